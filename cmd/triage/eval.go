package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/internal/atomicfile"
	"github.com/triagegw/triage/internal/progress"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// errGate is a gating failure: the figures are printed, the exit status is 1.
var errGate = errors.New("evaluation below the required figures")

// evalFlags are the flags of "triage eval".
type evalFlags struct {
	place                                                           placeFlags // --config, --heads, --models
	rules, data, tier, labelMap, textCol, labelCol, by, train, html string
	agreement, misses                                               string
	asJSON                                                          bool
	minAcc, minMacroP, minCov, maxEsc, defFloor                     float64
	robust                                                          robustFlags
	enc                                                             encoderFlags
}

// headsCascade names the heads-only cascade of "eval --tier": the
// gateway's decision over a rule set made of the heads alone, one route per
// class at the heads' floors, tier 2 on (evaluation.HeadsCascadeRules). It
// says what tier 2 adds to the heads; the decision of a rules file of
// one's own is "eval --rules".
const headsCascade = "heads-cascade"

func parseEvalFlags(args []string, stderr io.Writer) (*evalFlags, error) {
	var f evalFlags
	fs := newFlagSet("triage eval", stderr)
	fs.StringVar(&f.place.heads, "heads", "", "heads artifact to evaluate one tier of, judged on classes (the top class against the label)")
	fs.StringVar(&f.rules, "rules", "", "rules file to evaluate, judged on routes: the gateway's whole decision (its pools come from --config)")
	fs.StringVar(&f.place.config, "config", "triage.yaml", "gateway config, for --rules (pools) and for its models_dir")
	fs.StringVar(&f.data, "data", "", "labelled dataset, .jsonl or .csv (required)")
	fs.StringVar(&f.tier, "tier", "", "with --heads: 1 (default), 2, or "+headsCascade+": the gateway's decision over a rule set of one route per class, at the heads' floors, tier 2 on "+
		"(the heads without your rules; --rules gives your rules'). As in any rule set, the first class in the heads' order to clear its tier-1 floor takes an item, the top class or not, "+
		"and tier 2's class is routed only at its tier-2 floor (below it, it is judged but not coverage)")
	fs.StringVar(&f.labelMap, "label-map", "", "JSON/YAML mapping of dataset labels to the heads' classes (\"\" drops a label)")
	fs.StringVar(&f.textCol, "text-col", "", "column holding the text (default text)")
	fs.StringVar(&f.labelCol, "label-col", "", "column holding the label (default label)")
	fs.StringVar(&f.by, "by", "", "repeat the report per value of this column (realism, source, ...)")
	fs.StringVar(&f.train, "train", "", "training data to check for leakage (evaluation texts found in it, exactly or normalised)")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&f.agreement, "agreement", "", agreementFlagHelp)
	fs.StringVar(&f.html, "html", "", "also write a self-contained HTML report to this file")
	fs.StringVar(&f.misses, "misses", "", missesFlagHelp)
	fs.Float64Var(&f.minAcc, "min-accuracy", -1, "fail (exit 1) below this accuracy")
	fs.Float64Var(&f.minMacroP, "min-macro-precision", -1, "fail below this macro precision")
	fs.Float64Var(&f.minCov, "min-coverage", -1, "fail below this coverage")
	fs.Float64Var(&f.maxEsc, "max-escalation", -1, "fail above this escalation rate")
	fs.StringVar(&f.place.models, "models", "", modelsFlagHelp)
	f.robust.register(fs)
	f.enc.register(fs)
	fs.Float64Var(&f.defFloor, "default-floor", 0.5, "--tier "+headsCascade+": the tier-1 floor, 0 to 1, of classes the heads have none for (the rule set's floors: tier1)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	f.place.parsed(fs)
	if err := f.robust.check(stderr); err != nil {
		return nil, err
	}
	if f.data == "" || (f.place.heads == "") == (f.rules == "") {
		fmt.Fprintln(stderr, "triage eval: --data and exactly one of --heads or --rules are required")
		return nil, errUsage
	}
	switch {
	case f.place.heads != "" && f.tier == "cascade":
		fmt.Fprintln(stderr, "triage eval: --tier cascade: which cascade? --tier "+headsCascade+" is the gateway's decision over one route per class of the heads, at their floors, without your rules;\n  your rules' decision is --rules FILE")
		return nil, errUsage
	case f.defFloor < 0 || f.defFloor > 1:
		fmt.Fprintf(stderr, "triage eval: --default-floor %v: want a floor from 0 to 1\n", f.defFloor)
		return nil, errUsage
	case f.place.heads != "" && f.tier != "" && f.tier != "1" && f.tier != "2" && f.tier != headsCascade:
		fmt.Fprintf(stderr, "triage eval: --tier %q: want 1, 2 or %s\n", f.tier, headsCascade)
		return nil, errUsage
	case f.rules != "" && f.tier != "" && f.tier != "cascade":
		fmt.Fprintf(stderr, "triage eval: --tier %s with --rules: a rule set decides as the gateway does (tier 1, then tier 2 where its rules say); drop --tier, or evaluate --heads DIR --tier %s\n", f.tier, f.tier)
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
	var report *evaluation.Report
	if f.place.heads != "" {
		report, err = evalHeads(ctx, f, items, stderr)
	} else {
		report, err = evalRules(ctx, f, items, stderr)
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
		fmt.Fprintf(stderr, "eval: wrote %s\n", describeFile(f.html))
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
	if err := needLabels(set, f.labelCol, "eval"); err != nil {
		return nil, nil, err
	}
	if err := checkModelLabels(set, f.agreement, "eval", stderr); err != nil {
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
	return set, itemsOf(set), nil
}

// itemsOf turns a dataset's rows into evaluation items.
func itemsOf(set *datasets.Set) []evaluation.Item {
	items := make([]evaluation.Item, len(set.Rows))
	for i, r := range set.Rows {
		items[i] = evaluation.Item{Text: r.Text, Label: r.Label, Cols: r.Cols}
	}
	return items
}

// needLabels checks that every row of set has a label, as a command that
// judges (what) needs: a file without the label column says which column
// was looked for.
func needLabels(set *datasets.Set, labelCol, what string) error {
	if labelCol == "" {
		labelCol = "label"
	}
	for i, r := range set.Rows {
		if r.Label != "" {
			continue
		}
		if set.Columns != nil && !slices.Contains(set.Columns, labelCol) {
			return badInput(fmt.Errorf("%s: no %q column to take the labels from (its columns: %s); name the label column with --label-col", set.Path, labelCol, strings.Join(set.Columns, ", ")))
		}
		return badInput(fmt.Errorf("%s: row %d (%q) has no label: %s needs every row labelled", set.Path, i+1, truncateText(r.Text, 60), what))
	}
	return nil
}

// evalHeads evaluates tier 1, tier 2 or the heads-only cascade of the
// heads in --heads.
func evalHeads(ctx context.Context, f *evalFlags, items []evaluation.Item, stderr io.Writer) (*evaluation.Report, error) {
	if f.tier == "" {
		f.tier = "1"
	}
	h, err := classifier.LoadHeads(f.place.heads)
	if err != nil {
		return nil, err
	}
	cfg, err := f.place.loadConfig()
	if err != nil {
		return nil, err
	}
	rc, err := f.enc.remote(cfg, false)
	if err != nil {
		return nil, err
	}
	label := "eval: tier " + f.tier
	if f.tier == headsCascade {
		label = "eval: " + headsCascade
	}
	report, finish := progress.Func(stderr, progress.Options{}, f.robust.labels([]string{label})...)
	defer finish()
	run, closeRun, err := headsDecision(h, f.place.place(cfg), rc, f.tier, f.defFloor)
	if err != nil {
		return nil, err
	}
	defer closeRun()
	o := evaluation.Options{Progress: report}
	spec := "tier " + f.tier + " of " + f.place.heads
	if f.tier == headsCascade {
		spec = headsCascadeSpec(f.place.heads, f.defFloor)
	} else {
		// A tier's coverage: its top class at or above that class's floor.
		o = evaluation.Options{Progress: report, Floors: h.TierFloors(int(f.tier[0] - '0'))}
	}
	out, compare, err := run(ctx, items, o)
	if err != nil {
		return nil, err
	}
	if err := f.missesOf(items, out, stderr); err != nil {
		return nil, err
	}
	r := evaluation.Summarize("tier", h.Classes, items, out, f.by)
	r.Compare = compare
	r.Spec = spec
	r.Robustness, err = f.robust.measure(ctx, stderr, "tier", items, out, f.by, func(ctx context.Context, items []evaluation.Item) ([]evaluation.Outcome, error) {
		out, _, err := run(ctx, items, o)
		return out, err
	})
	return r, err
}

// headsRun is the decision of a heads spec over items, judged on classes;
// the heads-only cascade also compares its two tiers.
type headsRun func(ctx context.Context, items []evaluation.Item, o evaluation.Options) ([]evaluation.Outcome, *evaluation.TierComparison, error)

// headsDecision loads what tier ("1", "2" or headsCascade) of h decides
// with, and returns its decision and what closes it. The heads-only
// cascade is the rules package's decision over the rule set
// evaluation.HeadsCascadeRules makes of h, with defFloor at tier 1 for the
// classes the heads hold no floor for.
func headsDecision(h *classifier.Heads, place modelsPlace, rc *onnx.RemoteConfig, tier string, defFloor float64) (headsRun, func(), error) {
	if tier != headsCascade {
		n := int(tier[0] - '0')
		clf, closeTier, err := loadTier(h, place, n, rc)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, items []evaluation.Item, o evaluation.Options) ([]evaluation.Outcome, *evaluation.TierComparison, error) {
			out, err := evaluation.Tier(ctx, clf, n, items, o)
			return out, nil, err
		}, closeTier, nil
	}
	if h.Tier2 == nil {
		return nil, nil, badInput(fmt.Errorf("%s of %s: the heads have no tier 2 to escalate to", headsCascade, h.Dir))
	}
	m1, close1, err := loadTier(h, place, 1, rc)
	if err != nil {
		return nil, nil, err
	}
	m2, close2, err := loadTier(h, place, 2, rc)
	if err != nil {
		close1()
		return nil, nil, err
	}
	closeBoth := func() { close2(); close1() }
	set, err := evaluation.CompileHeadsCascade(h, m1, m2, defFloor)
	if err != nil {
		closeBoth()
		return nil, nil, err
	}
	return func(ctx context.Context, items []evaluation.Item, o evaluation.Options) ([]evaluation.Outcome, *evaluation.TierComparison, error) {
		return evaluation.HeadsCascade(ctx, set, items, o)
	}, closeBoth, nil
}

// headsCascadeSpec says what the heads-only cascade of dir is, for a
// person.
func headsCascadeSpec(dir string, defFloor float64) string {
	return fmt.Sprintf("heads-only cascade of %s (the gateway's decision over one route per class, each to its own pool, at the heads' floors, %g at tier 1 where they have none, tier 2 on: the heads without your rules)", dir, defFloor)
}

// evalRules evaluates the whole decision of the rules in --rules, with the
// pools of --config.
func evalRules(ctx context.Context, f *evalFlags, items []evaluation.Item, stderr io.Writer) (*evaluation.Report, error) {
	cfg, err := config.Load(f.place.config)
	if err != nil {
		return nil, err
	}
	cfg.UseRules(f.rules)
	cache := &lifecycle.Models{Budget: rules.Offline, Encoder: f.enc.override()}
	if f.place.models != "" {
		p := f.place.place(cfg)
		cache.Place = &p
	}
	rt, err := cache.Load(cfg)
	if err != nil {
		return nil, err
	}
	report, finish := progress.Func(stderr, progress.Options{}, f.robust.labels([]string{"eval: rules " + f.rules})...)
	defer finish()
	decide := func(ctx context.Context, items []evaluation.Item) ([]evaluation.Outcome, error) {
		return evaluation.Rules(ctx, rt.Set, items, evaluation.Options{Progress: report})
	}
	out, err := decide(ctx, items)
	if err != nil {
		return nil, err
	}
	if err := f.missesOf(items, out, stderr); err != nil {
		return nil, err
	}
	r := evaluation.Summarize("rules", rt.Set.RoutedClasses(), items, out, f.by)
	r.Spec = "rules " + f.rules + " (version " + rt.Set.Version() + ")"
	r.Robustness, err = f.robust.measure(ctx, stderr, "rules", items, out, f.by, decide)
	return r, err
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
	if f.robust.maxFlip >= 0 && r.Robustness != nil {
		gate(r.Robustness.Rate <= f.robust.maxFlip, "flip rate under noise %.4f > %.4f", r.Robustness.Rate, f.robust.maxFlip)
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

func printEval(w io.Writer, r *evaluation.Report) {
	fmt.Fprintf(w, "%s on %s (%d items, %s mode)\n", r.Spec, r.Data, r.N, r.Mode)
	fmt.Fprintf(w, "accuracy %.4f  macro P/R/F1 %.4f/%.4f/%.4f  micro F1 %.4f  coverage %.4f  escalation %.4f  ECE %.4f\n",
		r.Accuracy, r.MacroPrecision, r.MacroRecall, r.MacroF1, r.MicroF1, r.Coverage, r.EscalationRate, r.ECE)
	if r.Mode == "rules" {
		fmt.Fprintf(w, "route precision %.4f (of the items a class route took, the share whose label it covers)\n", r.RoutePrecision)
	}
	printIntervals(w, r)
	lat := make([]string, 0, len(r.Latency))
	for k, p := range r.Latency {
		lat = append(lat, fmt.Sprintf("%s p50 %.1f µs p99 %.1f µs", k, p.P50, p.P99))
	}
	sort.Strings(lat)
	if len(lat) > 0 {
		fmt.Fprintln(w, "latency: "+strings.Join(lat, "; "))
	}
	printRobustnessLine(w, r.Robustness)
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
	if len(r.PerRoute) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "\nroute\tprecision\trecall\ttaken\tright\tsupport\t")
		for _, name := range slices.Sorted(maps.Keys(r.PerRoute)) {
			p := r.PerRoute[name]
			fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%d\t%d\t%d\t\n", name, p.Precision, p.Recall, p.Taken, p.Right, p.Support)
		}
		tw.Flush()
	}
	if len(r.Slices) > 0 && r.Mode == "rules" {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "\n%s\tn\taccuracy\troute precision\tcoverage\tescalation\tmacro F1\tECE\t\n", r.By)
		for _, k := range slices.Sorted(maps.Keys(r.Slices)) {
			s := r.Slices[k]
			fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t\n", k, s.N, s.Accuracy, s.RoutePrecision, s.Coverage, s.EscalationRate, s.MacroF1, s.ECE)
		}
		tw.Flush()
	} else if len(r.Slices) > 0 {
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
	printRobustness(w, r.Robustness)
}

// printIntervals prints the 95% intervals of accuracy and, for a rule
// set, route precision: how far the figures may be from what more labels
// like these would show.
func printIntervals(w io.Writer, r *evaluation.Report) {
	fmt.Fprintf(w, "95%% intervals (Wilson): accuracy %.3f–%.3f of %d items", r.AccuracyCI.Lo, r.AccuracyCI.Hi, r.N)
	if ci := r.RoutePrecisionCI; ci != nil {
		fmt.Fprintf(w, "; route precision %.3f–%.3f of %d routed (±%.3f)", ci.Lo, ci.Hi, r.Routed, (ci.Hi-ci.Lo)/2)
	}
	fmt.Fprintln(w)
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
		if len(set.Rows) == 0 {
			return nil, fmt.Errorf("%s: the label map %s drops every row: %w", path, labelMap, datasets.ErrEmpty)
		}
	}
	return set, nil
}
