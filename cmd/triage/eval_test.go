package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/lifecycle"
)

// defaultHeadsOrSkip returns the default heads' directory and models
// directory, or skips when setup has not built the table (see
// testenv.Models).
func defaultHeadsOrSkip(t *testing.T) (heads, models string) {
	t.Helper()
	models = testenv.Models(t, "tables/subjects-tier1.tbl")
	return filepath.Join(repoRoot(), "models", "heads", "subjects"), models
}

func devSet(t *testing.T) string {
	t.Helper()
	return filepath.Join(testenv.Shared(t, "datasets/subjects/dev.jsonl"), "datasets", "subjects", "dev.jsonl")
}

func TestEvalCLI(t *testing.T) {
	skipHeavyUnderRace(t)
	heads, models := defaultHeadsOrSkip(t)
	dev := devSet(t)
	r := evalJSON(t, "--heads", heads, "--models", models, "--data", dev, "--by", "realism")
	for _, k := range []string{"accuracy", "macro_precision", "macro_recall", "macro_f1", "coverage", "escalation_rate", "per_class", "latency"} {
		if _, ok := r[k]; !ok {
			t.Errorf("--json lacks %q", k)
		}
	}
	h, err := classifier.LoadHeads(heads)
	if err != nil {
		t.Fatal(err)
	}
	if acc := r["accuracy"].(float64); acc < 0.82 {
		t.Fatalf("eval accuracy %.4f", acc)
	}
	recordedAsMeasured(t, h.Tier1.Eval["dev.jsonl"], r, 1)
	lat := r["latency"].(map[string]any)["tier1"].(map[string]any)
	if lat["p50"].(float64) <= 0 || lat["p99"].(float64) < lat["p50"].(float64) {
		t.Fatalf("latency %v", lat)
	}
	pc := r["per_class"].(map[string]any)["law"].(map[string]any)
	for _, k := range []string{"precision", "recall", "f1", "support"} {
		if _, ok := pc[k]; !ok {
			t.Errorf("per_class.law lacks %q", k)
		}
	}
	if s := r["slices"].(map[string]any); len(s) != 4 {
		t.Fatalf("%d realism slices, want 4", len(s))
	}
	// Gates: a bar it clears passes, one it cannot fails with the figures.
	var out, errb bytes.Buffer
	if err := runEval(context.Background(), []string{"--heads", heads, "--models", models, "--data", dev, "--min-accuracy", "0.8"}, &out, &errb); err != nil {
		t.Fatalf("gate 0.8: %v", err)
	}
	err = runEval(context.Background(), []string{"--heads", heads, "--models", models, "--data", dev, "--min-accuracy", "0.99", "--min-macro-precision", "0.99"}, &out, &errb)
	if !errors.Is(err, errGate) || !strings.Contains(errb.String(), "FAIL accuracy") || !strings.Contains(errb.String(), "FAIL macro precision") {
		t.Fatalf("gate 0.99: %v\n%s", err, errb.String())
	}
	// The rules' view, with an HTML report and a leakage check.
	html := filepath.Join(t.TempDir(), "r.html")
	out.Reset()
	errb.Reset()
	t.Setenv("TRIAGE_MODELS", models)
	train := filepath.Join(filepath.Dir(dev), "train.jsonl")
	args := []string{"--rules", filepath.Join(repoRoot(), "rules.yaml"), "--config", filepath.Join(repoRoot(), "triage.yaml"), "--data", dev, "--html", html, "--train", train}
	if err := runEval(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("eval --rules: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "rules mode") || !strings.Contains(out.String(), "coverage") ||
		!strings.Contains(out.String(), "route precision 0.") || !strings.Contains(out.String(), "route  precision  recall  taken  right  support\n") {
		t.Fatalf("eval --rules printed:\n%s", out.String())
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("--html wrote %d bytes (%v)", len(b), err)
	}
}

func TestCalibrateCLI(t *testing.T) {
	skipHeavyUnderRace(t)
	heads, models := defaultHeadsOrSkip(t)
	dev := devSet(t)
	out := filepath.Join(t.TempDir(), "cal")
	var so, se bytes.Buffer
	args := []string{"--heads", heads, "--models", models, "--data", dev, "--group-by", "source", "--target-precision", "0.9", "--out", out}
	if err := runCalibrate(context.Background(), args, &so, &se); err != nil {
		t.Fatalf("calibrate: %v\n%s", err, se.String())
	}
	for _, want := range []string{"temperature", "floors for precision 0.90", "held-out source", "reddit_selfposts", "cv precision"} {
		if !strings.Contains(so.String(), want) {
			t.Fatalf("calibrate output lacks %q:\n%s", want, so.String())
		}
	}
	h, err := classifier.LoadHeads(out)
	if err != nil {
		t.Fatal(err)
	}
	if f := h.Floors["law"].Tier1; f == nil || *f <= 0 || *f > 1 {
		t.Fatalf("calibrated heads: law floor %v", f)
	}
	if _, ok := h.Floors["other"]; ok {
		t.Fatal("a floor for other: it is the default's class")
	}
	// The copy's report on dev, the set it was calibrated on, is at the
	// calibrated temperature.
	if !strings.Contains(se.String(), "tier 1's report on dev.jsonl measured again with it") {
		t.Fatalf("calibrate's messages:\n%s", se.String())
	}
	recordedAsMeasured(t, h.Tier1.Eval["dev.jsonl"], evalJSON(t, "--heads", out, "--models", models, "--data", dev), 1)
	// --diff: a rules snippet, every floored class once.
	so.Reset()
	if err := runCalibrate(context.Background(), []string{"--heads", heads, "--models", models, "--data", dev, "--diff"}, &so, &se); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(so.String(), "classes:\n") || !strings.Contains(so.String(), `  "computer science": {floors: {tier1: `) || strings.Count(so.String(), "{floors:") != 13 {
		t.Fatalf("--diff:\n%s", so.String())
	}
}

// TestCalibrateRulesHeldOutCLI chooses the default rules' setting leaving
// each of dev's sources out, on 200 items of each.
func TestCalibrateRulesHeldOutCLI(t *testing.T) {
	skipHeavyUnderRace(t)
	_, models := defaultHeadsOrSkip(t)
	t.Setenv("TRIAGE_MODELS", models)
	b, err := os.ReadFile(devSet(t))
	if err != nil {
		t.Fatal(err)
	}
	var sample []string
	per := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var row struct{ Source string }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		if per[row.Source] < 200 {
			per[row.Source]++
			sample = append(sample, line)
		}
	}
	data := filepath.Join(t.TempDir(), "sample.jsonl")
	if err := os.WriteFile(data, []byte(strings.Join(sample, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--rules", filepath.Join(repoRoot(), "rules.yaml"), "--config", filepath.Join(repoRoot(), "triage.yaml"), "--data", data,
		"--group-by", "source", "--target-precision", "0.9", "--max-escalation", "0.3", "--min-routed", "10", "--folds", "2",
		"--unfamiliar-shares", "0"} // off: its five shares would multiply the candidates by five; evaluation.TestFitRoutesUnfamiliar covers its search
	var so, se bytes.Buffer
	if err := runCalibrate(context.Background(), append(args, "--json"), &so, &se); err != nil {
		t.Fatalf("calibrate --rules --group-by: %v\n%s", err, se.String())
	}
	var rep struct {
		Selection struct {
			HeldOut    bool    `json:"held_out_sources"`
			MinRouted  int     `json:"min_routed"`
			Precision  float64 `json:"precision"`
			Escalation float64 `json:"escalation"`
			Met        bool    `json:"met"`
		} `json:"selection"`
		Sources []struct {
			Source  string
			HeldOut struct {
				N          int     `json:"n"`
				Routed     int     `json:"routed"`
				Precision  float64 `json:"route_precision"`
				Escalation float64 `json:"escalation"`
			} `json:"held_out"`
			Unseen struct{ N int } `json:"unseen"`
		} `json:"sources"`
		NewSource *struct {
			Sources   int                              `json:"sources"`
			Level     float64                          `json:"level"`
			Precision struct{ Median, Lo, Hi float64 } `json:"route_precision"`
		} `json:"new_source"`
	}
	if err := json.Unmarshal(so.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, so.String())
	}
	sel := rep.Selection
	if !sel.HeldOut || sel.MinRouted != 10 || len(rep.Sources) != 4 {
		t.Fatalf("selection %+v over %d sources", sel, len(rep.Sources))
	}
	// The choice read the worst held-out source: the least precision of
	// those routing 10, the most escalation of those holding 10.
	worstP, worstE := 2.0, -1.0
	for _, s := range rep.Sources {
		if s.HeldOut.N != 200 || s.Unseen.N != 200 {
			t.Fatalf("source %s: held out %+v, unseen n %d", s.Source, s.HeldOut, s.Unseen.N)
		}
		if s.HeldOut.Routed >= 10 {
			worstP = min(worstP, s.HeldOut.Precision)
		}
		worstE = max(worstE, s.HeldOut.Escalation)
	}
	if sel.Precision != worstP || sel.Escalation != worstE || sel.Met != (worstP >= 0.9 && worstE <= 0.3) {
		t.Fatalf("selection %+v; the worst held-out source has precision %v, escalation %v", sel, worstP, worstE)
	}
	n := rep.NewSource
	if n == nil || n.Sources < 2 || math.Abs(n.Level-float64(n.Sources-1)/float64(n.Sources+1)) > 1e-9 || n.Precision.Lo > n.Precision.Median || n.Precision.Median > n.Precision.Hi {
		t.Fatalf("new source: %+v", n)
	}
	// The text says how it chose, per source, and what a new one may see.
	so.Reset()
	if err := runCalibrate(context.Background(), args, &so, &se); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"chosen leaving each source out", "the worst held-out source reaches route precision", "unseen: routed", "reddit_selfposts", "a new source: route precision"} {
		if !strings.Contains(so.String(), want) {
			t.Fatalf("calibrate --rules output lacks %q:\n%s", want, so.String())
		}
	}
	// A quantile outside 0..1 is a usage error.
	if err := runCalibrate(context.Background(), append(args, "--source-quantile", "1.5"), &so, &se); !errors.Is(err, errUsage) {
		t.Fatalf("--source-quantile 1.5: %v", err)
	}
}

func TestABCLI(t *testing.T) {
	skipHeavyUnderRace(t)
	heads, models := defaultHeadsOrSkip(t)
	dev := devSet(t)
	t.Setenv("TRIAGE_MODELS", models)
	var out, errb bytes.Buffer
	args := []string{"--a", "heads:" + heads, "--b", "rules:" + filepath.Join(repoRoot(), "rules.yaml"), "--config", filepath.Join(repoRoot(), "triage.yaml"),
		"--data", dev, "--models", models, "--bootstrap", "200", "--json", "--html", filepath.Join(t.TempDir(), "ab.html")}
	if err := runAB(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("ab: %v\n%s", err, errb.String())
	}
	var r map[string]any
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"agreement", "accuracy", "per_class", "mcnemar", "latency_a", "latency_b", "counterfactual", "differ"} {
		if _, ok := r[k]; !ok {
			t.Errorf("ab --json lacks %q", k)
		}
	}
	if n := r["n"].(float64); n < 4000 {
		t.Fatalf("n = %v", n)
	}
	// Tier 1 of heads against a rule set is judged through that rule set:
	// both sides on routes.
	if r["judged_on"] != "routes" || !strings.Contains(r["spec_a"].(string), "tier 1 of "+heads+", judged through rules") {
		t.Fatalf("ab heads against rules: judged_on %v, spec_a %v", r["judged_on"], r["spec_a"])
	}
	// Tier 2 of the default heads: it runs where the build has the runtime,
	// and says why not where it hasn't.
	env := &abEnv{place: modelsPlace{Dir: models}}
	_, err := env.resolve(abSpec{text: "tier2:" + heads, kind: "heads", tier: "2", dir: heads})
	if onnx.Available() && err != nil || !onnx.Available() && !errors.Is(err, classifier.ErrUnavailable) {
		t.Fatalf("tier2 spec (runtime in this build: %v): %v", onnx.Available(), err)
	}
}

