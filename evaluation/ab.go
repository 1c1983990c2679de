package evaluation

import (
	"math"
	"math/rand/v2"
	"sort"
)

// ABReport compares two specs (tiers, heads artifacts or rule sets) run
// over the same items.
type ABReport struct {
	A, B *Report `json:"-"`
	// SpecA, SpecB say what ran.
	SpecA string `json:"spec_a"`
	SpecB string `json:"spec_b"`
	N     int    `json:"n"`
	// Agreement: Counts[i][j] items A predicted Labels[i] and B Labels[j].
	Agreement     Confusion `json:"agreement"`
	AgreementRate float64   `json:"agreement_rate"`
	// Accuracy and per-class F1, B minus A, with bootstrap 95% intervals
	// of the difference (paired: each resample draws the same items for
	// both sides); the accuracy with each side's Wilson interval too.
	Accuracy Delta `json:"accuracy"`
	// RoutePrecision (rule sets) is the same for route precision: each
	// side's over the items its class routes took, each side's Wilson
	// interval, and the paired bootstrap interval of the difference.
	RoutePrecision *Delta           `json:"route_precision,omitempty"`
	PerClass       map[string]Delta `json:"per_class"`
	McNemar        McNemar          `json:"mcnemar"`
	// Latency per side (p50/p90/p99 µs) and escalation rates.
	LatencyA    Percentiles `json:"latency_a"`
	LatencyB    Percentiles `json:"latency_b"`
	EscalationA float64     `json:"escalation_a"`
	EscalationB float64     `json:"escalation_b"`
	// Counterfactual: where each side would have sent the items (pools for
	// rule sets, predicted classes otherwise), and how often they differ.
	Counterfactual Confusion `json:"counterfactual"`
	Differ         int       `json:"differ"`
}

// Delta is a figure for A and B, B − A, and a bootstrap 95% interval of
// the difference.
type Delta struct {
	A     float64 `json:"a"`
	B     float64 `json:"b"`
	Delta float64 `json:"delta"`
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	// CIA and CIB are each side's own 95% interval, where one is given.
	CIA *Interval `json:"a_ci,omitempty"`
	CIB *Interval `json:"b_ci,omitempty"`
}

// McNemar's test on the items exactly one side gets right.
type McNemar struct {
	OnlyA int     `json:"only_a_right"` // b
	OnlyB int     `json:"only_b_right"` // c
	Stat  float64 `json:"statistic"`    // (|b−c|−1)²/(b+c), or 0 for the exact test
	P     float64 `json:"p_value"`
	Exact bool    `json:"exact"` // binomial test (b+c < 25)
}

