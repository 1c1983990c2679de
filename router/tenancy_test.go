package router

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/tenancy"
)

// Tenant isolation, tried with two tenants as a new user would: every id,
// header and session key is checked against its owner.

// asTenant is an OpenAI client with who's key.
func asTenant(h *harness, secret string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(h.URL+"/v1/"), option.WithAPIKey(secret), option.WithMaxRetries(0))
	return &c
}

// A chain (previous_response_id) continues only a response the caller
// made: another tenant's id, or one the gateway does not know, is the same
// 404 and reaches no replica.
func TestResponsesChainOwnedByItsPrincipal(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice", "bob")
	gen := newReplica(t, "llama", "gen-0")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL))
	cfg.Access = tenancy.Config{KeysFile: keys}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	ctx := context.Background()
	alice, err := asTenant(h, secrets["alice"]).Responses.New(ctx, responses.ResponseNewParams{Model: "llama", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	before := gen.Stats().Requests
	escaped := `\u0072` + alice.ID[1:] // the same id, with a JSON escape
	for _, tc := range []struct{ name, prev string }{
		{"another tenant's id", `"` + alice.ID + `"`},
		{"another tenant's id, escaped", `"` + escaped + `"`},
		{"an unknown id", `"resp_0123456789"`},
		{"not an id", `"../resp_x"`},
	} {
		r := h.do(t, "POST", "/v1/responses", `{"model":"llama","input":"more","previous_response_id":`+tc.prev+`}`,
			"Authorization", "Bearer "+secrets["bob"])
		msg, typ, code := openAIError(t, r.body)
		if r.status != 404 || code != "previous_response_not_found" || typ != "invalid_request_error" || strings.Contains(msg, "alice") {
			t.Errorf("%s: %d %s", tc.name, r.status, r.body)
		}
	}
	if n := gen.Stats().Requests; n != before {
		t.Fatalf("refused chains reached the replica %d times", n-before)
	}
	if r := h.do(t, "POST", "/v1/responses", `{"model":"llama","input":"more","previous_response_id":7}`, "Authorization", "Bearer "+secrets["bob"]); r.status != 400 {
		t.Fatalf("a non-string previous_response_id: %d %s", r.status, r.body)
	}
	// Its owner continues it, on the replica that holds it.
	next, err := asTenant(h, secrets["alice"]).Responses.New(ctx, responses.ResponseNewParams{Model: "llama",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("more")}, PreviousResponseID: openai.String(alice.ID)})
	if err != nil || next.PreviousResponseID != alice.ID {
		t.Fatalf("alice's own chain: %v", err)
	}
}

// The stored-response endpoints take one clean id segment and the
// sub-resources the API has: a path that would name another response past
// the segment the owner check reads is refused, plain or escaped.
func TestResponsesPathIsOneCleanSegment(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice", "bob")
	gen := newReplica(t, "llama", "gen-0")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL))
	cfg.Access = tenancy.Config{KeysFile: keys}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	ctx := context.Background()
	mk := func(who string) string {
		r, err := asTenant(h, secrets[who]).Responses.New(ctx, responses.ResponseNewParams{Model: "llama", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	a, b := mk("alice"), mk("bob")
	before := gen.Stats().Requests
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/responses/" + b + "/../" + a, 404}, // no route: the router matches no dot segment
		{"GET", "/v1/responses/" + b + "/..%2F" + a, 400},
		{"GET", "/v1/responses/" + b + "%2F..%2F" + a, 400},
		{"GET", "/v1/responses/" + b + "%2f%2e%2e%2f" + a, 400},
		{"DELETE", "/v1/responses/" + b + "/../" + a, 404},
		{"GET", "/v1/responses/" + b + "/input_items/../../" + a, 404},
		{"GET", "/v1/responses/" + b + "/cancel", 404},
		{"GET", "/v1/responses/..", 400},
		{"GET", "/v1/responses/%72" + b[1:], 400},
	} {
		r := h.do(t, tc.method, tc.path, "", "Authorization", "Bearer "+secrets["bob"])
		if r.status != tc.status || !strings.Contains(r.body, `"error"`) {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, r.status, r.body, tc.status)
		}
	}
	if n := gen.Stats().Requests; n != before {
		t.Fatalf("refused paths reached the replica %d times", n-before)
	}
	if r := h.do(t, "GET", "/v1/responses/"+b, "", "Authorization", "Bearer "+secrets["bob"]); r.status != 200 {
		t.Fatalf("bob reading his own response: %d %s", r.status, r.body)
	}
	if r := h.do(t, "GET", "/v1/responses/"+a, "", "Authorization", "Bearer "+secrets["bob"]); r.status != 404 {
		t.Fatalf("bob reading alice's response: %d %s", r.status, r.body)
	}
}

