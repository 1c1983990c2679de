package bert_test

import (
	"math"

	"github.com/triagegw/triage/models/bert"
)

// BERTForward is a plain-Go forward pass of the encoder BuildFrom
// writes, in float64, for one sequence: ids, token types and attention mask
// (1 keep, 0 masked) of the same length. It returns the last hidden state,
// one row of Hidden values per token. It is the reference the ONNX graph is
// checked against, written from the definition of BERT rather than from
// the graph.
func BERTForward(c bert.Config, w *bert.Weights, ids, types, mask []int64) [][]float32 {
	h, f, nh := c.Hidden, c.Intermediate, c.Heads
	hd := h / nh
	n := len(ids)
	x := make([][]float64, n)
	for s := range n {
		x[s] = make([]float64, h)
		for i := range h {
			x[s][i] = float64(w.Word[int(ids[s])*h+i]) + float64(w.Position[s*h+i]) + float64(w.TokenType[int(types[s])*h+i])
		}
		layerNorm(x[s], w.EmbLNScale, w.EmbLNBias)
	}
	scale := 1 / math.Sqrt(float64(hd))
	for _, l := range w.Layers {
		q := linear(x, l.Q, l.QBias, h, h)
		k := linear(x, l.K, l.KBias, h, h)
		v := linear(x, l.V, l.VBias, h, h)
		ctx := make([][]float64, n)
		for i := range ctx {
			ctx[i] = make([]float64, h)
		}
		p := make([]float64, n)
		for hh := range nh {
			off := hh * hd
			for i := range n {
				maxv := math.Inf(-1)
				for j := range n {
					var s float64
					for d := range hd {
						s += q[i][off+d] * k[j][off+d]
					}
					s = s*scale + (1-float64(mask[j]))*bert.MaskBias
					p[j] = s
					maxv = math.Max(maxv, s)
				}
				var sum float64
				for j := range n {
					p[j] = math.Exp(p[j] - maxv)
					sum += p[j]
				}
				for j := range n {
					pj := p[j] / sum
					for d := range hd {
						ctx[i][off+d] += pj * v[j][off+d]
					}
				}
			}
		}
		a := linear(ctx, l.O, l.OBias, h, h)
		for s := range n {
			for i := range h {
				a[s][i] += x[s][i]
			}
			layerNorm(a[s], l.AttnLNScale, l.AttnLNBias)
		}
		x = a
		u := linear(x, l.FF1, l.FF1Bias, h, f)
		for s := range n {
			for i, z := range u[s] {
				u[s][i] = 0.5 * z * (1 + math.Erf(z/math.Sqrt2))
			}
		}
		d := linear(u, l.FF2, l.FF2Bias, f, h)
		for s := range n {
			for i := range h {
				d[s][i] += x[s][i]
			}
			layerNorm(d[s], l.OutLNScale, l.OutLNBias)
		}
		x = d
	}
	out := make([][]float32, n)
	for s := range n {
		out[s] = make([]float32, h)
		for i, z := range x[s] {
			out[s][i] = float32(z)
		}
	}
	return out
}

// linear is x·W + b for W [in, out] row-major.
func linear(x [][]float64, w, b []float32, in, out int) [][]float64 {
	y := make([][]float64, len(x))
	for s, row := range x {
		y[s] = make([]float64, out)
		for o := range out {
			y[s][o] = float64(b[o])
		}
		for i := range in {
			xi := row[i]
			wr := w[i*out : i*out+out]
			for o, wv := range wr {
				y[s][o] += xi * float64(wv)
			}
		}
	}
	return y
}

func layerNorm(v []float64, scale, bias []float32) {
	var mean, vr float64
	for _, z := range v {
		mean += z
	}
	mean /= float64(len(v))
	for _, z := range v {
		vr += (z - mean) * (z - mean)
	}
	vr /= float64(len(v))
	inv := 1 / math.Sqrt(vr+bert.LNEpsilon)
	for i, z := range v {
		v[i] = (z-mean)*inv*float64(scale[i]) + float64(bias[i])
	}
}
