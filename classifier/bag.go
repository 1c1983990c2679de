package classifier

import (
	"math"
	"math/rand/v2"
)

// BagOptions tunes TrainBag.
type BagOptions struct {
	Epochs       int     // default 20
	LearningRate float32 // initial step, decayed linearly to 0; default 0.2
	Balance      bool    // weight examples by inverse class frequency
	Seed         uint64  // default 1
	// RowWeight, when set, weights each row in the mean (a weighted bag,
	// such as SIF weights); nil is the plain mean.
	RowWeight []float32
	// Dropout drops each row of an example with this probability at each
	// step (never all of them): a regulariser for long, noisy texts.
	Dropout float32
	// Targets, when set, are each doc's target distribution over the
	// classes (soft labels, such as a teacher's probabilities): the loss is
	// the cross-entropy against them instead of against y, whose class
	// then only picks the Balance weight. A one-hot row is y's loss
	// exactly; a mix a·onehot + (1-a)·q is the same mix of the two losses.
	Targets [][]float32
	// Progress, if set, is called after each epoch with the mean loss.
	Progress func(epoch int, loss float64)
}

// TrainBag trains an embedding bag and a softmax head together, fastText's
// supervised way: an example's features are the plain mean of its rows of
// emb (rows of d values, flat), and each example's gradient flows into the
// head and into those rows. emb is updated in place. Deterministic for a
// seed (single-threaded SGD). With o.Targets, it learns soft labels.
func TrainBag(emb []float32, d int, docs [][]int32, y []int, classes []string, o BagOptions) *Linear {
	if o.Epochs == 0 {
		o.Epochs = 20
	}
	if o.LearningRate == 0 {
		o.LearningRate = 0.2
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	k := len(classes)
	head := &Linear{Kind: "softmax", Classes: classes, Dims: d, W: make([]float32, k*d), B: make([]float32, k), Temperature: 1}
	weight := ClassWeights(y, k, o.Balance)
	order := make([]int, len(docs))
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x7e7e))
	h := make([]float32, d)
	gh := make([]float32, d)
	p := make([]float32, k)
	var kept []int32
	total := float32(o.Epochs * len(order))
	step := 0
	for epoch := range o.Epochs {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		var loss float64
		for _, idx := range order {
			lr := o.LearningRate * (1 - float32(step)/total)
			step++
			doc := docs[idx]
			if len(doc) == 0 {
				continue
			}
			if o.Dropout > 0 && len(doc) > 1 {
				kept = kept[:0]
				for _, r := range doc {
					if rng.Float32() >= o.Dropout {
						kept = append(kept, r)
					}
				}
				if len(kept) > 0 {
					doc = kept
				}
			}
			clear(h)
			var wsum float32
			for _, r := range doc {
				v := emb[int(r)*d : int(r)*d+d]
				wr := float32(1)
				if o.RowWeight != nil {
					wr = o.RowWeight[r]
				}
				wsum += wr
				for i := range h {
					h[i] += wr * v[i]
				}
			}
			if wsum == 0 {
				continue
			}
			inv := 1 / wsum
			for i := range h {
				h[i] *= inv
			}
			head.Logits(h, p)
			Softmax(p, 1)
			c := y[idx]
			var t []float32
			if o.Targets != nil {
				t = o.Targets[idx]
				for j, tj := range t {
					if tj > 0 {
						loss -= float64(tj) * math.Log(math.Max(float64(p[j]), 1e-12)) * float64(weight[c])
					}
				}
			} else {
				loss -= math.Log(math.Max(float64(p[c]), 1e-12)) * float64(weight[c])
			}
			clear(gh)
			for j := range k {
				g := p[j]
				if t != nil {
					g -= t[j]
				} else if j == c {
					g -= 1
				}
				g *= weight[c] * lr
				if g == 0 {
					continue
				}
				row := head.W[j*d : j*d+d]
				for i := range gh {
					gh[i] += g * row[i]
					row[i] -= g * h[i]
				}
				head.B[j] -= g
			}
			for i := range gh {
				gh[i] *= inv
			}
			for _, r := range doc {
				v := emb[int(r)*d : int(r)*d+d]
				wr := float32(1)
				if o.RowWeight != nil {
					wr = o.RowWeight[r]
				}
				for i := range v {
					v[i] -= wr * gh[i]
				}
			}
		}
		if o.Progress != nil {
			o.Progress(epoch+1, loss/float64(len(order)))
		}
	}
	return head
}

// BagFeatures writes the mean of doc's rows of emb into h.
func BagFeatures(emb []float32, d int, doc []int32, h []float32) {
	clear(h)
	if len(doc) == 0 {
		return
	}
	for _, r := range doc {
		v := emb[int(r)*d : int(r)*d+d]
		for i := range h {
			h[i] += v[i]
		}
	}
	inv := 1 / float32(len(doc))
	for i := range h {
		h[i] *= inv
	}
}
