package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/internal/progress"
	"github.com/triagegw/triage/lifecycle"
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
	cache := &lifecycle.Models{Budget: rules.Offline, Encoder: f.enc.override()}
	if f.place.models != "" {
		p := f.place.place(cfg)
		cache.Place = &p
	}
	rt, err := cache.Load(cfg)
	if err != nil {
		return err
	}
	set := rt.Set
	ds, err := readLabelled(f.data, f.labelMap, set.Classes(), f.agreement, stderr)
	if err != nil {
		return err
	}
	_ = set.LoadTier2() // the figures are of decisions, not of the load
	gather := func(ds *datasets.Set) []evaluation.RouteItem {
		report, finish := progress.Func(stderr, progress.Options{}, "calibrate: both tiers on "+filepath.Base(ds.Path))
		defer finish()
		return evaluation.GatherRoutes(ctx, set, itemsOf(ds), f.groupBy, evaluation.Options{Progress: report})
	}
	ev := gather(ds)
	var prior *datasets.Set
	if f.prior != "" {
		if prior, err = readLabelled(f.prior, f.labelMap, set.Classes(), "", stderr); err != nil {
			return err
		}
		own := map[string]bool{}
		for _, r := range ds.Rows {
			own[strings.TrimSpace(r.Text)] = true
		}
		kept := prior.Rows[:0]
		for _, r := range prior.Rows {
			if !own[strings.TrimSpace(r.Text)] {
				kept = append(kept, r)
			}
		}
		if n := len(prior.Rows) - len(kept); n > 0 {
			fmt.Fprintf(stderr, "calibrate: %d rows of %s are in %s too: kept as your labels only\n", n, f.prior, f.data)
		}
		prior.Rows = kept
		for _, it := range gather(prior) {
			it.Prior = true
			ev = append(ev, it)
		}
	}
	rep := evaluation.FitRoutes(set, ev, evaluation.RouteFitOptions{TargetPrecision: f.target, Robust: f.groupBy != "",
		MaxEscalation: f.maxEsc, Folds: f.folds, SourceQuantile: f.quantile, MinRouted: f.minRouted, PriorWeight: f.priorWeight,
		Unfamiliar: f.unfamiliar})
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
			"rules": set.Version(), "group_by": f.groupBy, "max_escalation": fmt.Sprint(f.maxEsc)}}
	if rep.UnfamiliarAt > 0 {
		r.UnfamiliarAt = &rep.UnfamiliarAt
	}
	if rep.Selection.HeldOut {
		r.Fit["chosen_on"] = fmt.Sprintf("held-out %s, quantile %g, at least %d routed", f.groupBy, f.quantile, f.minRouted)
	}
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
	fmt.Fprintf(w, "rules %s (version %s): fitted for route precision %.2f on %s (%d items)",
		set.File().Path, set.Version(), rep.Target, f.data, len(ds.Rows))
	if rep.Prior > 0 {
		fmt.Fprintf(w, " leaning on %s (%d items, each weighing %.3f: %.0f in all)", f.prior, rep.Prior, rep.PriorWeight, rep.PriorWeight*float64(rep.Prior))
	}
	fmt.Fprintln(w)
	printSelection(w, f, rep)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "route\tclasses\tfloor tier 1\tfloor tier 2\ttaken tier 1\tprecision\ttaken tier 2\tprecision")
	for _, r := range rep.Routes {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%d\t%.3f\t%d\t%.3f\n", r.Name, strings.Join(r.Classes, ", "),
			r.Floor1, r.Floor2, r.Taken1, r.Precision1, r.Taken2, r.Precision2)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nescalate_at %.2f  mix %.2f  fallback_floor %.2f%s\n\n", rep.EscalateAt, rep.Mix, rep.FallbackFloor, unfamiliarNote(rep))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\taccuracy\troute precision\tcoverage\tescalated")
	row := func(name string, s evaluation.RouteSummary) {
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.1f%%\n", name, s.Accuracy, s.Precision, s.Coverage, 100*s.Escalation)
	}
	if rep.Prior > 0 {
		fmt.Fprintf(tw, "on your %d labels:\t\t\t\t\n", rep.Own)
	}
	row("as the rules are", rep.Before)
	row("fitted (on all the data)", rep.Fitted)
	row(fmt.Sprintf("cross-validated (%d folds)", f.folds), rep.CV)
	tw.Flush()
	ci := rep.CV.PrecisionCI
	fmt.Fprintf(w, "cross-validated route precision %.3f, 95%% interval %.3f–%.3f (Wilson, %d routed of %d): more labels narrow it\n",
		rep.CV.Precision, ci.Lo, ci.Hi, rep.CV.Routed, rep.CV.N)
	if rep.Selection.Own {
		fmt.Fprintln(w, "  (the setting is the best of those tried on these labels: the traffic may come out below it, by up to the interval's half-width)")
	}
	if len(rep.Sources) == 0 {
		return
	}
	fmt.Fprintf(w, "\nper %s: fitted on all the data; the chosen setting fitted without it (held out); the whole fit, choice included, run without it (unseen)\n", f.groupBy)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, f.groupBy+"\titems\tfitted: precision\tcoverage\tescalated\theld out: precision\tescalated\tunseen: routed\taccuracy\tprecision\tcoverage\tescalated")
	for _, s := range rep.Sources {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.1f%%\t%.3f\t%.1f%%\t%d\t%.3f\t%.3f\t%.3f\t%.1f%%\n", s.Source, s.Fitted.N,
			s.Fitted.Precision, s.Fitted.Coverage, 100*s.Fitted.Escalation, s.HeldOut.Precision, 100*s.HeldOut.Escalation,
			s.Unseen.Routed, s.Unseen.Accuracy, s.Unseen.Precision, s.Unseen.Coverage, 100*s.Unseen.Escalation)
	}
	tw.Flush()
	if n := rep.NewSource; n != nil {
		fmt.Fprintf(w, "\na new %s: route precision %.3f (%.3f–%.3f), accuracy %.3f (%.3f–%.3f), coverage %.3f (%.3f–%.3f), escalated %.1f%% (%.1f–%.1f%%)\n",
			f.groupBy, n.Precision.Median, n.Precision.Lo, n.Precision.Hi, n.Accuracy.Median, n.Accuracy.Lo, n.Accuracy.Hi,
			n.Coverage.Median, n.Coverage.Lo, n.Coverage.Hi, 100*n.Escalation.Median, 100*n.Escalation.Lo, 100*n.Escalation.Hi)
		fmt.Fprintf(w, "  the median and range of the %d unseen %ss with at least %d routed: one like them falls inside the range with probability %.0f%% ((K-1)/(K+1)), below it with %.0f%%\n",
			n.Sources, f.groupBy, rep.Selection.MinRouted, 100*n.Level, 100/float64(n.Sources+1))
	}
}

