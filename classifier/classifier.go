package classifier

import (
	"context"
	"errors"
	"math"
	"sort"
)

// ErrUnavailable is returned by a tier that cannot run in this build or
// configuration; the message says why (a missing build tag, say).
var ErrUnavailable = errors.New("classifier: tier unavailable")

// ErrEncoderDown is returned by a tier whose remote encoder kept failing:
// it is not called until its breaker's cooldown ends.
var ErrEncoderDown = errors.New("classifier: the encoder keeps failing: not called until its cooldown ends")

// Classifier is one tier: it scores text and fills r, reusing r.Top's
// capacity. text is valid only during the call (callers may pass a view of
// a reused buffer): implementations must not keep it. Implementations are
// safe for concurrent use. A tier that cannot
// run returns an error wrapping ErrUnavailable; one that ran out of time
// returns ctx's error.
type Classifier interface {
	Classify(ctx context.Context, text string, r *Result) error
}

// Scored is one class and its score (a calibrated probability).
type Scored struct {
	Class string  `json:"class"`
	Score float32 `json:"score"`
}

// Result is a tier's verdict: the top class, its score, the tier that
// produced it, and the top-k classes in descending order of score.
type Result struct {
	Class string   `json:"class"`
	Score float32  `json:"score"`
	Tier  int      `json:"tier"`
	Top   []Scored `json:"top"`
	// Tokens is how many tokens were used (after the cap), for reports.
	Tokens int `json:"tokens"`
	// Distance is 1 − the cosine between the text's features and its top
	// class's centroid (0 to 2; see Centroids): how unlike that class's
	// training texts it is. 0 when the tier has no centroids.
	Distance float32 `json:"distance,omitempty"`
	// Probs is the probability of every class, in the order of the
	// tier's head classes (both built-in tiers fill it; a tier that does
	// not leaves it empty and Top stands for it). Routing sums it over a
	// route's classes.
	Probs []float32 `json:"-"`
}

// SetProbs keeps a copy of probs in r.Probs, reusing its capacity.
func (r *Result) SetProbs(probs []float32) { r.Probs = append(r.Probs[:0], probs...) }

// SetTop fills r from probabilities over classes, keeping the k best in
// r.Top (reusing its capacity: no allocation once it holds k).
func (r *Result) SetTop(classes []string, probs []float32, k int) {
	if k > len(classes) {
		k = len(classes)
	}
	r.Top = r.Top[:0]
	for i, p := range probs {
		// Insertion into a short sorted list: k is small.
		if len(r.Top) < k {
			r.Top = append(r.Top, Scored{})
		} else if p <= r.Top[k-1].Score {
			continue
		}
		j := len(r.Top) - 1
		for j > 0 && r.Top[j-1].Score < p {
			r.Top[j] = r.Top[j-1]
			j--
		}
		r.Top[j] = Scored{Class: classes[i], Score: p}
	}
	if len(r.Top) > 0 {
		r.Class, r.Score = r.Top[0].Class, r.Top[0].Score
	}
}

// Softmax turns logits into probabilities in place, dividing them by
// temperature first (1 leaves them as they are).
func Softmax(logits []float32, temperature float32) {
	if temperature <= 0 {
		temperature = 1
	}
	maxv := float32(math.Inf(-1))
	for _, v := range logits {
		if v > maxv {
			maxv = v
		}
	}
	var sum float32
	for i, v := range logits {
		e := float32(math.Exp(float64((v - maxv) / temperature)))
		logits[i] = e
		sum += e
	}
	for i := range logits {
		logits[i] /= sum
	}
}

// L2Normalize scales v to unit length in place; a zero vector stays zero.
// It returns the original norm.
func L2Normalize(v []float32) float32 {
	var s float32
	for _, x := range v {
		s += x * x
	}
	if s == 0 {
		return 0
	}
	n := float32(math.Sqrt(float64(s)))
	inv := 1 / n
	for i := range v {
		v[i] *= inv
	}
	return n
}

// Argmax returns the index of the largest value (the first on ties).
func Argmax(v []float32) int {
	best := 0
	for i := range v {
		if v[i] > v[best] {
			best = i
		}
	}
	return best
}

// ClassIndex maps class names to their index.
func ClassIndex(classes []string) map[string]int {
	m := make(map[string]int, len(classes))
	for i, c := range classes {
		m[c] = i
	}
	return m
}

// SortedClasses returns the distinct labels, sorted.
func SortedClasses(labels []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range labels {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}
