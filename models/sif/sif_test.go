package sif

import (
	"math"
	"testing"
)

func TestWeights(t *testing.T) {
	n := 341479
	h := math.Log(1.78 * float64(n))
	w := Weights([]int{1, 253, 50000, 0, -1}, n, A)
	want := []float64{1e-3 / (1e-3 + 1/h), 1e-3 / (1e-3 + 1/(253*h)), 1e-3 / (1e-3 + 1/(50000*h)), 0, 0}
	for i := range w {
		if math.Abs(float64(w[i])-want[i]) > 1e-6 {
			t.Errorf("rank %d: %v, want %v", i, w[i], want[i])
		}
	}
	if !(w[0] < w[1] && w[1] < w[2] && w[2] < 1) {
		t.Errorf("weights do not grow with rank: %v", w)
	}
	// A larger a weighs every ranked word more.
	if w2 := Weights([]int{253}, n, 1e-2); w2[0] <= w[1] {
		t.Errorf("a=1e-2: %v, a=1e-3: %v", w2[0], w[1])
	}
}
