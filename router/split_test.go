package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/shadow"
	"github.com/triagegw/triage/split"
	"github.com/triagegw/triage/tenancy"

	"github.com/triagegw/triage/internal/testenv"
)

// TestSplitRoutesEachArm: with a split, callers on the B arm are routed by
// the candidate rules (real traffic, not a shadow), callers on A by the
// file's own; each response names its arm, and each arm is counted and
// logged apart, without the prompt.
func TestSplitRoutesEachArm(t *testing.T) {
	cfg, set, dir := splitFixture(t, "split: {rules: candidate.yaml, weight: 0.5, log: split.jsonl, names: [control, next]}\n")

	// Principals on each arm.
	var names []string
	byArm := map[rules.Arm]string{}
	for i := 0; len(byArm) < 2; i++ {
		name := fmt.Sprintf("user%d", i)
		names = append(names, name)
		if arm := set.Split().Assign(rules.ByPrincipal, name); byArm[arm] == "" {
			byArm[arm] = name
		}
	}
	keys := filepath.Join(dir, "keys.jsonl")
	secrets := writeKeys(t, keys, names...)
	cfg.Access = tenancy.Config{KeysFile: keys, Policies: []tenancy.Policy{{Group: "*"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	hs := newHarness(t, newConfig("general", poolCfg("general", "llama", cfg.Pools[0].Replicas[0].URL)))
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
	if len(opened) != 1 || opened[0] != filepath.Join(dir, "split.jsonl") {
		t.Fatalf("split log opened %v", opened)
	}
	for _, tc := range []struct {
		arm           rules.Arm
		name, replica string
	}{{rules.ArmA, "control", "code"}, {rules.ArmB, "next", "legal"}} {
		for range 3 { // sticky: the same arm every time
			r := hs.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"how do I rebase onto main"}]}`,
				"Authorization", "Bearer "+secrets[byArm[tc.arm]])
			if r.status != 200 || r.header.Get("X-Sim-Replica") != tc.replica || r.header.Get("X-Triage-Arm") != tc.name || r.header.Get("X-Triage-Route") != "coding" {
				t.Fatalf("%s (arm %s): status %d replica %q arm %q route %q, want %s", byArm[tc.arm], tc.name, r.status,
					r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Arm"), r.header.Get("X-Triage-Route"), tc.replica)
			}
		}
	}
	// A request naming a pool's model is on no arm.
	if r := hs.do(t, "POST", "/v1/chat/completions", chatFor("llama"), "Authorization", "Bearer "+secrets[byArm[rules.ArmB]]); r.status != 200 || r.header.Get("X-Triage-Arm") != "" {
		t.Fatalf("explicit model: %d, arm %q", r.status, r.header.Get("X-Triage-Arm"))
	}

	testenv.Wait(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(logged.String(), "\n") >= 6
	}, "six split records")
	mu.Lock()
	text := logged.String()
	mu.Unlock()
	if strings.Contains(text, "rebase") || strings.Contains(text, "user") {
		t.Fatalf("prompt text or a principal in the split log:\n%s", text)
	}
	count := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		var r split.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("split line %q: %v", l, err)
		}
		want := map[string]string{"control": "code", "next": "legal"}[r.Arm]
		wantVersion := map[string]string{"control": set.Version(), "next": set.Split().Candidate().Version()}[r.Arm]
		if r.Pool != want || r.By != rules.ByPrincipal || r.Route != "coding" || r.Reason != rules.ReasonTier1Confident || r.Tier != 1 ||
			r.Class != "code" || r.Status != 200 || r.RequestID == "" || r.Time.IsZero() || r.DurationMS <= 0 || r.Version != wantVersion ||
			r.PromptTokens == 0 {
			t.Fatalf("record %+v", r)
		}
		count[r.Arm]++
	}
	if len(count) != 2 || count["control"] != 3 || count["next"] != 3 || strings.Count(text, "\n") != 6 {
		t.Fatalf("records by arm %v (the explicit model is on no arm):\n%s", count, text)
	}
	m := scrape(t, hs)
	for _, want := range []string{
		`triage_split_requests_total{arm="control",route="coding",status="2xx"} 3`,
		`triage_split_requests_total{arm="next",route="coding",status="2xx"} 3`,
		`triage_split_requests_total{arm="next",route="default",status="5xx"} 0`,
		`triage_split_request_duration_seconds_count{arm="control"} 3`,
		`triage_split_request_duration_seconds_count{arm="next"} 3`,
		`triage_split_log_dropped_total 0`,
		// The gateway's own series are unchanged by the split.
		`triage_requests_total{code="200",pool="code"} 3`,
		`triage_requests_total{code="200",pool="legal"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s\n%s", want, grep(m, "split"))
		}
	}
}

// TestSplitBySession: without access control a conversation keeps its arm
// by the rules' session header,
// else by its fingerprint.
func TestSplitBySession(t *testing.T) {
	cfg, set, _ := splitFixture(t, "session: {header: x-session-id}\nsplit: {rules: candidate.yaml, weight: 0.5}\n")
	hs := newHarness(t, cfg)
	if err := hs.gw.Apply(cfg, set); err != nil {
		t.Fatal(err)
	}
	arms := map[string]int{}
	for i := range 16 {
		sess := fmt.Sprintf("s-%d", i)
		want := ""
		for range 3 {
			r := hs.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"rebase"}]}`, "X-Session-Id", sess)
			arm := r.header.Get("X-Triage-Arm")
			if want == "" {
				want = arm
			}
			if r.status != 200 || arm != want || r.header.Get("X-Sim-Replica") != map[string]string{"a": "code", "b": "legal"}[arm] {
				t.Fatalf("session %s: status %d arm %q (first %q) replica %q", sess, r.status, arm, want, r.header.Get("X-Sim-Replica"))
			}
		}
		arms[want]++
	}
	if arms["a"] == 0 || arms["b"] == 0 {
		t.Fatalf("16 sessions all on one arm: %v", arms)
	}
	// No header: the same first turn keeps its arm as the chat grows.
	first := hs.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"rebase please"}]}`).header.Get("X-Triage-Arm")
	for range 3 {
		r := hs.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"rebase please"},{"role":"assistant","content":"ok"},{"role":"user","content":"rebase again"}]}`)
		if r.header.Get("X-Triage-Arm") != first {
			t.Fatalf("fingerprint: arm %q, first %q", r.header.Get("X-Triage-Arm"), first)
		}
	}
}

// TestSplitShadowNamesServingArm: with a split and a shadow both on, each
// shadow record names the arm that served the request and that arm's
// rules version, and its live decision is the one that arm's rules made.
func TestSplitShadowNamesServingArm(t *testing.T) {
	cfg, set, dir := splitFixture(t, "split: {rules: candidate.yaml, weight: 0.5, names: [control, next]}\n"+
		"shadow: {rules: shadow.yaml, log: shadow.jsonl}\n")
	var names []string
	byArm := map[rules.Arm]string{}
	for i := 0; len(byArm) < 2; i++ {
		name := fmt.Sprintf("user%d", i)
		names = append(names, name)
		if arm := set.Split().Assign(rules.ByPrincipal, name); byArm[arm] == "" {
			byArm[arm] = name
		}
	}
	keys := filepath.Join(dir, "keys.jsonl")
	secrets := writeKeys(t, keys, names...)
	cfg.Access = tenancy.Config{KeysFile: keys, Policies: []tenancy.Policy{{Group: "*"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	hs := newHarness(t, newConfig("general", poolCfg("general", "llama", cfg.Pools[0].Replicas[0].URL)))
	var mu sync.Mutex
	var logged bytes.Buffer
	hs.gw.shadowLog = func(p string) (io.Writer, error) {
		if p != filepath.Join(dir, "shadow.jsonl") {
			return nil, fmt.Errorf("unexpected log %s", p)
		}
		return writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logged.Write(b) }), nil
	}
	if err := hs.gw.Apply(cfg, set); err != nil {
		t.Fatal(err)
	}
	for _, arm := range []rules.Arm{rules.ArmA, rules.ArmB} {
		r := hs.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"how do I rebase onto main"}]}`,
			"Authorization", "Bearer "+secrets[byArm[arm]])
		if want := map[rules.Arm]string{rules.ArmA: "code", rules.ArmB: "legal"}[arm]; r.status != 200 || r.header.Get("X-Sim-Replica") != want {
			t.Fatalf("arm %d: status %d replica %q, want %s", arm, r.status, r.header.Get("X-Sim-Replica"), want)
		}
	}
	testenv.Wait(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(logged.String(), "\n") >= 2
	}, "two shadow records")
	mu.Lock()
	text := logged.String()
	mu.Unlock()
	want := map[string]struct{ version, pool string }{
		"control": {set.Version(), "code"},
		"next":    {set.Split().Candidate().Version(), "legal"},
	}
	if set.Version() == set.Split().Candidate().Version() {
		t.Fatal("the arms' rules have the same version: the test cannot tell them apart")
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		var r shadow.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("shadow line %q: %v", l, err)
		}
		w, ok := want[r.Arm]
		if !ok || r.Live.Version != w.version || r.Live.Pool != w.pool || r.Shadow.Pool != "general" {
			t.Fatalf("shadow record arm %q live version %q pool %q shadow pool %q; want version %q pool %q, shadow general",
				r.Arm, r.Live.Version, r.Live.Pool, r.Shadow.Pool, w.version, w.pool)
		}
		seen[r.Arm] = true
	}
	if len(seen) != 2 {
		t.Fatalf("shadow records for arms %v, want both:\n%s", seen, text)
	}
}

