package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/internal/atomicfile"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// abSide is one side of a comparison, resolved from its spec.
type abSide struct {
	spec    string
	mode    string // "tier" or "rules"
	classes []string
	run     func(context.Context, []evaluation.Item, evaluation.Options) ([]evaluation.Outcome, error)
}

// resolveSpec turns a spec into something that runs: tier1 (the default
// heads' tier 1), cascade (the config's rules), a heads directory, a rules
// file (.yaml), or heads:DIR / rules:FILE.
func resolveSpec(spec, cfgPath, mdir string, cache *tierCache) (*abSide, error) {
	kind, arg, explicit := strings.Cut(spec, ":")
	if !explicit {
		switch {
		case spec == "tier1":
			kind, arg = "heads", filepath.Join("models", "heads", "subjects")
		case spec == "cascade":
			kind, arg = "rules", ""
		case spec == "tier2":
			kind, arg = "tier2", filepath.Join("models", "heads", "subjects")
		case strings.HasSuffix(spec, ".yaml") || strings.HasSuffix(spec, ".yml"):
			kind, arg = "rules", spec
		default:
			kind, arg = "heads", spec
		}
	}
	switch kind {
	case "heads", "tier2":
		tier := 1
		if kind == "tier2" {
			tier = 2
		}
		h, err := classifier.LoadHeads(arg)
		if err != nil {
			return nil, err
		}
		m, _, err := loadTier(h, mdir, tier) // kept for the process's life
		if err != nil {
			return nil, err
		}
		return &abSide{spec: fmt.Sprintf("tier %d of %s", tier, arg), mode: "tier", classes: h.Classes,
			run: func(ctx context.Context, items []evaluation.Item, o evaluation.Options) ([]evaluation.Outcome, error) {
				return evaluation.Tier(ctx, m, tier, items, o)
			}}, nil
	case "rules":
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return nil, err
		}
		if arg != "" {
			cfg.Rules, cfg.Path = arg, ""
		}
		rt, err := loadRouting(cfg, cache)
		if err != nil {
			return nil, err
		}
		if rt.set == nil {
			return nil, fmt.Errorf("spec %q: %s names no rules file", spec, cfgPath)
		}
		return &abSide{spec: "rules " + cfg.RulesPath() + " (version " + rt.set.Version() + ")", mode: "rules", classes: rt.set.RoutedClasses(),
			run: func(ctx context.Context, items []evaluation.Item, o evaluation.Options) ([]evaluation.Outcome, error) {
				return evaluation.Rules(ctx, rt.set, items, o)
			}}, nil
	}
	return nil, fmt.Errorf("spec %q: want tier1, tier2, cascade, a heads directory, a rules .yaml, heads:DIR, tier2:DIR or rules:FILE", spec)
}

// abFlags are the flags of "triage ab".
type abFlags struct {
	a, b, data, config, labelMap, html, models, log string
	boot                                            int
	seed                                            uint64
	asJSON                                          bool
}

func parseABFlags(args []string, stderr io.Writer) (*abFlags, error) {
	var f abFlags
	fs := flag.NewFlagSet("triage ab", flag.ContinueOnError)
	fs.StringVar(&f.a, "a", "", "spec A: tier1, tier2, cascade, a heads directory (tier 1), a rules .yaml, heads:DIR, tier2:DIR or rules:FILE (required)")
	fs.StringVar(&f.b, "b", "", "spec B (required)")
	fs.StringVar(&f.data, "data", "", "labelled dataset, .jsonl or .csv (required)")
	fs.StringVar(&f.config, "config", "triage.yaml", "gateway config, for rules specs (pools)")
	fs.StringVar(&f.labelMap, "label-map", "", "JSON/YAML mapping of dataset labels to classes")
	fs.IntVar(&f.boot, "bootstrap", 1000, "bootstrap resamples for the confidence intervals")
	fs.Uint64Var(&f.seed, "seed", 1, "bootstrap seed")
	fs.BoolVar(&f.asJSON, "json", false, "print the comparison as JSON")
	fs.StringVar(&f.html, "html", "", "also write a self-contained HTML page")
	fs.StringVar(&f.models, "models", modelsDir(), "directory of model files built by setup ($TRIAGE_MODELS)")
	fs.StringVar(&f.log, "log", "", "a shadow decision log (the rules' shadow.log) to compare its live and shadow decisions, instead of --a/--b/--data")
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	switch {
	case f.log != "" && (f.a != "" || f.b != "" || f.data != ""):
		fmt.Fprintln(stderr, "triage ab: --log compares the two sides the log holds; it takes no --a, --b or --data")
		return nil, errUsage
	case f.log == "" && (f.a == "" || f.b == "" || f.data == ""):
		fmt.Fprintln(stderr, "triage ab: --a, --b and --data are required (or --log)")
		return nil, errUsage
	}
	return &f, nil
}

