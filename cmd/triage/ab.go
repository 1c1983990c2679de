package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
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

// An ab spec names one of two kinds of thing, judged differently:
//
//   - a heads tier, judged on classes (the top class against the label):
//     tier1, tier2 and heads-cascade (of the heads the config's rules
//     name), heads:DIR (tier 1 of DIR, also a bare DIR), tier2:DIR,
//     heads-cascade:DIR. The heads-only cascade is the rules' decision
//     over one route per class of the heads (evaluation.HeadsCascadeRules),
//     judged on the class it decided;
//   - a rule set, judged on routes (the route taken against the label's):
//     rules (the config's rules: the gateway's decision; also cascade),
//     rules:FILE (also a bare .yaml), rules-tier1 and rules-tier1:FILE
//     (the rules deciding with tier 1 alone, as a build without tier 2).
//
// Both sides are compared like with like: two heads tiers on classes, two
// rule sets on routes. Tier 1 of heads against a rule set is judged through
// that rule set (its routes and floors, without tier 2); any other mix is
// refused.

// abSpec is a spec, parsed.
type abSpec struct {
	text  string
	kind  string // "heads" or "rules"
	tier  string // heads: "1", "2" or headsCascade
	dir   string // heads: the artifact ("" until resolved: the config's)
	file  string // rules: the rules file ("": the config's)
	tier1 bool   // rules: decided with tier 1 alone
	heads bool   // rules: tier 1 of heads, judged through a rule set
}

func parseSpec(spec string) (abSpec, error) {
	s := abSpec{text: spec}
	kind, arg, explicit := strings.Cut(spec, ":")
	if !explicit {
		switch {
		case spec == "tier1", spec == "tier2", spec == headsCascade:
			kind = spec
		case spec == "rules", spec == "cascade", spec == "rules-tier1":
			kind = spec
		case strings.HasSuffix(spec, ".yaml") || strings.HasSuffix(spec, ".yml"):
			kind, arg = "rules", spec
		default:
			kind, arg = "heads", spec
		}
	}
	switch kind {
	case "tier1", "heads":
		s.kind, s.tier, s.dir = "heads", "1", arg
	case "tier2":
		s.kind, s.tier, s.dir = "heads", "2", arg
	case headsCascade:
		s.kind, s.tier, s.dir = "heads", headsCascade, arg
	case "rules", "cascade":
		s.kind, s.file = "rules", arg
	case "rules-tier1":
		s.kind, s.file, s.tier1 = "rules", arg, true
	default:
		return s, badInput(fmt.Errorf("spec %q: want tier1, tier2, %s, rules, rules-tier1, a heads directory, a rules .yaml, or KIND:PATH (heads:DIR, tier2:DIR, %s:DIR, rules:FILE, rules-tier1:FILE)", spec, headsCascade, headsCascade))
	}
	if explicit && arg == "" {
		return s, badInput(fmt.Errorf("spec %q: no path after %q", spec, kind+":"))
	}
	return s, nil
}

// likeWithLike makes two specs comparable: tier 1 of heads against a rule
// set becomes those heads' tier 1 through that rule set, without tier 2.
func likeWithLike(a, b abSpec) (abSpec, abSpec, error) {
	if a.kind == b.kind {
		return a, b, nil
	}
	swap := a.kind == "rules"
	if swap {
		a, b = b, a
	}
	// a is heads, b rules.
	if a.tier != "1" {
		what := "tier 2"
		if a.tier == headsCascade {
			what = "the heads-only cascade"
		}
		return a, b, badInput(fmt.Errorf("--a and --b are not alike: %q is %s of heads, judged on classes, and %q a rule set, judged on routes; "+
			"only tier 1 can be judged through a rule set (as the rules decide without tier 2). Compare heads with heads (tier1, tier2, %s, heads:DIR) or rules with rules (rules, rules-tier1, rules:FILE)",
			a.text, what, b.text, headsCascade))
	}
	conv := abSpec{text: a.text, kind: "rules", file: b.file, dir: a.dir, tier1: true, heads: true}
	if swap {
		return b, conv, nil
	}
	return conv, b, nil
}

// abSide is one side of a comparison, ready to run.
type abSide struct {
	spec    string // what ran, for a person
	mode    string // "tier" (judged on classes) or "rules" (on routes)
	classes []string
	run     func(context.Context, []evaluation.Item, evaluation.Options) ([]evaluation.Outcome, error)
}

// abEnv is what specs resolve against: the config (nil when there is
// none), the models directory and where tier 2's vectors come from.
type abEnv struct {
	cfgPath string
	cfg     *config.Config
	place   modelsPlace
	enc     encoderFlags // --encoder-url and its kin: the engine of every side that runs tier 2
}

