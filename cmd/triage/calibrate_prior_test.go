package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCalibratePriorCLI fits the subjects rules on 120 labels of the forum
// posts leaning on 100 rows of each other source of dev: the setting is
// chosen on the labels, cross-validated, and every figure printed is of
// them.
func TestCalibratePriorCLI(t *testing.T) {
	skipHeavyUnderRace(t)
	_, models := defaultHeadsOrSkip(t)
	t.Setenv("TRIAGE_MODELS", models)
	b, err := os.ReadFile(devSet(t))
	if err != nil {
		t.Fatal(err)
	}
	var own, prior []string
	per := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var row struct{ Source string }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		switch {
		case row.Source == "reddit_selfposts" && len(own) < 120:
			own = append(own, line)
		case row.Source != "reddit_selfposts" && per[row.Source] < 100:
			per[row.Source]++
			prior = append(prior, line)
		}
	}
	dir := t.TempDir()
	write := func(name string, lines []string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ownPath, priorPath := write("mine.jsonl", own), write("public.jsonl", prior)
	root := repoRoot()
	args := []string{"--rules", filepath.Join(root, "examples", "subjects", "rules.yaml"), "--config", filepath.Join(root, "examples", "subjects", "triage.yaml"),
		"--data", ownPath, "--prior", priorPath, "--target-precision", "0.9", "--max-escalation", "0.3", "--folds", "3"}
	var so, se bytes.Buffer
	if err := runCalibrate(context.Background(), append(args, "--json"), &so, &se); err != nil {
		t.Fatalf("calibrate --prior: %v\n%s", err, se.String())
	}
	var rep struct {
		Own         int     `json:"own_items"`
		Prior       int     `json:"prior_items"`
		PriorWeight float64 `json:"prior_item_weight"`
		Selection   struct {
			Own     bool `json:"own_items_cross_validated"`
			HeldOut bool `json:"held_out_sources"`
		} `json:"selection"`
		CV struct {
			N         int                      `json:"n"`
			Routed    int                      `json:"routed"`
			Precision float64                  `json:"route_precision"`
			CI        struct{ Lo, Hi float64 } `json:"route_precision_ci"`
		} `json:"cv"`
		Sources []any `json:"sources"`
	}
	if err := json.Unmarshal(so.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, so.String())
	}
	if rep.Own != 120 || rep.Prior != 300 || rep.PriorWeight != 0.4 || !rep.Selection.Own || rep.Selection.HeldOut || len(rep.Sources) != 0 {
		t.Fatalf("calibrate --prior --json: %+v", rep)
	}
	if rep.CV.N != 120 || rep.CV.Routed == 0 || rep.CV.CI.Lo > rep.CV.Precision || rep.CV.CI.Hi < rep.CV.Precision || rep.CV.CI.Hi-rep.CV.CI.Lo < 0.05 {
		t.Fatalf("cross-validated on the own labels: %+v", rep.CV)
	}
	// The text and the snippet say what the figures are of, with the
	// interval the labels give.
	for _, extra := range [][]string{nil, {"--diff"}} {
		so.Reset()
		if err := runCalibrate(context.Background(), append(args, extra...), &so, &se); err != nil {
			t.Fatal(err)
		}
		wants := []string{"leaning on " + priorPath + " (300 items, each weighing 0.400: 120 in all)", "chosen on your labels, cross-validated", "on your 120 labels:", "95% interval"}
		if extra != nil {
			wants = []string{"--data " + ownPath + " --target-precision 0.90 --prior " + priorPath, "# cross-validated on your 120 labels (the prior's 300 items weighing 0.400 each)", "routes:\n  - {name: coding, floors: {tier1: "}
		}
		for _, want := range wants {
			if !strings.Contains(so.String(), want) {
				t.Fatalf("calibrate --prior %v lacks %q:\n%s", extra, want, so.String())
			}
		}
	}
}