// TestSplitByRequestOptIn: a request with neither a principal nor a
// conversation (a completion) stays outside the split, decided by A's
// rules and counted as unassigned, unless split.by_request assigns it by
// its request id; the rules then warn that it is not sticky.
func TestSplitByRequestOptIn(t *testing.T) {
	const completion = `{"model":"auto","prompt":"how do I rebase onto main"}`
	t.Run("off", func(t *testing.T) {
		cfg, set, _ := splitFixture(t, "split: {rules: candidate.yaml, weight: 0.5}\n")
		if len(set.Warnings()) != 0 {
			t.Fatalf("Warnings() = %v, want none", set.Warnings())
		}
		hs := newHarness(t, cfg)
		if err := hs.gw.Apply(cfg, set); err != nil {
			t.Fatal(err)
		}
		for range 8 {
			r := hs.do(t, "POST", "/v1/completions", completion)
			if r.status != 200 || r.header.Get("X-Triage-Arm") != "" || r.header.Get("X-Sim-Replica") != "code" {
				t.Fatalf("status %d arm %q replica %q, want 200 on no arm, A's route to code", r.status, r.header.Get("X-Triage-Arm"), r.header.Get("X-Sim-Replica"))
			}
		}
		m := scrape(t, hs)
		if !strings.Contains(m, "triage_split_unassigned_total 8") || !strings.Contains(m, `triage_split_requests_total{arm="a",route="coding",status="2xx"} 0`) {
			t.Fatalf("want 8 unassigned and none on an arm:\n%s", grep(m, "split"))
		}
	})
	t.Run("on", func(t *testing.T) {
		cfg, set, _ := splitFixture(t, "split: {rules: candidate.yaml, weight: 0.5, by_request: true}\n")
		w := set.Warnings()
		if len(w) != 1 || !strings.Contains(w[0].Error(), "rules.yaml:7:") || !strings.Contains(w[0].Msg, "not sticky") {
			t.Fatalf("Warnings() = %v, want one for split.by_request at its line", w)
		}
		hs := newHarness(t, cfg)
		if err := hs.gw.Apply(cfg, set); err != nil {
			t.Fatal(err)
		}
		arms := map[string]int{}
		for range 32 {
			r := hs.do(t, "POST", "/v1/completions", completion)
			arm := r.header.Get("X-Triage-Arm")
			if r.status != 200 || r.header.Get("X-Sim-Replica") != map[string]string{"a": "code", "b": "legal"}[arm] {
				t.Fatalf("status %d arm %q replica %q", r.status, arm, r.header.Get("X-Sim-Replica"))
			}
			arms[arm]++
		}
		if arms["a"] == 0 || arms["b"] == 0 {
			t.Fatalf("32 requests by request id all on one arm: %v", arms)
		}
		if m := scrape(t, hs); !strings.Contains(m, "triage_split_unassigned_total 0") {
			t.Fatalf("want none unassigned:\n%s", grep(m, "split"))
		}
	})
}

