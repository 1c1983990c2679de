package rules

import (
	"context"
	"errors"
	"time"

	"github.com/triagegw/triage/classifier"
)

// A decision has two parts. Gathering asks the tiers and measures every
// class route's mass in their verdicts (the evidence); the policy then
// reads only the evidence and the parameters (the routes' floors,
// escalate_at, fallback_floor, mix). Decide gathers what it needs as it
// goes, asking tier 2 only when the policy escalates; calibration gathers
// everything once (Gather) and replays the same policy under candidate
// parameters (Replay). There is one policy, and this file holds it.

// Params are the numbers the policy decides with.
type Params struct {
	// Floors holds each class route's floor at tiers 1 and 2 (index 1, 2),
	// by route index (Routes), before min_score raises it.
	Floors [3][]float32
	// EscalateAt is tier 1's routed mass from which an unsure request goes
	// to tier 2; FallbackFloor the mass at which tier 1's best route is
	// taken when tier 2 cannot answer; Mix the weight of tier 1's masses in
	// tier 2's decision.
	EscalateAt, FallbackFloor, Mix float32
	// UnfamiliarAt is tier 1's distance from its top class's centroid at
	// or above which its answer escalates however sure it is (0: off).
	UnfamiliarAt float32
}

// Params are the parameters in effect (a copy: change it freely).
func (s *Set) Params() Params {
	p := s.params
	for t := 1; t <= 2; t++ {
		p.Floors[t] = append([]float32(nil), s.params.Floors[t]...)
	}
	return p
}

// RouteInfo describes a route, by its index in Params.Floors.
type RouteInfo struct {
	Name    string
	Classes []string // nil for a route without class conditions
	Pool    string
	Block   bool
	// RequiresTier2: one of its classes is never trusted to tier 1 alone.
	RequiresTier2 bool
}

// Routes describes the set's routes, in order.
func (s *Set) Routes() []RouteInfo {
	out := make([]RouteInfo, len(s.routes))
	for i, r := range s.routes {
		out[i] = RouteInfo{Name: r.name, Pool: r.pool, Block: r.block, RequiresTier2: r.requiresTier2}
		for c, in := range r.classes {
			if in {
				out[i].Classes = append(out[i].Classes, s.classes[c])
			}
		}
	}
	return out
}

// evidence is what the policy reads of one request.
type evidence struct {
	match   []bool    // by route: its conditions other than classes hold
	m1, m2  []float32 // by route: the mass of its classes at tier 1, tier 2
	routed1 float32   // tier 1's mass of the classes the matching class routes take
	dist1   float32   // tier 1's distance from its top class's centroid (0: none)
	// allClass: every class route's conditions other than classes hold.
	allClass bool
	first    int // the first matching route, if it has no class condition; -1 otherwise
	after    int // the first matching route without class conditions after a class route; -1: none
	// top1, top2 are each tier's top class and score; class1, class2 each
	// route's most likely class and its score at that tier, when kept
	// (Gather keeps them; a live decision finds the taken route's from
	// res1, res2, the tiers' verdicts).
	top1, top2     classifier.Scored
	class1, class2 []classifier.Scored
	res1, res2     *classifier.Result
	tier2          int    // 0: not asked, 1: answered, 2: failed
	tier2Reason    string // why it failed: tier2_timeout, tier2_shed, tier2_unavailable, tier2_error, client_gone
	tier2Available bool   // the set can escalate at all
}

