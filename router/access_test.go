package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/tenancy"
)

// writeKeys writes a keys file with a key per principal and returns the
// secrets.
func writeKeys(t *testing.T, path string, principals ...string) map[string]string {
	t.Helper()
	secrets := map[string]string{}
	for _, p := range principals {
		name, groups, _ := strings.Cut(p, ":")
		var gs []string
		if groups != "" {
			gs = strings.Split(groups, ",")
		}
		secret, k, err := tenancy.NewKey(name, gs, time.Time{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := tenancy.AppendKey(path, k); err != nil {
			t.Fatal(err)
		}
		secrets[name] = secret
	}
	return secrets
}

func accessConfig(t *testing.T, keys string, policies ...tenancy.Policy) *config.Config {
	t.Helper()
	gen := newReplica(t, "llama", "gen-0")
	code := newReplica(t, "coder", "code-0")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL))
	cfg.Access = tenancy.Config{KeysFile: keys, Policies: policies}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func chatFor(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
}

func TestAccessKeysPoliciesAndLimits(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice:eng", "bob")
	cfg := accessConfig(t, keys,
		tenancy.Policy{Group: "eng", Pools: []string{"code"}, Limits: tenancy.Limits{RequestsPerMinute: 3}},
		tenancy.Policy{Group: "*", Models: []string{"llama"}},
	)
	h := newHarness(t, cfg)
	auth := func(who string) []string { return []string{"Authorization", "Bearer " + secrets[who]} }

	// No key, a wrong key: 401, before the body is read, and never upstream.
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer sk-triage-00000000-" + strings.Repeat("x", 40)}} {
		r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), hdr...)
		msg, typ, code := openAIError(t, r.body)
		if r.status != 401 || typ != "authentication_error" || code != "invalid_api_key" {
			t.Fatalf("%v: %d %s %s %s", hdr, r.status, typ, code, msg)
		}
	}
	// bob: everyone's policy, llama only.
	if r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth("bob")...); r.status != 200 || r.header.Get("X-Ratelimit-Limit-Requests") != "" {
		t.Fatalf("bob llama: %d %v %s", r.status, r.header, r.body)
	}
	r := h.do(t, "POST", "/v1/chat/completions", chatFor("coder"), auth("bob")...)
	if _, typ, code := openAIError(t, r.body); r.status != 403 || typ != "permission_error" || code != "model_not_allowed" {
		t.Fatalf("bob coder: %d %s", r.status, r.body)
	}
	// alice (eng): the code pool only, 3 a minute.
	r = h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth("alice")...)
	if _, _, code := openAIError(t, r.body); r.status != 403 || code != "permission_denied" || !strings.Contains(r.body, `the pool \"general\"`) {
		t.Fatalf("alice llama: %d %s", r.status, r.body)
	}
	// The refused request counted (it was admitted before the pool was
	// known): 2 left.
	for i, want := range []string{"1", "0"} {
		r := h.do(t, "POST", "/v1/chat/completions", chatFor("coder"), auth("alice")...)
		if r.status != 200 || r.header.Get("X-Ratelimit-Limit-Requests") != "3" || r.header.Get("X-Ratelimit-Remaining-Requests") != want ||
			r.header.Get("X-Ratelimit-Reset-Requests") == "" {
			t.Fatalf("alice coder %d: %d %v", i, r.status, r.header)
		}
	}
	r = h.do(t, "POST", "/v1/chat/completions", chatFor("coder"), auth("alice")...)
	if _, typ, code := openAIError(t, r.body); r.status != 429 || typ != "rate_limit_error" || code != "rate_limit_exceeded" ||
		r.header.Get("Retry-After") == "" || r.header.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Fatalf("alice's 4th: %d %v %s", r.status, r.header, r.body)
	}
	// The secret is in no log line; the principal is.
	logs := h.log.String()
	for _, s := range secrets {
		if strings.Contains(logs, s[len(s)-20:]) {
			t.Fatal("a key's secret reached the log")
		}
	}
	if !strings.Contains(logs, `"principal":"alice"`) {
		t.Fatalf("the access log does not name the principal:\n%s", logs)
	}
	m := scrape(t, h)
	for _, want := range []string{`triage_limited_total{reason="invalid_api_key"} 2`, `triage_limited_total{reason="model_not_allowed"} 1`,
		`triage_limited_total{reason="permission_denied"} 1`, `triage_limited_total{reason="rate_limit_exceeded"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(m, "triage_limited"))
		}
	}
}

// The official SDK sees the errors it knows: 401 and 429 as APIErrors
// with OpenAI's codes.
func TestAccessWithOpenAISDK(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice")
	h := newHarness(t, accessConfig(t, keys, tenancy.Policy{Principal: "alice", Limits: tenancy.Limits{RequestsPerMinute: 1}}))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "llama", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	bad := openai.NewClient(option.WithBaseURL(h.URL+"/v1/"), option.WithAPIKey("sk-wrong"), option.WithMaxRetries(0))
	var ae *openai.Error
	if _, err := bad.Chat.Completions.New(ctx, params); !errors.As(err, &ae) || ae.StatusCode != 401 || ae.Code != "invalid_api_key" {
		t.Fatalf("wrong key: %v", err)
	}
	good := openai.NewClient(option.WithBaseURL(h.URL+"/v1/"), option.WithAPIKey(secrets["alice"]), option.WithMaxRetries(0))
	if _, err := good.Chat.Completions.New(ctx, params); err != nil {
		t.Fatal(err)
	}
	if _, err := good.Chat.Completions.New(ctx, params); !errors.As(err, &ae) || ae.StatusCode != 429 || ae.Code != "rate_limit_exceeded" {
		t.Fatalf("over the limit: %v", err)
	}
}

// A key created or revoked applies at the next reload; a bad keys file
// is rejected whole and the keys in effect stay; counts survive reloads.
func TestAccessReload(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.jsonl")
	secrets := writeKeys(t, keys, "alice")
	cfg := accessConfig(t, keys, tenancy.Policy{Principal: "alice", Limits: tenancy.Limits{RequestsPerMinute: 2}})
	h := newHarness(t, cfg)
	auth := func(who string) []string { return []string{"Authorization", "Bearer " + secrets[who]} }
	if r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth("alice")...); r.status != 200 {
		t.Fatal(r.status, r.body)
	}
	for k, v := range writeKeys(t, keys, "carol") {
		secrets[k] = v
	}
	if err := h.gw.Apply(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth("carol")...); r.status != 200 {
		t.Fatalf("carol after the reload: %d %s", r.status, r.body)
	}
	// alice's count outlived the reload: one left, then none.
	if r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth("alice")...); r.header.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Fatalf("alice after the reload: %d %v", r.status, r.header)
	}
	// A broken line: the reload fails, naming it; carol still gets in.
	good, _ := os.ReadFile(keys)
	if err := os.WriteFile(keys, append(good, "{not json\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.Apply(cfg, nil); err == nil || !strings.Contains(err.Error(), "line 4: not a key") {
		t.Fatalf("a bad keys file applied: %v", err)
	}
	if r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth("carol")...); r.status != 200 {
		t.Fatalf("carol after a rejected reload: %d", r.status)
	}
	// Revoked: 401 once applied.
	_ = os.WriteFile(keys, good, 0o600)
	var carol string
	ks, _ := tenancy.LoadKeys(keys)
	for _, k := range ks {
		if k.Principal == "carol" {
			carol = k.ID
		}
	}
	if _, err := tenancy.RevokeKey(keys, carol, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.Apply(cfg, nil); err != nil {
		t.Fatal(err)
	}
	r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth("carol")...)
	if msg, _, _ := openAIError(t, r.body); r.status != 401 || !strings.Contains(msg, "revoked") {
		t.Fatalf("a revoked key: %d %s", r.status, msg)
	}
}

// A keys file truncated in place and not yet rewritten (what a reload
// caught between the two sees) keeps the keys in effect; the rewrite
// applies; a file that says "# no keys" withdraws them all.
func TestAccessKeysFileTruncated(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice")
	cfg := accessConfig(t, keys, tenancy.Policy{Principal: "alice"})
	h := newHarness(t, cfg)
	post := func(who string) int {
		return h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), "Authorization", "Bearer "+secrets[who]).status
	}
	if s := post("alice"); s != 200 {
		t.Fatal(s)
	}
	good, err := os.ReadFile(keys)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(keys, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.Apply(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if s := post("alice"); s != 200 {
		t.Fatalf("alice after a reload of the truncated keys file: %d, want 200 (the keys before kept)", s)
	}
	// The rewrite, with a key more, applies.
	if err := os.WriteFile(keys, good, 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range writeKeys(t, keys, "bob") {
		secrets[k] = v
	}
	if err := h.gw.Apply(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if a, b := post("alice"), post("bob"); a != 200 || b != 200 {
		t.Fatalf("after the rewrite: alice %d, bob %d", a, b)
	}
	// Emptied on purpose.
	if err := os.WriteFile(keys, []byte("# every key withdrawn\n"+tenancy.KeysEmptyMarker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.Apply(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if a, b := post("alice"), post("bob"); a != 401 || b != 401 {
		t.Fatalf("after the keys file was emptied on purpose: alice %d, bob %d, want 401", a, b)
	}
}

// A policy naming a pool, model or route that does not exist is rejected
// with its path.
func TestAccessPolicyNamesChecked(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	writeKeys(t, keys, "alice")
	cfg := accessConfig(t, keys, tenancy.Policy{Principal: "alice", Pools: []string{"gpu"}, Models: []string{"gpt-5"}})
	_, err := New(cfg, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), `access.policies[0].pools[0]: no pool named "gpu"; the pools are "general", "code"`) ||
		!strings.Contains(err.Error(), `access.policies[0].models[0]: no model named "gpt-5"`) {
		t.Fatalf("New: %v", err)
	}
}

// Tokens from an identity provider: HS256 here, the principal from "sub"
// and the groups from "groups"; policies and limits apply as to keys, and
// an API key still works beside them.
func TestAccessJWT(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.jsonl")
	secrets := writeKeys(t, keys, "svc")
	cfgPath := filepath.Join(dir, "triage.yaml")
	gen := newReplica(t, "llama", "gen-0")
	secret := strings.Repeat("s3cr3t-", 6)
	if err := os.WriteFile(cfgPath, []byte(`
default_pool: general
pools:
  - {name: general, model: llama, replicas: [{url: "`+gen.URL+`"}], health: {enabled: false}}
access:
  keys_file: keys.jsonl
  jwt: {secret: "`+secret+`", issuer: https://idp.example, audience: [triage], skew: 10s}
  policies:
    - {group: analysts, limits: {requests_per_minute: 2}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	sign := func(sub string, groups []string, exp time.Time) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": sub, "groups": groups, "iss": "https://idp.example", "aud": "triage", "exp": exp.Unix(),
		}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	post := func(bearer string) reply {
		return h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), "Authorization", "Bearer "+bearer)
	}
	ann := sign("ann", []string{"analysts"}, time.Now().Add(time.Hour))
	if r := post(ann); r.status != 200 || r.header.Get("X-Ratelimit-Limit-Requests") != "2" {
		t.Fatalf("ann: %d %v %s", r.status, r.header, r.body)
	}
	// Another token of ann's shares her count.
	if r := post(sign("ann", []string{"analysts"}, time.Now().Add(2*time.Hour))); r.status != 200 || r.header.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Fatalf("ann's second token: %d %v", r.status, r.header)
	}
	if r := post(ann); r.status != 429 {
		t.Fatalf("ann's third request: %d", r.status)
	}
	// Expired, wrongly signed, garbage: 401 saying why, never quoting it.
	for _, tc := range []struct{ tok, why string }{
		{sign("bo", nil, time.Now().Add(-time.Hour)), "expired"},
		{ann[:len(ann)-4] + "AAAA", "signature"},
		{"a.b.c", "malformed"},
	} {
		r := post(tc.tok)
		msg, _, code := openAIError(t, r.body)
		if r.status != 401 || code != "invalid_api_key" || !strings.Contains(msg, tc.why) || strings.Contains(msg, tc.tok) {
			t.Errorf("%s: %d %q", tc.why, r.status, msg)
		}
	}
	if r := post(secrets["svc"]); r.status != 200 {
		t.Fatalf("an API key beside tokens: %d %s", r.status, r.body)
	}
}

