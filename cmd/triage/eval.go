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
	"github.com/triagegw/triage/rules"
)

// errGate is a gating failure: the figures are printed, the exit status is 1.
var errGate = errors.New("evaluation below the required figures")

// evalFlags are the flags of "triage eval".
type evalFlags struct {
	heads, rules, config, data, tier, labelMap, textCol, labelCol, by, train, html, models string
	asJSON                                                                                 bool
	minAcc, minMacroP, minCov, maxEsc, defFloor                                            float64
}

func parseEvalFlags(args []string, stderr io.Writer) (*evalFlags, error) {
	var f evalFlags
	fs := flag.NewFlagSet("triage eval", flag.ContinueOnError)
	fs.StringVar(&f.heads, "heads", "", "heads artifact to evaluate one tier of (tier mode)")
	fs.StringVar(&f.rules, "rules", "", "rules file to evaluate the whole decision of (cascade mode); its pools come from --config")
	fs.StringVar(&f.config, "config", "triage.yaml", "gateway config, for --rules (pools)")
	fs.StringVar(&f.data, "data", "", "labelled dataset, .jsonl or .csv (required)")
	fs.StringVar(&f.tier, "tier", "", "with --heads: 1 (default) or 2; with --rules: cascade")
	fs.StringVar(&f.labelMap, "label-map", "", "JSON/YAML mapping of dataset labels to the heads' classes (\"\" drops a label)")
	fs.StringVar(&f.textCol, "text-col", "", "column holding the text (default text)")
	fs.StringVar(&f.labelCol, "label-col", "", "column holding the label (default label)")
	fs.StringVar(&f.by, "by", "", "repeat the report per value of this column (realism, source, ...)")
	fs.StringVar(&f.train, "train", "", "training data to check for leakage (evaluation texts found in it, exactly or normalised)")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&f.html, "html", "", "also write a self-contained HTML report to this file")
	fs.Float64Var(&f.minAcc, "min-accuracy", -1, "fail (exit 1) below this accuracy")
	fs.Float64Var(&f.minMacroP, "min-macro-precision", -1, "fail below this macro precision")
	fs.Float64Var(&f.minCov, "min-coverage", -1, "fail below this coverage")
	fs.Float64Var(&f.maxEsc, "max-escalation", -1, "fail above this escalation rate")
	fs.StringVar(&f.models, "models", modelsDir(), "directory of model files built by setup ($TRIAGE_MODELS)")
	fs.Float64Var(&f.defFloor, "default-floor", 0.5, "--tier cascade: the tier-1 floor of classes the heads have none for (as a rules file's floors: default)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	if f.data == "" || (f.heads == "") == (f.rules == "") {
		fmt.Fprintln(stderr, "triage eval: --data and exactly one of --heads or --rules are required")
		return nil, errUsage
	}
	return &f, nil
}

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseEvalFlags(args, stderr)
	if err != nil {
		return err
	}
	set, items, err := readEvalItems(f, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	opts := evaluation.Options{Progress: progressBar(stderr)}
	var report *evaluation.Report
	if f.heads != "" {
		report, err = evalHeads(ctx, f, items, opts)
	} else {
		report, err = evalRules(ctx, f, items, opts)
	}
	if err != nil {
		return err
	}
	report.Data, report.DataSHA256 = filepath.Base(f.data), set.SHA256
	fmt.Fprintf(stderr, "eval: %d items in %s\n", len(items), time.Since(start).Round(time.Millisecond))
	if f.html != "" {
		if err := atomicfile.Write(f.html, func(w io.Writer) error { return evaluation.WriteHTML(w, report) }); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
		fmt.Fprintf(stderr, "eval: wrote %s\n", f.html)
	}
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else {
		printEval(stdout, report)
	}
	return evalGates(f, report, stderr)
}

// readEvalItems reads the labelled set (warning on stderr about texts the
// training data holds too) and turns its rows into items.
func readEvalItems(f *evalFlags, stderr io.Writer) (*datasets.Set, []evaluation.Item, error) {
	cols := datasets.Columns{Text: f.textCol, Label: f.labelCol}
	set, err := readDataset(f.data, cols, f.labelMap, stderr)
	if err != nil {
		return nil, nil, err
	}
	if f.train != "" {
		tr, err := datasets.Read(f.train, cols)
		if err != nil {
			return nil, nil, err
		}
		if leaks := datasets.Leakage(tr, set); len(leaks) > 0 {
			exact := 0
			for _, l := range leaks {
				if l.Exact {
					exact++
				}
			}
			fmt.Fprintf(stderr, "eval: warning: %d of %d evaluation texts appear in %s (%d exactly, %d after normalisation), e.g. %q\n",
				len(leaks), len(set.Rows), f.train, exact, len(leaks)-exact, truncateText(leaks[0].Text, 80))
		}
	}
	items := make([]evaluation.Item, 0, len(set.Rows))
	for _, r := range set.Rows {
		if r.Label == "" {
			return nil, nil, fmt.Errorf("%s: a row without a label (%q): eval needs labels", f.data, truncateText(r.Text, 60))
		}
		items = append(items, evaluation.Item{Text: r.Text, Label: r.Label, Cols: r.Cols})
	}
	return set, items, nil
}

