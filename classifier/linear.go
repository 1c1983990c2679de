package classifier

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Linear is a linear head: logits = W·x + B, one row of W per class. Softmax
// regression and nearest centroid (unit centroids, B = 0, x unit length: the
// logits are cosines) both take this form.
type Linear struct {
	Kind    string    `json:"kind"` // "softmax", "centroid" or "mlp"
	Classes []string  `json:"classes"`
	Dims    int       `json:"dims"`
	W       []float32 `json:"w"` // len(Classes)*Dims (len(Classes)*Hidden with a hidden layer), row-major
	B       []float32 `json:"b"` // len(Classes)
	// Hidden, W1 and B1 are an optional hidden layer of ReLU units between
	// the input and W (see TrainMLP): W1 is Hidden*Dims, row-major.
	Hidden int       `json:"hidden,omitempty"`
	W1     []float32 `json:"w1,omitempty"`
	B1     []float32 `json:"b1,omitempty"`
	// Temperature divides the logits before the softmax, fitted on held-out
	// data so scores are calibrated probabilities. 0 means 1.
	Temperature float32 `json:"temperature"`
}

// Validate checks the shapes.
func (l *Linear) Validate() error {
	switch {
	case len(l.Classes) < 2:
		return fmt.Errorf("head: %d classes, need at least 2", len(l.Classes))
	case l.Dims < 1:
		return fmt.Errorf("head: dims %d", l.Dims)
	case l.Hidden < 0:
		return fmt.Errorf("head: hidden %d", l.Hidden)
	case l.Hidden > 0:
		if err := l.validateHidden(); err != nil {
			return err
		}
	case len(l.W) != len(l.Classes)*l.Dims:
		return fmt.Errorf("head: w has %d values, want %d classes x %d dims", len(l.W), len(l.Classes), l.Dims)
	case len(l.B) != len(l.Classes):
		return fmt.Errorf("head: b has %d values, want %d", len(l.B), len(l.Classes))
	}
	for _, v := range l.W {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("head: w holds a non-finite value")
		}
	}
	return nil
}

// Logits writes W·x + B into out (len(out) == len(Classes)); with a
// hidden layer, W·relu(W1·x + B1) + B.
func (l *Linear) Logits(x, out []float32) {
	if l.Hidden > 0 {
		hp := hiddenPool.Get().(*[]float32)
		if cap(*hp) < l.Hidden {
			*hp = make([]float32, l.Hidden)
		}
		h := (*hp)[:l.Hidden]
		l.hidden(x, h)
		for c := range l.Classes {
			row := l.W[c*l.Hidden : (c+1)*l.Hidden]
			s := l.B[c]
			for j, w := range row {
				s += w * h[j]
			}
			out[c] = s
		}
		hiddenPool.Put(hp)
		return
	}
	// Four classes at a time: four independent sums per pass over x, each
	// in the order of the one-class loop (so the logits are the same
	// bits), with the slices cut to x's length so that no index is
	// checked. The sums' additions, not the loads, bound this loop.
	d, k := l.Dims, len(l.Classes)
	x = x[:d]
	c := 0
	for ; c+3 < k; c += 4 {
		w := l.W[c*d : c*d+4*d]
		r0, r1, r2, r3 := w[:len(x)], w[d:][:len(x)], w[2*d:][:len(x)], w[3*d:][:len(x)]
		s0, s1, s2, s3 := l.B[c], l.B[c+1], l.B[c+2], l.B[c+3]
		for i, v := range x {
			s0 += r0[i] * v
			s1 += r1[i] * v
			s2 += r2[i] * v
			s3 += r3[i] * v
		}
		out[c], out[c+1], out[c+2], out[c+3] = s0, s1, s2, s3
	}
	for ; c < k; c++ {
		r := l.W[c*d : c*d+d][:len(x)]
		s := l.B[c]
		for i, v := range x {
			s += r[i] * v
		}
		out[c] = s
	}
}

