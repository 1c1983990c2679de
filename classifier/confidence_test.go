package classifier

import (
	"math"
	"math/rand/v2"
	"testing"
)

// nllAt is the mean NLL of y under softmax(logits / exp(w·phi)).
func nllAt(logits, phi [][]float32, y []int, w []float32) float64 {
	c := Confidence{W: w}
	var s float64
	p := make([]float32, len(logits[0]))
	for i, z := range logits {
		copy(p, z)
		Softmax(p, c.Scale(phi[i]))
		s -= math.Log(math.Max(float64(p[y[i]]), 1e-12))
	}
	return s / float64(len(logits))
}

// Texts with the feature set are as sure of themselves as the others but
// right only half the time: FitConfidence must give them a higher
// temperature, and lower the NLL below one temperature for all.
func TestFitConfidence(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	var logits, phi [][]float32
	var y []int
	for i := range 4000 {
		unfamiliar := i%2 == 1
		label := rng.IntN(3)
		top := label
		if unfamiliar && rng.IntN(2) == 0 {
			top = (label + 1 + rng.IntN(2)) % 3
		} else if !unfamiliar && rng.IntN(10) == 0 {
			top = (label + 1) % 3
		}
		z := []float32{0, 0, 0}
		z[top] = 4
		f := float32(0)
		if unfamiliar {
			f = 1
		}
		logits, phi, y = append(logits, z), append(phi, []float32{1, f}), append(y, label)
	}
	w := FitConfidence(logits, phi, y, nil)
	if w[1] <= 0.5 {
		t.Fatalf("FitConfidence = %v: want a clearly positive weight on the unfamiliar feature", w)
	}
	one := FitTemperature(logits, y)
	global := []float32{float32(math.Log(float64(one))), 0}
	if got, base := nllAt(logits, phi, y, w), nllAt(logits, phi, y, global); got >= base-0.01 {
		t.Fatalf("NLL %.4f with the fitted weights, %.4f with one temperature: want lower", got, base)
	}
	// Row weights: the same rows weighted 1 each fit the same weights.
	ones := make([]float32, len(y))
	for i := range ones {
		ones[i] = 1
	}
	if w2 := FitConfidence(logits, phi, y, ones); math.Abs(float64(w2[1]-w[1])) > 1e-4 {
		t.Fatalf("weights of 1 fit %v, none %v", w2, w)
	}
}

func TestConfidenceValidate(t *testing.T) {
	feats := []string{"bias", "x"}
	for _, c := range []Confidence{
		{Features: []string{"bias"}, W: []float32{0}},
		{Features: feats, W: []float32{0}},
		{Features: feats, W: []float32{0, float32(math.NaN())}},
		{Features: feats, W: []float32{0, 40}},
	} {
		if err := c.Validate(feats); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
	if err := (&Confidence{Features: feats, W: []float32{0.1, -2}}).Validate(feats); err != nil {
		t.Fatal(err)
	}
}