// policy decides on the evidence ev under p: the whole cascade but for
// asking the tiers, which ask (when not nil) does for tier 2 when it is
// needed, filling ev.
//
//  1. A route without class conditions that comes before any class route
//     the request could take settles it (rule).
//  2. The first class route (in order, its other conditions holding) whose
//     tier-1 mass clears its tier-1 floor takes the request
//     (tier1_confident), unless one of its classes requires tier 2, or
//     tier 1's text lies unfamiliar_at or further from its top class's
//     centroid: then no route is taken at tier 1, and the request goes
//     on as in 4 and 5 (unfamiliar).
//  3. No route did: when the matching class routes' classes carry less
//     than escalate_at at tier 1, tier 1 is sure no route applies: the
//     default pool (or a class-free route after the class routes) takes it
//     (default).
//  4. Otherwise tier 1 is unsure of the route, and tier 2 decides, its
//     masses mixed with tier 1's by mix: the first class route whose mass
//     clears its tier-2 floor, else the default (below_floor, or
//     class_requires_tier2). With tier 2 off, the default.
//  5. Tier 2 past its budget, failing or unavailable: tier 1's best route
//     if its mass clears fallback_floor, else the default, with the reason.
func (s *Set) policy(p *Params, ev *evidence, ask func()) Decision {
	if ev.first >= 0 {
		r := &s.routes[ev.first]
		return Decision{Pool: r.pool, Fallback: r.fallback, Route: r.name, Reason: ReasonRule, Block: r.block}
	}
	needsTier2 := false // a route only tier 2 may take is within reach
	unfamiliar := false // a route cleared its floor, but the text is too unlike tier 1's training data
	best, bestMass := -1, float32(0)
	for i := range s.routes {
		r := &s.routes[i]
		if !ev.match[i] || r.classes == nil {
			continue
		}
		m, f := ev.m1[i], max(p.Floors[1][i], r.minScore)
		if r.requiresTier2 {
			needsTier2 = needsTier2 || m >= f
			continue
		}
		if m > bestMass {
			best, bestMass = i, m
		}
		if m >= f && !needsTier2 && !unfamiliar {
			if unfamiliar = p.unfamiliar(ev); !unfamiliar {
				return s.take(i, ev.top(1, i, s), 1, ReasonTier1Confident, m, f)
			}
		}
	}
	def := Decision{Pool: s.def, Class: ev.top1.Class, Score: ev.top1.Score, Tier: 1, Reason: ReasonDefault}
	if ev.after >= 0 {
		r := &s.routes[ev.after]
		def.Pool, def.Fallback, def.Route, def.Reason, def.Block = r.pool, r.fallback, r.name, ReasonRule, r.block
	}
	if !needsTier2 && !unfamiliar && ev.routed1 < p.EscalateAt {
		return def // tier 1 is sure no route applies
	}
	def.Reason = ReasonBelowFloor
	if needsTier2 {
		def.Reason = ReasonClassRequiresTier2
	} else if unfamiliar {
		def.Reason = ReasonUnfamiliar
	}
	if !ev.tier2Available {
		return def
	}
	if ev.tier2 == 0 && ask != nil {
		ask()
	}
	if ev.tier2 != 1 {
		def.Reason = ev.tier2Reason
		if best >= 0 {
			if f := max(p.FallbackFloor, s.routes[best].minScore); bestMass >= f {
				return s.take(best, ev.top(1, best, s), 1, def.Reason, bestMass, f)
			}
		}
		return def
	}
	for i := range s.routes {
		r := &s.routes[i]
		if !ev.match[i] || r.classes == nil {
			continue
		}
		m := ev.m2[i]
		if p.Mix > 0 {
			m = p.Mix*ev.m1[i] + (1-p.Mix)*m
		}
		if f := max(p.Floors[2][i], r.minScore); m >= f {
			return s.take(i, ev.top(2, i, s), 2, def.Reason, m, f)
		}
	}
	def.Class, def.Score, def.Tier = ev.top2.Class, ev.top2.Score, 2
	return def
}

// top is route i's most likely class at a tier.
func (ev *evidence) top(tier, i int, s *Set) classifier.Scored {
	cls, res := ev.class1, ev.res1
	if tier == 2 {
		cls, res = ev.class2, ev.res2
	}
	if res == nil {
		return cls[i]
	}
	c, sc := s.routeTop(&s.routes[i], res, tier)
	return classifier.Scored{Class: c, Score: sc}
}