// A token whose subject is an API key's principal is not that principal:
// refused without a prefix, and kept apart with one.
func TestAccessTokensAndKeysDoNotShareAPrincipal(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.jsonl")
	secrets := writeKeys(t, keys, "alice")
	gen := newReplica(t, "llama", "gen-0")
	secret := strings.Repeat("s3cr3t-", 6)
	load := func(prefix string) *config.Config {
		t.Helper()
		p := filepath.Join(dir, "triage.yaml")
		if err := os.WriteFile(p, []byte(`
default_pool: general
pools:
  - {name: general, model: llama, replicas: [{url: "`+gen.URL+`"}], health: {enabled: false}}
access:
  keys_file: keys.jsonl
  jwt: {secret: "`+secret+`", principal_prefix: "`+prefix+`"}
`), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	sign := func(sub string) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	h := newHarness(t, load(""))
	ctx := context.Background()
	own, err := asTenant(h, secrets["alice"]).Responses.New(ctx, responses.ResponseNewParams{Model: "llama", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	r := h.do(t, "GET", "/v1/responses/"+own.ID, "", "Authorization", "Bearer "+sign("alice"))
	if msg, _, code := openAIError(t, r.body); r.status != 401 || code != "invalid_api_key" || !strings.Contains(msg, "principal_prefix") {
		t.Fatalf("a token named like a key's principal: %d %s", r.status, r.body)
	}
	if r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), "Authorization", "Bearer "+sign("carol")); r.status != 200 {
		t.Fatalf("another token: %d %s", r.status, r.body)
	}

	// With a prefix, the token is idp/alice: served, and not alice.
	if err := h.gw.Apply(load("idp/"), nil); err != nil {
		t.Fatal(err)
	}
	if r := h.do(t, "GET", "/v1/responses/"+own.ID, "", "Authorization", "Bearer "+sign("alice")); r.status != 404 {
		t.Fatalf("token alice read key alice's response: %d %s", r.status, r.body)
	}
	if r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), "Authorization", "Bearer "+sign("alice")); r.status != 200 {
		t.Fatalf("token alice with a prefix: %d %s", r.status, r.body)
	}
	if !strings.Contains(h.log.String(), `"principal":"idp/alice"`) {
		t.Fatal("the access log does not name the token principal with its prefix")
	}

	// A key whose principal starts with the prefix is refused at load.
	writeKeys(t, keys, "idp/mallory")
	if err := h.gw.Apply(load("idp/"), nil); err == nil || !strings.Contains(err.Error(), "principal_prefix") {
		t.Fatalf("a key in the tokens' namespace: %v", err)
	}
}