// resolve loads what s runs.
func (e *abEnv) resolve(s abSpec) (*abSide, error) {
	if s.kind == "heads" {
		dir := s.dir
		if dir == "" {
			if e.cfg == nil {
				return nil, badInput(fmt.Errorf("spec %q: no %s to take the heads its rules name from: give heads:DIR, or --config FILE", s.text, e.cfgPath))
			}
			d, err := configHeads(e.cfg)
			if err != nil {
				return nil, err
			}
			dir = d
		}
		return e.headsSide(s, dir, s.dir == "")
	}
	if e.cfg == nil {
		return nil, badInput(fmt.Errorf("spec %q: a rule set needs the gateway config's pools, and there is no %s: give --config FILE", s.text, e.cfgPath))
	}
	cfg := *e.cfg
	if s.file != "" {
		cfg.UseRules(s.file)
	}
	cache := &lifecycle.Models{Budget: rules.Offline, Place: &e.place, NoTier2: s.tier1, Heads: s.dir, Encoder: e.enc.override()}
	rt, err := cache.Load(&cfg)
	if err != nil {
		return nil, err
	}
	if rt.Set == nil {
		return nil, badInput(fmt.Errorf("spec %q: %s names no rules file", s.text, e.cfgPath))
	}
	desc := fmt.Sprintf("rules %s (version %s): the gateway's decision, tier 1 then tier 2 where the rules say", cfg.RulesPath(), rt.Set.Version())
	switch {
	case s.heads:
		desc = fmt.Sprintf("tier 1 of %s, judged through rules %s (their routes and floors, without tier 2)", lifecycle.RulesHeads(rt.Set.File()), cfg.RulesPath())
		if s.dir != "" {
			desc = fmt.Sprintf("tier 1 of %s, judged through rules %s (their routes and floors, without tier 2)", s.dir, cfg.RulesPath())
		}
	case s.tier1:
		desc = fmt.Sprintf("rules %s (version %s) deciding with tier 1 alone, without tier 2", cfg.RulesPath(), rt.Set.Version())
	}
	return &abSide{spec: desc, mode: "rules", classes: rt.Set.RoutedClasses(),
		run: func(ctx context.Context, items []evaluation.Item, o evaluation.Options) ([]evaluation.Outcome, error) {
			return evaluation.Rules(ctx, rt.Set, items, o)
		}}, nil
}

// headsSide runs tier 1, tier 2 or the heads-only cascade of the heads in
// dir (its classes without a tier-1 floor at a rules file's default,
// 0.5); fromRules says they are the heads the config's rules name, whose
// tier2.encoder then serves tier 2 unless --encoder-url names another
// engine (as classify and calibrate take it).
func (e *abEnv) headsSide(s abSpec, dir string, fromRules bool) (*abSide, error) {
	h, err := classifier.LoadHeads(dir)
	if err != nil {
		return nil, err
	}
	var rc *onnx.RemoteConfig
	if s.tier != "1" {
		if rc, err = e.enc.remote(e.cfg, fromRules); err != nil {
			return nil, err
		}
	}
	run, _, err := headsDecision(h, e.place, rc, s.tier, 0.5) // kept for the process's life
	if err != nil {
		return nil, err
	}
	side := &abSide{spec: fmt.Sprintf("tier %s of %s", s.tier, dir), mode: "tier", classes: h.Classes,
		run: func(ctx context.Context, items []evaluation.Item, o evaluation.Options) ([]evaluation.Outcome, error) {
			out, _, err := run(ctx, items, o)
			return out, err
		}}
	if s.tier == headsCascade {
		side.spec = headsCascadeSpec(dir, 0.5)
	}
	return side, nil
}

// abFlags are the flags of "triage ab".
type abFlags struct {
	enc                                             encoderFlags
	a, b, data, config, labelMap, html, models, log string
	agreement                                       string
	boot                                            int
	seed                                            uint64
	asJSON, configSet                               bool
}

const abSpecHelp = "heads (judged on classes): tier1, tier2, " + headsCascade + " (of the config's heads), heads:DIR, tier2:DIR, " + headsCascade + ":DIR; " +
	"rules (judged on routes): rules (the config's: the gateway's decision), rules-tier1 (the same without tier 2), rules:FILE, rules-tier1:FILE. " +
	"Tier 1 against a rule set is judged through that rule set"

