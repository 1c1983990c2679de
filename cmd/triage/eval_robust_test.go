package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/triagegw/triage/evaluation"
)

// TestEvalRobustnessCLI runs eval --robustness on the example rule set
// (the gateway's decision, tier 2 included) and on a sample of dev with
// tier 1 alone: the report lists every perturbation with what it does,
// its counts add up, the same seed gives the same report, the rest of the
// report is what it is without it, and --max-flip-rate gates on it.
func TestEvalRobustnessCLI(t *testing.T) {
	skipHeavyUnderRace(t)
	heads, models := defaultHeadsOrSkip(t)
	t.Setenv("TRIAGE_MODELS", models)
	root := repoRoot()
	examples := filepath.Join(root, "datasets", "examples", "subjects.jsonl")
	rulesArgs := []string{"--rules", filepath.Join(root, "examples", "subjects", "rules.yaml"), "--config", filepath.Join(root, "examples", "subjects", "triage.yaml"),
		"--data", examples, "--by", "realism"}
	plain := evalJSON(t, rulesArgs...)
	if _, ok := plain["robustness"]; ok {
		t.Fatal("a robustness report without --robustness")
	}
	r := evalJSON(t, append(rulesArgs, "--robustness", "--seed", "3")...)
	for _, k := range []string{"accuracy", "coverage", "escalation_rate", "per_class", "reasons"} {
		if !reflect.DeepEqual(r[k], plain[k]) {
			t.Errorf("%s with --robustness: %v, without: %v", k, r[k], plain[k])
		}
	}
	var rb evaluation.Robustness
	jsonAs(t, r["robustness"], &rb)
	n := int(plain["n"].(float64))
	if rb.JudgedOn != "route" || rb.Seed != 3 || rb.Rows != n || rb.Of != n || rb.By != "realism" {
		t.Fatalf("robustness: judged on %q, seed %d, %d rows of %d, by %q", rb.JudgedOn, rb.Seed, rb.Rows, rb.Of, rb.By)
	}
	perts := evaluation.Perturbations()
	if len(rb.Perturbations) != len(perts) {
		t.Fatalf("%d perturbations reported, %d listed", len(rb.Perturbations), len(perts))
	}
	total, flips := 0, 0
	for i, p := range rb.Perturbations {
		if p.Name != perts[i].Name || p.Does != perts[i].Does {
			t.Errorf("perturbation %d: %q (%q), want %q (%q)", i, p.Name, p.Does, perts[i].Name, perts[i].Does)
		}
		if p.N+p.Unchanged != n || p.Broke+p.Mended > p.Flips.Flips || math.Abs(p.Rate-float64(p.Flips.Flips)/float64(p.N)) > 1e-12 {
			t.Errorf("%s: n %d + unchanged %d (want %d rows), flips %d (right→wrong %d, wrong→right %d), rate %v",
				p.Name, p.N, p.Unchanged, n, p.Flips.Flips, p.Broke, p.Mended, p.Rate)
		}
		total += p.N
		flips += p.Flips.Flips
	}
	classTotal := 0
	for _, g := range rb.PerClass {
		classTotal += g.N
	}
	if rb.N != total || rb.Flips.Flips != flips || classTotal != total || len(rb.Slices) == 0 {
		t.Fatalf("overall n %d flips %d; the perturbations' %d and %d, the classes' n %d; %d slices", rb.N, rb.Flips.Flips, total, flips, classTotal, len(rb.Slices))
	}
	// The same seed, the same report.
	var again evaluation.Robustness
	jsonAs(t, evalJSON(t, append(rulesArgs, "--robustness", "--seed", "3")...)["robustness"], &again)
	if !reflect.DeepEqual(again, rb) {
		t.Fatalf("two runs with seed 3 differ:\n%+v\n%+v", rb, again)
	}

	// Text and HTML, and the gate.
	html := filepath.Join(t.TempDir(), "r.html")
	var out, errb bytes.Buffer
	err := runEval(context.Background(), append(rulesArgs, "--robustness", "--seed", "3", "--html", html, "--max-flip-rate", "0"), &out, &errb)
	if rb.Rate > 0 && (!errors.Is(err, errGate) || !strings.Contains(errb.String(), "FAIL flip rate under noise")) || rb.Rate == 0 && err != nil {
		t.Fatalf("--max-flip-rate 0 at a flip rate of %v: %v\n%s", rb.Rate, err, errb.String())
	}
	for _, want := range []string{"robustness: ", "perturbation", "quick-question", "what it does", "most frequent changes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("eval --robustness printed no %q:\n%s", want, out.String())
		}
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte(`id="robustness"`)) || !bytes.Contains(b, []byte("Flip rate")) {
		t.Errorf("--html: no robustness section in %d bytes (%v)", len(b), err)
	}

	// Tier 1 of the heads, on a sample of dev: judged on classes.
	var t1 evaluation.Robustness
	jsonAs(t, evalJSON(t, "--heads", heads, "--models", models, "--data", devSet(t), "--robustness", "--robustness-rows", "200")["robustness"], &t1)
	if t1.JudgedOn != "class" || t1.Rows != 200 || t1.Of < 4000 || t1.Seed != 1 || t1.N < 200*(len(perts)-1) {
		t.Fatalf("tier 1 on 200 rows of dev: judged on %q, %d rows of %d, seed %d, n %d", t1.JudgedOn, t1.Rows, t1.Of, t1.Seed, t1.N)
	}
}

func TestEvalRobustnessUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--rules", "rules.yaml", "--data", "x.jsonl", "--robustness", "--robustness-rows", "-1"},
		{"--rules", "rules.yaml", "--data", "x.jsonl", "--max-flip-rate", "3"},
	} {
		var out, errb bytes.Buffer
		if err := runEval(context.Background(), args, &out, &errb); !errors.Is(err, errUsage) || errb.Len() == 0 {
			t.Errorf("eval %v: %v, %q; want a usage error that says why", args, err, errb.String())
		}
	}
}

// jsonAs turns a decoded JSON value back into v.
func jsonAs(t *testing.T, from any, v any) {
	t.Helper()
	b, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
