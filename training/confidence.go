package training

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/static"
)

// confidenceRows caps the held-out rows of one source that the fit judges;
// confidenceTrain the rows each model trained without a source learns
// from (a stride over them), and confidenceEpochs its passes: these models
// only stand for how a model sees a source it never saw, so they train at
// about a seventh of the full model's cost each.
const (
	confidenceRows   = 1500
	confidenceTrain  = 15000
	confidenceEpochs = 8
)

// fitConfidence fits tier 1's per-text temperature (classifier.Confidence)
// on texts the way an unseen source looks to the model: for each source of
// the rows to fit, one tuned model is trained without that source (on a sample of the rest,
// see confidenceTrain), and its
// logits on (up to confidenceRows of) that source's rows, with the
// Familiarity features the full model computes for them, are what the
// weights are fitted on, each source weighing the same. Sources with fewer
// than 50 rows are not held out.
func fitConfidence(ctx context.Context, o Tier1Options, d *tier1Data, model *static.Model, logf func(string, ...any)) (*classifier.Confidence, error) {
	bySource := map[string][]int{} // positions in d.fit
	for k, i := range d.fit.rows {
		s := d.set.Rows[i].Source
		bySource[s] = append(bySource[s], k)
	}
	var sources []string
	for s, ks := range bySource {
		if len(ks) >= 50 {
			sources = append(sources, s)
		}
	}
	sort.Strings(sources)
	if len(sources) < 2 {
		return nil, fmt.Errorf("training: confidence: %d sources of 50 rows or more (the source column), need 2 to hold one out", len(sources))
	}
	var logits, phi [][]float32
	var y []int
	var weight []float32
	start := time.Now()
	for n, src := range sources {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var texts []string
		var ys []int
		held := map[int]bool{}
		for _, k := range bySource[src] {
			held[k] = true
		}
		stride := (len(d.fit.text) - len(held) + confidenceTrain - 1) / confidenceTrain
		var kept int
		for k := range d.fit.text {
			if held[k] {
				continue
			}
			if kept%stride == 0 {
				texts = append(texts, d.fit.text[k])
				ys = append(ys, d.fit.y[k])
			}
			kept++
		}
		tuned, head, enc, err := static.Tune(d.tok, d.base, texts, ys, d.classes, static.TuneOptions{
			Epochs: min(o.Epochs, confidenceEpochs), LearningRate: float32(o.LearningRate), Balance: o.Balance, Dropout: float32(o.Dropout),
			Seed: o.Seed, MaxTokens: o.MaxTokens, Bigrams: o.Bigrams, MinCount: o.MinCount, SIF: o.SIF, Prune: o.Prune,
			Structure: o.Structure,
		})
		if err != nil {
			return nil, err
		}
		member, err := static.New(d.tok, tuned, head, enc)
		if err != nil {
			return nil, err
		}
		ks := bySource[src]
		step := (len(ks) + confidenceRows - 1) / confidenceRows
		var judged int
		for j := 0; j < len(ks); j += step {
			judged++
		}
		for j := 0; j < len(ks); j += step {
			k := ks[j]
			z := make([]float32, len(d.classes))
			member.Logits(d.fit.text[k], z)
			f := make([]float32, len(static.Familiarity))
			model.Phi(d.fit.text[k], f)
			logits, phi, y = append(logits, z), append(phi, f), append(y, d.fit.y[k])
			weight = append(weight, 1/float32(judged))
		}
		logf("train: confidence: held out %s (%d of %d rows judged; %d/%d, %s)", src, judged, len(ks), n+1, len(sources), time.Since(start).Round(time.Second))
	}
	w := classifier.FitConfidence(logits, phi, y, weight)
	parts := make([]string, len(w))
	for i, v := range w {
		parts[i] = static.Familiarity[i] + " " + strconv.FormatFloat(float64(v), 'f', 3, 32)
	}
	logf("train: confidence: %s (fitted on %d rows of %d sources, each held out)", strings.Join(parts, ", "), len(y), len(sources))
	return &classifier.Confidence{Features: append([]string(nil), static.Familiarity...), W: w, Fit: map[string]string{
		"held_out": strings.Join(sources, ","), "rows": strconv.Itoa(len(y)), "per_source": strconv.Itoa(confidenceRows)}}, nil
}