func parseABFlags(args []string, stderr io.Writer) (*abFlags, error) {
	var f abFlags
	fs := newFlagSet("triage ab", stderr)
	fs.StringVar(&f.a, "a", "", "spec A (required): "+abSpecHelp)
	fs.StringVar(&f.b, "b", "", "spec B (required), of the same kind as A")
	fs.StringVar(&f.data, "data", "", "labelled dataset, .jsonl or .csv (required)")
	fs.StringVar(&f.config, "config", "triage.yaml", "gateway config: its rules, pools and models_dir")
	fs.StringVar(&f.labelMap, "label-map", "", "JSON/YAML mapping of dataset labels to classes")
	fs.IntVar(&f.boot, "bootstrap", 1000, "bootstrap resamples for the confidence intervals")
	fs.Uint64Var(&f.seed, "seed", 1, "bootstrap seed")
	fs.BoolVar(&f.asJSON, "json", false, "print the comparison as JSON")
	fs.StringVar(&f.html, "html", "", "also write a self-contained HTML page")
	fs.StringVar(&f.agreement, "agreement", "", agreementFlagHelp)
	fs.StringVar(&f.models, "models", "", modelsFlagHelp)
	fs.StringVar(&f.log, "log", "", "a shadow decision log (the rules' shadow.log) to compare its live and shadow decisions, instead of --a/--b/--data")
	f.enc.register(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	if err := f.enc.check(); err != nil {
		return nil, err
	}
	fs.Visit(func(fl *flag.Flag) { f.configSet = f.configSet || fl.Name == "config" })
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
	ab, err := compareSpecs(ctx, f, stderr)
	if err != nil {
		return err
	}
	if f.html != "" {
		if err := atomicfile.Write(f.html, func(w io.Writer) error { return evaluation.WriteABHTML(w, ab) }); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "ab: wrote %s\n", describeFile(f.html))
	}
	judged := judgedOn(ab)
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			JudgedOn string `json:"judged_on"`
			*evaluation.ABReport
		}{judged, ab})
	}
	return printAB(stdout, ab)
}

// judgedOn is "classes" or "routes": what both sides of ab were judged on.
func judgedOn(ab *evaluation.ABReport) string {
	if ab.A.Mode == "rules" {
		return "routes"
	}
	return "classes"
}