// splitFixture is the gateway the split tests share: pools general, code
// and legal, each on a simulated replica of its own, a tier 1 that calls
// "rebase" code, and gatewayRules compiled with extra appended, whose split
// names candidate.yaml: the same rules with the code route sent to legal,
// so the arms route one class to two pools. When extra has a shadow
// section, it names shadow.yaml: the same rules with the code route sent
// to general. dir holds the rules files (and whatever the split logs).
func splitFixture(t *testing.T, extra string) (cfg *config.Config, set *rules.Set, dir string) {
	t.Helper()
	gen := newReplica(t, "llama", "gen")
	code := newReplica(t, "coder", "code")
	legal := newReplica(t, "saul", "legal")
	cfg = newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL), poolCfg("legal", "saul", legal.URL))
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "rebase", Class: "code", Score: 0.93}},
		Default: classifier.Scored{Class: "other", Score: 0.8}}
	dir = t.TempDir()
	cand := filepath.Join(dir, "candidate.yaml")
	if err := os.WriteFile(cand, []byte(strings.Replace(gatewayRules, "pool: code, fallback: general", "pool: legal", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(live, []byte(gatewayRules+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	var sh *rules.Set
	if strings.Contains(extra, "shadow:") {
		p := filepath.Join(dir, "shadow.yaml")
		if err := os.WriteFile(p, []byte(strings.Replace(gatewayRules, "pool: code, fallback: general", "pool: general", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		sh = compileRulesFile(t, p, cfg, tier1, nil)
	}
	return cfg, compileSplitFile(t, live, cfg, tier1, compileRulesFile(t, cand, cfg, tier1, nil), sh), dir
}

func compileSplitFile(t *testing.T, p string, cfg interface{ PoolNames() map[string]bool }, tier1 classifier.Classifier, b, shadow *rules.Set) *rules.Set {
	t.Helper()
	f, err := rules.ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	classes := []string{"code", "law", "other"}
	head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, 3), B: make([]float32, 3)}
	h := &classifier.Heads{Format: 1, Name: "t", Version: "1", Classes: classes, Dir: "/h", Tier1: &classifier.Tier{Head: head}}
	s, err := rules.Compile(f, rules.Env{Pools: cfg.PoolNames(), Heads: h, Tier1: tier1, Split: b, Shadow: shadow})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