// TestEvalCLITier2 holds the default heads' tier-2 figures on dev to what
// eval measures with the encoder they name.
func TestEvalCLITier2(t *testing.T) {
	skipHeavyUnderRace(t)
	heads, models := defaultHeadsOrSkip(t)
	if !onnx.Available() {
		t.Skip("a build without the ONNX runtime (the ort tag)")
	}
	h, err := classifier.LoadHeads(heads)
	if err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.NeedFiles(h, 2, modelsPlace{Dir: models}); err != nil {
		t.Skipf("tier 2's files: %v", err)
	}
	r := evalJSON(t, "--heads", heads, "--models", models, "--tier", "2", "--data", devSet(t))
	recordedAsMeasured(t, h.Tier2.Eval["dev.jsonl"], r, 2)
}

// evalJSON runs triage eval with args and --json, and decodes its report.
func evalJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	var out, errb bytes.Buffer
	if err := runEval(context.Background(), append(args, "--json"), &out, &errb); err != nil {
		t.Fatalf("eval: %v\n%s", err, errb.String())
	}
	var r map[string]any
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// recordedAsMeasured fails unless the report the heads record for tier n
// on dev is what eval measured (its --json output r): the artifact's
// figures are those of its temperature and encoder. Tier 1 is pure Go and
// gives the same on every machine; tier 2 runs ONNX Runtime, whose kernels
// differ by CPU, so one text may go the other way there (the float
// encoder's figures, which the int8 heads recorded before, were two texts
// and 0.0004 of ECE away).
func recordedAsMeasured(t *testing.T, rec classifier.Report, r map[string]any, n int) {
	t.Helper()
	acc, ece := r["accuracy"].(float64), r["ece"].(float64)
	texts, eceTol := 0.0, 1e-4
	if n == 2 {
		texts, eceTol = 1, 3e-4
	}
	if rec.N != int(r["n"].(float64)) || math.Abs(rec.Accuracy-acc) > (texts+1e-6)/float64(rec.N) || math.Abs(rec.ECE-ece) > eceTol {
		t.Fatalf("tier %d on dev: the heads record n %d, accuracy %.4f, ECE %.4f; eval measures n %v, accuracy %.4f, ECE %.4f (after a calibration or an encoder change, `triage calibrate --out` on dev records them again)",
			n, rec.N, rec.Accuracy, rec.ECE, r["n"], acc, ece)
	}
}