// TestCalibrateRefusesBadLabels: a labelled file with a label that is not
// a class, a repeated text or a blank one is refused before anything
// runs, every line at fault named; so is a prior with them.
func TestCalibrateRefusesBadLabels(t *testing.T) {
	_, models := defaultHeadsOrSkip(t) // the classes are the rules' heads'
	t.Setenv("TRIAGE_MODELS", models)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(good, []byte(`{"text":"how do I sue my landlord","label":"law"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"text":"how do I sue my landlord","label":"law"}
{"text":"what is a tort","label":"torts"}
{"text":" ","label":"law"}
{"text":"how do I sue my landlord","label":"law"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	root := repoRoot()
	base := []string{"--rules", filepath.Join(root, "examples", "subjects", "rules.yaml"), "--config", filepath.Join(root, "examples", "subjects", "triage.yaml")}
	for _, c := range []struct{ data, prior string }{{bad, ""}, {good, bad}} {
		args := append(append([]string{}, base...), "--data", c.data)
		if c.prior != "" {
			args = append(args, "--prior", c.prior)
		}
		var so, se bytes.Buffer
		err := runCalibrate(context.Background(), args, &so, &se)
		var in inputError
		if !errors.As(err, &in) {
			t.Fatalf("calibrate --data %s --prior %q: %v, want an input error", c.data, c.prior, err)
		}
		for _, want := range []string{bad + `:2: label "torts" is not a class`, bad + ":3: blank text", bad + ":4: the text of line 1 again"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("calibrate --data %s --prior %q: %v\nlacks %q", c.data, c.prior, err, want)
			}
		}
		if so.Len() != 0 {
			t.Fatalf("refused, yet printed:\n%s", so.String())
		}
	}
	// Flags that do not go together are usage errors.
	for _, extra := range [][]string{
		{"--data", good, "--prior", good, "--group-by", "source"},
		{"--data", good, "--prior", good, "--prior-weight", "0"},
		{"--data", good, "--prior", good, "--folds", "1"},
	} {
		var so, se bytes.Buffer
		if err := runCalibrate(context.Background(), append(append([]string{}, base...), extra...), &so, &se); !errors.Is(err, errUsage) {
			t.Fatalf("calibrate %v: %v, want a usage error", extra, err)
		}
	}
	var so, se bytes.Buffer
	if err := runCalibrate(context.Background(), []string{"--heads", "x", "--data", good, "--prior", good}, &so, &se); !errors.Is(err, errUsage) || !strings.Contains(se.String(), "--prior fits a rule set's floors") {
		t.Fatalf("--prior without --rules: %v %s", err, se.String())
	}
}

// TestModelLabelsNeedAgreement: a labels file a model proposed is judged
// on only with --agreement, whose report comes first.
func TestModelLabelsNeedAgreement(t *testing.T) {
	_, models := defaultHeadsOrSkip(t)
	t.Setenv("TRIAGE_MODELS", models)
	dir := t.TempDir()
	modelLabels := filepath.Join(dir, "model.jsonl")
	human := filepath.Join(dir, "human.jsonl")
	if err := os.WriteFile(modelLabels, []byte(`{"text":"Can my landlord keep my deposit?","label":"law","labeller":"model:judge"}
{"text":"What is the integral of 1/x?","label":"math","labeller":"model:judge"}
{"text":"how do I rebase onto main","label":"other","labeller":"model:judge"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(human, []byte(`{"text":"Can my landlord keep my deposit?","label":"law"}
{"text":"What is the integral of 1/x?","label":"math"}
{"text":"how do I rebase onto main","label":"computer science"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	root := repoRoot()
	args := []string{"eval", "--rules", filepath.Join(root, "examples", "subjects", "rules.yaml"), "--config", filepath.Join(root, "examples", "subjects", "triage.yaml"), "--data", modelLabels}
	var so, se bytes.Buffer
	if code := run(context.Background(), args, &so, &se); code != 2 || !strings.Contains(se.String(), "add --agreement HUMAN.jsonl") {
		t.Fatalf("eval on a model's labels: exit %d\n%s", code, se.String())
	}
	so.Reset()
	se.Reset()
	if code := run(context.Background(), append(args, "--agreement", human), &so, &se); code != 0 {
		t.Fatalf("eval --agreement: exit %d\n%s", code, se.String())
	}
	report, figures := strings.Index(se.String(), "raw agreement 0.667"), strings.Index(so.String(), "route precision")
	if report < 0 || figures < 0 || !strings.Contains(se.String(), "3 of 3 labels were proposed by model:judge") {
		t.Fatalf("eval --agreement: stderr\n%s\nstdout\n%s", se.String(), so.String())
	}
}
