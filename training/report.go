package training

import (
	"path/filepath"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
)

// evaluate reports on the labelled set at path with probs, fills in
// r.EvalName and r.Reports, and returns the reports as the artifact keeps
// them: by the set's file name (and slice).
func (r *Result) evaluate(path string, probs func(text string, out []float32), classes []string) (map[string]classifier.Report, error) {
	set, err := datasets.ReadJSONL(path)
	if err != nil {
		return nil, err
	}
	return r.report(path, evaluate(probs, set, classes)), nil
}

// report records reports on the set at path in r and returns them as the
// artifact keeps them.
func (r *Result) report(path string, reports map[string]classifier.Report) map[string]classifier.Report {
	r.EvalName, r.Reports = filepath.Base(path), reports
	kept := make(map[string]classifier.Report, len(reports))
	for k, rep := range reports {
		kept[r.EvalName+k] = rep
	}
	return kept
}

// evaluate reports on a labelled set: overall (key "") and per realism
// (key "/realism=X"). Rows whose label the head does not know are left
// out.
func evaluate(probs func(text string, out []float32), set *datasets.Set, classes []string) map[string]classifier.Report {
	return evaluateRows(set.Rows, func(_ int, r datasets.Row, out []float32) { probs(r.Text, out) }, classes)
}

// evaluateRows is evaluate on rows, probs given each row and its index.
func evaluateRows(rows []datasets.Row, probs func(i int, r datasets.Row, out []float32), classes []string) map[string]classifier.Report {
	index := classifier.ClassIndex(classes)
	type slice struct {
		probs [][]float32
		y     []int
	}
	slices := map[string]*slice{}
	add := func(k string, p []float32, y int) {
		s := slices[k]
		if s == nil {
			s = &slice{}
			slices[k] = s
		}
		s.probs, s.y = append(s.probs, p), append(s.y, y)
	}
	for i, r := range rows {
		y, ok := index[r.Label]
		if !ok {
			continue
		}
		p := make([]float32, len(classes))
		probs(i, r, p)
		add("", p, y)
		if r.Realism != "" {
			add("/realism="+r.Realism, p, y)
		}
	}
	out := map[string]classifier.Report{}
	for k, s := range slices {
		out[k] = classifier.Evaluate(classes, s.probs, s.y)
	}
	return out
}