func runAB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseABFlags(args, stderr)
	if err != nil {
		return err
	}
	if f.log != "" {
		return runABLog(f.log, f.asJSON, f.html, stdout)
	}
	ab, mixed, err := compareSpecs(ctx, f, stderr)
	if err != nil {
		return err
	}
	if f.html != "" {
		if err := atomicfile.Write(f.html, func(w io.Writer) error { return evaluation.WriteABHTML(w, ab) }); err != nil {
			return err
		}
	}
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ab)
	}
	return printAB(stdout, ab, mixed)
}

// compareSpecs runs both specs over the data and compares them; mixed is
// true when one is a tier and the other a rule set.
func compareSpecs(ctx context.Context, f *abFlags, stderr io.Writer) (ab *evaluation.ABReport, mixed bool, err error) {
	set, err := readDataset(f.data, datasets.Columns{}, f.labelMap, stderr)
	if err != nil {
		return nil, false, err
	}
	items := make([]evaluation.Item, len(set.Rows))
	for i, r := range set.Rows {
		items[i] = evaluation.Item{Text: r.Text, Label: r.Label, Cols: r.Cols}
	}
	cache := &tierCache{budget: rules.Offline} // offline: no tier-2 budget, deterministic
	var sides [2]*abSide
	var outs [2][]evaluation.Outcome
	var reps [2]*evaluation.Report
	for i, spec := range []string{f.a, f.b} {
		if sides[i], err = resolveSpec(spec, f.config, f.models, cache); err != nil {
			return nil, false, err
		}
		if outs[i], err = sides[i].run(ctx, items, evaluation.Options{Progress: progressBar(stderr)}); err != nil {
			return nil, false, err
		}
		reps[i] = evaluation.Summarize(sides[i].mode, sides[i].classes, items, outs[i], "")
	}
	// Per-class deltas over the classes both sides name.
	var classes []string
	for _, c := range sides[0].classes {
		if slices.Contains(sides[1].classes, c) {
			classes = append(classes, c)
		}
	}
	ab = evaluation.AB(sides[0].spec, sides[1].spec, reps[0], reps[1], outs[0], outs[1], classes, f.boot, f.seed)
	return ab, sides[0].mode != sides[1].mode, nil
}

// printAB prints a comparison for a person.
func printAB(w io.Writer, ab *evaluation.ABReport, mixed bool) error {
	fmt.Fprintf(w, "A: %s\nB: %s\n%d items; agreement %.3f; routed elsewhere %d\n", ab.SpecA, ab.SpecB, ab.N, ab.AgreementRate, ab.Differ)
	if mixed {
		fmt.Fprintln(w, "note: a tier and a rule set: accuracy is the top class's for the tier and the route's for the rules")
	}
	fmt.Fprintf(w, "accuracy A %.4f  B %.4f  B-A %+.4f (95%% [%+.4f, %+.4f])\n", ab.Accuracy.A, ab.Accuracy.B, ab.Accuracy.Delta, ab.Accuracy.Lo, ab.Accuracy.Hi)
	test := "chi-square"
	if ab.McNemar.Exact {
		test = "exact"
	}
	fmt.Fprintf(w, "McNemar (%s): only A right %d, only B right %d, p = %.3g\n", test, ab.McNemar.OnlyA, ab.McNemar.OnlyB, ab.McNemar.P)
	fmt.Fprintf(w, "latency p50/p99 µs: A %.1f/%.1f  B %.1f/%.1f; escalation A %.3f  B %.3f\n",
		ab.LatencyA.P50, ab.LatencyA.P99, ab.LatencyB.P50, ab.LatencyB.P99, ab.EscalationA, ab.EscalationB)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nclass\tF1 A\tF1 B\tB-A\t95% interval\t")
	keys := make([]string, 0, len(ab.PerClass))
	for k := range ab.PerClass {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d := ab.PerClass[k]
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%+.3f\t[%+.3f, %+.3f]\t\n", k, d.A, d.B, d.Delta, d.Lo, d.Hi)
	}
	return tw.Flush()
}

