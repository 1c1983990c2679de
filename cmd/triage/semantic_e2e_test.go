package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// readyzBody is what /readyz says of the rules.
type readyzBody struct {
	RulesVersion string `json:"rules_version"`
	Tier2        string `json:"tier2"`
}

func readyz(t *testing.T, c *http.Client, gw *proc) readyzBody {
	t.Helper()
	var v readyzBody
	if err := json.Unmarshal(get(t, c, gw.url("/readyz")).body, &v); err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	return v
}

// ask sends one chat request naming model with text as the user message.
func ask(t *testing.T, c *http.Client, base, model, text string) reply {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": text}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %q: %v", text, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestSemanticRoutingEndToEnd runs the gateway with real rules and the
// default tier-1 heads (built by setup), routes real prompts by subject, and
// reloads the rules live: a stricter floor takes effect, a broken file is
// rejected whole.
func TestSemanticRoutingEndToEnd(t *testing.T) {
	root := repoRoot()
	models := testenv.Models(t, "tables/subjects-tier1.tbl") // the default heads' table, built by setup
	t.Parallel()
	gen := startSim(t, "m-gen", "gen")
	code := startSim(t, "m-code", "code")
	legal := startSim(t, "m-legal", "legal")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "triage.yaml")
	rulesPath := filepath.Join(dir, "rules.yaml")
	rulesBody := func(floor string) string {
		return "alias: auto\nheads: " + filepath.Join(root, "models", "heads", "subjects") + "\nclasses: {computer science: {floors: {tier1: " + floor + "}}}\n" +
			"routes:\n  - {name: coding, when: {class: computer science}, pool: code}\n  - {name: legal, when: {class: law}, pool: legal}\ndefault: general\n"
	}
	writeFile(t, rulesPath, rulesBody("0.6"))
	writeFile(t, cfgPath, "models_dir: "+models+"\nrules: rules.yaml\n"+gatewayConfig("",
		poolSpec{name: "general", model: "m-gen", replicas: []*proc{gen}},
		poolSpec{name: "code", model: "m-code", replicas: []*proc{code}},
		poolSpec{name: "legal", model: "m-legal", replicas: []*proc{legal}}))
	gw := startGateway(t, cfgPath)
	c := newClient(t)
	const python = "Why does my Python list comprehension raise a TypeError?"
	for _, tc := range []struct{ text, replica, route, class, reason string }{
		{python, "code", "coding", "computer science", "tier1_confident"},
		{"Is it legal for my employer to fire me for being sick?", "legal", "legal", "law", "tier1_confident"},
		{"What is a good recipe for banana bread?", "gen", "default", "other", "default"},
	} {
		r := ask(t, c, gw.url(""), "auto", tc.text)
		if r.status != 200 || r.header.Get("X-Sim-Replica") != tc.replica || r.header.Get("X-Triage-Route") != tc.route ||
			r.header.Get("X-Triage-Class") != tc.class || r.header.Get("X-Triage-Reason") != tc.reason {
			t.Fatalf("%q: status %d replica %q route %q class %q reason %q; want %s %s %s %s", tc.text, r.status,
				r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Route"), r.header.Get("X-Triage-Class"), r.header.Get("X-Triage-Reason"),
				tc.replica, tc.route, tc.class, tc.reason)
		}
	}
	rulesVersion := func() string { return readyz(t, c, gw).RulesVersion }
	v1 := rulesVersion()
	if v1 == "" {
		t.Fatal("/readyz has no rules_version")
	}
	// A floor no score clears: the same prompt now stays below it.
	replaceFile(t, rulesPath, rulesBody("0.99999"))
	testenv.WaitWithin(t, 10*time.Second, "the stricter floor to apply", func() (bool, string) {
		r := ask(t, c, gw.url(""), "auto", python)
		return r.header.Get("X-Triage-Reason") == "below_floor" && r.header.Get("X-Sim-Replica") == "gen", r.header.Get("X-Triage-Reason")
	})
	v2 := rulesVersion()
	if v2 == v1 {
		t.Fatalf("rules_version stayed %s after the rules changed", v1)
	}
	// A broken rules file: rejected whole, with its line; the last good
	// rules stay in effect.
	replaceFile(t, rulesPath, strings.Replace(rulesBody("0.99999"), "class: law", "class: astrology", 1))
	testenv.WaitWithin(t, 10*time.Second, "the broken rules to be rejected", func() (bool, string) {
		log := gw.stderr.String()
		return strings.Contains(log, "config reload rejected") && strings.Contains(log, `\"astrology\" is not a class`), ""
	})
	if v := rulesVersion(); v != v2 {
		t.Fatalf("rules_version %s after a rejected reload, want %s", v, v2)
	}
	if r := ask(t, c, gw.url(""), "auto", python); r.header.Get("X-Triage-Reason") != "below_floor" {
		t.Fatalf("after a rejected reload: reason %q", r.header.Get("X-Triage-Reason"))
	}
}

