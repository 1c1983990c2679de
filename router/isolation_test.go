package router

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/sim"
	"github.com/triagegw/triage/tenancy"
)

var saltRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// upstreamJSON decodes the body a replica last received.
func upstreamJSON(t *testing.T, r *replica) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.LastRequest().Body, &m); err != nil {
		t.Fatalf("the replica got a body that is not JSON: %v: %s", err, r.LastRequest().Body)
	}
	return m
}

// TestCacheSaltPerTenant: with access control, every request to a vllm
// pool carries its principal's cache_salt (the same for each of its
// requests, another for another principal, never its name), whatever
// cache_salt the client sent; the rest of the body is as the client sent
// it. An anthropic pool's requests, and a pool with cache_salt: off, get
// none; without access control the body goes byte for byte.
func TestCacheSaltPerTenant(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "acme-legal", "globex")
	t.Setenv("TEST_ANTHROPIC_KEY", "sk-ant-test")
	gen := newReplica(t, "llama", "gen-0")
	shared := newReplica(t, "shared-llama", "shared-0")
	hosted := anthropicReplica(t, "claude-sonnet-4-5", "hosted", "sk-ant-test")
	hc := poolCfg("hosted", "claude-sonnet-4-5", hosted.URL)
	hc.Kind, hc.Replicas[0].APIKeyEnv = pool.KindAnthropic, "TEST_ANTHROPIC_KEY"
	hc.ResolveSecrets()
	off := poolCfg("shared", "shared-llama", shared.URL)
	off.CacheSalt = pool.CacheSaltOff
	pools := []pool.Config{poolCfg("general", "llama", gen.URL), hc, off}
	cfg := newConfig("general", pools...)
	cfg.Access = tenancy.Config{KeysFile: keys}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	as := func(who string) []string { return []string{"Authorization", "Bearer " + secrets[who]} }
	post := func(who, path, body string, hdr ...string) reply {
		t.Helper()
		r := h.do(t, "POST", path, body, append(as(who), hdr...)...)
		if r.status != 200 {
			t.Fatalf("%s %s %s: %d %s", who, path, body, r.status, r.body)
		}
		return r
	}
	saltOf := func(what string) string {
		t.Helper()
		m := upstreamJSON(t, gen)
		s, _ := m["cache_salt"].(string)
		if !saltRE.MatchString(s) {
			t.Fatalf("%s: the replica got cache_salt %v, want 32 hexadecimal digits", what, m["cache_salt"])
		}
		return s
	}

	chat := `{"model":"llama","messages":[{"role":"user","content":"is this clause enforceable?"}],"temperature":0.2}`
	post("acme-legal", "/v1/chat/completions", chat)
	acme := saltOf("acme")
	m := upstreamJSON(t, gen)
	delete(m, "cache_salt")
	var sent map[string]any
	_ = json.Unmarshal([]byte(chat), &sent)
	if got, want := mustJSON(t, m), mustJSON(t, sent); got != want {
		t.Fatalf("besides its salt the replica got %s, want the client's %s", got, want)
	}
	post("acme-legal", "/v1/chat/completions", chat)
	if again := saltOf("acme again"); again != acme {
		t.Fatalf("acme's salt changed from %s to %s", acme, again)
	}
	post("globex", "/v1/chat/completions", chat)
	globex := saltOf("globex")
	if globex == acme {
		t.Fatal("two tenants sent the same cache_salt")
	}
	for _, s := range []string{acme, globex} {
		if strings.Contains(s, "acme") || strings.Contains(s, "globex") {
			t.Fatalf("salt %s shows a principal's name", s)
		}
	}

	// A client's own cache_salt, even another tenant's, is never
	// forwarded as sent.
	stolen := `{"cache_salt":"` + globex + `","model":"llama","messages":[{"role":"user","content":"is this clause enforceable?"}]}`
	post("acme-legal", "/v1/chat/completions", stolen)
	if s := saltOf("acme sending globex's salt"); s == globex || s == acme {
		t.Fatalf("acme sending globex's salt: the replica got %s (acme's is %s, globex's %s)", s, acme, globex)
	}
	post("acme-legal", "/v1/chat/completions", `{"model":"llama","cache_salt":null,"messages":[{"role":"user","content":"hi"}]}`)
	if s := saltOf("a null cache_salt"); s != acme {
		t.Fatalf("a null cache_salt: %s, want acme's %s", s, acme)
	}

	// Every endpoint, a stream whose usage the gateway asks for at the
	// same place, and a Messages request translated for the pool.
	post("acme-legal", "/v1/chat/completions", `{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if m := upstreamJSON(t, gen); m["cache_salt"] != acme || m["stream_options"] == nil {
		t.Fatalf("a stream: the replica got %v", m)
	}
	post("acme-legal", "/v1/completions", `{"model":"llama","prompt":"once upon a time"}`)
	if s := saltOf("completions"); s != acme {
		t.Fatalf("completions: %s, want %s", s, acme)
	}
	post("acme-legal", "/v1/embeddings", `{"model":"llama","input":"once upon a time"}`)
	if s := saltOf("embeddings"); s != acme {
		t.Fatalf("embeddings: %s, want %s", s, acme)
	}
	post("acme-legal", "/v1/responses", `{"model":"llama","input":"once upon a time"}`)
	if s := saltOf("responses"); s != acme {
		t.Fatalf("responses: %s, want %s", s, acme)
	}
	post("globex", "/v1/messages", `{"model":"llama","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, "anthropic-version", "2023-06-01")
	if s := saltOf("messages"); s != globex {
		t.Fatalf("messages: %s, want %s", s, globex)
	}

	// A cache_salt given twice, or not a non-empty string, is refused in
	// the client's dialect, and never reaches a replica.
	before := gen.Stats().Requests
	for _, body := range []string{
		`{"model":"llama","cache_salt":"a","messages":[{"role":"user","content":"hi"}],"cache_salt":"b"}`,
		`{"model":"llama","cache_salt":7,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"llama","cache_salt":"","messages":[{"role":"user","content":"hi"}]}`,
	} {
		r := h.do(t, "POST", "/v1/chat/completions", body, as("acme-legal")...)
		if msg, typ, _ := openAIError(t, r.body); r.status != 400 || typ != "invalid_request_error" || !strings.Contains(r.body, `"param":"cache_salt"`) {
			t.Fatalf("%s: %d %s %s", body, r.status, typ, msg)
		}
	}
	if n := gen.Stats().Requests; n != before {
		t.Fatalf("refused requests reached the replica (%d requests, were %d)", n, before)
	}

	// An anthropic pool is sent no cache_salt; a Messages request goes
	// byte for byte.
	post("acme-legal", "/v1/chat/completions", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`)
	if strings.Contains(string(hosted.LastRequest().Body), "cache_salt") {
		t.Fatalf("an anthropic pool got %s", hosted.LastRequest().Body)
	}
	msg := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	post("acme-legal", "/v1/messages", msg, "anthropic-version", "2023-06-01")
	if got := string(hosted.LastRequest().Body); got != msg {
		t.Fatalf("a Messages request to an anthropic pool went as %s, sent %s", got, msg)
	}
	// cache_salt: off: as sent.
	asSent := `{"model":"shared-llama","cache_salt":"mine","messages":[{"role":"user","content":"hi"}]}`
	post("globex", "/v1/chat/completions", asSent)
	if got := string(shared.LastRequest().Body); got != asSent {
		t.Fatalf("cache_salt: off: the replica got %s, sent %s", got, asSent)
	}

	// Without access control: byte for byte, the client's salt included.
	open := newConfig("general", pools...)
	if err := open.Validate(); err != nil {
		t.Fatal(err)
	}
	h2 := newHarness(t, open)
	for _, body := range []string{chat, `{"model":"llama","cache_salt":"client-chosen","messages":[{"role":"user","content":"hi"}]}`} {
		if r := h2.do(t, "POST", "/v1/chat/completions", body); r.status != 200 {
			t.Fatalf("no access control: %d %s", r.status, r.body)
		}
		if got := string(gen.LastRequest().Body); got != body {
			t.Fatalf("no access control: the replica got %s, sent %s", got, body)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCacheSaltHidesPrefix: the attack itself. A tenant who sends a
// prompt another tenant sent is told, by usage's cached_tokens (and by a
// shorter time to first token), that the replica had it cached; with
// each tenant's salt, only the tenant's own earlier request is.
func TestCacheSaltHidesPrefix(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "acme-legal", "globex")
	s, err := sim.New(sim.Options{Model: "llama", Name: "gen-0", Chunks: 2,
		Perf: sim.Perf{Enabled: true, DecodeStep: time.Millisecond, DecodePerSeq: time.Microsecond, PrefillTokensPerSecond: 1e7}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	gen := &replica{Server: s, URL: srv.URL}
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL))
	cfg.Access = tenancy.Config{KeysFile: keys}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	secret := `{"model":"llama","messages":[{"role":"user","content":"` + strings.Repeat("acme's merger with initech closes on the first of march; ", 12) + `"}]}`
	cached := func(who string) int {
		t.Helper()
		r := h.do(t, "POST", "/v1/chat/completions", secret, "Authorization", "Bearer "+secrets[who])
		var out struct {
			Usage struct {
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(r.body), &out); r.status != 200 || err != nil {
			t.Fatalf("%s: %d %s", who, r.status, r.body)
		}
		return out.Usage.PromptTokensDetails.CachedTokens
	}
	if n := cached("acme-legal"); n != 0 {
		t.Fatalf("acme's first request: %d cached tokens", n)
	}
	if n := cached("acme-legal"); n == 0 {
		t.Fatal("acme's second request found nothing cached: the test would pass without a cache")
	}
	if n := cached("globex"); n != 0 {
		t.Fatalf("globex sending acme's prompt was told %d of its tokens were cached", n)
	}
}

// TestAffinityPerTenant: with access control, prefix affinity is keyed by
// tenant as the replicas' caches are: a tenant's next request finds the
// replica its prefix went to, another tenant's same request finds none.
func TestAffinityPerTenant(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "acme-legal", "globex")
	a, b := newReplica(t, "llama", "gen-0"), newReplica(t, "llama", "gen-1")
	pc := poolCfg("general", "llama", a.URL, b.URL)
	pc.Balance = pool.BalancePrefix
	cfg := newConfig("general", pc)
	cfg.Access = tenancy.Config{KeysFile: keys}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	p := h.gw.snap.Load().byName["general"].pool
	body := `{"model":"llama","messages":[{"role":"system","content":"` + strings.Repeat("You review contracts for acme. ", 40) + `"},{"role":"user","content":"is this clause enforceable?"}]}`
	for i, step := range []struct {
		who  string
		hits uint64
	}{{"acme-legal", 0}, {"acme-legal", 1}, {"globex", 1}, {"globex", 2}} {
		if r := h.do(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+secrets[step.who]); r.status != 200 {
			t.Fatalf("%s: %d %s", step.who, r.status, r.body)
		}
		if n := p.ChoicesMade(pool.ChoiceHit); n != step.hits {
			t.Fatalf("request %d (%s): %d prefix hits, want %d", i, step.who, n, step.hits)
		}
	}
}