func (s *Set) take(i int, top classifier.Scored, tier int, reason string, mass, floor float32) Decision {
	r := &s.routes[i]
	return Decision{Pool: r.pool, Fallback: r.fallback, Route: r.name, Class: top.Class, Score: top.Score, Tier: tier,
		Reason: reason, Mass: mass, Floor: floor, Block: r.block}
}

// RouteTrace is one class route's mass and floor at each tier, for `triage
// route`: Mass2 is the mass tier 2 decided on, mixed with tier 1's by the
// set's mix.
type RouteTrace struct {
	Name   string  `json:"name"`
	Mass1  float32 `json:"mass_tier1"`
	Floor1 float32 `json:"floor_tier1"`
	Mass2  float32 `json:"mass_tier2,omitempty"`
	Floor2 float32 `json:"floor_tier2"`
}

// match fills ev.match, ev.first and ev.after for sig.
func (s *Set) match(sig *Signals, ev *evidence) {
	tokens := -1
	ev.first, ev.after = -1, -1
	ev.allClass = true
	classRoute := false
	for i := range s.routes {
		r := &s.routes[i]
		ev.match[i] = r.always || s.matches(r, sig, &tokens)
		if !ev.match[i] {
			ev.allClass = ev.allClass && r.classes == nil
			continue
		}
		switch {
		case r.classes != nil:
			classRoute = true
		case !classRoute && ev.first < 0 && ev.after < 0:
			ev.first = i
		case classRoute && ev.after < 0:
			ev.after = i
		}
	}
}

// measure fills the class routes' masses at a tier from its verdict
// (and, keep, their most likely classes).
func (s *Set) measure(tier int, res *classifier.Result, ev *evidence, taken []bool, keep bool) {
	m, cls := ev.m1, ev.class1
	if tier == 2 {
		m, cls = ev.m2, ev.class2
		ev.top2, ev.res2 = classifier.Scored{Class: res.Class, Score: res.Score}, res
	} else {
		ev.top1, ev.res1 = classifier.Scored{Class: res.Class, Score: res.Score}, res
	}
	for i := range s.routes {
		r := &s.routes[i]
		m[i] = 0
		if keep {
			cls[i] = classifier.Scored{}
		}
		if !ev.match[i] || r.classes == nil {
			continue
		}
		m[i] = s.mass(r, res, tier)
		if keep {
			cls[i].Class, cls[i].Score = s.routeTop(r, res, tier)
		}
	}
	if tier == 1 {
		ev.routed1 = s.routedMass(ev, res, taken)
		ev.dist1 = res.Distance
	}
}

// routedMass is tier 1's mass of the classes the matching class routes
// take, each class once, summed in head order.
func (s *Set) routedMass(ev *evidence, res *classifier.Result, taken []bool) float32 {
	var m float32
	if !s.full(res, 1) {
		clear(taken)
		for i := range s.routes {
			if r := &s.routes[i]; ev.match[i] && r.classes != nil {
				for c, in := range r.classes {
					taken[c] = taken[c] || in
				}
			}
		}
		for _, sc := range res.Top {
			if j, ok := s.index[sc.Class]; ok && taken[j] {
				m += sc.Score
			}
		}
		return m
	}
	if ev.allClass { // the usual case: every class route's conditions hold
		for _, p := range s.union1 {
			m += res.Probs[p]
		}
		return m
	}
	clear(taken)
	for i := range s.routes {
		if ev.match[i] {
			for _, p := range s.routes[i].heads[1] {
				taken[p] = true
			}
		}
	}
	for p, v := range res.Probs {
		if taken[p] {
			m += v
		}
	}
	return m
}

// full reports whether a tier's verdict has the probability of every
// class of its head (a stand-in in tests may give only its top classes).
func (s *Set) full(res *classifier.Result, tier int) bool {
	return len(res.Probs) > 0 && len(res.Probs) == len(s.headIdx[tier])
}

