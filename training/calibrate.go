package training

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/evaluation"
)

// MinCalibrationRows is the fewest rows with a known label Calibrate
// fits on.
const MinCalibrationRows = 50

// CalibrateOptions say what Calibrate fits, and on what.
type CalibrateOptions struct {
	// Classes are the heads' classes, Temperature the tier's current one
	// (0 means 1).
	Classes     []string
	Temperature float32
	// Logits scores texts with the tier's head: one row of len(Classes)
	// logits per text.
	Logits func(ctx context.Context, texts []string) ([][]float32, error)
	// Refit refits the temperature on the rows first; otherwise the
	// current one calibrates the scores.
	Refit bool
	// GroupBy names the column holding each row's source: with it, floors
	// must hold in every source and are judged leaving each source out.
	GroupBy string
	// Floors tune the fit (evaluation.FitFloors); their Classes default
	// to every class but "other", and Robust is set by GroupBy.
	Floors evaluation.FloorOptions
}

// Calibration is what Calibrate fitted.
type Calibration struct {
	// Rows is the number of rows fitted on: those whose label is a class.
	Rows int
	// OldTemperature and Temperature are the tier's temperature before
	// and after; OldECE and ECE the expected calibration errors with each.
	OldTemperature, Temperature float32
	OldECE, ECE                 float64
	// Floors are the fitted floors, per class, at Temperature.
	Floors evaluation.FloorReport
	// Eval reports the tier at Temperature on the rows fitted on, keyed
	// as training keys its held-out reports after the set's name: "" for
	// all rows, "/realism=X" per realism.
	Eval map[string]classifier.Report
}

// RefreshEval replaces tier n's reports on the calibration set in h (those
// keyed by name, the set's file name, as training keys them) with c.Eval,
// so that an artifact's figures on that set are its calibrated
// temperature's, with the encoder it names, and not those of the
// temperature (or encoder) it was trained with. A tier without reports on
// that set gets none: a calibration set is not a held-out set unless it
// was one already. h's tier must be its own (as Heads.Calibrated's copy's
// is): its Eval map is replaced, not written to. It returns the reports on
// other sets that stay as they were.
func (c *Calibration) RefreshEval(h *classifier.Heads, n int, name string) (kept []string) {
	t := h.Tier(n)
	if t == nil {
		return nil
	}
	if _, ok := t.Eval[name]; !ok {
		for k := range t.Eval {
			kept = append(kept, k)
		}
		sort.Strings(kept)
		return kept
	}
	eval := make(map[string]classifier.Report, len(t.Eval))
	for k, r := range t.Eval {
		if k != name && !strings.HasPrefix(k, name+"/") {
			eval[k] = r
			kept = append(kept, k)
		}
	}
	for k, r := range c.Eval {
		eval[name+k] = r
	}
	t.Eval = eval
	sort.Strings(kept)
	return kept
}

// FloorsByClass returns the fitted floors by class, as
// classifier.Heads.Calibrated takes them.
func (c *Calibration) FloorsByClass() map[string]float32 {
	m := make(map[string]float32, len(c.Floors.Classes))
	for _, f := range c.Floors.Classes {
		m[f.Class] = float32(f.Floor)
	}
	return m
}

// ErrTooFewRows is Calibrate's error when fewer than MinCalibrationRows
// rows have a label the heads know.
var ErrTooFewRows = errors.New("calibration needs more")

// Calibrate fits a tier's temperature (with o.Refit) and per-class floors
// on rows, the calibration set (not the training data). Rows whose label
// is not one of o.Classes are left out.
func Calibrate(ctx context.Context, rows []datasets.Row, o CalibrateOptions) (*Calibration, error) {
	if o.Logits == nil {
		return nil, errors.New("training: no logits to calibrate")
	}
	index := classifier.ClassIndex(o.Classes)
	var known []datasets.Row
	for _, r := range rows {
		if _, ok := index[r.Label]; ok {
			known = append(known, r)
		}
	}
	if len(known) < MinCalibrationRows {
		return nil, fmt.Errorf("%d rows with a label the heads know; %w", len(known), ErrTooFewRows)
	}
	// Logits once; the temperature, then calibrated scores.
	texts := make([]string, len(known))
	y := make([]int, len(known))
	for i, r := range known {
		texts[i], y[i] = r.Text, index[r.Label]
	}
	logits, err := o.Logits(ctx, texts)
	if err != nil {
		return nil, err
	}
	c := &Calibration{Rows: len(known), OldTemperature: o.Temperature, Temperature: o.Temperature}
	if o.Refit {
		c.Temperature = classifier.FitTemperature(logits, y)
	}
	c.OldECE, c.ECE = calibratedECE(logits, y, c.OldTemperature), calibratedECE(logits, y, c.Temperature)
	scored := make([]evaluation.Scored, len(known))
	p := make([]float32, len(o.Classes))
	for i, r := range known {
		copy(p, logits[i])
		classifier.Softmax(p, c.Temperature)
		best := classifier.Argmax(p)
		scored[i] = evaluation.Scored{Pred: o.Classes[best], Score: p[best], Label: r.Label, Group: r.Cols[o.GroupBy], Key: r.Text}
	}
	fo := o.Floors
	if fo.Classes == nil {
		for _, c := range o.Classes {
			if c != "other" {
				fo.Classes = append(fo.Classes, c)
			}
		}
	}
	fo.Robust = o.GroupBy != ""
	c.Floors = evaluation.FitFloors(scored, fo)
	c.Eval = evaluateRows(known, func(i int, _ datasets.Row, out []float32) {
		copy(out, logits[i])
		classifier.Softmax(out, c.Temperature)
	}, o.Classes)
	return c, nil
}

// calibratedECE is the expected calibration error of softmax(logits/t).
func calibratedECE(logits [][]float32, y []int, t float32) float64 {
	probs := make([][]float32, len(logits))
	for i, l := range logits {
		probs[i] = append([]float32(nil), l...)
		classifier.Softmax(probs[i], t)
	}
	classes := make([]string, len(logits[0]))
	for i := range classes {
		classes[i] = fmt.Sprint(i)
	}
	return classifier.Evaluate(classes, probs, y).ECE
}