// Tokens per minute and a daily budget: admitted as an estimate, settled
// with the response's usage, refused with OpenAI's codes; the budget's
// spending survives a restart through the state file.
func TestAccessTokenLimitsAndBudgets(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.jsonl")
	secrets := writeKeys(t, keys, "alice")
	cfg := accessConfig(t, keys, tenancy.Policy{Principal: "alice",
		Limits: tenancy.Limits{TokensPerMinute: 100}, Budget: tenancy.Budget{TokensPerDay: 40}})
	cfg.Access.StateFile = filepath.Join(dir, "state.json")
	cfg.Access.ReserveTokens = 4 // what the sim answers with: a request without max_tokens is counted as 4 more
	h := newHarness(t, cfg)
	auth := []string{"Authorization", "Bearer " + secrets["alice"]}
	body := `{"model":"llama","messages":[{"role":"user","content":"hi"}]}` // 61 bytes, no max_tokens: counted as 16 + 4 until settled
	r := h.do(t, "POST", "/v1/chat/completions", body, auth...)
	if r.status != 200 || r.header.Get("X-Ratelimit-Limit-Tokens") != "100" || r.header.Get("X-Ratelimit-Remaining-Tokens") != "80" {
		t.Fatalf("first: %d %v", r.status, r.header)
	}
	// Settled at the usage the sim reports (1 prompt + 4 completion): 95
	// left before this one's estimate.
	r = h.do(t, "POST", "/v1/chat/completions", body, auth...)
	if got := r.header.Get("X-Ratelimit-Remaining-Tokens"); got != "75" {
		t.Fatalf("second: remaining tokens %s, want 75 (100 - 5 used - 20 estimated)", got)
	}
	n := 2
	for ; n < 10; n++ {
		r = h.do(t, "POST", "/v1/chat/completions", body, auth...)
		if r.status != 200 {
			break
		}
	}
	if _, typ, code := openAIError(t, r.body); r.status != 429 || code != "insufficient_quota" || typ != "rate_limit_error" || n != 5 {
		t.Fatalf("request %d: %d %s", n+1, r.status, r.body)
	}
	// alice's own policy: her budget is reported (40 - 5 answered × 5 tokens).
	if m := scrape(t, h); !strings.Contains(m, `triage_budget_remaining_tokens{period="day",policy="principal:alice"} 15`) {
		t.Fatalf("metrics:\n%s", grep(m, "triage_budget"))
	}
	h.gw.saveBudgets()
	gw2, err := New(cfg, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c, d := gw2.snap.Load().access.Authenticate(http.Header{"Authorization": {"Bearer " + secrets["alice"]}}, time.Now()); d != nil {
		t.Fatal(d)
	} else if _, d := c.Admit(time.Now(), 16); d == nil || d.Code != "insufficient_quota" {
		t.Fatalf("after a restart: %v", d)
	}
}

// The usage log gets a line per authenticated request: who, where, how
// many tokens the response reported; never the key's secret.
func TestAccessUsageLog(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.jsonl")
	secrets := writeKeys(t, keys, "alice:eng")
	cfg := accessConfig(t, keys)
	cfg.Access.UsageLog = filepath.Join(dir, "usage.jsonl")
	out := &testenv.Buffer{}
	var opened string
	gw, err := New(cfg, nil, Options{UsageLog: func(path string, maxBytes int64, keep int) (io.Writer, error) {
		opened = fmt.Sprintf("%s %d %d", path, maxBytes, keep)
		return out, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler())
	defer srv.Close()
	h := &harness{gw: gw, URL: srv.URL, log: &testenv.Buffer{}}
	if r := h.do(t, "POST", "/v1/chat/completions", chatFor("coder"), "Authorization", "Bearer "+secrets["alice"]); r.status != 200 {
		t.Fatal(r.status, r.body)
	}
	if r := h.do(t, "POST", "/v1/chat/completions", chatFor("coder")); r.status != 401 {
		t.Fatal(r.status)
	}
	if opened != cfg.Access.UsageLog+" 104857600 5" {
		t.Fatalf("opened %q", opened)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var rec map[string]any
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil {
		t.Fatalf("usage log:\n%s", out.String())
	}
	if rec["principal"] != "alice" || rec["pool"] != "code" || rec["model"] != "coder" || rec["status"] != 200.0 ||
		rec["reported"] != true || rec["completion_tokens"] != 4.0 || rec["key"] != tenancy.KeyID(secrets["alice"]) {
		t.Fatalf("record %v", rec)
	}
	if strings.Contains(out.String(), secrets["alice"][20:]) {
		t.Fatal("the usage log holds the key")
	}
}

// A request admitted and then refused (a pool its policy does not allow)
// gives back the tokens it was admitted with; its request still counts.
func TestAccessRefusedAfterAdmissionRefundsTokens(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice")
	cfg := accessConfig(t, keys, tenancy.Policy{Principal: "alice", Pools: []string{"code"},
		Limits: tenancy.Limits{TokensPerMinute: 100}})
	cfg.Access.ReserveTokens = 4
	h := newHarness(t, cfg)
	auth := []string{"Authorization", "Bearer " + secrets["alice"]}
	for range 3 {
		if r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth...); r.status != 403 {
			t.Fatal(r.status, r.body)
		}
	}
	// Three refused requests of ~20 tokens each: none of them is still
	// counted, so this one sees the whole minute's budget less its own.
	r := h.do(t, "POST", "/v1/chat/completions", chatFor("coder"), auth...)
	if r.status != 200 || r.header.Get("X-Ratelimit-Remaining-Tokens") != "80" {
		t.Fatalf("%d %v", r.status, r.header)
	}
}

// With Redis, limits count across gateways; while Redis does not answer,
// requests are admitted with X-Triage-Degraded: true and counted in the
// metrics, and enforcement resumes when it answers again.
func TestAccessSharedThroughRedis(t *testing.T) {
	addr, stop, start := testenv.Redis(t)
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice")
	newGW := func() *harness {
		cfg := accessConfig(t, keys, tenancy.Policy{Principal: "alice", Limits: tenancy.Limits{RequestsPerMinute: 10}})
		cfg.Access.Redis = tenancy.RedisConfig{Addr: addr}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return newHarness(t, cfg)
	}
	a, b := newGW(), newGW()
	auth := []string{"Authorization", "Bearer " + secrets["alice"]}
	ok := 0
	for i := range 30 {
		h := a
		if i%2 == 1 {
			h = b
		}
		r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth...)
		switch r.status {
		case 200:
			ok++
			if r.header.Get("X-Triage-Degraded") != "" {
				t.Fatal("degraded with Redis up")
			}
		case 429:
		default:
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	if ok < 10 || ok > 10+4*2 {
		t.Fatalf("two gateways admitted %d at a limit of 10 (allowed 10 to 18: two leases each)", ok)
	}
	stop()
	testenv.Wait(t, func() bool {
		r := a.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth...)
		return r.status == 200 && r.header.Get("X-Triage-Degraded") == "true"
	}, "fail-open admissions marked degraded")
	if m := scrape(t, a); !strings.Contains(m, "triage_limits_degraded 1") || strings.Contains(m, "triage_degraded_admissions_total 0\n") {
		t.Fatalf("metrics while degraded:\n%s", grep(m, "degraded"))
	}
	start()
	testenv.Wait(t, func() bool {
		return a.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth...).status == 429
	}, "enforcement back once Redis answers")
}

// blackhole is a TCP proxy to target that, once closed, accepts and holds
// connections without answering: a Redis that is there but stalled.
type blackhole struct {
	ln     net.Listener
	target string
	holed  atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			if b.holed.Load() {
				continue // held: never answered
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, up)
			b.mu.Unlock()
			go b.pipe(up, c)
			go b.pipe(c, up)
		}
	}()
	return b
}