// AB compares outcomes a and b of the same items. classes are the classes
// to report per-class deltas for; boot is the number of bootstrap
// resamples (default 1000), seeded for determinism.
func AB(specA, specB string, ra, rb *Report, a, b []Outcome, classes []string, boot int, seed uint64) *ABReport {
	if boot <= 0 {
		boot = 1000
	}
	n := len(a)
	r := &ABReport{A: ra, B: rb, SpecA: specA, SpecB: specB, N: n, PerClass: map[string]Delta{},
		EscalationA: ra.EscalationRate, EscalationB: rb.EscalationRate}
	r.LatencyA, r.LatencyB = firstLatency(ra), firstLatency(rb)
	r.Agreement = pairMatrix(a, b, func(o Outcome) string { return o.Pred })
	agree := 0
	for i := range a {
		if a[i].Pred == b[i].Pred {
			agree++
		}
		switch {
		case a[i].Correct && !b[i].Correct:
			r.McNemar.OnlyA++
		case !a[i].Correct && b[i].Correct:
			r.McNemar.OnlyB++
		}
	}
	if n > 0 {
		r.AgreementRate = float64(agree) / float64(n)
	}
	r.McNemar = mcnemar(r.McNemar.OnlyA, r.McNemar.OnlyB)
	where := func(o Outcome) string {
		if o.Pool != "" {
			return o.Pool
		}
		return o.Pred
	}
	r.Counterfactual = pairMatrix(a, b, where)
	for i := range a {
		if where(a[i]) != where(b[i]) {
			r.Differ++
		}
	}
	// Bootstrap: resample items with replacement; recompute the figures.
	rng := rand.New(rand.NewPCG(seed, 0xab))
	idx := make([]int, n)
	accD := make([]float64, 0, boot)
	rules := ra.Mode == "rules" && rb.Mode == "rules"
	var precD []float64
	f1D := map[string][]float64{}
	for range boot {
		for i := range idx {
			idx[i] = rng.IntN(max(n, 1))
		}
		accD = append(accD, accuracyOf(b, idx)-accuracyOf(a, idx))
		if rules {
			precD = append(precD, routePrecisionOf(b, idx)-routePrecisionOf(a, idx))
		}
		fa, fb := f1Of(a, idx, classes), f1Of(b, idx, classes)
		for _, c := range classes {
			f1D[c] = append(f1D[c], fb[c]-fa[c])
		}
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	r.Accuracy = delta(accuracyOf(a, all), accuracyOf(b, all), accD)
	r.Accuracy.CIA, r.Accuracy.CIB = &ra.AccuracyCI, &rb.AccuracyCI
	if rules {
		d := delta(routePrecisionOf(a, all), routePrecisionOf(b, all), precD)
		d.CIA, d.CIB = ra.RoutePrecisionCI, rb.RoutePrecisionCI
		r.RoutePrecision = &d
	}
	fa, fb := f1Of(a, all, classes), f1Of(b, all, classes)
	for _, c := range classes {
		r.PerClass[c] = delta(fa[c], fb[c], f1D[c])
	}
	return r
}

func firstLatency(r *Report) Percentiles {
	for _, k := range []string{"decision", "tier1", "tier2"} {
		if p, ok := r.Latency[k]; ok {
			return p
		}
	}
	return Percentiles{}
}

func delta(a, b float64, boot []float64) Delta {
	sort.Float64s(boot)
	d := Delta{A: a, B: b, Delta: b - a}
	if len(boot) > 0 {
		d.Lo = boot[int(0.025*float64(len(boot)))]
		d.Hi = boot[min(int(0.975*float64(len(boot))), len(boot)-1)]
	}
	return d
}

func accuracyOf(o []Outcome, idx []int) float64 {
	if len(idx) == 0 {
		return 0
	}
	right := 0
	for _, i := range idx {
		if o[i].Correct {
			right++
		}
	}
	return float64(right) / float64(len(idx))
}

// routePrecisionOf is the share right of the resampled items a class
// route took (rules mode).
func routePrecisionOf(o []Outcome, idx []int) float64 {
	routed, right := 0, 0
	for _, i := range idx {
		if o[i].Routed {
			routed++
			if o[i].Correct {
				right++
			}
		}
	}
	return ratio(right, routed)
}

// f1Of is each class's F1 over the resampled items (the top class against
// the label).
func f1Of(o []Outcome, idx []int, classes []string) map[string]float64 {
	tp := map[string]int{}
	pred := map[string]int{}
	sup := map[string]int{}
	for _, i := range idx {
		sup[o[i].Label]++
		if o[i].Pred != DefaultLabel {
			pred[o[i].Pred]++
			if o[i].Pred == o[i].Label {
				tp[o[i].Pred]++
			}
		}
	}
	out := map[string]float64{}
	for _, c := range classes {
		if pred[c] == 0 || sup[c] == 0 || tp[c] == 0 {
			out[c] = 0
			continue
		}
		p, r := float64(tp[c])/float64(pred[c]), float64(tp[c])/float64(sup[c])
		out[c] = 2 * p * r / (p + r)
	}
	return out
}

// mcnemar tests whether A and B err on different items more than chance:
// the exact binomial test below 25 discordant items, else the chi-square
// with continuity correction.
func mcnemar(b, c int) McNemar {
	m := McNemar{OnlyA: b, OnlyB: c}
	n := b + c
	if n == 0 {
		m.P = 1
		return m
	}
	if n < 25 {
		m.Exact = true
		k := min(b, c)
		// Two-sided: 2 * P(X <= k), X ~ Binomial(n, 1/2).
		var cdf float64
		for i := 0; i <= k; i++ {
			cdf += math.Exp(logChoose(n, i) - float64(n)*math.Ln2)
		}
		m.P = math.Min(1, 2*cdf)
		return m
	}
	d := math.Abs(float64(b-c)) - 1
	m.Stat = d * d / float64(n)
	m.P = math.Erfc(math.Sqrt(m.Stat / 2)) // chi-square, 1 degree of freedom
	return m
}

func logChoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

func pairMatrix(a, b []Outcome, key func(Outcome) string) Confusion {
	pairs := map[[2]string]int{}
	for i := range a {
		pairs[[2]string{key(a[i]), key(b[i])}]++
	}
	return pairCounts(pairs)
}