// Sessions belong to their principal: another tenant sending the same
// session id neither inherits the conversation's route nor moves it; and a
// tenant's pin follows its conversation's class on the turns the session
// keeps.
func TestSessionsScopedByPrincipal(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice", "bob", "acme")
	gen := newReplica(t, "llama", "gen")
	code := newReplica(t, "coder", "code")
	own := newReplica(t, "coder", "acme-code")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL), poolCfg("acme-code", "acme-coder", own.URL))
	cfg.Access = tenancy.Config{KeysFile: keys, Policies: []tenancy.Policy{{Principal: "acme", Pins: map[string]string{"code": "acme-code"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "rebase", Class: "code", Score: 0.95},
		{Contains: "recipe", Class: "other", Score: 0.95},
	}, Default: classifier.Scored{Class: "other", Score: 0.4}}
	set := compileRules(t, cfg, tier1, "routes: [{name: coding, when: {class: code}, pool: code}]\ndefault: general\nsession: {header: x-session-id, turns: 5}\nexplain: true\n")
	h := newHarness(t, cfg)
	if err := h.gw.Apply(cfg, set); err != nil {
		t.Fatal(err)
	}
	ask := func(who, session, text string) reply {
		t.Helper()
		return h.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"`+text+`"}]}`,
			"Authorization", "Bearer "+secrets[who], "X-Session-Id", session)
	}
	if r := ask("alice", "conv-1", "how do I rebase"); r.header.Get("X-Sim-Replica") != "code" {
		t.Fatalf("alice's first turn: %q", r.header.Get("X-Sim-Replica"))
	}
	// Bob, with alice's session id: his vague turn is his own.
	if r := ask("bob", "conv-1", "and then?"); r.header.Get("X-Sim-Replica") != "gen" || r.header.Get("X-Triage-Reason") == "session" {
		t.Fatalf("bob inherited alice's session: %q, reason %q", r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Reason"))
	}
	// Bob's confident turn on that id does not move alice's conversation.
	if r := ask("bob", "conv-1", "a recipe for bread"); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := ask("alice", "conv-1", "and then?"); r.header.Get("X-Sim-Replica") != "code" || r.header.Get("X-Triage-Reason") != "session" {
		t.Fatalf("alice's follow-up: %q, reason %q", r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Reason"))
	}
	// acme pins code to its own pool: its follow-up, kept by its session,
	// goes there too.
	if r := ask("acme", "conv-1", "how do I rebase"); r.header.Get("X-Sim-Replica") != "acme-code" {
		t.Fatalf("acme's first turn: %q", r.header.Get("X-Sim-Replica"))
	}
	if r := ask("acme", "conv-1", "and then?"); r.header.Get("X-Sim-Replica") != "acme-code" || r.header.Get("X-Triage-Reason") != "session" {
		t.Fatalf("acme's follow-up kept by its session: %q, reason %q", r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Reason"))
	}
	// The access line names the override that chose acme's pool, on its
	// two turns and no one else's.
	testenv.Wait(t, func() bool { return strings.Count(h.log.String(), `"placed_by":"tenant_pin"`) == 2 }, "two access lines placed by acme's pin")
	for _, l := range strings.Split(h.log.String(), "\n") {
		if strings.Contains(l, `"placed_by"`) != strings.Contains(l, `"principal":"acme"`) && strings.Contains(l, `"request_id"`) {
			t.Errorf("placed_by on the wrong line: %s", l)
		}
	}
}

// /v1/models needs a credential with access control on, and lists only
// what the caller may name.
func TestModelsListedPerCaller(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice", "bob")
	gen := newReplica(t, "llama", "gen")
	priv := newReplica(t, "alice-7b", "priv")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("private", "alice-7b", priv.URL))
	cfg.Access = tenancy.Config{KeysFile: keys, Policies: []tenancy.Policy{
		{Principal: "alice", Pools: []string{"general", "private"}},
		{Group: "*", Pools: []string{"general"}},
	}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	for _, path := range []string{"/v1/models", "/v1/models/alice-7b"} {
		if r := h.do(t, "GET", path, ""); r.status != 401 {
			t.Fatalf("%s without a key: %d %s", path, r.status, r.body)
		}
	}
	ids := func(who string) []string {
		r := h.do(t, "GET", "/v1/models", "", "Authorization", "Bearer "+secrets[who])
		var list struct{ Data []struct{ ID string } }
		if r.status != 200 || json.Unmarshal([]byte(r.body), &list) != nil {
			t.Fatalf("%s: %d %s", who, r.status, r.body)
		}
		var out []string
		for _, m := range list.Data {
			out = append(out, m.ID)
		}
		return out
	}
	if got := ids("alice"); !slices.Equal(got, []string{"alice-7b", "llama"}) {
		t.Fatalf("alice sees %v", got)
	}
	if got := ids("bob"); !slices.Equal(got, []string{"llama"}) {
		t.Fatalf("bob sees %v", got)
	}
	if r := h.do(t, "GET", "/v1/models/alice-7b", "", "Authorization", "Bearer "+secrets["bob"]); r.status != 404 {
		t.Fatalf("bob reading alice's model: %d %s", r.status, r.body)
	}
	if r := h.do(t, "GET", "/v1/models/alice-7b", "", "Authorization", "Bearer "+secrets["alice"]); r.status != 200 {
		t.Fatalf("alice reading her model: %d %s", r.status, r.body)
	}
}

// A credential header sent twice, or two headers naming different
// credentials, is refused with 400 in the client's dialect.
func TestAccessRepeatedCredentialRefused(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice", "bob")
	cfg := accessConfig(t, keys)
	h := newHarness(t, cfg)
	a, b := "Bearer "+secrets["alice"], "Bearer "+secrets["bob"]
	for _, tc := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"two Authorization", []string{"Authorization", a, "Authorization", b}, 400},
		{"the same Authorization twice", []string{"Authorization", a, "Authorization", a}, 400},
		{"two x-api-key", []string{"X-Api-Key", secrets["alice"], "X-Api-Key", secrets["bob"]}, 400},
		{"Authorization and another x-api-key", []string{"Authorization", a, "X-Api-Key", secrets["bob"]}, 400},
		{"Authorization and the same x-api-key", []string{"Authorization", a, "X-Api-Key", secrets["alice"]}, 200},
		{"x-api-key alone", []string{"X-Api-Key", secrets["bob"]}, 200},
	} {
		r := h.do(t, "POST", "/v1/chat/completions", chatFor("llama"), tc.hdr...)
		if r.status != tc.want {
			t.Errorf("%s: %d %s", tc.name, r.status, r.body)
		} else if tc.want == 400 {
			if _, typ, _ := openAIError(t, r.body); typ != "invalid_request_error" {
				t.Errorf("%s: %s", tc.name, r.body)
			}
		}
	}
	// In Anthropic's dialect on /v1/messages.
	r := h.do(t, "POST", "/v1/messages", `{"model":"llama","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		"X-Api-Key", secrets["alice"], "X-Api-Key", secrets["bob"])
	var ae struct {
		Type  string
		Error struct{ Type string }
	}
	if r.status != 400 || json.Unmarshal([]byte(r.body), &ae) != nil || ae.Type != "error" || ae.Error.Type != "invalid_request_error" {
		t.Fatalf("messages: %d %s", r.status, r.body)
	}
}