// compareSpecs runs both specs over the data and compares them, like with
// like.
func compareSpecs(ctx context.Context, f *abFlags, stderr io.Writer) (*evaluation.ABReport, error) {
	var specs [2]abSpec
	for i, text := range []string{f.a, f.b} {
		s, err := parseSpec(text)
		if err != nil {
			return nil, err
		}
		specs[i] = s
	}
	a, b, err := likeWithLike(specs[0], specs[1])
	if err != nil {
		return nil, err
	}
	set, err := readDataset(f.data, datasets.Columns{}, f.labelMap, stderr)
	if err != nil {
		return nil, err
	}
	if err := needLabels(set, "", "ab"); err != nil {
		return nil, err
	}
	if err := checkModelLabels(set, f.agreement, "ab", stderr); err != nil {
		return nil, err
	}
	items := itemsOf(set)
	pf := placeFlags{config: f.config, models: f.models, configSet: f.configSet}
	env := &abEnv{cfgPath: f.config, enc: f.enc}
	if a.kind == "rules" || a.dir == "" || b.dir == "" || f.models == "" {
		if env.cfg, err = pf.loadConfig(); err != nil {
			return nil, err
		}
	}
	env.place = pf.place(env.cfg)
	var sides [2]*abSide
	var outs [2][]evaluation.Outcome
	var reps [2]*evaluation.Report
	for i, s := range []abSpec{a, b} {
		if sides[i], err = env.resolve(s); err != nil {
			return nil, err
		}
		report, finish := progress.Func(stderr, progress.Options{}, fmt.Sprintf("ab: %c: %s", 'A'+i, s.text))
		outs[i], err = sides[i].run(ctx, items, evaluation.Options{Progress: report})
		finish()
		if err != nil {
			return nil, err
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
	return evaluation.AB(sides[0].spec, sides[1].spec, reps[0], reps[1], outs[0], outs[1], classes, f.boot, f.seed), nil
}

// printAB prints a comparison for a person, saying what both sides were
// judged on.
func printAB(w io.Writer, ab *evaluation.ABReport) error {
	fmt.Fprintf(w, "A: %s\nB: %s\n", ab.SpecA, ab.SpecB)
	if judgedOn(ab) == "routes" {
		fmt.Fprintln(w, "judged on routes: an item is right when the route taken covers its label, or the default pool takes a label no route covers")
		fmt.Fprintf(w, "%d items; the same pool for %.1f%% (%d routed elsewhere); the same route class, or both the default, for %.1f%%\n",
			ab.N, 100*(1-float64(ab.Differ)/float64(max(ab.N, 1))), ab.Differ, 100*ab.AgreementRate)
	} else {
		fmt.Fprintln(w, "judged on classes: an item is right when the top class is its label")
		fmt.Fprintf(w, "%d items; the same top class for %.1f%% (%d differ)\n", ab.N, 100*ab.AgreementRate, ab.Differ)
	}
	fmt.Fprintf(w, "accuracy A %.4f  B %.4f  B-A %+.4f (95%% [%+.4f, %+.4f])\n", ab.Accuracy.A, ab.Accuracy.B, ab.Accuracy.Delta, ab.Accuracy.Lo, ab.Accuracy.Hi)
	if d := ab.RoutePrecision; d != nil {
		fmt.Fprintf(w, "route precision A %.4f  B %.4f  B-A %+.4f (95%% [%+.4f, %+.4f], paired bootstrap)\n", d.A, d.B, d.Delta, d.Lo, d.Hi)
	}
	printSideIntervals(w, ab)
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

// printSideIntervals prints each side's own 95% intervals (Wilson): what
// each figure may be, given the number of labels, beside the interval of
// the difference above.
func printSideIntervals(w io.Writer, ab *evaluation.ABReport) {
	side := func(name string, acc, prec *evaluation.Interval, routed int) {
		if acc == nil {
			return
		}
		fmt.Fprintf(w, "  %s: accuracy %.3f–%.3f", name, acc.Lo, acc.Hi)
		if prec != nil {
			fmt.Fprintf(w, ", route precision %.3f–%.3f of %d routed", prec.Lo, prec.Hi, routed)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "95%% intervals of each side (Wilson, %d items):\n", ab.N)
	var pa, pb *evaluation.Interval
	if d := ab.RoutePrecision; d != nil {
		pa, pb = d.CIA, d.CIB
	}
	side("A", ab.Accuracy.CIA, pa, ab.A.Routed)
	side("B", ab.Accuracy.CIB, pb, ab.B.Routed)
}

// runABLog is "triage ab --log": live against shadow decisions of sampled
// live requests, or the arms of a live split.
func runABLog(path string, asJSON bool, htmlOut string, stdout io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	head := make([]byte, 4<<10)
	n, _ := io.ReadFull(f, head)
	if evaluation.IsSplitLog(head[:n]) {
		defer f.Close()
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		return runSplitLog(f, path, asJSON, htmlOut, stdout)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
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

// runSplitLog is "triage ab --log" on a split log: each arm's requests,
// routes, errors, latency and tokens.
func runSplitLog(r io.Reader, path string, asJSON bool, htmlOut string, stdout io.Writer) error {
	if htmlOut != "" {
		return badInput(fmt.Errorf("%s is a split log: --html reports shadow logs only; use the text or --json", path))
	}
	rep, err := evaluation.ReadSplitLog(r)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printSplit(stdout, path, rep)
}

// printSplit prints a split log's arms side by side.
func printSplit(w io.Writer, path string, rep *evaluation.SplitReport) error {
	fmt.Fprintf(w, "%s: %d split requests from %s to %s", path, rep.N, rep.From.Format(time.RFC3339), rep.To.Format(time.RFC3339))
	if rep.Skipped > 0 {
		fmt.Fprintf(w, " (%d lines skipped)", rep.Skipped)
	}
	fmt.Fprintln(w, "\nboth arms routed real traffic; no labels on it: compare outcomes, not accuracy (triage eval and triage ab --data measure that)")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(label string, cell func(a *evaluation.SplitArm) string) {
		fmt.Fprint(tw, label)
		for i := range rep.Arms {
			fmt.Fprint(tw, "\t", cell(&rep.Arms[i]))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "\n")
	row("arm", func(a *evaluation.SplitArm) string { return a.Name })
	row("requests", func(a *evaluation.SplitArm) string { return fmt.Sprintf("%d (%.1f%%)", a.Requests, 100*a.Share) })
	row("assigned by", func(a *evaluation.SplitArm) string { return countList(a.By) })
	row("versions", func(a *evaluation.SplitArm) string { return countList(a.Versions) })
	row("error rate (5xx)", func(a *evaluation.SplitArm) string { return fmt.Sprintf("%.3f", a.ErrorRate) })
	row("latency p50/p99 ms", func(a *evaluation.SplitArm) string { return fmt.Sprintf("%.1f/%.1f", a.LatencyMS.P50, a.LatencyMS.P99) })
	row("tokens prompt/completion", func(a *evaluation.SplitArm) string { return fmt.Sprintf("%d/%d", a.PromptTokens, a.CompletionTokens) })
	row("tokens per request", func(a *evaluation.SplitArm) string { return fmt.Sprintf("%.1f", a.TokensPerRequest) })
	row("routes", func(a *evaluation.SplitArm) string { return countList(a.Routes) })
	row("pools", func(a *evaluation.SplitArm) string { return countList(a.Pools) })
	row("reasons", func(a *evaluation.SplitArm) string { return countList(a.Reasons) })
	return tw.Flush()
}
