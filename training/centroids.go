package training

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/datasets"
)

// DefaultCentroidRows are the rows tier 1's centroids are made of unless
// asked otherwise: the rows that are not exam questions. Judged on dev by
// `triage calibrate --rules examples/subjects/rules.yaml --group-by
// source` with tier2.unfamiliar_at among the candidates, they make the
// better escalation signal (bench/tier1-confidence.md).
const DefaultCentroidRows = classifier.CentroidRowsUser

// centroids computes tier 1's class centroids from the feature vectors
// model computes for the rows d fits on: all of them, or (rows
// CentroidRowsUser) those whose realism is not an exam's, a class with
// none such taking all of its rows. model must keep its vectors (not be
// folded).
func centroids(model *static.Model, d *tier1Data, rows string) (*classifier.Centroids, error) {
	if rows != classifier.CentroidRowsAll && rows != classifier.CentroidRowsUser {
		return nil, fmt.Errorf("training: centroid rows %q: want %s or %s", rows, classifier.CentroidRowsAll, classifier.CentroidRowsUser)
	}
	k, dims := len(d.classes), model.Head().Dims
	user := make([]bool, k) // the class has a row that is not an exam question
	for j := range d.fit.text {
		if !classifier.ExamRealism(d.set.Rows[d.fit.rows[j]].Realism) {
			user[d.fit.y[j]] = true
		}
	}
	var feats [][]float32
	var y []int
	count := make([]int, k)
	for j, text := range d.fit.text {
		c := d.fit.y[j]
		if rows == classifier.CentroidRowsUser && user[c] && classifier.ExamRealism(d.set.Rows[d.fit.rows[j]].Realism) {
			continue
		}
		f := make([]float32, dims)
		if _, ok := model.Features(text, f); !ok {
			return nil, fmt.Errorf("training: centroids: tier 1 is folded: no feature vectors")
		}
		feats, y = append(feats, f), append(y, c)
		count[c]++
	}
	cent, err := classifier.NewCentroids(feats, y, k, dims, rows)
	if err != nil {
		return nil, fmt.Errorf("training: %w", err)
	}
	per := make([]string, k)
	for c, name := range d.classes {
		per[c] = name + " " + strconv.Itoa(count[c])
		if !user[c] && rows == classifier.CentroidRowsUser {
			per[c] += " (exam rows: it has no others)"
		}
	}
	cent.Fit = map[string]string{"data": filepath.Base(d.set.Path), "data_sha256": d.set.SHA256,
		"rows": strconv.Itoa(len(feats)), "per_class": strings.Join(per, ", ")}
	return cent, nil
}

// AddCentroidsOptions say which artifact AddCentroids completes, from
// what.
type AddCentroidsOptions struct {
	// Dir is the heads artifact; its tier 1 gets the centroids.
	Dir string
	// ModelsDir is where the artifact's table and tokenizer are found
	// when not in Dir.
	ModelsDir string
	// Data is the labelled JSONL tier 1 was trained on: its sha256 must
	// be the one the artifact records.
	Data string
	// Rows: classifier.CentroidRowsAll or CentroidRowsUser (default
	// DefaultCentroidRows).
	Rows string
}

// AddCentroids computes tier-1 centroids for an artifact trained without
// them, from the rows its tier 1 was fitted on (its training data, the
// same share held out by the same hash), and saves the artifact with them
// and its version marked "+centroids". The weights, floors and reports
// are unchanged: every decision that does not read the distance stays the
// same.
func AddCentroids(o AddCentroidsOptions) (*classifier.Heads, error) {
	if o.Rows == "" {
		o.Rows = DefaultCentroidRows
	}
	h, err := classifier.LoadHeads(o.Dir)
	if err != nil {
		return nil, err
	}
	t := h.Tier1
	if t == nil {
		return nil, fmt.Errorf("training: heads %s have no tier 1", h.Dir)
	}
	set, err := datasets.ReadJSONL(o.Data)
	if err != nil {
		return nil, err
	}
	if set.SHA256 != t.Training.DataSHA256 {
		return nil, fmt.Errorf("training: %s has sha256 %s; tier 1 of %s was trained on %s (sha256 %s)", o.Data, set.SHA256, h.Dir, t.Training.Data, t.Training.DataSHA256)
	}
	holdout, _ := t.Training.Params["holdout"].(float64)
	firstLines, _ := t.Training.Params["first_lines"].(bool)
	model, err := static.LoadVectors(h, o.ModelsDir)
	if err != nil {
		return nil, err
	}
	index := classifier.ClassIndex(h.Classes)
	for _, r := range set.Rows {
		if _, ok := index[r.Label]; !ok {
			return nil, fmt.Errorf("training: %s: label %q is not a class of %s", o.Data, r.Label, h.Dir)
		}
	}
	texts := make([]string, len(set.Rows))
	for i, r := range set.Rows {
		texts[i] = r.Text
	}
	fit, _ := holdOut(texts, holdout)
	d := &tier1Data{set: set, classes: h.Classes, fit: fit.of(set, index)}
	if firstLines {
		d.fit = d.fit.withFirstLines()
	}
	if len(d.fit.text) != t.Training.Rows {
		return nil, fmt.Errorf("training: %s holds out %d rows to fit on; tier 1 of %s was fitted on %d", o.Data, len(d.fit.text), h.Dir, t.Training.Rows)
	}
	if t.Centroids, err = centroids(model, d, o.Rows); err != nil {
		return nil, err
	}
	if !strings.HasSuffix(h.Version, "+centroids") {
		h.Version += "+centroids"
	}
	if err := h.Save(h.Dir); err != nil {
		return nil, err
	}
	return h, nil
}
