package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/internal/progress"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// runCalibrateRules fits a rule set's parameters at the level it decides
// (`triage calibrate --rules`): each class route's floors per tier,
// escalate_at, mix and fallback_floor, for the target route precision,
// judged on data that did not fit them; and writes them as a rules snippet
// (--diff) or into a copy of the heads artifact (--out).
func runCalibrateRules(ctx context.Context, f *calibrateFlags, stdout, stderr io.Writer) error {
	cfg, err := config.Load(f.place.config)
	if err != nil {
		return err
	}
	cfg.UseRules(f.rules)
	cache := &tierCache{budget: rules.Offline}
	if f.place.models != "" {
		p := f.place.place(cfg)
		cache.place = &p
	}
	rt, err := loadRouting(cfg, cache)
	if err != nil {
		return err
	}
	set := rt.set
	ds, err := readDataset(f.data, datasets.Columns{}, f.labelMap, stderr)
	if err != nil {
		return err
	}
	if err := needLabels(ds, "label", "calibrate"); err != nil {
		return err
	}
	items := itemsOf(ds)
	_ = set.LoadTier2() // the figures are of decisions, not of the load
	report, finish := progress.Func(stderr, progress.Options{}, "calibrate: both tiers on "+filepath.Base(f.data))
	ev := evaluation.GatherRoutes(ctx, set, items, f.groupBy, evaluation.Options{Progress: report})
	finish()
	rep := evaluation.FitRoutes(set, ev, evaluation.RouteFitOptions{TargetPrecision: f.target, Robust: f.groupBy != "",
		MaxEscalation: f.maxEsc, Folds: f.folds})
	switch {
	case f.asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case f.diff:
		printRouteSnippet(stdout, f, set, ds, &rep)
		return nil
	}
	printRouteFit(stdout, f, set, ds, &rep)
	if f.out == "" {
		fmt.Fprintln(stdout, "\n(--diff prints the fitted floors as a rules snippet; --out DIR writes them into a copy of the heads artifact)")
		return nil
	}
	return writeRouteFit(stdout, f, set, ds, &rep)
}

// routeFitOf is the fit as the heads artifact stores it.
func routeFitOf(f *calibrateFlags, set *rules.Set, ds *datasets.Set, rep *evaluation.RouteFitReport) *classifier.Routing {
	r := &classifier.Routing{Routes: map[string]classifier.RouteFloors{},
		EscalateAt: &rep.EscalateAt, FallbackFloor: &rep.FallbackFloor, Mix: &rep.Mix,
		Fit: map[string]string{"target_precision": fmt.Sprint(f.target), "data": filepath.Base(f.data), "data_sha256": ds.SHA256,
			"rules": set.Version(), "group_by": f.groupBy}}
	for _, rf := range rep.Routes {
		f1, f2 := rf.Floor1, rf.Floor2
		r.Routes[rf.Name] = classifier.RouteFloors{Classes: rf.Classes, Floors: classifier.Floors{Tier1: &f1, Tier2: &f2}}
	}
	return r
}

func writeRouteFit(stdout io.Writer, f *calibrateFlags, set *rules.Set, ds *datasets.Set, rep *evaluation.RouteFitReport) error {
	headsDir := set.File().Heads
	if !filepath.IsAbs(headsDir) {
		headsDir = filepath.Join(filepath.Dir(set.File().Path), headsDir)
	}
	h, err := classifier.LoadHeads(headsDir)
	if err != nil {
		return err
	}
	c := *h
	c.Routing = routeFitOf(f, set, ds, rep)
	c.Version = h.Version + "+routes"
	if err := c.CopyTo(f.out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s (version %s): a rules file naming these heads takes the fitted floors of each route of the same name and classes, and the escalation settings, unless it sets its own\n",
		filepath.Join(f.out, classifier.HeadsFile), c.Version)
	return nil
}

func printRouteFit(w io.Writer, f *calibrateFlags, set *rules.Set, ds *datasets.Set, rep *evaluation.RouteFitReport) {
	fmt.Fprintf(w, "rules %s (version %s): fitted for route precision %.2f on %s (%d items)\n\n",
		set.File().Path, set.Version(), rep.Target, f.data, len(ds.Rows))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "route\tclasses\tfloor tier 1\tfloor tier 2\ttaken tier 1\tprecision\ttaken tier 2\tprecision")
	for _, r := range rep.Routes {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%d\t%.3f\t%d\t%.3f\n", r.Name, strings.Join(r.Classes, ", "),
			r.Floor1, r.Floor2, r.Taken1, r.Precision1, r.Taken2, r.Precision2)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nescalate_at %.2f  mix %.2f  fallback_floor %.2f\n\n", rep.EscalateAt, rep.Mix, rep.FallbackFloor)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\taccuracy\troute precision\tcoverage\tescalated")
	row := func(name string, s evaluation.RouteSummary) {
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.1f%%\n", name, s.Accuracy, s.Precision, s.Coverage, 100*s.Escalation)
	}
	row("as the rules are", rep.Before)
	row("fitted (on all the data)", rep.Fitted)
	row(fmt.Sprintf("cross-validated (%d folds)", f.folds), rep.CV)
	for _, g := range slices.Sorted(maps.Keys(rep.ByGroup)) {
		row(fmt.Sprintf("%s=%s, fitted without it", f.groupBy, g), rep.ByGroup[g])
	}
	tw.Flush()
}

// printRouteSnippet prints the fit as rules-file lines to review: each
// route's floors, and the tier-2 settings.
func printRouteSnippet(w io.Writer, f *calibrateFlags, set *rules.Set, ds *datasets.Set, rep *evaluation.RouteFitReport) {
	fmt.Fprintf(w, "# triage calibrate --rules %s --data %s --target-precision %.2f", f.rules, f.data, rep.Target)
	if f.groupBy != "" {
		fmt.Fprintf(w, " --group-by %s", f.groupBy)
	}
	fmt.Fprintf(w, "\n# data sha256 %s, rules version %s\n", ds.SHA256, set.Version())
	s := rep.CV
	fmt.Fprintf(w, "# cross-validated: accuracy %.3f, route precision %.3f, coverage %.3f, escalated %.1f%%\n", s.Accuracy, s.Precision, s.Coverage, 100*s.Escalation)
	fmt.Fprintf(w, "# Set each route's floors in its entry, and these in tier2:\n")
	fmt.Fprintf(w, "tier2: {escalate_at: %.3f, mix: %.2f, fallback_floor: %.3f}\nroutes:\n", rep.EscalateAt, rep.Mix, rep.FallbackFloor)
	for _, r := range rep.Routes {
		fmt.Fprintf(w, "  - {name: %s, floors: {tier1: %.3f, tier2: %.3f}}   # precision %.3f (%d) at tier 1, %.3f (%d) at tier 2\n",
			r.Name, r.Floor1, r.Floor2, r.Precision1, r.Taken1, r.Precision2, r.Taken2)
	}
}
