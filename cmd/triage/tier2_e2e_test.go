//go:build ort

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/internal/testenv"
)

// TestTier2EndToEnd runs the gateway built with the ONNX runtime, the
// default heads and their encoder (Universal Sentence Encoder lite,
// converted and quantized to int8): a prompt tier 1 is unsure of is
// decided by tier 2, which loads on first need, off the request path; a
// rules file that never needs tier 2 never loads it.
func TestTier2EndToEnd(t *testing.T) {
	root := repoRoot()
	heads, err := classifier.LoadHeads(filepath.Join(root, "models", "heads", "subjects"))
	if err != nil {
		t.Fatal(err)
	}
	models := testenv.Models(t, "tables/subjects-tier1.tbl", heads.Tier2.Encoder.Model+"/model.onnx", "ort/libonnxruntime.so.1")
	t.Parallel()
	gen := startSim(t, "m-gen", "gen")
	code := startSim(t, "m-code", "code")
	dir := t.TempDir()
	headsDir := filepath.Join(dir, "heads")
	if err := heads.Save(headsDir); err != nil {
		t.Fatal(err)
	}
	rules := func(tier2 string) string {
		return "alias: auto\nheads: " + headsDir + "\n" +
			"routes:\n  - {name: coding, when: {class: computer science}, pool: code}\ndefault: general\n" + tier2
	}
	writeFile(t, filepath.Join(dir, "rules.yaml"), rules("tier2: {enabled: true, budget: 5s}\n"))
	cfgPath := filepath.Join(dir, "triage.yaml")
	writeFile(t, cfgPath, "models_dir: "+models+"\nrules: rules.yaml\n"+gatewayConfig("",
		poolSpec{name: "general", model: "m-gen", replicas: []*proc{gen}},
		poolSpec{name: "code", model: "m-code", replicas: []*proc{code}}))
	gw := startGateway(t, cfgPath)
	c := newClient(t)
	tier2 := func() string { return readyz(t, c, gw).Tier2 }
	if st := tier2(); st != "not loaded" {
		t.Fatalf("tier 2 %q before any request needs it", st)
	}
	// Confident on tier 1: tier 2 is still not needed.
	if r := ask(t, c, gw.url(""), "auto", "my code keeps crashing when I open the file, what am I doing wrong"); r.header.Get("X-Triage-Tier") != "1" || tier2() != "not loaded" {
		t.Fatalf("a confident tier-1 decision: tier %q, tier 2 %q", r.header.Get("X-Triage-Tier"), tier2())
	}
	// Tier 1 is unsure (0.46 against a 0.87 floor); tier 2 is not (0.91).
	const rebase = "How do I rebase my branch onto main in git?"
	testenv.WaitWithin(t, 60*time.Second, "tier 2 to decide", func() (bool, string) {
		r := ask(t, c, gw.url(""), "auto", rebase)
		h := r.header
		return h.Get("X-Triage-Tier") == "2" && h.Get("X-Triage-Route") == "coding" && h.Get("X-Sim-Replica") == "code" &&
				h.Get("X-Triage-Class") == "computer science" && h.Get("X-Triage-Reason") == "below_floor",
			h.Get("X-Triage-Tier") + " " + h.Get("X-Triage-Reason") + " " + h.Get("X-Sim-Replica")
	})
	if st := tier2(); st != "loaded" {
		t.Fatalf("tier 2 %q after deciding", st)
	}
	m := string(get(t, c, gw.url("/metrics")).body)
	if !strings.Contains(m, `triage_decisions_total{reason="below_floor",route="coding",tier="2"}`) {
		t.Fatalf("no tier-2 decision counted:\n%s", m)
	}

	// New floors in the heads: the rules and heads reload, the session
	// stays (same encoder): the next escalation is decided by tier 2 at
	// once, with no load to wait for.
	v := func() string { return readyz(t, c, gw).RulesVersion }
	before := v()
	f := float32(0.5)
	fl := heads.Floors["law"]
	fl.Tier1 = &f
	heads.Floors["law"] = fl
	if err := heads.Save(headsDir); err != nil {
		t.Fatal(err)
	}
	testenv.WaitWithin(t, 10*time.Second, "the new heads", func() (bool, string) { return v() != before, v() })
	if st := tier2(); st != "loaded" {
		t.Fatalf("tier 2 %q right after a heads reload that kept its encoder", st)
	}
	if r := ask(t, c, gw.url(""), "auto", rebase); r.header.Get("X-Triage-Tier") != "2" {
		t.Fatalf("first escalation after the reload: tier %q reason %q (the session was not kept)", r.header.Get("X-Triage-Tier"), r.header.Get("X-Triage-Reason"))
	}

	// Rules that never escalate (tier 2 off): reloaded, tier 2 is "off".
	replaceFile(t, filepath.Join(dir, "rules.yaml"), rules(""))
	testenv.WaitWithin(t, 10*time.Second, "the rules without tier 2", func() (bool, string) { st := tier2(); return st == "off", st })
	if r := ask(t, c, gw.url(""), "auto", rebase); r.header.Get("X-Triage-Tier") != "1" || r.header.Get("X-Triage-Reason") != "below_floor" || r.header.Get("X-Sim-Replica") != "gen" {
		t.Fatalf("without tier 2: %v", r.header)
	}
}