// A prefix hit tells whether some replica was sent the same prompt: with
// access control on, X-Triage-Replica-Choice is not sent, even when the
// rules explain their decisions.
func TestReplicaChoiceNotExplainedToTenants(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice")
	a, b := newReplica(t, "coder", "code-0"), newReplica(t, "coder", "code-1")
	pc := poolCfg("code", "coder", a.URL, b.URL)
	pc.Balance = pool.BalancePrefix
	tier1 := &classifiertest.Fixed{Default: classifier.Scored{Class: "code", Score: 0.95}}
	for _, tc := range []struct {
		name   string
		access bool
	}{{"without access control", false}, {"with access control", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := newConfig("code", pc)
			var hdr []string
			if tc.access {
				cfg.Access = tenancy.Config{KeysFile: keys}
				hdr = []string{"Authorization", "Bearer " + secrets["alice"]}
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			set := compileRules(t, cfg, tier1, "routes: [{name: coding, when: {class: code}, pool: code}]\ndefault: code\nexplain: true\n")
			h := newHarness(t, cfg)
			if err := h.gw.Apply(cfg, set); err != nil {
				t.Fatal(err)
			}
			r := h.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"rebase onto main"}]}`, hdr...)
			if r.status != 200 || r.header.Get("X-Triage-Route") != "coding" {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if got := r.header.Get("X-Triage-Replica-Choice"); (got != "") == tc.access {
				t.Fatalf("X-Triage-Replica-Choice = %q", got)
			}
		})
	}
}
