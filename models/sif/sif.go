package sif

import "math"

// A is the a of the SIF weight a/(a+p(w)) that imported and distilled
// tables use.
const A = 1e-3

// Weights returns the SIF weight a/(a+p(r)) of each 1-based frequency rank,
// with p estimated by Zipf's law for a vocabulary of n words: p(r) =
// 1/(r*ln(1.78*n)). A rank <= 0 means "not in the list": weight 0.
func Weights(ranks []int, n int, a float64) []float32 {
	w := make([]float32, len(ranks))
	h := math.Log(1.78 * float64(max(n, 1)))
	for i, r := range ranks {
		if r <= 0 {
			continue
		}
		p := 1 / (float64(r) * h)
		w[i] = float32(a / (a + p))
	}
	return w
}
