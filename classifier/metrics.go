package classifier

import "math"

// Report is how a head did on labelled data.
type Report struct {
	N           int                 `json:"n"`
	Accuracy    float64             `json:"accuracy"`
	MacroF1     float64             `json:"macro_f1"`
	MacroPrec   float64             `json:"macro_precision"`
	MacroRecall float64             `json:"macro_recall"`
	ECE         float64             `json:"ece"` // expected calibration error, 15 equal-width bins of confidence
	NLL         float64             `json:"nll"`
	PerClass    map[string]PerClass `json:"per_class"`
}

// PerClass is one class's figures.
type PerClass struct {
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
	Support   int     `json:"support"`
}

// Evaluate scores predictions: probs[i] is the probability vector for item
// i, y[i] its true class.
func Evaluate(classes []string, probs [][]float32, y []int) Report {
	k := len(classes)
	r := Report{N: len(y), PerClass: map[string]PerClass{}}
	tp := make([]int, k)
	fp := make([]int, k)
	fn := make([]int, k)
	const bins = 15
	var binConf, binAcc [bins]float64
	var binN [bins]int
	correct := 0
	for i, p := range probs {
		pred := Argmax(p)
		conf := float64(p[pred])
		hit := pred == y[i]
		if hit {
			correct++
			tp[pred]++
		} else {
			fp[pred]++
			fn[y[i]]++
		}
		b := min(int(conf*bins), bins-1)
		binConf[b] += conf
		if hit {
			binAcc[b]++
		}
		binN[b]++
		r.NLL -= math.Log(math.Max(float64(p[y[i]]), 1e-12))
	}
	if r.N == 0 {
		return r
	}
	r.Accuracy = float64(correct) / float64(r.N)
	r.NLL /= float64(r.N)
	for b := range bins {
		if binN[b] > 0 {
			r.ECE += math.Abs(binAcc[b]-binConf[b]) / float64(r.N)
		}
	}
	counted := 0
	for c := range k {
		pc := PerClass{Support: tp[c] + fn[c]}
		if tp[c]+fp[c] > 0 {
			pc.Precision = float64(tp[c]) / float64(tp[c]+fp[c])
		}
		if pc.Support > 0 {
			pc.Recall = float64(tp[c]) / float64(pc.Support)
		}
		if pc.Precision+pc.Recall > 0 {
			pc.F1 = 2 * pc.Precision * pc.Recall / (pc.Precision + pc.Recall)
		}
		r.PerClass[classes[c]] = pc
		if pc.Support > 0 {
			counted++
			r.MacroPrec += pc.Precision
			r.MacroRecall += pc.Recall
			r.MacroF1 += pc.F1
		}
	}
	if counted > 0 {
		r.MacroPrec /= float64(counted)
		r.MacroRecall /= float64(counted)
		r.MacroF1 /= float64(counted)
	}
	return r
}
