package classifier

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Centroids are the unit mean of a tier's feature vectors per class, over
// the texts it was trained on: how far a text's features lie from its
// predicted class's centroid says how unlike that class's training texts
// it is. Tier 1 is often confidently wrong on such text, and the distance
// tells its confident errors from its confident right answers better than
// its probability does on real users' posts (bench/tier1-confidence.md).
// They are tier 1's only: tier 2 does not read them.
type Centroids struct {
	// Dims is the features' length (the head's Dims); W holds one unit row
	// of Dims values per class of the head, in its order.
	Dims int       `json:"dims"`
	W    []float32 `json:"w"`
	// Rows says which training rows made them: CentroidRowsAll, or
	// CentroidRowsUser (the rows whose realism is not an exam's).
	Rows string `json:"rows"`
	// Fit says how: the data and its sha256, the rows used per class.
	Fit map[string]string `json:"fit,omitempty"`
}

// The rows centroids are made of.
const (
	// CentroidRowsAll: every row the tier was trained on.
	CentroidRowsAll = "all"
	// CentroidRowsUser: the rows that are not exam questions (realism
	// exam or exam_wordproblem), each class's all of its rows when it has
	// none such.
	CentroidRowsUser = "user"
)

// ExamRealism reports whether a row's realism column marks an exam
// question (exam, exam_wordproblem): text written to test, not asked.
func ExamRealism(realism string) bool { return strings.HasPrefix(realism, "exam") }

// Validate checks the centroids against a head of classes classes and
// dims dims: one finite, unit-length row per class.
func (c *Centroids) Validate(classes, dims int) error {
	var errs []error
	if c.Dims != dims {
		errs = append(errs, fmt.Errorf("centroids: dims %d, the head's %d", c.Dims, dims))
	}
	if len(c.W) != classes*dims {
		return errors.Join(append(errs, fmt.Errorf("centroids: %d values, want %d classes x %d dims", len(c.W), classes, dims))...)
	}
	if c.Rows != CentroidRowsAll && c.Rows != CentroidRowsUser {
		errs = append(errs, fmt.Errorf("centroids: rows %q, want %q or %q", c.Rows, CentroidRowsAll, CentroidRowsUser))
	}
	for k := range classes {
		var s float64
		for _, v := range c.W[k*dims : (k+1)*dims] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return errors.Join(append(errs, errors.New("centroids: a non-finite value"))...)
			}
			s += float64(v) * float64(v)
		}
		if math.Abs(s-1) > 1e-3 {
			errs = append(errs, fmt.Errorf("centroids: class %d has length %.4f, want 1", k, math.Sqrt(s)))
		}
	}
	return errors.Join(errs...)
}

// Distance is 1 − the cosine between feat and class k's centroid: 0 for
// a text whose features point where the class's training texts do, up to
// 2; 1 for a zero feat (no tokens). One pass over feat, no allocation.
func (c *Centroids) Distance(feat []float32, k int) float32 {
	row := c.W[k*c.Dims : (k+1)*c.Dims]
	feat = feat[:len(row)]
	var dot, norm float32
	for i, v := range feat {
		dot += v * row[i]
		norm += v * v
	}
	if norm == 0 {
		return 1
	}
	return 1 - dot/float32(math.Sqrt(float64(norm)))
}

// NewCentroids builds centroids from feature vectors feats (each of dims
// values) and their classes y (indices into k classes): each class's mean
// of its unit-length vectors, normalised. A class without a row gets an
// error: its centroid would say nothing.
func NewCentroids(feats [][]float32, y []int, k, dims int, rows string) (*Centroids, error) {
	c := &Centroids{Dims: dims, W: make([]float32, k*dims), Rows: rows}
	sum := make([]float64, k*dims)
	count := make([]int, k)
	unit := make([]float64, dims)
	for i, f := range feats {
		var s float64
		for j, v := range f[:dims] {
			unit[j] = float64(v)
			s += float64(v) * float64(v)
		}
		if s == 0 {
			continue
		}
		inv := 1 / math.Sqrt(s)
		row := sum[y[i]*dims : (y[i]+1)*dims]
		for j := range row {
			row[j] += unit[j] * inv
		}
		count[y[i]]++
	}
	for cl := range k {
		if count[cl] == 0 {
			return nil, fmt.Errorf("centroids: class %d has no row with features", cl)
		}
		row := sum[cl*dims : (cl+1)*dims]
		var s float64
		for _, v := range row {
			s += v * v
		}
		if s == 0 {
			return nil, fmt.Errorf("centroids: class %d's rows cancel out", cl)
		}
		inv := 1 / math.Sqrt(s)
		for j, v := range row {
			c.W[cl*dims+j] = float32(v * inv)
		}
	}
	return c, nil
}