// evalHeads evaluates tier 1, tier 2 or their cascade of the heads in
// --heads.
func evalHeads(ctx context.Context, f *evalFlags, items []evaluation.Item, opts evaluation.Options) (*evaluation.Report, error) {
	if f.tier == "" {
		f.tier = "1"
	}
	h, err := classifier.LoadHeads(f.heads)
	if err != nil {
		return nil, err
	}
	run := func(tier int) ([]evaluation.Outcome, error) {
		clf, closeTier, err := loadTier(h, f.models, tier)
		if err != nil {
			return nil, err
		}
		defer closeTier()
		o := opts
		o.Floors = h.TierFloors(tier)
		return evaluation.Tier(ctx, clf, tier, items, o)
	}
	var out []evaluation.Outcome
	var compare *evaluation.TierComparison
	switch f.tier {
	case "1", "2":
		if out, err = run(int(f.tier[0] - '0')); err != nil {
			return nil, err
		}
	case "cascade":
		t1, err := run(1)
		if err != nil {
			return nil, err
		}
		t2, err := run(2)
		if err != nil {
			return nil, err
		}
		out = evaluation.Cascade(t1, t2, h.TierFloors(1), float32(f.defFloor))
		compare = evaluation.CompareTiers(t1, t2)
	default:
		return nil, fmt.Errorf("--tier %q: want 1, 2 or cascade", f.tier)
	}
	report := evaluation.Summarize("tier", h.Classes, items, out, f.by)
	report.Compare = compare
	report.Spec = "tier " + f.tier + " of " + f.heads
	return report, nil
}

// evalRules evaluates the whole decision of the rules in --rules, with the
// pools of --config.
func evalRules(ctx context.Context, f *evalFlags, items []evaluation.Item, opts evaluation.Options) (*evaluation.Report, error) {
	if f.tier != "" && f.tier != "cascade" {
		return nil, fmt.Errorf("--tier %s with --rules: the rules decide with the cascade", f.tier)
	}
	cfg, err := config.Load(f.config)
	if err != nil {
		return nil, err
	}
	cfg.Rules, cfg.Path = f.rules, ""
	rt, err := loadRouting(cfg, &tierCache{budget: rules.Offline})
	if err != nil {
		return nil, err
	}
	out, err := evaluation.Rules(ctx, rt.set, items, opts)
	if err != nil {
		return nil, err
	}
	report := evaluation.Summarize("rules", rt.set.RoutedClasses(), items, out, f.by)
	report.Spec = "rules " + f.rules + " (version " + rt.set.Version() + ")"
	return report, nil
}

// evalGates checks the report against the bars set by flags: a failure is
// errGate, with the figures on stderr.
func evalGates(f *evalFlags, r *evaluation.Report, stderr io.Writer) error {
	var failed []string
	gate := func(ok bool, format string, a ...any) {
		if !ok {
			failed = append(failed, fmt.Sprintf(format, a...))
		}
	}
	if f.minAcc >= 0 {
		gate(r.Accuracy >= f.minAcc, "accuracy %.4f < %.4f", r.Accuracy, f.minAcc)
	}
	if f.minMacroP >= 0 {
		gate(r.MacroPrecision >= f.minMacroP, "macro precision %.4f < %.4f", r.MacroPrecision, f.minMacroP)
	}
	if f.minCov >= 0 {
		gate(r.Coverage >= f.minCov, "coverage %.4f < %.4f", r.Coverage, f.minCov)
	}
	if f.maxEsc >= 0 {
		gate(r.EscalationRate <= f.maxEsc, "escalation rate %.4f > %.4f", r.EscalationRate, f.maxEsc)
	}
	if len(failed) == 0 {
		return nil
	}
	for _, msg := range failed {
		fmt.Fprintln(stderr, "eval: FAIL "+msg)
	}
	return errGate
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
