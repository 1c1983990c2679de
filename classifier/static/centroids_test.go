package static

import (
	"context"
	"math"
	"path/filepath"
	"sort"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/internal/testenv"
)

// With centroids, Classify reports the distance of the text's features
// from its top class's centroid, as Features and the centroid give it; the
// model keeps its vectors to do so (New would fold this head), classifies
// as the folded model does.
func TestClassifyDistance(t *testing.T) {
	folded := newTiny(t, 50)
	if !folded.Folded() {
		t.Fatal("the tiny model should fold: the test needs a model New folds")
	}
	tk := tokenizer(t)
	tb := tinyTable(t, tk, 8, []string{"landlord"}, 50)
	enc := classifier.Encoder{Kind: "static", MaxTokens: 64, Normalize: "mean", Bigrams: 50}
	head := folded.Head()
	vectors, err := NewWithCentroids(tk, tb, head, enc, nil)
	if err != nil || vectors.Folded() {
		t.Fatalf("NewWithCentroids(nil): %v, folded %v", err, vectors.Folded())
	}
	texts := []string{"my landlord kept the deposit", "integrals and derivatives", "a recipe for bread", "the court ruled", "wear and tear"}
	feats := make([][]float32, len(texts))
	for i, text := range texts {
		feats[i] = make([]float32, head.Dims)
		vectors.Features(text, feats[i])
	}
	cent, err := classifier.NewCentroids(feats, []int{0, 1, 2, 0, 1}, 3, head.Dims, classifier.CentroidRowsAll)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewWithCentroids(tk, tb, head, enc, cent)
	if err != nil {
		t.Fatal(err)
	}
	var r, rf classifier.Result
	f := make([]float32, head.Dims)
	for _, text := range append(texts, classifyText, "") {
		m.Classify(context.Background(), text, &r)
		folded.Classify(context.Background(), text, &rf)
		if r.Class != rf.Class || math.Abs(float64(r.Score-rf.Score)) > 1e-5 || rf.Distance != 0 {
			t.Errorf("%q: with centroids %s %v, folded %s %v (distance %v)", text, r.Class, r.Score, rf.Class, rf.Score, rf.Distance)
		}
		m.Features(text, f)
		k := classifier.ClassIndex(head.Classes)[r.Class]
		var dot, norm float64
		for i, v := range f {
			dot += float64(v) * float64(cent.W[k*head.Dims+i])
			norm += float64(v) * float64(v)
		}
		want := 1.0
		if norm > 0 {
			want = 1 - dot/math.Sqrt(norm)
		}
		if math.Abs(float64(r.Distance)-want) > 1e-5 {
			t.Errorf("%q: distance %v, want %v", text, r.Distance, want)
		}
	}
}

// With centroids, Classify still allocates nothing.
func TestClassifyDistanceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector: make test checks allocations without it")
	}
	tk := tokenizer(t)
	tb := tinyTable(t, tk, 8, []string{"landlord"}, 50)
	head := newTiny(t, 50).Head()
	cent := &classifier.Centroids{Dims: 8, W: make([]float32, 24), Rows: classifier.CentroidRowsAll}
	for k := range 3 {
		cent.W[k*8+k] = 1
	}
	m, err := NewWithCentroids(tk, tb, head, classifier.Encoder{Kind: "static", MaxTokens: 64, Normalize: "mean", Bigrams: 50}, cent)
	if err != nil {
		t.Fatal(err)
	}
	var r classifier.Result
	m.Classify(context.Background(), classifyText, &r)
	if n := testing.AllocsPerRun(200, func() { m.Classify(context.Background(), classifyText, &r) }); n != 0 || r.Distance == 0 {
		t.Fatalf("Classify with centroids allocates %v times per call in steady state (distance %v)", n, r.Distance)
	}
}

// The default heads carry centroids (of their training data's rows that
// are not exam questions), and the distance tells tier 1's confident
// errors on dev's real users' rows (not exam questions) from its
// confident right answers (bench/tier1-confidence.md: AUROC 0.77,
// against 0.67 for the top probability).
func TestDefaultHeadsDistance(t *testing.T) {
	h, m := defaultModel(t)
	if h.Tier1.Centroids == nil || m.Centroids() == nil {
		t.Fatal("the default heads have no tier-1 centroids")
	}
	shared := testenv.Shared(t, "datasets/subjects/dev.jsonl")
	dev, err := datasets.ReadJSONL(filepath.Join(shared, "datasets", "subjects", "dev.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var right, wrong []float64
	var r classifier.Result
	for _, row := range dev.Rows {
		if classifier.ExamRealism(row.Realism) {
			continue
		}
		m.Classify(context.Background(), row.Text, &r)
		if r.Score < 0.8 {
			continue
		}
		if r.Class == row.Label {
			right = append(right, float64(r.Distance))
		} else {
			wrong = append(wrong, float64(r.Distance))
		}
	}
	sort.Float64s(right)
	var above float64 // pairs where the wrong answer is further
	for _, w := range wrong {
		above += float64(sort.SearchFloat64s(right, w))
	}
	auroc := above / float64(len(wrong)*len(right))
	t.Logf("dev, rows not exam questions: %d confident right, %d wrong; distance AUROC %.3f", len(right), len(wrong), auroc)
	if len(wrong) < 30 || auroc < 0.72 {
		t.Fatalf("distance AUROC %.3f on %d wrong and %d right confident answers; want at least 0.72", auroc, len(wrong), len(right))
	}
}
