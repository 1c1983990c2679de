package classifier

import "math"

// FitTemperature finds the temperature T that minimises the negative
// log-likelihood of labels y under softmax(logits/T): the standard
// post-hoc calibration. logits are not modified. The search is a
// golden-section over log T in [1e-3, 1e3].
func FitTemperature(logits [][]float32, y []int) float32 {
	nll := func(logT float64) float64 {
		t := float32(math.Exp(logT))
		var s float64
		p := make([]float32, len(logits[0]))
		for i, l := range logits {
			copy(p, l)
			Softmax(p, t)
			s -= math.Log(math.Max(float64(p[y[i]]), 1e-12))
		}
		return s / float64(len(logits))
	}
	a, b := math.Log(1e-3), math.Log(1e3)
	const phi = 0.6180339887498949
	c, d := b-phi*(b-a), a+phi*(b-a)
	fc, fd := nll(c), nll(d)
	for b-a > 1e-4 {
		if fc < fd {
			b, d, fd = d, c, fc
			c = b - phi*(b-a)
			fc = nll(c)
		} else {
			a, c, fc = c, d, fd
			d = a + phi*(b-a)
			fd = nll(d)
		}
	}
	return float32(math.Exp((a + b) / 2))
}
