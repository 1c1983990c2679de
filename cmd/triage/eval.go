package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/internal/atomicfile"
	"github.com/triagegw/triage/router/config"
)

// errGate is a gating failure: the figures are printed, the exit status is 1.
var errGate = errors.New("evaluation below the required figures")

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage eval", flag.ContinueOnError)
	headsDir := fs.String("heads", "", "heads artifact to evaluate one tier of (tier mode)")
	rulesPath := fs.String("rules", "", "rules file to evaluate the whole decision of (cascade mode); its pools come from --config")
	cfgPath := fs.String("config", "triage.yaml", "gateway config, for --rules (pools)")
	data := fs.String("data", "", "labelled dataset, .jsonl or .csv (required)")
	tier := fs.String("tier", "", "with --heads: 1 (default) or 2; with --rules: cascade")
	labelMap := fs.String("label-map", "", "JSON/YAML mapping of dataset labels to the heads' classes (\"\" drops a label)")
	textCol := fs.String("text-col", "", "column holding the text (default text)")
	labelCol := fs.String("label-col", "", "column holding the label (default label)")
	by := fs.String("by", "", "repeat the report per value of this column (realism, source, ...)")
	train := fs.String("train", "", "training data to check for leakage (evaluation texts found in it, exactly or normalised)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	htmlOut := fs.String("html", "", "also write a self-contained HTML report to this file")
	minAcc := fs.Float64("min-accuracy", -1, "fail (exit 1) below this accuracy")
	minMacroP := fs.Float64("min-macro-precision", -1, "fail below this macro precision")
	minCov := fs.Float64("min-coverage", -1, "fail below this coverage")
	maxEsc := fs.Float64("max-escalation", -1, "fail above this escalation rate")
	mdir := fs.String("models", modelsDir(), "directory of model files built by setup ($TRIAGE_MODELS)")
	defFloor := fs.Float64("default-floor", 0.5, "--tier cascade: the tier-1 floor of classes the heads have none for (as a rules file's floors: default)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *data == "" || (*headsDir == "") == (*rulesPath == "") {
		fmt.Fprintln(stderr, "triage eval: --data and exactly one of --heads or --rules are required")
		return errUsage
	}
	set, err := readDataset(*data, datasets.Columns{Text: *textCol, Label: *labelCol}, *labelMap, stderr)
	if err != nil {
		return err
	}
	if *train != "" {
		tr, err := datasets.Read(*train, datasets.Columns{Text: *textCol, Label: *labelCol})
		if err != nil {
			return err
		}
		if leaks := datasets.Leakage(tr, set); len(leaks) > 0 {
			exact := 0
			for _, l := range leaks {
				if l.Exact {
					exact++
				}
			}
			fmt.Fprintf(stderr, "eval: warning: %d of %d evaluation texts appear in %s (%d exactly, %d after normalisation), e.g. %q\n",
				len(leaks), len(set.Rows), *train, exact, len(leaks)-exact, truncateText(leaks[0].Text, 80))
		}
	}
	items := make([]evaluation.Item, 0, len(set.Rows))
	for _, r := range set.Rows {
		if r.Label == "" {
			return fmt.Errorf("%s: a row without a label (%q): eval needs labels", *data, truncateText(r.Text, 60))
		}
		items = append(items, evaluation.Item{Text: r.Text, Label: r.Label, Cols: r.Cols})
	}
	opts := evaluation.Options{Progress: progressBar(stderr)}
	var report *evaluation.Report
	start := time.Now()
	if *headsDir != "" {
		if *tier == "" {
			*tier = "1"
		}
		h, err := classifier.LoadHeads(*headsDir)
		if err != nil {
			return err
		}
		floors := func(tier int) map[string]float32 {
			m := map[string]float32{}
			for c, f := range h.Floors {
				v := f.Tier1
				if tier == 2 {
					v = f.Tier2
				}
				if v != nil {
					m[c] = *v
				}
			}
			return m
		}
		run := func(tier int) ([]evaluation.Outcome, error) {
			clf, closeTier, err := loadTier(h, *mdir, tier)
			if err != nil {
				return nil, err
			}
			defer closeTier()
			o := opts
			o.Floors = floors(tier)
			return evaluation.Tier(ctx, clf, tier, items, o)
		}
		var out []evaluation.Outcome
		var compare *evaluation.TierComparison
		switch *tier {
		case "1", "2":
			n := int((*tier)[0] - '0')
			if out, err = run(n); err != nil {
				return err
			}
		case "cascade":
			t1, err := run(1)
			if err != nil {
				return err
			}
			t2, err := run(2)
			if err != nil {
				return err
			}
			out = evaluation.Cascade(t1, t2, floors(1), float32(*defFloor))
			compare = evaluation.CompareTiers(t1, t2)
		default:
			return fmt.Errorf("--tier %q: want 1, 2 or cascade", *tier)
		}
		report = evaluation.Summarize("tier", h.Classes, items, out, *by)
		report.Compare = compare
		report.Spec = "tier " + *tier + " of " + *headsDir
	} else {
		if *tier != "" && *tier != "cascade" {
			return fmt.Errorf("--tier %s with --rules: the rules decide with the cascade", *tier)
		}
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		cfg.Rules, cfg.Path = *rulesPath, ""
		rt, err := loadRouting(cfg, &tierCache{})
		if err != nil {
			return err
		}
		out, err := evaluation.Rules(ctx, rt.set, items, opts)
		if err != nil {
			return err
		}
		report = evaluation.Summarize("rules", rt.set.RoutedClasses(), items, out, *by)
		report.Spec = "rules " + *rulesPath + " (version " + rt.set.Version() + ")"
	}
	report.Data, report.DataSHA256 = filepath.Base(*data), set.SHA256
	fmt.Fprintf(stderr, "eval: %d items in %s\n", len(items), time.Since(start).Round(time.Millisecond))
	if *htmlOut != "" {
		if err := atomicfile.Write(*htmlOut, func(w io.Writer) error { return evaluation.WriteHTML(w, report) }); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
		fmt.Fprintf(stderr, "eval: wrote %s\n", *htmlOut)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else {
		printEval(stdout, report)
	}
	var failed []string
	gate := func(ok bool, format string, a ...any) {
		if !ok {
			failed = append(failed, fmt.Sprintf(format, a...))
		}
	}
	if *minAcc >= 0 {
		gate(report.Accuracy >= *minAcc, "accuracy %.4f < %.4f", report.Accuracy, *minAcc)
	}
	if *minMacroP >= 0 {
		gate(report.MacroPrecision >= *minMacroP, "macro precision %.4f < %.4f", report.MacroPrecision, *minMacroP)
	}
	if *minCov >= 0 {
		gate(report.Coverage >= *minCov, "coverage %.4f < %.4f", report.Coverage, *minCov)
	}
	if *maxEsc >= 0 {
		gate(report.EscalationRate <= *maxEsc, "escalation rate %.4f > %.4f", report.EscalationRate, *maxEsc)
	}
	if len(failed) > 0 {
		for _, f := range failed {
			fmt.Fprintln(stderr, "eval: FAIL "+f)
		}
		return errGate
	}
	return nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// progressBar draws a bar with an ETA on w when w is a terminal, else
// nothing.
func progressBar(w io.Writer) func(done, total int) {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	start := time.Now()
	var mu sync.Mutex
	last := time.Time{}
	return func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if done < total && time.Since(last) < 100*time.Millisecond {
			return
		}
		last = time.Now()
		el := time.Since(start)
		eta := time.Duration(float64(el) / float64(done) * float64(total-done))
		const width = 30
		n := width * done / max(total, 1)
		fmt.Fprintf(f, "\r[%s%s] %d/%d  eta %s ", strings.Repeat("#", n), strings.Repeat(".", width-n), done, total, eta.Round(time.Second))
		if done == total {
			fmt.Fprintln(f)
		}
	}
}

func printEval(w io.Writer, r *evaluation.Report) {
	fmt.Fprintf(w, "%s on %s (%d items, %s mode)\n", r.Spec, r.Data, r.N, r.Mode)
	fmt.Fprintf(w, "accuracy %.4f  macro P/R/F1 %.4f/%.4f/%.4f  micro F1 %.4f  coverage %.4f  escalation %.4f  ECE %.4f\n",
		r.Accuracy, r.MacroPrecision, r.MacroRecall, r.MacroF1, r.MicroF1, r.Coverage, r.EscalationRate, r.ECE)
	lat := make([]string, 0, len(r.Latency))
	for k, p := range r.Latency {
		lat = append(lat, fmt.Sprintf("%s p50 %.1f µs p99 %.1f µs", k, p.P50, p.P99))
	}
	sort.Strings(lat)
	if len(lat) > 0 {
		fmt.Fprintln(w, "latency: "+strings.Join(lat, "; "))
	}
	if c := r.Compare; c != nil {
		fmt.Fprintf(w, "tier 1 alone %.4f, tier 2 alone %.4f (agree on %.1f%%; only tier 1 right %d, only tier 2 right %d)\n",
			c.Tier1Acc, c.Tier2Acc, 100*c.Agreement, c.Tier1Only, c.Tier2Only)
	}
	if len(r.Reasons) > 0 {
		keys := make([]string, 0, len(r.Reasons))
		for k := range r.Reasons {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s=%d", k, r.Reasons[k]))
		}
		fmt.Fprintln(w, "reasons: "+strings.Join(parts, " "))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nclass\tprecision\trecall\tF1\tsupport\tpredicted\t")
	classes := make([]string, 0, len(r.PerClass))
	for c := range r.PerClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		p := r.PerClass[c]
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%d\t%d\t\n", c, p.Precision, p.Recall, p.F1, p.Support, p.Predicted)
	}
	tw.Flush()
	if len(r.Slices) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "\n%s\tn\taccuracy\tmacro F1\tcoverage\tECE\t\n", r.By)
		keys := make([]string, 0, len(r.Slices))
		for k := range r.Slices {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s := r.Slices[k]
			fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t\n", k, s.N, s.Accuracy, s.MacroF1, s.Coverage, s.ECE)
		}
		tw.Flush()
	}
}

// readDataset reads a labelled dataset and applies the label map, if one
// is given, saying on stderr how many rows it dropped.
func readDataset(path string, cols datasets.Columns, labelMap string, stderr io.Writer) (*datasets.Set, error) {
	set, err := datasets.Read(path, cols)
	if err != nil {
		return nil, err
	}
	if labelMap != "" {
		m, err := datasets.ReadLabelMap(labelMap)
		if err != nil {
			return nil, err
		}
		if n := m.Apply(set); n > 0 {
			fmt.Fprintf(stderr, "label map: dropped %d rows of %s\n", n, path)
		}
	}
	return set, nil
}
