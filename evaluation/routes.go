package evaluation

import (
	"context"
	"hash/fnv"
	"slices"
	"sort"

	"github.com/triagegw/triage/rules"
)

// RouteItem is one labelled request for fitting a rule set's parameters:
// what both tiers said of it (rules.Set.Gather), its label, its group (its
// source) and a key for the row folds (its text).
type RouteItem struct {
	Ev    *rules.Evidence
	Label string
	Group string
	Key   string
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
	// TargetPrecision is the precision each route must reach at each tier:
	// of the requests it takes, the share whose label it covers. Default
	// 0.9.
	TargetPrecision float64
	// Robust also requires it in every group on its own (with at least
	// MinGroup requests taken there).
	Robust   bool
	MinGroup int // default 20
	// MaxEscalation, when above 0, caps the share of requests sent to tier
	// 2; the settings that escalate more are not chosen.
	MaxEscalation float64
	// Folds cross-validates over rows. Default 5.
	Folds int
	// EscalateAt and Mix are the candidates tried; defaults
	// {0.05, 0.1, 0.15, 0.2, 0.3} and {0, 0.25, 0.5}.
	EscalateAt, Mix []float32
}

// RouteSummary is what a rule set's decisions did on some items.
type RouteSummary struct {
	N int `json:"n"`
	// Accuracy: decisions right (the route covers the label, or the default
	// pool took a label no route covers), over all items.
	Accuracy float64 `json:"accuracy"`
	// Precision: right, of the items a class route took.
	Precision float64 `json:"route_precision"`
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

// RouteFitReport is the outcome of FitRoutes.
type RouteFitReport struct {
	Target float64         `json:"target_precision"`
	Params rules.Params    `json:"-"`
	Routes []RouteFloorFit `json:"routes"`
	// EscalateAt, FallbackFloor and Mix are the fitted settings.
	EscalateAt    float32 `json:"escalate_at"`
	FallbackFloor float32 `json:"fallback_floor"`
	Mix           float32 `json:"mix"`
	// Before is the rule set as it was, Fitted with the fitted
	// parameters, both on all the data; CV judges parameters fitted without
	// each fold on it, ByGroup parameters fitted without each group.
	Before  RouteSummary            `json:"before"`
	Fitted  RouteSummary            `json:"fitted"`
	CV      RouteSummary            `json:"cv"`
	ByGroup map[string]RouteSummary `json:"by_group,omitempty"`
}

// FitRoutes fits a rule set's parameters to labelled evidence, at the
// level the rules decide: for each class route, the least mass at which
// each tier's verdict takes it while its precision holds (the most
// coverage that keeps the target), the routed mass from which tier 1
// escalates, tier 2's mix with tier 1, and the fallback floor when tier 2
// cannot answer; and judges them on data that did not fit them. Every
// figure comes from replaying the rule set's own decision (rules.Set.Replay).
func FitRoutes(set *rules.Set, items []RouteItem, o RouteFitOptions) RouteFitReport {
	if o.TargetPrecision == 0 {
		o.TargetPrecision = 0.9
	}
	if o.MinGroup == 0 {
		o.MinGroup = 20
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
	f := routeFitter{set: set, routes: set.Routes(), o: o}
	rep := RouteFitReport{Target: o.TargetPrecision, ByGroup: map[string]RouteSummary{}}
	before := set.Params()
	rep.Before = f.judge(items, &before)
	rep.Params = f.fit(items)
	rep.Fitted = f.judge(items, &rep.Params)
	rep.EscalateAt, rep.FallbackFloor, rep.Mix = rep.Params.EscalateAt, rep.Params.FallbackFloor, rep.Params.Mix
	for i, r := range f.routes {
		if r.Classes == nil {
			continue
		}
		rf := RouteFloorFit{Name: r.Name, Classes: r.Classes, Floor1: rep.Params.Floors[1][i], Floor2: rep.Params.Floors[2][i]}
		var right1, right2 int
		for _, it := range items {
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
	// Cross-validation over rows, and leaving each group out.
	var cv []scoredDecision
	for k := range o.Folds {
		var fitOn, held []RouteItem
		for i, it := range items {
			if rowFold(it.Key, i, o.Folds) == k {
				held = append(held, it)
			} else {
				fitOn = append(fitOn, it)
			}
		}
		p := f.fit(fitOn)
		cv = append(cv, f.decide(held, &p)...)
	}
	rep.CV = f.summarize(cv)
	groups := map[string]bool{}
	for _, it := range items {
		if it.Group != "" {
			groups[it.Group] = true
		}
	}
	if len(groups) > 1 {
		for g := range groups {
			var rest, held []RouteItem
			for _, it := range items {
				if it.Group == g {
					held = append(held, it)
				} else {
					rest = append(rest, it)
				}
			}
			p := f.fit(rest)
			rep.ByGroup[g] = f.judge(held, &p)
		}
	}
	return rep
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
	return RouteSummary{N: n, Accuracy: ratio(right, n), Precision: ratio(routedRight, routed), Coverage: ratio(routed, n), Escalation: ratio(esc, n)}
}

func (f *routeFitter) judge(items []RouteItem, p *rules.Params) RouteSummary {
	return f.summarize(f.decide(items, p))
}

// fit chooses the parameters for items. It searches the settings that
// matter together: how sure tier 1 must be (each route's tier-1 floor,
// fitted for a precision at or above the target: higher sends more to
// tier 2), how sure tier 2 must be (its floors, fitted for a precision
// around the target on what tier 1 sends it), escalate_at and mix; and
// keeps the one with the best accuracy whose overall route precision
// reaches the target within the escalation budget.
func (f *routeFitter) fit(items []RouteItem) rules.Params {
	base := f.set.Params()
	target := f.o.TargetPrecision
	var best rules.Params
	var bestSum RouteSummary
	found := false
	for _, t1 := range []float64{target, target + 0.02, target + 0.04, target + 0.06} {
		t1 = min(t1, 0.995)
		floors1 := make([]float32, len(f.routes))
		for i, r := range f.routes {
			floors1[i] = base.Floors[1][i]
			if r.Classes == nil || r.RequiresTier2 {
				continue // a route tier 1 may not take keeps its floor: it says when to escalate
			}
			floors1[i] = f.floor(items, i, t1, func(it RouteItem) float32 { return it.Ev.Mass1(i) })
		}
		for _, esc := range f.o.EscalateAt {
			p := rules.Params{EscalateAt: esc, FallbackFloor: base.FallbackFloor}
			p.Floors[1], p.Floors[2] = floors1, base.Floors[2]
			var sent []RouteItem // what this tier 1 sends on
			for _, it := range items {
				if Escalated(f.set.Replay(it.Ev, &p).Reason) {
					sent = append(sent, it)
				}
			}
			for _, mix := range f.o.Mix {
				for _, t2 := range []float64{target - 0.1, target - 0.05, target} {
					p.Mix = mix
					p.Floors[2] = slices.Clone(base.Floors[2])
					for i, r := range f.routes {
						if r.Classes != nil {
							p.Floors[2][i] = f.floor(sent, i, t2, func(it RouteItem) float32 {
								return mix*it.Ev.Mass1(i) + (1-mix)*it.Ev.Mass2(i)
							})
						}
					}
					p.FallbackFloor = f.fallback(sent, target)
					sum := f.judge(items, &p)
					if f.o.MaxEscalation > 0 && sum.Escalation > f.o.MaxEscalation {
						continue
					}
					okP, bestOK := sum.Precision >= target, bestSum.Precision >= target
					if !found || okP && (!bestOK || sum.Accuracy > bestSum.Accuracy) || !okP && !bestOK && sum.Precision > bestSum.Precision {
						best, bestSum, found = p, sum, true
						best.Floors[1] = slices.Clone(p.Floors[1])
						best.Floors[2] = slices.Clone(p.Floors[2])
					}
				}
			}
		}
	}
	if !found { // nothing fits the escalation budget: the least escalating
		g := *f
		g.o.MaxEscalation = 0
		g.o.EscalateAt = []float32{slices.Max(f.o.EscalateAt)}
		return g.fit(items)
	}
	return best
}

// floor is the least mass of route i (as mass reads it) at which the items
// it would take reach the given precision, overall and, when robust, in
// every group with enough of them; 1 when no mass does.
func (f *routeFitter) floor(items []RouteItem, i int, target float64, mass func(RouteItem) float32) float32 {
	classes := f.routes[i].Classes
	type pt struct {
		m     float32
		right bool
		group string
	}
	var pts []pt
	for _, it := range items {
		if !it.Ev.Matches(i) {
			continue
		}
		pts = append(pts, pt{mass(it), slices.Contains(classes, it.Label), it.Group})
	}
	scan := func(group string) float32 {
		var sel []pt
		for _, p := range pts {
			if group == "" || p.group == group {
				sel = append(sel, p)
			}
		}
		sort.SliceStable(sel, func(a, b int) bool { return sel[a].m > sel[b].m })
		best, right := float32(1), 0
		for k, p := range sel {
			if p.right {
				right++
			}
			if k+1 < len(sel) && sel[k+1].m == p.m {
				continue // a floor sits between distinct masses
			}
			if p.m < 0.05 {
				break // below this a route is not a decision
			}
			if float64(right)/float64(k+1) >= target {
				best = p.m
			}
		}
		return best
	}
	fl := scan("")
	if f.o.Robust {
		counts := map[string]int{}
		for _, p := range pts {
			if p.m >= fl && p.group != "" {
				counts[p.group]++
			}
		}
		for g, n := range counts {
			if n >= f.o.MinGroup {
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
			pts = append(pts, pt{bm, slices.Contains(f.routes[best].Classes, it.Label)})
		}
	}
	sort.SliceStable(pts, func(a, b int) bool { return pts[a].m > pts[b].m })
	fl, right := float32(1), 0
	for k, x := range pts {
		if x.right {
			right++
		}
		if k+1 < len(pts) && pts[k+1].m == x.m {
			continue
		}
		if float64(right)/float64(k+1) >= target {
			fl = x.m
		}
	}
	return max(fl, 0.5)
}
