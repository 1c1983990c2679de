package evaluation

import "math"

// z95 is the standard normal quantile of a two-sided 95% interval.
const z95 = 1.959964

// Interval is a 95% confidence interval of a share.
type Interval struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// Wilson is the Wilson score interval at 95% for k successes in n trials:
// unlike the normal approximation it stays inside [0, 1] and keeps its
// coverage near 0 and 1 and at a few hundred trials, where own labels are.
// Its width shrinks as 1/√n: about ±0.03 at n = 300 and a share of 0.9.
// With no trials it is [0, 1]: nothing is known.
func Wilson(k, n int) Interval {
	if n <= 0 {
		return Interval{0, 1}
	}
	p, nf := float64(k)/float64(n), float64(n)
	z2 := z95 * z95
	centre := (p + z2/(2*nf)) / (1 + z2/nf)
	half := z95 * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / (1 + z2/nf)
	return Interval{math.Max(0, centre-half), math.Min(1, centre+half)}
}
