package evaluation

import (
	"slices"

	"github.com/triagegw/triage/rules"
)

// DefaultUnfamiliarShares are the shares of tier 1's confident answers
// FitRoutes tries escalating by their distance from their top class's
// centroid (tier2.unfamiliar_at), off included: on dev's real user posts,
// taking half of tier 1's confident errors away escalates about a sixth
// of its confident answers (bench/tier1-confidence.md).
var DefaultUnfamiliarShares = []float32{0, 0.05, 0.1, 0.2, 0.3}

// hasDistances reports whether tier 1 measured a distance from a
// centroid for any item: its heads have centroids.
func hasDistances(items []RouteItem) bool {
	for _, it := range items {
		if it.Ev.Distance() > 0 {
			return true
		}
	}
	return false
}

// tier1Candidate is one candidate of how sure tier 1 must be: the share of
// its confident answers unfamiliar_at escalates and the distance that
// share stands for on the data (0: off), and its floors, raised by a
// margin.
type tier1Candidate struct {
	share, unfamiliarAt float32
	margin              float32
	floors1             []float32
}

// tier1Candidates are the tier-1 candidates (only, when not nil, that
// one) for floors fitted1 (fitted on items for precision t1, in every
// source when every): each RouteFitOptions.Unfamiliar share with each
// margin, in that order, the same for any items. A share becomes a
// distance on the items tier 1 answers with confidence under fitted1
// (unfamiliarAt), and the floors are fitted again without the items at
// that distance or further, which tier 1 no longer takes: what tier 1
// escalates as unfamiliar does not hold its floors up.
func (f *routeFitter) tier1Candidates(items []RouteItem, t1 float64, every bool, fitted1 []float32, margins1 []float32, only *RouteSetting) []tier1Candidate {
	var out []tier1Candidate
	for _, share := range f.o.Unfamiliar {
		if only != nil && share != only.Unfamiliar {
			continue
		}
		at, floors := float32(0), fitted1
		if share > 0 {
			at = f.unfamiliarAt(items, fitted1, share)
		}
		if at > 0 {
			near := make([]RouteItem, 0, len(items))
			for _, it := range items {
				if it.Ev.Distance() < at {
					near = append(near, it)
				}
			}
			floors = slices.Clone(fitted1)
			for i, r := range f.routes {
				if r.Classes != nil && !r.RequiresTier2 {
					floors[i] = f.floor(near, i, t1, every, func(it RouteItem) float32 { return it.Ev.Mass1(i) })
				}
			}
		}
		for _, m1 := range margins1 {
			if only != nil && m1 != only.Tier1Margin {
				continue
			}
			floors1 := floors
			if m1 > 0 {
				floors1 = slices.Clone(floors)
				for i, r := range f.routes {
					if r.Classes != nil && !r.RequiresTier2 {
						floors1[i] = min(floors1[i]+m1, 1)
					}
				}
			}
			out = append(out, tier1Candidate{share: share, unfamiliarAt: at, margin: m1, floors1: floors1})
		}
	}
	return out
}

// unfamiliarAt is the distance from which share of the items tier 1
// answers with confidence under floors1 (a route clears its floor) lie
// from their top class's centroid: the least distance of the furthest
// share of them; 0 (off) when tier 1 is confident of nothing or the
// distance is 0 (no centroids).
func (f *routeFitter) unfamiliarAt(items []RouteItem, floors1 []float32, share float32) float32 {
	p := rules.Params{EscalateAt: 1}
	p.Floors[1], p.Floors[2] = floors1, floors1
	var dist []float32
	for _, it := range items {
		if f.set.Replay(it.Ev, &p).Reason == rules.ReasonTier1Confident {
			dist = append(dist, it.Ev.Distance())
		}
	}
	if len(dist) == 0 {
		return 0
	}
	slices.Sort(dist)
	slices.Reverse(dist)
	k := int(share*float32(len(dist))+0.5) - 1 // the furthest k+1 escalate
	return max(dist[max(0, min(k, len(dist)-1))], 0)
}
