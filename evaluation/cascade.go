package evaluation

import "github.com/triagegw/triage/rules"

// Cascade combines a tier-1 and a tier-2 run over the same items into the
// cascade's outcomes: tier 1's verdict where its score reaches its class's
// tier-1 floor (floors1),
// tier 2's otherwise. A class without a floor of its own takes def, as a
// rules file's default floor does (0.5 unless the file says otherwise).
// An escalated item's latency is both tiers'. Both runs must be over the
// same items in the same order.
func Cascade(t1, t2 []Outcome, floors1 map[string]float32, def float32) []Outcome {
	out := make([]Outcome, len(t1))
	for i := range t1 {
		a := t1[i]
		f, ok := floors1[a.Pred]
		if !ok {
			f = def
		}
		if a.Score >= f {
			a.Reason = rules.ReasonTier1Confident
			out[i] = a
			continue
		}
		b := t2[i]
		b.Reason = rules.ReasonBelowFloor
		b.Latency += a.Latency
		out[i] = b
	}
	return out
}

// CompareTiers puts two full runs, tier 1 and tier 2 over the same items,
// side by side.
func CompareTiers(t1, t2 []Outcome) *TierComparison {
	c := &TierComparison{N: len(t1)}
	if c.N == 0 {
		return c
	}
	var r1, r2, agree int
	for i := range t1 {
		a, b := t1[i].ClassRight, t2[i].ClassRight
		if a {
			r1++
		}
		if b {
			r2++
		}
		if t1[i].Pred == t2[i].Pred {
			agree++
		}
		switch {
		case a && !b:
			c.Tier1Only++
		case b && !a:
			c.Tier2Only++
		}
	}
	n := float64(c.N)
	c.Tier1Acc, c.Tier2Acc, c.Agreement = float64(r1)/n, float64(r2)/n, float64(agree)/n
	return c
}