// printSelection says how the setting was chosen and whether it keeps the
// promises.
func printSelection(w io.Writer, f *calibrateFlags, rep *evaluation.RouteFitReport) {
	sel := &rep.Selection
	st := sel.Setting
	every := ""
	if st.EverySource {
		every = ", in every " + f.groupBy
	}
	fmt.Fprintf(w, "setting: tier-1 floors for precision %.2f, raised by %.2f; tier-2 floors for %.2f, raised by %.2f%s; escalate_at %.2f, mix %.2f%s\n",
		st.Tier1Precision, st.Tier1Margin, st.Tier2Precision, st.Tier2Margin, every, st.EscalateAt, st.Mix, unfamiliarSetting(rep))
	capNote := ""
	if f.maxEsc > 0 {
		capNote = fmt.Sprintf(" (cap %.1f%%)", 100*f.maxEsc)
	}
	kept := "keeps"
	if !sel.Met {
		kept = "MISSES"
	}
	if sel.Own {
		fmt.Fprintf(w, "chosen on your labels, cross-validated (each fold judged by the floors fitted on the prior and the other folds): route precision %.3f, escalated %.1f%%%s: it %s the target\n",
			sel.Precision, 100*sel.Escalation, capNote, kept)
		return
	}
	if !sel.HeldOut {
		fmt.Fprintf(w, "chosen on the pooled data it was fitted on: route precision %.3f, escalated %.1f%%%s: it %s the target\n",
			sel.Precision, 100*sel.Escalation, capNote, kept)
		return
	}
	which := "the worst held-out " + f.groupBy
	if sel.Quantile > 0 {
		which = fmt.Sprintf("the %.2f quantile of the held-out %ss", sel.Quantile, f.groupBy)
	}
	fmt.Fprintf(w, "chosen leaving each %s out (fitted on the others, judged on it): %s reaches route precision %.3f (of those with at least %d routed) and escalates %.1f%%%s: it %s the target\n",
		f.groupBy, which, sel.Precision, sel.MinRouted, 100*sel.Escalation, capNote, kept)
}

