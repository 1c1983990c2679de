package router

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/shadow"
	"github.com/triagegw/triage/tenancy"

	"github.com/triagegw/triage/internal/testenv"
)

// TestShadowDecisions: a rules file with a shadow decides sampled requests
// a second way, off the request path; the live decision routes, both land
// in the shadow log without the prompt, and agreement is counted.
func TestShadowDecisions(t *testing.T) {
	gen := newReplica(t, "llama", "gen")
	code := newReplica(t, "coder", "code")
	legal := newReplica(t, "saul", "legal")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL), poolCfg("legal", "saul", legal.URL))
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "rebase", Class: "code", Score: 0.93},
		{Contains: "lease", Class: "law", Score: 0.55},
	}, Default: classifier.Scored{Class: "other", Score: 0.8}}

	dir := t.TempDir()
	live := filepath.Join(dir, "rules.yaml")
	os.WriteFile(live, []byte(gatewayRules+"shadow: {rules: candidate.yaml, log: logs/shadow.jsonl}\n"), 0o644)
	// The candidate trusts tier 1 at 0.5: "lease" goes to legal there.
	os.WriteFile(filepath.Join(dir, "candidate.yaml"), []byte(strings.Replace(gatewayRules, "tier1: 0.6", "tier1: 0.5", 1)), 0o644)
	cand := compileRulesFile(t, filepath.Join(dir, "candidate.yaml"), cfg, tier1, nil)
	set := compileRulesFile(t, live, cfg, tier1, cand)
	if got := set.ShadowLog(); got != filepath.Join(dir, "logs", "shadow.jsonl") {
		t.Fatalf("ShadowLog() = %q", got)
	}

	hs := newHarness(t, cfg)
	var mu sync.Mutex
	var logged bytes.Buffer
	var opened []string
	hs.gw.shadowLog = func(p string) (io.Writer, error) {
		opened = append(opened, p)
		return writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logged.Write(b) }), nil
	}
	if err := hs.gw.Apply(cfg, set); err != nil {
		t.Fatal(err)
	}
	if len(opened) != 1 || opened[0] != set.ShadowLog() {
		t.Fatalf("shadow log opened %v", opened)
	}
	for _, tc := range []struct{ text, replica string }{
		{"how do I rebase onto main", "code"},
		{"my lease", "gen"}, // live: below the 0.6 floor
		{"banana bread", "gen"},
	} {
		r := hs.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"`+tc.text+`"}]}`)
		if r.status != 200 || r.header.Get("X-Sim-Replica") != tc.replica {
			t.Fatalf("%q: status %d replica %q, want %s (the shadow must not route)", tc.text, r.status, r.header.Get("X-Sim-Replica"), tc.replica)
		}
	}
	// A request naming a pool's model is not routed by rules: no shadow.
	hs.do(t, "POST", "/v1/chat/completions", `{"model":"coder","messages":[{"role":"user","content":"my lease"}]}`)
	var recs []shadow.Record
	testenv.Wait(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(logged.String(), "\n") >= 3
	}, "three shadow records")
	mu.Lock()
	text := logged.String()
	mu.Unlock()
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		var r shadow.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("shadow line %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 {
		t.Fatalf("%d shadow records, want 3 (explicit models are not shadowed):\n%s", len(recs), text)
	}
	byPool := map[string]shadow.Record{}
	for _, r := range recs {
		if r.RequestID == "" || r.Model != "auto" || r.Time.IsZero() || r.Live.Version != set.Version() || r.Shadow.Version != cand.Version() || r.Shadow.Micros <= 0 {
			t.Fatalf("record %+v", r)
		}
		byPool[r.Live.Pool+">"+r.Shadow.Pool] = r
	}
	if r, ok := byPool["general>legal"]; !ok || r.Live.Reason != "below_floor" || r.Shadow.Reason != "tier1_confident" || r.Shadow.Class != "law" {
		t.Fatalf("the lease request: %+v (all: %v)", r, byPool)
	}
	if _, ok := byPool["code>code"]; !ok {
		t.Fatalf("the rebase request: %v", byPool)
	}
	for _, word := range []string{"rebase", "lease", "banana"} {
		if strings.Contains(text, word) {
			t.Fatalf("prompt text in the shadow log: %s", text)
		}
	}
	m := scrape(t, hs)
	for _, want := range []string{`triage_shadow_decisions_total{result="agree"} 2`, `triage_shadow_decisions_total{result="differ"} 1`, `triage_shadow_decisions_total{result="dropped"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s\n%s", want, grep(m, "shadow"))
		}
	}
}

