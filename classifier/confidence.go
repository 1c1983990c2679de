package classifier

import (
	"fmt"
	"math"
	"slices"
)

// Confidence is a per-text temperature: a text's logits are divided by
// exp(W·φ), φ being the text's familiarity features (named in Features, in
// order; the first is a constant 1), before the head's own temperature.
// It is fitted on texts from sources the model was trained without (each
// source of the training data held out in turn), so that text unlike the
// training data gets the flatter scores such text earns, instead of the
// confidence a bag of familiar-looking words gives it.
type Confidence struct {
	Features []string  `json:"features"`
	W        []float32 `json:"w"`
	// Fit says how it was fitted: the sources held out, the rows judged.
	Fit map[string]string `json:"fit,omitempty"`
}

// Validate checks that the weights match the features, which must be the
// ones this build computes (want).
func (c *Confidence) Validate(want []string) error {
	if !slices.Equal(c.Features, want) {
		return fmt.Errorf("confidence: features %v, this build computes %v", c.Features, want)
	}
	if len(c.W) != len(c.Features) {
		return fmt.Errorf("confidence: %d weights for %d features", len(c.W), len(c.Features))
	}
	for _, w := range c.W {
		if math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) || math.Abs(float64(w)) > 20 {
			return fmt.Errorf("confidence: weight %v", w)
		}
	}
	return nil
}

// Scale is exp(W·phi): what a text with features phi divides its logits by.
func (c *Confidence) Scale(phi []float32) float32 {
	var s float32
	for i, w := range c.W {
		s += w * phi[i]
	}
	return float32(math.Exp(float64(s)))
}

// FitConfidence finds the weights w minimising the negative log-likelihood
// of labels y under softmax(logits / exp(w·phi)), each row weighted by
// weight (nil: 1): a temperature per text, as FitTemperature fits one for
// all. phi[i][0] should be 1 (the constant). Plain gradient descent with
// backtracking from w = 0 (temperature 1); the objective is smooth and the
// features few.
func FitConfidence(logits [][]float32, phi [][]float32, y []int, weight []float32) []float32 {
	nf := len(phi[0])
	k := len(logits[0])
	var wsum float64
	for i := range logits {
		wsum += rowWeight(weight, i)
	}
	p := make([]float64, k)
	eval := func(w []float64, grad []float64) float64 {
		clear(grad)
		var loss float64
		for i, z := range logits {
			var a float64
			for f := range nf {
				a += w[f] * float64(phi[i][f])
			}
			inv := math.Exp(-a)
			maxu := math.Inf(-1)
			for j, v := range z {
				p[j] = float64(v) * inv
				maxu = math.Max(maxu, p[j])
			}
			var sum float64
			for j := range p {
				sum += math.Exp(p[j] - maxu)
			}
			lse := maxu + math.Log(sum)
			uy := float64(z[y[i]]) * inv
			rw := rowWeight(weight, i)
			loss += rw * (lse - uy)
			// d(lse - u_y)/da = -(E_p[u] - u_y)
			var eu float64
			for j := range p {
				eu += math.Exp(p[j]-lse) * p[j]
			}
			g := rw * (uy - eu)
			for f := range nf {
				grad[f] += g * float64(phi[i][f])
			}
		}
		for f := range grad {
			grad[f] /= wsum
		}
		return loss / wsum
	}
	w := make([]float64, nf)
	grad := make([]float64, nf)
	trial := make([]float64, nf)
	tg := make([]float64, nf)
	loss := eval(w, grad)
	step := 1.0
	for range 500 {
		var gn float64
		for _, g := range grad {
			gn += g * g
		}
		if gn < 1e-12 {
			break
		}
		for {
			for f := range w {
				trial[f] = w[f] - step*grad[f]
			}
			if l := eval(trial, tg); l <= loss-0.5*step*gn {
				copy(w, trial)
				copy(grad, tg)
				loss = l
				step *= 2
				break
			}
			step /= 2
			if step < 1e-10 {
				break
			}
		}
		if step < 1e-10 {
			break
		}
	}
	out := make([]float32, nf)
	for f := range w {
		out[f] = float32(w[f])
	}
	return out
}

func rowWeight(weight []float32, i int) float64 {
	if weight == nil {
		return 1
	}
	return float64(weight[i])
}