// printRouteSnippet prints the fit as rules-file lines to review: each
// route's floors, and the tier-2 settings.
func printRouteSnippet(w io.Writer, f *calibrateFlags, set *rules.Set, ds *datasets.Set, rep *evaluation.RouteFitReport) {
	fmt.Fprintf(w, "# triage calibrate --rules %s --data %s --target-precision %.2f", f.rules, f.data, rep.Target)
	if f.prior != "" {
		fmt.Fprintf(w, " --prior %s", f.prior)
		if f.priorWeight != 1 {
			fmt.Fprintf(w, " --prior-weight %g", f.priorWeight)
		}
	}
	if f.maxEsc > 0 {
		fmt.Fprintf(w, " --max-escalation %g", f.maxEsc)
	}
	if f.groupBy != "" {
		fmt.Fprintf(w, " --group-by %s", f.groupBy)
		if f.quantile > 0 {
			fmt.Fprintf(w, " --source-quantile %g", f.quantile)
		}
		if f.minRouted != 100 {
			fmt.Fprintf(w, " --min-routed %d", f.minRouted)
		}
	}
	fmt.Fprintf(w, "\n# data sha256 %s, rules version %s\n", ds.SHA256, set.Version())
	s := rep.CV
	on := ""
	if rep.Prior > 0 {
		on = fmt.Sprintf(" on your %d labels (the prior's %d items weighing %.3f each)", rep.Own, rep.Prior, rep.PriorWeight)
	}
	fmt.Fprintf(w, "# cross-validated%s: accuracy %.3f, route precision %.3f (95%% %.3f-%.3f, %d routed), coverage %.3f, escalated %.1f%%\n",
		on, s.Accuracy, s.Precision, s.PrecisionCI.Lo, s.PrecisionCI.Hi, s.Routed, s.Coverage, 100*s.Escalation)
	if n := rep.NewSource; n != nil {
		fmt.Fprintf(w, "# a new %s (median and range of %d held out, the fit run without each): route precision %.3f (%.3f-%.3f), accuracy %.3f (%.3f-%.3f), escalated %.1f%% (%.1f-%.1f%%)\n",
			f.groupBy, n.Sources, n.Precision.Median, n.Precision.Lo, n.Precision.Hi, n.Accuracy.Median, n.Accuracy.Lo, n.Accuracy.Hi,
			100*n.Escalation.Median, 100*n.Escalation.Lo, 100*n.Escalation.Hi)
	}
	if !rep.Selection.Met {
		fmt.Fprintf(w, "# no setting kept the target within the cap (as chosen: route precision %.3f, escalated %.1f%%)\n", rep.Selection.Precision, 100*rep.Selection.Escalation)
	}
	fmt.Fprintf(w, "# Set each route's floors in its entry, and these in tier2:\n")
	unfamiliar := ""
	if len(rep.UnfamiliarShares) > 1 {
		unfamiliar = fmt.Sprintf(", unfamiliar_at: %.3f", rep.UnfamiliarAt)
	}
	fmt.Fprintf(w, "tier2: {escalate_at: %.3f, mix: %.2f, fallback_floor: %.3f%s}\nroutes:\n", rep.EscalateAt, rep.Mix, rep.FallbackFloor, unfamiliar)
	for _, r := range rep.Routes {
		fmt.Fprintf(w, "  - {name: %s, floors: {tier1: %.3f, tier2: %.3f}}   # precision %.3f (%d) at tier 1, %.3f (%d) at tier 2\n",
			r.Name, r.Floor1, r.Floor2, r.Precision1, r.Taken1, r.Precision2, r.Taken2)
	}
}

// unfamiliarSetting is the chosen share of tier 1's confident answers
// unfamiliar_at escalates, for the setting line; "" when no share was
// tried (heads without centroids).
func unfamiliarSetting(rep *evaluation.RouteFitReport) string {
	if len(rep.UnfamiliarShares) < 2 {
		return ""
	}
	if rep.Selection.Setting.Unfamiliar == 0 {
		return ", unfamiliar_at off"
	}
	return fmt.Sprintf(", unfamiliar_at at the least familiar %.0f%% of tier 1's confident answers", 100*rep.Selection.Setting.Unfamiliar)
}

// unfamiliarNote is the fitted unfamiliar_at, for the settings line; ""
// when no share was tried.
func unfamiliarNote(rep *evaluation.RouteFitReport) string {
	if len(rep.UnfamiliarShares) < 2 {
		return ""
	}
	if rep.UnfamiliarAt == 0 {
		return "  unfamiliar_at off"
	}
	return fmt.Sprintf("  unfamiliar_at %.3f", rep.UnfamiliarAt)
}