// TestEvalHeadsCascadeCLI: the heads-only cascade is one decision over
// both tiers, and the tiers it compares are each tier alone, as --tier 1
// and --tier 2 measure them on the same items.
func TestEvalHeadsCascadeCLI(t *testing.T) {
	skipHeavyUnderRace(t)
	heads, models := defaultHeadsOrSkip(t)
	if !onnx.Available() {
		t.Skip("a build without the ONNX runtime (the ort tag)")
	}
	h, err := classifier.LoadHeads(heads)
	if err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.NeedFiles(h, 2, modelsPlace{Dir: models}); err != nil {
		t.Skipf("tier 2's files: %v", err)
	}
	b, err := os.ReadFile(devSet(t))
	if err != nil {
		t.Fatal(err)
	}
	var sample strings.Builder // every 30th row: 149 rows of every source
	for i, l := range strings.SplitAfter(string(b), "\n") {
		if (i+1)%30 == 0 {
			sample.WriteString(l)
		}
	}
	n := float64(strings.Count(sample.String(), "\n"))
	data := filepath.Join(t.TempDir(), "dev-sample.jsonl")
	if err := os.WriteFile(data, []byte(sample.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := evalJSON(t, "--heads", heads, "--models", models, "--tier", "heads-cascade", "--data", data)
	reasons := r["reasons"].(map[string]any)
	confident, below := reasons["tier1_confident"].(float64), reasons["below_floor"].(float64)
	if confident+below != n || len(reasons) != 2 || below == 0 || math.Abs(r["escalation_rate"].(float64)-below/n) > 1e-9 {
		t.Fatalf("reasons %v, escalation %v: want every item decided at tier 1 or escalated", reasons, r["escalation_rate"])
	}
	lat := r["latency"].(map[string]any)
	if _, ok := lat["tier1"]; !ok {
		t.Fatalf("latency %v", lat)
	}
	cmp := r["compare"].(map[string]any)
	for tier, key := range map[string]string{"1": "tier1_accuracy", "2": "tier2_accuracy"} {
		alone := evalJSON(t, "--heads", heads, "--models", models, "--tier", tier, "--data", data)
		if cmp[key] != alone["accuracy"] {
			t.Errorf("compare %s %v, --tier %s accuracy %v", key, cmp[key], tier, alone["accuracy"])
		}
	}
	// The classes without a tier-1 floor of the heads' own ("other") at 1
	// instead of 0.5: more items go to tier 2.
	strict := evalJSON(t, "--heads", heads, "--models", models, "--tier", "heads-cascade", "--default-floor", "1", "--data", data)
	if strict["escalation_rate"].(float64) <= r["escalation_rate"].(float64) {
		t.Errorf("escalation at a default floor of 1: %v, below %v at 0.5", strict["escalation_rate"], r["escalation_rate"])
	}
	var out, errb bytes.Buffer
	err = runEval(context.Background(), []string{"--heads", heads, "--tier", "heads-cascade", "--default-floor", "1.5", "--data", data}, &out, &errb)
	if !errors.Is(err, errUsage) || !strings.Contains(errb.String(), "--default-floor 1.5: want a floor from 0 to 1") {
		t.Fatalf("--default-floor 1.5: %v\n%s", err, errb.String())
	}
}
