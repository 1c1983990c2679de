package rules

import (
	"fmt"
	"strconv"

	yaml "go.yaml.in/yaml/v3"

	"github.com/triagegw/triage/classifier"
)

// Tier 1 is often confidently wrong on text unlike its training data. With
// centroids in the heads (classifier.Centroids), tier 1 reports how far a
// text lies from its top class's training texts (Result.Distance), and
// tier2.unfamiliar_at sets the distance from which its answer is not
// trusted however sure it is: the request goes on as one below its
// route's floor does (to tier 2, reason unfamiliar). This file holds the
// setting; the policy (decide.go) reads it in its step 2.

// ReasonUnfamiliar: tier 1's answer cleared its route's floor, but the
// text lies at least tier2.unfamiliar_at from its top class's centroid.
const ReasonUnfamiliar = "unfamiliar"

// MaxDistance is the largest distance from a centroid: 1 − a cosine.
const MaxDistance = 2

// unfamiliarAt parses tier2.unfamiliar_at: a distance from 0 (off) to 2.
func (p *parser) unfamiliarAt(n *yaml.Node, f *File) {
	f.pos["tier2.unfamiliar_at"] = pos(n)
	var v float64
	if p.scalar(n, "a distance between 0 and 2") {
		var err error
		if v, err = strconv.ParseFloat(n.Value, 64); err != nil || v < 0 || v > MaxDistance {
			p.bad(n, fmt.Sprintf("want a distance between 0 (off) and 2, got %q", n.Value))
			v = 0
		}
	}
	f.Tier2.UnfamiliarAt = &v
}

// compileUnfamiliar resolves tier2.unfamiliar_at (the file's, else the
// artifact's fitted one, else off) and checks that tier 1 can measure it.
func (s *Set) compileUnfamiliar(f *File, h *classifier.Heads, bad func(Pos, string, ...any)) float32 {
	var d float32
	switch {
	case f.Tier2.UnfamiliarAt != nil:
		d = float32(*f.Tier2.UnfamiliarAt)
	case h.Routing != nil && h.Routing.UnfamiliarAt != nil:
		d = *h.Routing.UnfamiliarAt
	}
	if d > 0 && (h.Tier1 == nil || h.Tier1.Centroids == nil) {
		bad(f.pos["tier2.unfamiliar_at"], "tier2.unfamiliar_at: tier 1 of the heads in %s has no class centroids to measure a distance from (triage train --add-centroids adds them)", h.Dir)
		return 0
	}
	return d
}

// unfamiliar reports whether tier 1's answer in ev is too far from its
// top class's centroid to be trusted under p.
func (p *Params) unfamiliar(ev *evidence) bool {
	return p.UnfamiliarAt > 0 && ev.dist1 >= p.UnfamiliarAt
}

// Distance is tier 1's distance from its top class's centroid in the
// evidence (0 when tier 1 did not run or has no centroids).
func (e *Evidence) Distance() float32 { return e.ev.dist1 }