// TestShadowQueueFullDrops: with no room in the queue a sampled request is
// dropped and counted, and the request itself is served as ever.
func TestShadowQueueFullDrops(t *testing.T) {
	gen := newReplica(t, "llama", "gen")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", gen.URL), poolCfg("legal", "saul", gen.URL))
	tier1 := &classifiertest.Fixed{Default: classifier.Scored{Class: "other", Score: 0.8}}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(gatewayRules), 0o644)
	cand := compileRules(t, cfg, tier1, gatewayRules)
	p := filepath.Join(dir, "rules.yaml")
	os.WriteFile(p, []byte(gatewayRules+"shadow: {rules: c.yaml, sample: 1}\n"), 0o644)
	set := compileRulesFile(t, p, cfg, tier1, cand)
	// A gateway whose Run never starts: nothing drains the queue of one.
	gw, err := New(cfg, set, Options{ShadowQueue: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	hs := &harness{gw: gw, URL: srv.URL}
	for range 3 {
		if r := hs.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`); r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
	}
	if m := scrape(t, hs); !strings.Contains(m, `triage_shadow_decisions_total{result="dropped"} 2`) {
		t.Fatalf("drops not counted:\n%s", grep(m, "shadow"))
	}
}

// A tenant's pin is part of both decisions a shadow compares: the
// candidate agreeing with the live rules on a pinned request is counted as
// agreeing, and both sides of the record show the tenant's pool.
func TestShadowPinsAlike(t *testing.T) {
	gen := newReplica(t, "llama", "gen")
	acme := newReplica(t, "acme-coder", "acme")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", gen.URL), poolCfg("legal", "saul", gen.URL),
		poolCfg("acme-code", "acme-coder", acme.URL))
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "acme")
	cfg.Access = tenancy.Config{KeysFile: keys, Policies: []tenancy.Policy{{Principal: "acme", Pins: map[string]string{"code": "acme-code"}}}}
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "rebase", Class: "code", Score: 0.93}},
		Default: classifier.Scored{Class: "other", Score: 0.8}}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(gatewayRules), 0o644)
	p := filepath.Join(dir, "rules.yaml")
	os.WriteFile(p, []byte(gatewayRules+"shadow: {rules: c.yaml, sample: 1, log: shadow.jsonl}\n"), 0o644)
	set := compileRulesFile(t, p, cfg, tier1, compileRulesFile(t, filepath.Join(dir, "c.yaml"), cfg, tier1, nil))
	hs := newHarness(t, cfg)
	var logged testenv.Buffer
	hs.gw.shadowLog = func(string) (io.Writer, error) { return &logged, nil }
	if err := hs.gw.Apply(cfg, set); err != nil {
		t.Fatal(err)
	}
	r := hs.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"how do I rebase"}]}`, "Authorization", "Bearer "+secrets["acme"])
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	testenv.Wait(t, func() bool { return strings.Contains(logged.String(), "\n") }, "a shadow record")
	var rec shadow.Record
	if err := json.Unmarshal([]byte(logged.String()), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Live.Pool != "acme-code" || !rec.Live.Pinned || rec.Shadow.Pool != "acme-code" || !rec.Shadow.Pinned {
		t.Fatalf("live %+v, shadow %+v; want both pinned to acme-code", rec.Live.Decision, rec.Shadow.Decision)
	}
	if m := scrape(t, hs); !strings.Contains(m, `triage_shadow_decisions_total{result="agree"} 1`) {
		t.Fatalf("a pinned request the candidate decides alike is not counted as agreeing:\n%s", grep(m, "shadow"))
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