// TestShippedConfigsCheck: the default configuration and every example
// load, rules and heads included.
func TestShippedConfigsCheck(t *testing.T) {
	root := repoRoot()
	models := testenv.Models(t, "tables/subjects-tier1.tbl") // the default heads' table, built by setup
	configs, _ := filepath.Glob(filepath.Join(root, "examples", "*", "triage.yaml"))
	configs = append(configs, filepath.Join(root, "triage.yaml"))
	if len(configs) < 3 {
		t.Fatalf("found only %v", configs)
	}
	for _, c := range configs {
		t.Run(filepath.Base(filepath.Dir(c)), func(t *testing.T) {
			t.Setenv("TRIAGE_MODELS", models)
			var out, errb bytes.Buffer
			if err := runServe(context.Background(), []string{"--config", c, "--check"}, &out, &errb); err != nil {
				t.Fatalf("%s: %v\n%s", c, err, errb.String())
			}
			if !strings.Contains(out.String(), "ok") || !strings.Contains(out.String(), "rules") {
				t.Fatalf("%s --check printed %q", c, out.String())
			}
		})
	}
}

func TestRouteAndRulesCheckCLI(t *testing.T) {
	root := repoRoot()
	models := testenv.Models(t, "tables/subjects-tier1.tbl") // the default heads' table, built by setup
	t.Setenv("TRIAGE_MODELS", models)
	cfg := filepath.Join(root, "triage.yaml")
	var out, errb bytes.Buffer
	if err := runRoute(context.Background(), []string{"--config", cfg, "Why does my Python list comprehension raise a TypeError?"}, &out, &errb); err != nil {
		t.Fatalf("route: %v\n%s", err, errb.String())
	}
	var tr struct {
		Tier1 struct {
			Class string `json:"class"`
			Top   []any  `json:"top"`
		} `json:"tier1"`
		Routes []struct {
			Name   string
			Mass1  float64 `json:"mass_tier1"`
			Floor1 float64 `json:"floor_tier1"`
		} `json:"routes"`
		Decision struct {
			Pool, Route, Reason string
			Mass, Floor         float64
		} `json:"decision"`
		Version string `json:"rules_version"`
	}
	if err := json.Unmarshal(out.Bytes(), &tr); err != nil {
		t.Fatalf("route printed %s: %v", out.String(), err)
	}
	// The trace shows every class route's mass and floor; the decision the
	// floor it cleared.
	var coding *struct {
		Name   string
		Mass1  float64 `json:"mass_tier1"`
		Floor1 float64 `json:"floor_tier1"`
	}
	for i := range tr.Routes {
		if tr.Routes[i].Name == "coding" {
			coding = &tr.Routes[i]
		}
	}
	if tr.Tier1.Class != "computer science" || len(tr.Tier1.Top) != 3 || coding == nil ||
		math.Abs(coding.Floor1-tr.Decision.Floor) > 1e-6 || coding.Mass1 < coding.Floor1 || math.Abs(coding.Mass1-tr.Decision.Mass) > 1e-6 ||
		tr.Decision.Pool != "code" || tr.Decision.Route != "coding" || tr.Decision.Reason != "tier1_confident" || tr.Version == "" {
		t.Fatalf("route trace: %s", out.String())
	}
	// A concrete model is routed by name, and says so.
	out.Reset()
	if err := runRoute(context.Background(), []string{"--config", cfg, "--model", "gpt-4o-mini", "anything"}, &out, &errb); err != nil ||
		!strings.Contains(out.String(), `"reason": "explicit_model"`) {
		t.Fatalf("route --model: %v %s", err, out.String())
	}
	// rules check, with a dry run over labelled prompts.
	data := filepath.Join(t.TempDir(), "d.jsonl")
	writeFile(t, data, `{"text":"Why does my Python list comprehension raise a TypeError?","label":"computer science"}
{"text":"Is it legal for my employer to fire me for being sick?","label":"law"}
{"text":"What is a good recipe for banana bread?","label":"other"}
{"text":"How do I center a div with flexbox in CSS?","label":"computer science"}
`)
	out.Reset()
	if err := runRules(context.Background(), []string{"check", "--config", cfg, "--data", data}, &out, &errb); err != nil {
		t.Fatalf("rules check: %v\n%s", err, errb.String())
	}
	for _, want := range []string{"ok — version", "coding", "legal", "default", "escalation", "reasons:"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("rules check output lacks %q:\n%s", want, out.String())
		}
	}
	// A broken rules file given on the command line: every problem, with lines.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, "heads: "+filepath.Join(root, "models", "heads", "subjects")+"\nroutes:\n  - {name: x, when: {class: astrology}, pool: nowhere}\ndefault: general\n")
	err := runRules(context.Background(), []string{"check", "--config", cfg, bad}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), `bad.yaml:3:`) || !strings.Contains(err.Error(), `no pool named "nowhere"`) || !strings.Contains(err.Error(), `"astrology" is not a class`) {
		t.Fatalf("rules check of a broken file: %v", err)
	}
}