// mass is the route's mass in a tier's verdict: the probability of the
// classes it takes. A tier without full probabilities (a stand-in in
// tests) counts its top classes.
func (s *Set) mass(r *route, res *classifier.Result, tier int) float32 {
	var m float32
	if s.full(res, tier) {
		for _, p := range r.heads[tier] {
			m += res.Probs[p]
		}
		return m
	}
	for _, sc := range res.Top {
		if j, ok := s.index[sc.Class]; ok && r.classes[j] {
			m += sc.Score
		}
	}
	return m
}

// routeTop is the route's most likely class in a tier's verdict, shown as
// the decision's class.
func (s *Set) routeTop(r *route, res *classifier.Result, tier int) (string, float32) {
	best, score := "", float32(-1)
	if s.full(res, tier) {
		for _, p := range r.heads[tier] {
			if v := res.Probs[p]; v > score {
				best, score = s.classes[s.headIdx[tier][p]], v
			}
		}
		return best, score
	}
	for _, sc := range res.Top {
		if j, ok := s.index[sc.Class]; ok && r.classes[j] && sc.Score > score {
			best, score = sc.Class, sc.Score
		}
	}
	if best == "" {
		return res.Class, res.Score
	}
	return best, score
}

// cascade decides on a request that named an alias (see policy), asking
// tier 2 only when the policy needs it.
func (s *Set) cascade(ctx context.Context, sig *Signals, w *work, tr *Trace) Decision {
	ev := &w.ev
	ev.tier2, ev.tier2Reason, ev.tier2Available = 0, "", s.tier2On
	ev.res1, ev.res2 = nil, nil
	s.match(sig, ev)
	if ev.first < 0 {
		if tr != nil {
			tr.Text = sig.Text
		}
		var t0 time.Time
		if w.tm != nil {
			t0 = time.Now()
		}
		_ = s.tier1.Classify(ctx, sig.Text, &w.r1) // tier 1 does not fail
		s.measure(1, &w.r1, ev, w.taken, false)
		if w.tm != nil {
			w.tm.Tier1Start, w.tm.Tier1 = t0, time.Since(t0)
		}
		if tr != nil {
			r1 := w.r1
			r1.Top, r1.Probs = append([]classifier.Scored(nil), w.r1.Top...), nil
			tr.Tier1 = &r1
		}
	}
	d := s.policy(&s.params, ev, func() { s.askTier2(ctx, sig, w, tr, s.tier2Budget) })
	if tr != nil {
		for i, r := range s.routes {
			if ev.match[i] && r.classes != nil && ev.first < 0 {
				rt := RouteTrace{Name: r.name, Mass1: ev.m1[i], Floor1: r.floor[1], Floor2: r.floor[2]}
				if ev.tier2 == 1 {
					rt.Mass2 = ev.m2[i]
					if mix := s.params.Mix; mix > 0 {
						rt.Mass2 = mix*ev.m1[i] + (1-mix)*ev.m2[i]
					}
				}
				tr.Routes = append(tr.Routes, rt)
			}
		}
	}
	return d
}

// askTier2 runs tier 2 within the budget (which covers the load, the first
// time, and the classification) and fills the evidence with its verdict
// or why there is none.
func (s *Set) askTier2(ctx context.Context, sig *Signals, w *work, tr *Trace, budget time.Duration) {
	ev := &w.ev
	if w.tm != nil {
		t0 := time.Now()
		defer func() { w.tm.Tier2Start, w.tm.Tier2 = t0, time.Since(t0) }()
	}
	err := s.tier2.ClassifyFor(ctx, budget, sig.Principal, sig.Text, &w.r2)
	if err != nil {
		ev.tier2 = 2
		if tr != nil {
			tr.Tier2Error = err.Error()
		}
		var le *classifier.LoadError
		switch {
		case errors.Is(err, classifier.ErrShed):
			ev.tier2Reason = ReasonTier2Shed
		case errors.Is(err, classifier.ErrEncoderDown):
			ev.tier2Reason = ReasonTier2EncoderDown
		case errors.Is(ctx.Err(), context.Canceled):
			ev.tier2Reason = ReasonClientGone
		case errors.Is(err, context.DeadlineExceeded):
			ev.tier2Reason = ReasonTier2Timeout
		case errors.Is(err, classifier.ErrUnavailable) || errors.As(err, &le):
			ev.tier2Reason = ReasonTier2Unavailable
		default:
			ev.tier2Reason = ReasonTier2Error
		}
		return
	}
	ev.tier2 = 1
	s.measure(2, &w.r2, ev, w.taken, ev.res1 == nil)
	if tr != nil {
		r2 := w.r2
		r2.Top, r2.Probs = append([]classifier.Scored(nil), w.r2.Top...), nil
		tr.Tier2 = &r2
	}
}