// Probs writes calibrated class probabilities for x into out.
func (l *Linear) Probs(x, out []float32) {
	l.Logits(x, out)
	Softmax(out, l.Temperature)
}

// SoftmaxOptions tunes TrainSoftmax.
type SoftmaxOptions struct {
	Epochs       int     // passes over the data; default 60
	LearningRate float32 // initial step; default 0.5, decayed linearly to 0
	L2           float32 // weight decay; default 1e-5
	Balance      bool    // weight each example by N/(K * count(its class))
	Seed         uint64  // shuffling; default 1
	BatchSize    int     // default 32
}

// TrainSoftmax fits multinomial logistic regression on features x (rows of
// dims values) and labels y (class indices) by minibatch SGD, deterministic
// for a given seed.
func TrainSoftmax(x [][]float32, y []int, classes []string, o SoftmaxOptions) *Linear {
	if o.Epochs == 0 {
		o.Epochs = 60
	}
	if o.LearningRate == 0 {
		o.LearningRate = 0.5
	}
	if o.L2 == 0 {
		o.L2 = 1e-5
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.BatchSize == 0 {
		o.BatchSize = 32
	}
	k, d := len(classes), len(x[0])
	l := &Linear{Kind: "softmax", Classes: classes, Dims: d, W: make([]float32, k*d), B: make([]float32, k), Temperature: 1}
	weight := ClassWeights(y, k, o.Balance)
	order := make([]int, len(x))
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	p := make([]float32, k)
	gw := make([]float32, k*d)
	gb := make([]float32, k)
	total := o.Epochs * ((len(x) + o.BatchSize - 1) / o.BatchSize)
	step := 0
	for range o.Epochs {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for start := 0; start < len(order); start += o.BatchSize {
			end := min(start+o.BatchSize, len(order))
			clear(gw)
			clear(gb)
			for _, idx := range order[start:end] {
				l.Logits(x[idx], p)
				Softmax(p, 1)
				wt := weight[y[idx]]
				for c := range k {
					g := p[c] * wt
					if c == y[idx] {
						g -= wt
					}
					if g == 0 {
						continue
					}
					gb[c] += g
					row := gw[c*d : c*d+d]
					for i, v := range x[idx] {
						row[i] += g * v
					}
				}
			}
			lr := o.LearningRate * (1 - float32(step)/float32(total))
			step++
			scale := lr / float32(end-start)
			for i := range l.W {
				l.W[i] -= scale*gw[i] + lr*o.L2*l.W[i]
			}
			for c := range l.B {
				l.B[c] -= scale * gb[c]
			}
		}
	}
	return l
}

// ClassWeights returns per-class example weights: 1 each, or with balance
// N/(K*count) so every class carries the same total weight.
func ClassWeights(y []int, k int, balance bool) []float32 {
	w := make([]float32, k)
	for i := range w {
		w[i] = 1
	}
	if !balance {
		return w
	}
	count := make([]int, k)
	for _, c := range y {
		count[c]++
	}
	for c := range w {
		if count[c] > 0 {
			w[c] = float32(len(y)) / float32(k*count[c])
		}
	}
	return w
}

// TrainCentroid builds a nearest-centroid head: each class's mean feature
// vector, normalised, so the logits of a unit-length x are cosines. The
// temperature is set by calibration; 0.05 is a usable start.
func TrainCentroid(x [][]float32, y []int, classes []string) *Linear {
	k, d := len(classes), len(x[0])
	l := &Linear{Kind: "centroid", Classes: classes, Dims: d, W: make([]float32, k*d), B: make([]float32, k), Temperature: 0.05}
	for i, v := range x {
		row := l.W[y[i]*d : y[i]*d+d]
		for j := range v {
			row[j] += v[j]
		}
	}
	for c := range k {
		L2Normalize(l.W[c*d : c*d+d])
	}
	return l
}
