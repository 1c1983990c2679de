package evaluation

import (
	"cmp"
	"context"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/triagegw/triage/rules"
)

// RouteItem is one labelled request for fitting a rule set's parameters:
// what both tiers said of it (rules.Set.Gather), its label, its group (its
// source) and a key for the row folds (its text). Prior marks a request
// of the public data a fit on the user's own labels leans on
// (RouteFitOptions.PriorWeight); the others are the user's own.
type RouteItem struct {
	Ev    *rules.Evidence
	Label string
	Group string
	Key   string
	Prior bool
}

// GatherRoutes asks both tiers about every item, as one-turn requests
// naming the set's first alias, in parallel.
func GatherRoutes(ctx context.Context, set *rules.Set, items []Item, group string, o Options) []RouteItem {
	out := make([]RouteItem, len(items))
	alias, window := set.Aliases()[0], set.Window()
	parallel(len(items), o, func(i int) {
		it := items[i]
		out[i] = RouteItem{Ev: set.Gather(ctx, rules.Signals{Model: alias, Text: window.Clip(it.Text)}),
			Label: it.Label, Group: it.Cols[group], Key: it.Text}
	})
	return out
}

// RouteFitOptions tune FitRoutes.
type RouteFitOptions struct {
	// TargetPrecision is the route precision the fit keeps: of the
	// requests class routes take, the share whose label the route covers.
	// Default 0.9.
	TargetPrecision float64
	// Robust chooses the settings on held-out sources: when the items come
	// from two sources or more (RouteItem.Group), every candidate setting
	// is fitted without each source and judged on it, and the setting kept
	// is the one whose held-out route precision reaches the target in
	// every source with at least MinRouted requests routed (or in the
	// SourceQuantile of them), and whose escalation stays within
	// MaxEscalation in every source with at least MinRouted requests.
	// The candidates then include floors that must hold in every source
	// of the data they are fitted on (with at least MinGroup requests
	// taken there), and floors raised by a margin above what that data
	// asks. Without it, or with one source, the setting kept is judged on
	// the data it was fitted on, pooled.
	Robust   bool
	MinGroup int // default 20
	// MinRouted is the fewest requests a held-out source must have routed
	// (or hold, for escalation) for its figures to bind the choice: fewer
	// give too noisy a precision. Default 100.
	MinRouted int
	// SourceQuantile is the quantile of the held-out sources' figures that
	// must keep the promises: 0 (the default) the worst source, 0.25 the
	// lower quartile of their precisions and the upper quartile of their
	// escalations.
	SourceQuantile float64
	// MaxEscalation, when above 0, caps the share of requests sent to tier
	// 2; the settings that escalate more are not chosen.
	MaxEscalation float64
	// Folds cross-validates over rows. Default 5.
	Folds int
	// EscalateAt and Mix are the candidates tried; defaults
	// {0.05, 0.1, 0.15, 0.2, 0.3} and {0, 0.25, 0.5}.
	EscalateAt, Mix []float32
	// Unfamiliar are the candidate shares of tier 1's confident answers
	// (those that clear their route's floor) that tier2.unfamiliar_at
	// escalates: the least familiar ones, by their distance from their top
	// class's centroid; 0 is off. Each becomes a distance (the quantile of
	// the confident answers' distances) where the floors are fitted.
	// Default DefaultUnfamiliarShares when the evidence has distances
	// (heads with centroids), else off alone.
	Unfamiliar []float32
	// PriorWeight applies when some items are Prior (public data) and
	// some are not (the user's own labels): the prior items together
	// weigh PriorWeight times as much as the own items in the floors'
	// precisions (each weighs at most 1), so a few hundred own labels are
	// not drowned by thousands of public ones, while routes the own
	// labels barely reach still get floors. The setting is then chosen,
	// and the fit judged, on the own items alone, cross-validated over
	// them: each fold of own items is judged by the fit on the prior and
	// the other folds (Robust does not apply). Default 1.
	PriorWeight float64
}

// RouteSummary is what a rule set's decisions did on some items.
type RouteSummary struct {
	N int `json:"n"`
	// Routed is the number of items a class route took.
	Routed int `json:"routed"`
	// Accuracy: decisions right (the route covers the label, or the default
	// pool took a label no route covers), over all items.
	Accuracy float64 `json:"accuracy"`
	// Precision: right, of the items a class route took; PrecisionCI its
	// Wilson 95% interval over the Routed items.
	Precision   float64  `json:"route_precision"`
	PrecisionCI Interval `json:"route_precision_ci"`
	// Coverage: the share of items a class route took.
	Coverage float64 `json:"coverage"`
	// Escalation: the share of items sent to tier 2.
	Escalation float64 `json:"escalation"`
}