// pipe copies until the hole opens, then swallows what comes.
func (b *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if !b.holed.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// No request waits on Redis: with Redis stalled (it accepts, never
// answers), requests take what they took before, not its timeout.
func TestAccessRequestPathDoesNotWaitOnRedis(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	hole := newBlackhole(t, addr)
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice")
	cfg := accessConfig(t, keys, tenancy.Policy{Principal: "alice", Limits: tenancy.Limits{RequestsPerMinute: 600000}, Budget: tenancy.Budget{TokensPerDay: 1 << 40}})
	const redisTimeout = 200 * time.Millisecond
	cfg.Access.Redis = tenancy.RedisConfig{Addr: hole.ln.Addr().String(), Timeout: redisTimeout}
	h := newHarness(t, cfg)
	auth := []string{"Authorization", "Bearer " + secrets["alice"]}
	// 80 requests spread over twice the Redis timeout (the time under
	// test): the loop's calls hang, time out and turn the limits degraded
	// while requests go on.
	gap := 2 * redisTimeout / 80
	timed := func() (d []time.Duration, degraded int) {
		for range 80 {
			t0 := time.Now()
			r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), auth...)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			d = append(d, time.Since(t0))
			if r.header.Get("X-Triage-Degraded") == "true" {
				degraded++
			}
			time.Sleep(gap)
		}
		slices.Sort(d)
		return d, degraded
	}
	before, _ := timed() // leases warm
	hole.holed.Store(true)
	during, degraded := timed()
	t.Logf("median %v before, %v with Redis stalled (90th percentile %v, max %v; Redis timeout %v); %d of 80 degraded",
		before[40], during[40], during[72], during[79], redisTimeout, degraded)
	if degraded == 0 {
		t.Fatal("no request saw the stall (the loop never timed out on Redis)")
	}
	if during[40] > 3*before[40]+5*time.Millisecond || during[72] >= redisTimeout {
		t.Fatalf("requests waited on a stalled Redis: median %v (before %v), 90th percentile %v", during[40], before[40], during[72])
	}
}