// Evidence is one request's verdicts as the decision reads them, tier 2
// included whatever tier 1 said: what calibration replays the decision on
// under candidate parameters.
type Evidence struct {
	ev evidence
	tm Timing
}

// Gather asks both tiers about a request (tier 2 without a budget) and
// keeps what the decision reads of their verdicts, and how long each tier
// took. A tier 2 that fails leaves the evidence of a request whose tier 2
// failed.
func (s *Set) Gather(ctx context.Context, sig Signals) *Evidence {
	w := s.scratch.Get().(*work)
	defer s.scratch.Put(w)
	out := &Evidence{}
	w.tm = &out.tm
	defer func() { w.tm = nil }()
	ev := &w.ev
	ev.tier2, ev.tier2Reason, ev.tier2Available = 0, "", s.tier2On
	ev.res1, ev.res2 = nil, nil
	s.match(&sig, ev)
	if ev.first < 0 {
		t0 := time.Now()
		_ = s.tier1.Classify(ctx, sig.Text, &w.r1)
		s.measure(1, &w.r1, ev, w.taken, true)
		out.tm.Tier1Start, out.tm.Tier1 = t0, time.Since(t0)
		ev.res1 = nil // kept: the evidence outlives the verdicts
		if s.tier2On {
			s.askTier2(ctx, &sig, w, nil, 0)
			ev.res2 = nil
		}
	}
	out.ev = *ev
	e := &out.ev
	e.match = append([]bool(nil), ev.match...)
	e.m1, e.m2 = append([]float32(nil), ev.m1...), append([]float32(nil), ev.m2...)
	e.class1, e.class2 = append([]classifier.Scored(nil), ev.class1...), append([]classifier.Scored(nil), ev.class2...)
	return out
}

// Replay decides on gathered evidence under p, with the policy Decide
// applies (sessions and pins aside: they are the caller's, not the
// rules').
func (s *Set) Replay(e *Evidence, p *Params) Decision {
	return s.policy(p, &e.ev, nil)
}

// Top is a tier's top class and score in the evidence, whatever the
// decision made of it; ok is false when that tier gave no verdict (a route
// without class conditions settled the request, tier 2 is off, or it
// failed: Tier2Failed says why).
func (e *Evidence) Top(tier int) (top classifier.Scored, ok bool) {
	if e.ev.first >= 0 {
		return classifier.Scored{}, false
	}
	if tier == 2 {
		return e.ev.top2, e.ev.tier2 == 1
	}
	return e.ev.top1, true
}

// Tier2Failed is why tier 2 gave no verdict when it was asked and failed
// (ReasonTier2Error, ReasonTier2Unavailable, ...); empty otherwise.
func (e *Evidence) Tier2Failed() string {
	if e.ev.tier2 != 2 {
		return ""
	}
	return e.ev.tier2Reason
}

// Timing is when each tier ran while the evidence was gathered: a
// decision that stopped at tier 1 took Tier1 of it, one that asked tier 2
// both.
func (e *Evidence) Timing() Timing { return e.tm }

// Mass1 and Mass2 are route i's mass at each tier in the evidence (0 when
// its conditions do not hold, or the tier did not answer).
func (e *Evidence) Mass1(i int) float32 { return e.ev.m1[i] }
func (e *Evidence) Mass2(i int) float32 { return e.ev.m2[i] }

// Matches reports whether route i's conditions other than classes held.
func (e *Evidence) Matches(i int) bool { return e.ev.match[i] }