// RouteFloorFit is one class route's fitted floors.
type RouteFloorFit struct {
	Name    string   `json:"name"`
	Classes []string `json:"classes"`
	// Floor1 and Floor2 are the least masses at which each tier takes the
	// route; a floor of 1 is one no fitted precision was reached at (the
	// tier never takes it alone).
	Floor1 float32 `json:"floor_tier1"`
	Floor2 float32 `json:"floor_tier2"`
	// Taken1, Taken2 and Precision1, Precision2 are what each tier did with
	// the route on the data it was fitted on.
	Taken1     int     `json:"taken_tier1"`
	Taken2     int     `json:"taken_tier2"`
	Precision1 float64 `json:"precision_tier1"`
	Precision2 float64 `json:"precision_tier2"`
}

// RouteSetting is how the fitted parameters were derived from the data:
// the precision each tier's floors were fitted for, whether they had to
// hold in every source of the data, and the tier-2 settings.
type RouteSetting struct {
	Tier1Precision float64 `json:"tier1_floor_precision"`
	Tier2Precision float64 `json:"tier2_floor_precision"`
	// Tier1Margin and Tier2Margin are added to each tier's fitted floors
	// (to at most 1): the headroom a source the data does not hold needs.
	Tier1Margin float32 `json:"tier1_margin"`
	Tier2Margin float32 `json:"tier2_margin"`
	EverySource bool    `json:"floors_hold_in_every_source"`
	EscalateAt  float32 `json:"escalate_at"`
	Mix         float32 `json:"mix"`
	// Unfamiliar is the share of tier 1's confident answers, the least
	// familiar, that unfamiliar_at sends to tier 2 (0: off).
	Unfamiliar float32 `json:"unfamiliar_share"`
}

// RouteSelection says how the setting was chosen.
type RouteSelection struct {
	// HeldOut: chosen on sources held out one at a time (Robust, with two
	// sources or more); otherwise on the pooled data it was fitted on.
	HeldOut bool `json:"held_out_sources"`
	// Own: chosen on the own items, cross-validated, the floors fitted
	// on them and the prior (RouteFitOptions.PriorWeight).
	Own       bool    `json:"own_items_cross_validated,omitempty"`
	Quantile  float64 `json:"source_quantile"`
	MinRouted int     `json:"min_routed"`
	// Precision and Escalation are the chosen setting's figures as the
	// choice read them: with HeldOut, the SourceQuantile of the held-out
	// sources' route precisions (over those with MinRouted routed; the
	// pooled held-out precision when none has) and of their escalations
	// (over those with MinRouted items); otherwise the pooled figures.
	Precision  float64 `json:"precision"`
	Escalation float64 `json:"escalation"`
	// Met: they keep the target and the escalation cap. When no setting
	// does, the one kept is the one within the cap with the best
	// precision, else the one that escalates least.
	Met     bool         `json:"met"`
	Setting RouteSetting `json:"setting"`
}

// SourceFit is what the fit does on one source of the data.
type SourceFit struct {
	Source string `json:"source"`
	// Fitted: the parameters fitted on all the data, on this source.
	Fitted RouteSummary `json:"fitted"`
	// HeldOut: the chosen setting fitted without this source, on it (what
	// the choice read; the choice saw it, so it flatters).
	HeldOut RouteSummary `json:"held_out"`
	// Unseen: the whole fit (the choice of setting included) run without
	// this source, on it: what a source the fit never saw gets.
	Unseen RouteSummary `json:"unseen"`
}