// TestShadowEndToEnd: a rules file with a shadow routes live by its own
// rules, logs both decisions of every sampled request, and triage ab --log
// reads the log back: where the candidate would have routed elsewhere.
func TestShadowEndToEnd(t *testing.T) {
	root := repoRoot()
	models := testenv.Models(t, "tables/subjects-tier1.tbl") // the default heads' table, built by setup
	t.Parallel()
	gen := startSim(t, "m-gen", "gen")
	code := startSim(t, "m-code", "code")
	dir := t.TempDir()
	rules := func(floor, extra string) string {
		return "alias: auto\nheads: " + filepath.Join(root, "models", "heads", "subjects") + "\nclasses: {computer science: {floors: {tier1: " + floor + "}}}\n" +
			"routes:\n  - {name: coding, when: {class: computer science}, pool: code}\ndefault: general\n" + extra
	}
	writeFile(t, filepath.Join(dir, "rules.yaml"), rules("0.6", "shadow: {rules: candidate.yaml, log: shadow/decisions.jsonl}\n"))
	// The candidate never trusts tier 1 on computer science.
	writeFile(t, filepath.Join(dir, "candidate.yaml"), rules("0.99999", ""))
	cfgPath := filepath.Join(dir, "triage.yaml")
	writeFile(t, cfgPath, "models_dir: "+models+"\nrules: rules.yaml\n"+gatewayConfig("",
		poolSpec{name: "general", model: "m-gen", replicas: []*proc{gen}},
		poolSpec{name: "code", model: "m-code", replicas: []*proc{code}}))
	gw := startGateway(t, cfgPath)
	c := newClient(t)
	const python = "Why does my Python list comprehension raise a TypeError?"
	for _, text := range []string{python, "What is a good recipe for banana bread?", python} {
		r := ask(t, c, gw.url(""), "auto", text)
		want := "gen"
		if text == python {
			want = "code" // live rules route; the shadow only watches
		}
		if r.status != 200 || r.header.Get("X-Sim-Replica") != want {
			t.Fatalf("%q: status %d replica %q, want %s", text, r.status, r.header.Get("X-Sim-Replica"), want)
		}
	}
	logPath := filepath.Join(dir, "shadow", "decisions.jsonl")
	testenv.WaitWithin(t, 10*time.Second, "three shadow decisions in the log", func() (bool, string) {
		b, _ := os.ReadFile(logPath)
		return bytes.Count(b, []byte("\n")) == 3, string(b)
	})
	if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("Python")) || bytes.Contains(b, []byte("banana")) {
		t.Fatalf("prompt text in the shadow log:\n%s", b)
	}
	var out, errb bytes.Buffer
	if err := runAB(context.Background(), []string{"--log", logPath}, &out, &errb); err != nil {
		t.Fatalf("triage ab --log: %v\n%s", err, errb.String())
	}
	for _, want := range []string{"3 sampled requests", "same pool for 33.3% (2 routed elsewhere)", "code → general: 2", "not accuracy"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("triage ab --log output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	html := filepath.Join(dir, "shadow.html")
	if err := runAB(context.Background(), []string{"--log", logPath, "--json", "--html", html}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		N             int     `json:"n"`
		PoolAgreement float64 `json:"pool_agreement"`
		Differ        int     `json:"differ"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.N != 3 || rep.Differ != 2 {
		t.Fatalf("--json: %v %+v\n%s", err, rep, out.String())
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("--html: %v", err)
	}
	if m := string(get(t, c, gw.url("/metrics")).body); !strings.Contains(m, `triage_shadow_decisions_total{result="differ"} 2`) {
		t.Fatalf("metrics lack the shadow's disagreement:\n%s", m)
	}
	if err := runAB(context.Background(), []string{"--log", logPath, "--a", "tier1"}, &out, &errb); !errors.Is(err, errUsage) {
		t.Fatalf("--log with --a: %v", err)
	}
}

// TestConversationEndToEnd: a real multi-turn exchange through the
// gateway with the default tier-1 heads and no session header: "Write a Go
// HTTP server", then "now add TLS", then "and tests?". Alone, the later
// turns read as something else ("and tests?" is math to tier 1); the
// window and the conversation's fingerprint keep every turn on the coding
// pool.
func TestConversationEndToEnd(t *testing.T) {
	root := repoRoot()
	models := testenv.Models(t, "tables/subjects-tier1.tbl")
	t.Parallel()
	gen := startSim(t, "m-gen", "gen")
	code := startSim(t, "m-code", "code")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "triage.yaml")
	writeFile(t, filepath.Join(dir, "rules.yaml"), "alias: auto\nheads: "+filepath.Join(root, "models", "heads", "subjects")+
		"\nroutes:\n  - {name: coding, when: {class: computer science}, pool: code}\ndefault: general\nwindow: {user_turns: 3}\nsession: {turns: 5}\n")
	writeFile(t, cfgPath, "models_dir: "+models+"\nrules: rules.yaml\n"+gatewayConfig("",
		poolSpec{name: "general", model: "m-gen", replicas: []*proc{gen}},
		poolSpec{name: "code", model: "m-code", replicas: []*proc{code}}))
	gw := startGateway(t, cfgPath)
	c := newClient(t)
	msgs := []map[string]string{{"role": "system", "content": "You are a helpful assistant."}}
	for i, turn := range []string{"Write a Go HTTP server", "now add TLS", "and tests?"} {
		msgs = append(msgs, map[string]string{"role": "user", "content": turn})
		body, _ := json.Marshal(map[string]any{"model": "auto", "messages": msgs})
		resp, err := c.Post(gw.url("/v1/chat/completions"), "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Sim-Replica") != "code" {
			t.Fatalf("turn %d %q: %d from %q (route %q, reason %q); want the coding pool", i+1, turn, resp.StatusCode,
				resp.Header.Get("X-Sim-Replica"), resp.Header.Get("X-Triage-Route"), resp.Header.Get("X-Triage-Reason"))
		}
		msgs = append(msgs, map[string]string{"role": "assistant", "content": "Here you go."})
	}
}