// runABLog is "triage ab --log": live against shadow decisions of sampled
// live requests.
func runABLog(path string, asJSON bool, htmlOut string, stdout io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	rep, err := evaluation.ReadShadowLog(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if htmlOut != "" {
		if err := atomicfile.Write(htmlOut, func(w io.Writer) error { return evaluation.WriteShadowHTML(w, rep) }); err != nil {
			return err
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := printShadow(stdout, path, rep); err != nil {
		return err
	}
	printShadowDifferences(stdout, rep)
	return nil
}

// printShadow prints a shadow log's two sides side by side.
func printShadow(w io.Writer, path string, rep *evaluation.ShadowReport) error {
	fmt.Fprintf(w, "%s: %d sampled requests from %s to %s", path, rep.N, rep.From.Format(time.RFC3339), rep.To.Format(time.RFC3339))
	if rep.Skipped > 0 {
		fmt.Fprintf(w, " (%d lines skipped)", rep.Skipped)
	}
	fmt.Fprintf(w, "\nlive and shadow chose the same pool for %.1f%% (%d routed elsewhere); same class for %.1f%% of those both classified\n",
		100*rep.PoolAgreement, rep.Differ, 100*rep.ClassAgreement)
	fmt.Fprintln(w, "no labels on live traffic: this is agreement, not accuracy (triage eval and triage ab --data measure that)")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\n\tlive\tshadow")
	fmt.Fprintf(tw, "versions\t%s\t%s\n", countList(rep.Live.Versions), countList(rep.Shadow.Versions))
	fmt.Fprintf(tw, "latency p50/p99 µs\t%.1f/%.1f\t%.1f/%.1f\n", rep.Live.Latency.P50, rep.Live.Latency.P99, rep.Shadow.Latency.P50, rep.Shadow.Latency.P99)
	fmt.Fprintf(tw, "escalation\t%.3f\t%.3f\n", rep.Live.Escalation, rep.Shadow.Escalation)
	fmt.Fprintf(tw, "decided by tier 2\t%.3f\t%.3f\n", rep.Live.Tier2Rate, rep.Shadow.Tier2Rate)
	fmt.Fprintf(tw, "reasons\t%s\t%s\n", countList(rep.Live.Reasons), countList(rep.Shadow.Reasons))
	fmt.Fprintf(tw, "pools\t%s\t%s\n", countList(rep.Live.Pools), countList(rep.Shadow.Pools))
	return tw.Flush()
}

// printShadowDifferences lists where live and shadow sent requests to
// different pools, most first.
func printShadowDifferences(w io.Writer, rep *evaluation.ShadowReport) {
	fmt.Fprintln(w, "\nwhere they differ (live pool → shadow pool: requests)")
	type cell struct {
		from, to string
		n        int
	}
	var cells []cell
	c := rep.Counterfactual
	for i := range c.Labels {
		for j := range c.Labels {
			if i != j && c.Counts[i][j] > 0 {
				cells = append(cells, cell{c.Labels[i], c.Labels[j], c.Counts[i][j]})
			}
		}
	}
	sort.Slice(cells, func(i, j int) bool {
		if cells[i].n != cells[j].n {
			return cells[i].n > cells[j].n
		}
		return cells[i].from+cells[i].to < cells[j].from+cells[j].to
	})
	if len(cells) == 0 {
		fmt.Fprintln(w, "  nowhere")
	}
	for _, x := range cells {
		fmt.Fprintf(w, "  %s → %s: %d\n", x.from, x.to, x.n)
	}
}

// countList renders counts as "a 3, b 1", largest first.
func countList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		name := k
		if name == "" {
			name = `""`
		}
		fmt.Fprintf(&b, "%s %d", name, m[k])
	}
	return b.String()
}
