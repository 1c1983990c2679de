package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/triagegw/triage/internal/testenv"
)

// TestUnfamiliarEndToEnd: with the default heads' centroids, triage route
// prints tier 1's distance from its top class's centroid; with
// tier2.unfamiliar_at at or below it, the same confident answer is not
// trusted, and with tier 2 off the gateway sends the request to the
// default pool, saying why in x-triage-reason and in
// triage_decisions_total.
func TestUnfamiliarEndToEnd(t *testing.T) {
	root := repoRoot()
	models := testenv.Models(t, "tables/subjects-tier1.tbl") // the default heads' table, built by setup
	t.Parallel()
	gen := startSim(t, "m-gen", "gen")
	code := startSim(t, "m-code", "code")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "triage.yaml")
	rulesPath := filepath.Join(dir, "rules.yaml")
	rules := func(unfamiliarAt string) string {
		return "alias: auto\nheads: " + filepath.Join(root, "models", "heads", "subjects") + "\nclasses: {computer science: {floors: {tier1: 0.6}}}\n" +
			"routes:\n  - {name: coding, when: {class: computer science}, pool: code}\ndefault: general\ntier2: {unfamiliar_at: " + unfamiliarAt + "}\n"
	}
	writeFile(t, cfgPath, "models_dir: "+models+"\nrules: rules.yaml\n"+gatewayConfig("",
		poolSpec{name: "general", model: "m-gen", replicas: []*proc{gen}},
		poolSpec{name: "code", model: "m-code", replicas: []*proc{code}}))
	const python = "Why does my Python list comprehension raise a TypeError?"
	type trace struct {
		Tier1 struct {
			Class    string  `json:"class"`
			Distance float64 `json:"distance"`
		} `json:"tier1"`
		UnfamiliarAt float64 `json:"unfamiliar_at"`
		Decision     struct {
			Pool, Route, Reason string
		} `json:"decision"`
	}
	route := func() trace {
		t.Helper()
		var out, errb bytes.Buffer
		if err := runRoute(context.Background(), []string{"--config", cfgPath, python}, &out, &errb); err != nil {
			t.Fatalf("route: %v\n%s", err, errb.String())
		}
		var tr trace
		if err := json.Unmarshal(out.Bytes(), &tr); err != nil {
			t.Fatalf("route printed %s: %v", out.String(), err)
		}
		return tr
	}
	writeFile(t, rulesPath, rules("0"))
	tr := route()
	if tr.Tier1.Class != "computer science" || tr.Tier1.Distance <= 0 || tr.Tier1.Distance >= 2 || tr.UnfamiliarAt != 0 || tr.Decision.Reason != "tier1_confident" {
		t.Fatalf("unfamiliar_at 0: %+v", tr)
	}
	d := tr.Tier1.Distance
	// Escalated at its own distance; without tier 2, to the default pool.
	writeFile(t, rulesPath, rules(strconv.FormatFloat(d, 'g', -1, 32)))
	if tr := route(); tr.Tier1.Distance != d || tr.Decision.Reason != "unfamiliar" || tr.Decision.Pool != "general" || tr.UnfamiliarAt == 0 {
		t.Fatalf("unfamiliar_at %v: %+v", d, tr)
	}
	gw := startGateway(t, cfgPath)
	c := newClient(t)
	r := ask(t, c, gw.url(""), "auto", python)
	if r.status != 200 || r.header.Get("X-Sim-Replica") != "gen" || r.header.Get("X-Triage-Reason") != "unfamiliar" || r.header.Get("X-Triage-Class") != "computer science" {
		t.Fatalf("gateway: status %d replica %q reason %q class %q", r.status, r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Reason"), r.header.Get("X-Triage-Class"))
	}
	if m := string(get(t, c, gw.url("/metrics")).body); !strings.Contains(m, `reason="unfamiliar"`) {
		t.Fatalf("/metrics has no decision with reason unfamiliar")
	}
}