// Spread is a figure across held-out sources: its median and its range.
type Spread struct {
	Median float64 `json:"median"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
}

// NewSource estimates what a source the fit has never seen will get, from
// the Unseen figures of the sources with MinRouted requests routed: their
// median and their range. If a new source is like the K held out (drawn
// from the same population of sources), its figure falls inside their
// range with probability (K-1)/(K+1) and below the lowest with 1/(K+1):
// Level is that probability.
type NewSource struct {
	Sources    int     `json:"sources"`
	Level      float64 `json:"level"`
	Accuracy   Spread  `json:"accuracy"`
	Precision  Spread  `json:"route_precision"`
	Coverage   Spread  `json:"coverage"`
	Escalation Spread  `json:"escalation"`
}

// RouteFitReport is the outcome of FitRoutes.
type RouteFitReport struct {
	Target float64 `json:"target_precision"`
	// Own and Prior count the user's own items and the prior's; with
	// both, PriorWeight is each prior item's weight in the floors, and
	// Before, Fitted, CV and the routes' figures are of the own items.
	Own         int             `json:"own_items"`
	Prior       int             `json:"prior_items,omitempty"`
	PriorWeight float64         `json:"prior_item_weight,omitempty"`
	Params      rules.Params    `json:"-"`
	Routes      []RouteFloorFit `json:"routes"`
	// EscalateAt, FallbackFloor, Mix and UnfamiliarAt are the fitted
	// settings.
	EscalateAt    float32 `json:"escalate_at"`
	FallbackFloor float32 `json:"fallback_floor"`
	Mix           float32 `json:"mix"`
	UnfamiliarAt  float32 `json:"unfamiliar_at"`
	// UnfamiliarShares are the shares of tier 1's confident answers tried
	// for unfamiliar_at (0: off alone, without centroids in the heads).
	UnfamiliarShares []float32      `json:"unfamiliar_shares"`
	Selection        RouteSelection `json:"selection"`
	// Before is the rule set as it was, Fitted with the fitted
	// parameters, both on all the data; CV judges the whole fit run
	// without each fold on it.
	Before RouteSummary `json:"before"`
	Fitted RouteSummary `json:"fitted"`
	CV     RouteSummary `json:"cv"`
	// Sources are the fit's figures per source, in name order (with two
	// sources or more), and NewSource what a new one may expect (with
	// two sources or more that route MinRouted requests).
	Sources   []SourceFit `json:"sources,omitempty"`
	NewSource *NewSource  `json:"new_source,omitempty"`
}

// FitRoutes fits a rule set's parameters to labelled evidence, at the
// level the rules decide: for each class route, the least mass at which
// each tier's verdict takes it while its precision holds (the most
// coverage that keeps the target), the routed mass from which tier 1
// escalates, tier 2's mix with tier 1, and the fallback floor when tier 2
// cannot answer; and judges them on data that did not fit them. With
// Robust and items from several sources, the setting is chosen on each
// source held out in turn (RouteFitOptions.Robust). Every figure comes
// from replaying the rule set's own decision (rules.Set.Replay).
func FitRoutes(set *rules.Set, items []RouteItem, o RouteFitOptions) RouteFitReport {
	if o.TargetPrecision == 0 {
		o.TargetPrecision = 0.9
	}
	if o.MinGroup == 0 {
		o.MinGroup = 20
	}
	if o.MinRouted == 0 {
		o.MinRouted = 100
	}
	if o.Folds == 0 {
		o.Folds = 5
	}
	if o.EscalateAt == nil {
		o.EscalateAt = []float32{0.05, 0.1, 0.15, 0.2, 0.3}
	}
	if o.Mix == nil {
		o.Mix = []float32{0, 0.25, 0.5}
	}
	if o.PriorWeight == 0 {
		o.PriorWeight = 1
	}
	if o.Unfamiliar == nil {
		o.Unfamiliar = []float32{0}
		if hasDistances(items) {
			o.Unfamiliar = DefaultUnfamiliarShares
		}
	}
	f := routeFitter{set: set, routes: set.Routes(), o: o, priorWeight: 1}
	own := items
	if nOwn, nPrior := countPrior(items); nPrior > 0 && nOwn > 0 {
		own = ownItems(items)
		f.prior, f.priorWeight = true, min(1, o.PriorWeight*float64(nOwn)/float64(nPrior))
		f.o.Robust = false
	}
	rep := RouteFitReport{Target: o.TargetPrecision, Own: len(own), Prior: len(items) - len(own), UnfamiliarShares: o.Unfamiliar}
	if f.prior {
		rep.PriorWeight = f.priorWeight
	}
	before := set.Params()
	rep.Before = f.judge(own, &before)
	var heldOut map[string]RouteSummary
	rep.Params, rep.Selection, heldOut = f.fit(items)
	rep.Fitted = f.judge(own, &rep.Params)
	rep.EscalateAt, rep.FallbackFloor, rep.Mix = rep.Params.EscalateAt, rep.Params.FallbackFloor, rep.Params.Mix
	rep.UnfamiliarAt = rep.Params.UnfamiliarAt
	for i, r := range f.routes {
		if r.Classes == nil {
			continue
		}
		rf := RouteFloorFit{Name: r.Name, Classes: r.Classes, Floor1: rep.Params.Floors[1][i], Floor2: rep.Params.Floors[2][i]}
		var right1, right2 int
		for _, it := range own {
			d := set.Replay(it.Ev, &rep.Params)
			if d.Route != r.Name {
				continue
			}
			ok := slices.Contains(r.Classes, it.Label)
			if d.Tier == 2 {
				rf.Taken2++
				if ok {
					right2++
				}
			} else {
				rf.Taken1++
				if ok {
					right1++
				}
			}
		}
		rf.Precision1, rf.Precision2 = ratio(right1, rf.Taken1), ratio(right2, rf.Taken2)
		rep.Routes = append(rep.Routes, rf)
	}
	// Cross-validation over rows (over the own rows, with a prior): the
	// chosen setting fitted without each fold, judged on it.
	var cv []scoredDecision
	for k := range o.Folds {
		fitOn, held := f.fold(items, k)
		p := f.fitSetting(fitOn, rep.Selection.Setting)
		cv = append(cv, f.decide(held, &p)...)
	}
	rep.CV = f.summarize(cv)
	// Each source: as fitted, as the choice saw it, and unseen.
	groups := groupsOf(items)
	if len(groups) < 2 || f.prior {
		return rep
	}
	rep.Sources = make([]SourceFit, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		wg.Go(func() {
			rest, held := partition(items, g)
			p, _, _ := f.fit(rest)
			rep.Sources[gi] = SourceFit{Source: g, Fitted: f.judge(held, &rep.Params), HeldOut: heldOut[g], Unseen: f.judge(held, &p)}
		})
	}
	wg.Wait()
	rep.NewSource = newSource(rep.Sources, o.MinRouted)
	return rep
}

// newSource summarises the unseen figures of the sources that routed at
// least minRouted requests; nil with fewer than two.
func newSource(sources []SourceFit, minRouted int) *NewSource {
	var acc, prec, cov, esc []float64
	for _, s := range sources {
		if u := s.Unseen; u.Routed >= minRouted {
			acc, prec = append(acc, u.Accuracy), append(prec, u.Precision)
			cov, esc = append(cov, u.Coverage), append(esc, u.Escalation)
		}
	}
	k := len(prec)
	if k < 2 {
		return nil
	}
	return &NewSource{Sources: k, Level: float64(k-1) / float64(k+1),
		Accuracy: spread(acc), Precision: spread(prec), Coverage: spread(cov), Escalation: spread(esc)}
}

func spread(v []float64) Spread {
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	med := v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return Spread{Median: med, Lo: v[0], Hi: v[n-1]}
}

// groupsOf lists the items' groups, sorted.
func groupsOf(items []RouteItem) []string {
	seen := map[string]bool{}
	var out []string
	for _, it := range items {
		if it.Group != "" && !seen[it.Group] {
			seen[it.Group] = true
			out = append(out, it.Group)
		}
	}
	slices.Sort(out)
	return out
}

// partition parts items into those of other groups and those of group g.
func partition(items []RouteItem, g string) (rest, held []RouteItem) {
	for _, it := range items {
		if it.Group == g {
			held = append(held, it)
		} else {
			rest = append(rest, it)
		}
	}
	return rest, held
}

// merge pools summaries of disjoint items.
func merge(sums []RouteSummary) RouteSummary {
	var n, routed int
	var right, routedRight, esc float64
	for _, s := range sums {
		n += s.N
		routed += s.Routed
		right += s.Accuracy * float64(s.N)
		routedRight += s.Precision * float64(s.Routed)
		esc += s.Escalation * float64(s.N)
	}
	if n == 0 {
		return RouteSummary{}
	}
	out := RouteSummary{N: n, Routed: routed, Accuracy: right / float64(n), Coverage: float64(routed) / float64(n), Escalation: esc / float64(n)}
	if routed > 0 {
		out.Precision = routedRight / float64(routed)
	}
	out.PrecisionCI = Wilson(int(math.Round(routedRight)), routed)
	return out
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func rowFold(key string, i, k int) int {
	h := fnv.New32a()
	if key != "" {
		h.Write([]byte(key))
	} else {
		h.Write([]byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)})
	}
	return int(h.Sum32() % uint32(k))
}

type routeFitter struct {
	set    *rules.Set
	routes []rules.RouteInfo
	o      RouteFitOptions
	// prior: the items hold prior and own ones; priorWeight is a prior
	// item's weight in the floors (1 without).
	prior       bool
	priorWeight float64
}

// weight is an item's weight in the floors' precisions.
func (f *routeFitter) weight(it RouteItem) float64 {
	if it.Prior {
		return f.priorWeight
	}
	return 1
}

// fold parts items for row fold k: the held rows are the fold's own rows
// (with a prior, the prior is always fitted on).
func (f *routeFitter) fold(items []RouteItem, k int) (fitOn, held []RouteItem) {
	for i, it := range items {
		if !it.Prior && rowFold(it.Key, i, f.o.Folds) == k {
			held = append(held, it)
		} else {
			fitOn = append(fitOn, it)
		}
	}
	return fitOn, held
}

func countPrior(items []RouteItem) (own, prior int) {
	for _, it := range items {
		if it.Prior {
			prior++
		} else {
			own++
		}
	}
	return own, prior
}

func ownItems(items []RouteItem) []RouteItem {
	out := make([]RouteItem, 0, len(items))
	for _, it := range items {
		if !it.Prior {
			out = append(out, it)
		}
	}
	return out
}

// scoredDecision is one item's decision and whether it was right.
type scoredDecision struct {
	d     rules.Decision
	right bool
}

// covers reports whether a decision is right for the label: a class route
// that takes the label's class, or a route without classes (the default
// pool among them) for a label no class route covers.
func (f *routeFitter) covers(d rules.Decision, label string) bool {
	covered := false
	for _, r := range f.routes {
		if r.Name == d.Route && r.Classes != nil {
			return slices.Contains(r.Classes, label)
		}
		covered = covered || slices.Contains(r.Classes, label)
	}
	return !covered
}

func (f *routeFitter) routed(d rules.Decision) bool {
	for _, r := range f.routes {
		if r.Name == d.Route {
			return r.Classes != nil
		}
	}
	return false
}

func (f *routeFitter) decide(items []RouteItem, p *rules.Params) []scoredDecision {
	out := make([]scoredDecision, len(items))
	for i, it := range items {
		d := f.set.Replay(it.Ev, p)
		out[i] = scoredDecision{d: d, right: f.covers(d, it.Label)}
	}
	return out
}

func (f *routeFitter) summarize(ds []scoredDecision) RouteSummary {
	var right, routed, routedRight, esc int
	for _, x := range ds {
		if x.right {
			right++
		}
		if f.routed(x.d) {
			routed++
			if x.right {
				routedRight++
			}
		}
		if Escalated(x.d.Reason) {
			esc++
		}
	}
	n := len(ds)
	return RouteSummary{N: n, Routed: routed, Accuracy: ratio(right, n), Precision: ratio(routedRight, routed), PrecisionCI: Wilson(routedRight, routed),
		Coverage: ratio(routed, n), Escalation: ratio(esc, n)}
}

func (f *routeFitter) judge(items []RouteItem, p *rules.Params) RouteSummary {
	return f.summarize(f.decide(items, p))
}

// fit runs the whole fit on items: it chooses a setting (choose) and
// fits it on all of them. With a choice on held-out sources it also
// returns the chosen setting's figures on each source held out.
func (f *routeFitter) fit(items []RouteItem) (rules.Params, RouteSelection, map[string]RouteSummary) {
	sel, held := f.choose(items)
	return f.fitSetting(items, sel.Setting), sel, held
}

// fitSetting fits one setting on items.
func (f *routeFitter) fitSetting(items []RouteItem, r RouteSetting) rules.Params {
	var p rules.Params
	f.each(items, &r, func(_ RouteSetting, q *rules.Params) { p = clone(q) })
	return p
}

// choose picks the setting: among the candidates (each), the one with the
// best accuracy whose route precision reaches the target within the
// escalation cap. With Robust and two sources or more, every candidate is
// fitted without each source and judged on it, and the promises must hold
// per source (RouteFitOptions.Robust); with a prior, each is judged on
// the own rows, cross-validated (RouteFitOptions.PriorWeight); otherwise
// each is judged, pooled, on the items it was fitted on.
func (f *routeFitter) choose(items []RouteItem) (RouteSelection, map[string]RouteSummary) {
	groups := groupsOf(items)
	heldOut := f.o.Robust && len(groups) > 1
	var order []RouteSetting
	sums := map[RouteSetting][]RouteSummary{} // by group, in groups' order
	switch {
	case f.prior:
		// Each fold of own rows judged by the candidates fitted without
		// it, in parallel; the candidates come in the same order for each.
		byFold := make([][]RouteSummary, f.o.Folds)
		var wg sync.WaitGroup
		for k := range f.o.Folds {
			wg.Go(func() {
				fitOn, held := f.fold(items, k)
				f.each(fitOn, nil, func(r RouteSetting, p *rules.Params) {
					byFold[k] = append(byFold[k], f.judge(held, p))
					if k == 0 {
						order = append(order, r)
					}
				})
			})
		}
		wg.Wait()
		for c, r := range order {
			var all []RouteSummary
			for k := range byFold {
				all = append(all, byFold[k][c])
			}
			sums[r] = []RouteSummary{merge(all)}
		}
	case !heldOut:
		f.each(items, nil, func(r RouteSetting, p *rules.Params) {
			order = append(order, r)
			sums[r] = []RouteSummary{f.judge(items, p)}
		})
	default:
		// Each source held out in turn, in parallel; the candidates come in
		// the same order for each.
		bySource := make([][]RouteSummary, len(groups))
		var wg sync.WaitGroup
		for gi, g := range groups {
			wg.Go(func() {
				rest, held := partition(items, g)
				f.each(rest, nil, func(r RouteSetting, p *rules.Params) {
					bySource[gi] = append(bySource[gi], f.judge(held, p))
					if gi == 0 {
						order = append(order, r)
					}
				})
			})
		}
		wg.Wait()
		for k, r := range order {
			for gi := range groups {
				sums[r] = append(sums[r], bySource[gi][k])
			}
		}
	}
	var best RouteSelection
	var bestAcc float64
	for k, r := range order {
		c := RouteSelection{HeldOut: heldOut, Own: f.prior, Quantile: f.o.SourceQuantile, MinRouted: f.o.MinRouted, Setting: r}
		var acc float64
		if heldOut {
			c.Precision, c.Escalation, acc = f.promises(sums[r])
		} else {
			s := sums[r][0]
			c.Precision, c.Escalation, acc = s.Precision, s.Escalation, s.Accuracy
		}
		escOK := f.o.MaxEscalation <= 0 || c.Escalation <= f.o.MaxEscalation
		c.Met = escOK && c.Precision >= f.o.TargetPrecision
		if k == 0 || better(c, acc, best, bestAcc, escOK, f.o.MaxEscalation <= 0 || best.Escalation <= f.o.MaxEscalation) {
			best, bestAcc = c, acc
		}
	}
	if !heldOut {
		return best, nil
	}
	held := map[string]RouteSummary{}
	for i, g := range groups {
		held[g] = sums[best.Setting][i]
	}
	return best, held
}

// better reports whether candidate c (accuracy acc, within the escalation
// cap when escOK) beats b: one that keeps both promises beats one that
// does not, then the better accuracy; of those that do not, one within
// the cap beats one beyond it, then the better precision; beyond it, the
// less escalation.
func better(c RouteSelection, acc float64, b RouteSelection, bAcc float64, escOK, bEscOK bool) bool {
	switch {
	case c.Met != b.Met:
		return c.Met
	case c.Met:
		return acc > bAcc
	case escOK != bEscOK:
		return escOK
	case escOK:
		return c.Precision > b.Precision || c.Precision == b.Precision && acc > bAcc
	}
	return c.Escalation < b.Escalation || c.Escalation == b.Escalation && c.Precision > b.Precision
}

// promises reads a candidate's held-out figures, one per source: the
// SourceQuantile of the route precisions of the sources that routed at
// least MinRouted requests (the pooled held-out precision when none did),
// the same quantile from the top of the escalations of the sources with
// at least MinRouted items (the pooled escalation when none has), and the
// pooled held-out accuracy.
func (f *routeFitter) promises(bySource []RouteSummary) (precision, escalation, accuracy float64) {
	var prec, esc []float64
	var n, right, routed, routedRight, escalated float64
	for _, s := range bySource {
		if s.Routed >= f.o.MinRouted {
			prec = append(prec, s.Precision)
		}
		if s.N >= f.o.MinRouted {
			esc = append(esc, -s.Escalation)
		}
		n += float64(s.N)
		right += s.Accuracy * float64(s.N)
		routed += float64(s.Routed)
		routedRight += s.Precision * float64(s.Routed)
		escalated += s.Escalation * float64(s.N)
	}
	precision, escalation = quantile(prec, f.o.SourceQuantile), -quantile(esc, f.o.SourceQuantile)
	if prec == nil && routed > 0 {
		precision = routedRight / routed
	}
	if esc == nil && n > 0 {
		escalation = escalated / n
	}
	if n > 0 {
		accuracy = right / n
	}
	return precision, escalation, accuracy
}

// quantile is the lower q-quantile of v (0: its least value); 0 for none.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[int(q*float64(len(v)-1))]
}

// tier1Targets are the precisions tier-1 floors are fitted for: the
// target and above, to 0.995.
func (f *routeFitter) tier1Targets() []float64 {
	var out []float64
	for _, d := range []float64{0, 0.02, 0.04, 0.06} {
		if t := min(f.o.TargetPrecision+d, 0.995); !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func clone(p *rules.Params) rules.Params {
	q := *p
	for t := 1; t <= 2; t++ {
		q.Floors[t] = slices.Clone(p.Floors[t])
	}
	return q
}

// each fits every candidate setting on items (only, when not nil, that
// one) and calls visit with it and its parameters (visit must copy what
// it keeps). The candidates are the settings that matter together: how
// sure tier 1 must be (each route's tier-1 floor, fitted for a precision
// at or above the target: higher sends more to tier 2), how sure tier 2
// must be (its floors, fitted for a precision around the target on what
// tier 1 sends it), escalate_at, the share of tier 1's confident answers
// unfamiliar_at escalates (tier1Candidates), and mix; with Robust, floors fitted on
// the pooled items or required to hold in each of their sources too, and
// each tier's floors raised by a margin (tier 1: up to 0.2, tier 2: up to
// 0.3). The
// fallback floor is fitted for the target on what tier 1 sends on.
func (f *routeFitter) each(items []RouteItem, only *RouteSetting, visit func(RouteSetting, *rules.Params)) {
	base := f.set.Params()
	target := f.o.TargetPrecision
	everySource, margins1, margins2 := []bool{false}, []float32{0}, []float32{0}
	if f.o.Robust {
		everySource = []bool{true, false} // the stricter first: it wins a tie
	}
	if f.o.Robust || f.prior {
		// A higher tier-1 floor escalates more; a higher tier-2 floor only
		// sends more to the default. With a prior, the margins let the own
		// rows ask for more than the weighted fit gives.
		margins1, margins2 = []float32{0, 0.05, 0.1, 0.2}, []float32{0, 0.1, 0.2, 0.3}
	}
	for _, every := range everySource {
		if only != nil && every != only.EverySource {
			continue
		}
		for _, t1 := range f.tier1Targets() {
			if only != nil && t1 != only.Tier1Precision {
				continue
			}
			fitted1 := make([]float32, len(f.routes))
			for i, r := range f.routes {
				fitted1[i] = base.Floors[1][i]
				if r.Classes == nil || r.RequiresTier2 {
					continue // a route tier 1 may not take keeps its floor: it says when to escalate
				}
				fitted1[i] = f.floor(items, i, t1, every, func(it RouteItem) float32 { return it.Ev.Mass1(i) })
			}
			for _, c := range f.tier1Candidates(items, t1, every, fitted1, margins1, only) {
				m1, floors1, share := c.margin, c.floors1, c.share
				for _, esc := range f.o.EscalateAt {
					if only != nil && esc != only.EscalateAt {
						continue
					}
					p := rules.Params{EscalateAt: esc, FallbackFloor: base.FallbackFloor, UnfamiliarAt: c.unfamiliarAt}
					p.Floors[1], p.Floors[2] = floors1, base.Floors[2]
					var sent []RouteItem // what this tier 1 sends on
					for _, it := range items {
						if Escalated(f.set.Replay(it.Ev, &p).Reason) {
							sent = append(sent, it)
						}
					}
					p.FallbackFloor = f.fallback(sent, target)
					for _, mix := range f.o.Mix {
						if only != nil && mix != only.Mix {
							continue
						}
						for _, t2 := range []float64{target - 0.1, target - 0.05, target} {
							if only != nil && t2 != only.Tier2Precision {
								continue
							}
							p.Mix = mix
							fitted2 := slices.Clone(base.Floors[2])
							for i, r := range f.routes {
								if r.Classes != nil {
									fitted2[i] = f.floor(sent, i, t2, every, func(it RouteItem) float32 {
										return mix*it.Ev.Mass1(i) + (1-mix)*it.Ev.Mass2(i)
									})
								}
							}
							for _, m2 := range margins2 {
								if only != nil && m2 != only.Tier2Margin {
									continue
								}
								p.Floors[2] = slices.Clone(fitted2)
								for i, r := range f.routes {
									if r.Classes != nil {
										p.Floors[2][i] = min(p.Floors[2][i]+m2, 1)
									}
								}
								visit(RouteSetting{Tier1Precision: t1, Tier2Precision: t2, Tier1Margin: m1, Tier2Margin: m2,
									EverySource: every, EscalateAt: esc, Mix: mix, Unfamiliar: share}, &p)
							}
						}
					}
				}
			}
		}
	}
}

// floor is the least mass of route i (as mass reads it) at which the items
// it would take reach the given precision, overall and, when every, in
// every group with enough of them; 1 when no mass does.
func (f *routeFitter) floor(items []RouteItem, i int, target float64, every bool, mass func(RouteItem) float32) float32 {
	classes := f.routes[i].Classes
	type pt struct {
		m     float32
		right bool
		group int32
		w     float64
	}
	groups := map[string]int32{}
	var pts []pt
	for _, it := range items {
		if !it.Ev.Matches(i) {
			continue
		}
		g, ok := groups[it.Group]
		if !ok {
			g = int32(len(groups))
			groups[it.Group] = g
		}
		pts = append(pts, pt{mass(it), slices.Contains(classes, it.Label), g, f.weight(it)})
	}
	// Sorted once, by mass, stably: a group's points, taken in this order,
	// are sorted as well.
	slices.SortStableFunc(pts, func(a, b pt) int { return cmp.Compare(b.m, a.m) })
	scan := func(group int32) float32 {
		best, right, k := float32(1), 0.0, 0.0
		for j, p := range pts {
			if group >= 0 && p.group != group {
				continue
			}
			k += p.w
			if p.right {
				right += p.w
			}
			next := j + 1
			for group >= 0 && next < len(pts) && pts[next].group != group {
				next++
			}
			if next < len(pts) && pts[next].m == p.m {
				continue // a floor sits between distinct masses
			}
			if p.m < 0.05 {
				break // below this a route is not a decision
			}
			if right/k >= target {
				best = p.m
			}
		}
		return best
	}
	fl := scan(-1)
	if every {
		counts := make([]int, len(groups))
		for _, p := range pts {
			if p.m >= fl {
				counts[p.group]++
			}
		}
		for name, g := range groups {
			if name != "" && counts[g] >= f.o.MinGroup {
				fl = max(fl, scan(g))
			}
		}
	}
	return fl
}

// fallback is the least mass at which tier 1's best route, among the
// requests sent to tier 2, is right often enough to take when tier 2
// cannot answer; never below 0.5.
func (f *routeFitter) fallback(sent []RouteItem, target float64) float32 {
	type pt struct {
		m     float32
		right bool
		w     float64
	}
	var pts []pt
	for _, it := range sent {
		best, bm := -1, float32(0)
		for i, r := range f.routes {
			if r.Classes != nil && !r.RequiresTier2 && it.Ev.Matches(i) && it.Ev.Mass1(i) > bm {
				best, bm = i, it.Ev.Mass1(i)
			}
		}
		if best >= 0 {
			pts = append(pts, pt{bm, slices.Contains(f.routes[best].Classes, it.Label), f.weight(it)})
		}
	}
	sort.SliceStable(pts, func(a, b int) bool { return pts[a].m > pts[b].m })
	fl, right, n := float32(1), 0.0, 0.0
	for k, x := range pts {
		n += x.w
		if x.right {
			right += x.w
		}
		if k+1 < len(pts) && pts[k+1].m == x.m {
			continue
		}
		if right/n >= target {
			fl = x.m
		}
	}
	return max(fl, 0.5)
}
