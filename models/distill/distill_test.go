package distill

import (
	"context"
	"errors"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/sif"
)

// fakeTeacher embeds a text in a 2-d subspace of R^6 (coordinates from a
// hash of the text), so that PCA to 2 dimensions keeps every distance. It
// counts its calls and the texts it saw.
type fakeTeacher struct {
	calls atomic.Int64
	mu    sync.Mutex
	seen  map[string]int
}

func (f *fakeTeacher) embed(ctx context.Context, text string) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.calls.Add(1)
	f.mu.Lock()
	if f.seen == nil {
		f.seen = map[string]int{}
	}
	f.seen[text]++
	f.mu.Unlock()
	h := fnv.New64a()
	h.Write([]byte(text))
	s := h.Sum64()
	x := float64(s&0xffff)/0xffff - 0.5
	y := float64(s>>16&0xffff)/0xffff - 0.5
	// Axes (1,1,0,0,0,0)/√2 and (0,0,1,0,2,0)/√5, plus an offset.
	r2, r5 := 1/math.Sqrt2, 1/math.Sqrt(5)
	return []float32{float32(x*r2 + 1), float32(x * r2), float32(y * r5), 3, float32(2 * y * r5), -1}, nil
}

var distillVocab = []string{
	"[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
	"the", "of", "law", "court", "##s", "ing", "##ing", "derivative", "##", "", "protein", "s",
}

func TestTable(t *testing.T) {
	var ft fakeTeacher
	tab, err := Table(context.Background(), distillVocab, ft.embed, Options{Dims: 2, Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if tab.Rows() != len(distillVocab) || tab.VocabSize() != len(distillVocab) || tab.Dims() != 2 || tab.Quant() != models.QuantF32 || tab.Buckets() != 0 || len(tab.ExtraWords()) != 0 {
		t.Fatalf("table: %d rows, vocab %d, %d dims, %s, %d buckets, %d extra", tab.Rows(), tab.VocabSize(), tab.Dims(), tab.Quant(), tab.Buckets(), len(tab.ExtraWords()))
	}
	if tab.Manifest.Method != "distill" || !strings.Contains(tab.Manifest.Notes, "100.0% of the variance") {
		t.Errorf("manifest: method %q, notes %q", tab.Manifest.Method, tab.Manifest.Notes)
	}
	// Each distinct surface form once: "##ing" is "ing", "##s" is "s".
	for text, n := range ft.seen {
		if n != 1 || strings.HasPrefix(text, "##") || strings.HasPrefix(text, "[") || text == "" {
			t.Errorf("teacher saw %q %d times", text, n)
		}
	}
	if len(ft.seen) != 8 {
		t.Errorf("teacher saw %d forms, want 8: %v", len(ft.seen), ft.seen)
	}
	row := map[string]int32{}
	for i, tok := range distillVocab {
		row[tok] = int32(i)
	}
	vec := func(tok string) []float32 { return tab.Vector(row[tok], nil) }
	// Specials, "##" and "" are zero rows of weight 0.
	for _, tok := range []string{"[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "##", ""} {
		if w := tab.Weight(row[tok]); w != 0 || !isZero(vec(tok)) {
			t.Errorf("%q: weight %v, vector %v; want a zero row of weight 0", tok, w, vec(tok))
		}
	}
	for _, pair := range [][2]string{{"##ing", "ing"}, {"##s", "s"}} {
		if a, b := vec(pair[0]), vec(pair[1]); a[0] != b[0] || a[1] != b[1] {
			t.Errorf("%s %v != %s %v", pair[0], a, pair[1], b)
		}
	}
	// PCA onto the subspace the vectors span keeps their distances, and
	// centres them.
	words := []string{"the", "of", "law", "court", "ing", "derivative", "protein", "s"}
	var mean [2]float64
	for _, a := range words {
		v := vec(a)
		mean[0] += float64(v[0]) / float64(len(words))
		mean[1] += float64(v[1]) / float64(len(words))
		for _, b := range words {
			ta, _ := ft.embed(context.Background(), a)
			tb, _ := ft.embed(context.Background(), b)
			if got, want := dist(vec(a), vec(b)), dist(ta, tb); math.Abs(got-want) > 1e-5 {
				t.Errorf("distance %s-%s: %v in the table, %v from the teacher", a, b, got, want)
			}
		}
	}
	if math.Abs(mean[0])+math.Abs(mean[1]) > 1e-5 {
		t.Errorf("mean of the rows %v, want 0 (PCA centres)", mean)
	}
	// Zipf/SIF weights: rank in id order among the 10 rows with a vector.
	want := RankWeights(distillVocab, nil, 0)
	prev := float32(0)
	for i, tok := range distillVocab {
		if got := tab.Weight(int32(i)); got != want[i] {
			t.Errorf("%q: weight %v, RankWeights %v", tok, got, want[i])
		}
		if _, ok := Surface(tok); ok {
			if want[i] <= prev || want[i] >= 1 {
				t.Errorf("%q: weight %v after %v, want increasing in (0, 1)", tok, want[i], prev)
			}
			prev = want[i]
		}
	}
	h := math.Log(1.78 * 10)
	if got, w := float64(want[row["the"]]), sif.A/(sif.A+1/h); math.Abs(got-w) > 1e-7 {
		t.Errorf("weight of rank 1: %v, want %v", got, w)
	}
}

func dist(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s)
}

// tableBytes is tb in the table file format.
func tableBytes(t *testing.T, tb *models.Table) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.tbl")
	if _, err := tb.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDistillDeterministic(t *testing.T) {
	var ft fakeTeacher
	var ref []byte
	for _, w := range []int{1, 2, 7} {
		tab, err := Table(context.Background(), distillVocab, ft.embed, Options{Dims: 3, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		tab.Manifest.Notes = "" // holds timings
		b := tableBytes(t, tab)
		if ref == nil {
			ref = b
		} else if string(b) != string(ref) {
			t.Fatalf("workers %d: a different table", w)
		}
	}
}

func TestOptions(t *testing.T) {
	var ft fakeTeacher
	ctx := context.Background()
	// Given weights, a limit, a custom a, and the default dims capped.
	given := make([]float32, len(distillVocab))
	for i := range given {
		given[i] = float32(i) + 0.5
	}
	var calls []int
	tab, err := Table(ctx, distillVocab, ft.embed, Options{Dims: 6, Weights: given, Limit: 3, Workers: 1,
		Progress: func(done, total int) { calls = append(calls, done, total) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0] != 3 || calls[1] != 3 {
		t.Errorf("progress calls %v, want one (3, 3)", calls)
	}
	if !strings.Contains(tab.Manifest.Notes, "past the limit of 3") {
		t.Errorf("notes %q", tab.Manifest.Notes)
	}
	for i, tok := range distillVocab {
		w := tab.Weight(int32(i))
		switch tok {
		case "the", "of", "law":
			if w != given[i] {
				t.Errorf("%q: weight %v, given %v", tok, w, given[i])
			}
		default:
			if w != 0 || !isZero(tab.Vector(int32(i), nil)) {
				t.Errorf("%q: weight %v; want a zero row of weight 0 (special or past the limit)", tok, w)
			}
		}
	}
	a := RankWeights(distillVocab, nil, 0.5)
	b := RankWeights(distillVocab, nil, 0)
	if a[row0(t, "the")] <= b[row0(t, "the")] {
		t.Errorf("a larger a should raise the weights: %v <= %v", a[row0(t, "the")], b[row0(t, "the")])
	}

	// The zero vector from the teacher: a zero row of weight 0.
	zeroFor := func(ctx context.Context, s string) ([]float32, error) {
		if s == "law" {
			return make([]float32, 6), nil
		}
		return ft.embed(ctx, s)
	}
	tab, err = Table(ctx, distillVocab, zeroFor, Options{Dims: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r := row0(t, "law"); tab.Weight(r) != 0 || !isZero(tab.Vector(r, nil)) || !strings.Contains(tab.Manifest.Notes, "1 of them the zero vector") {
		t.Errorf("law: weight %v, vector %v, notes %q", tab.Weight(r), tab.Vector(r, nil), tab.Manifest.Notes)
	}
}

func row0(t *testing.T, tok string) int32 {
	for i, v := range distillVocab {
		if v == tok {
			return int32(i)
		}
	}
	t.Fatalf("%q not in the vocabulary", tok)
	return -1
}

func TestDistillErrors(t *testing.T) {
	var ft fakeTeacher
	ctx := context.Background()
	boom := errors.New("boom")
	cases := []struct {
		name  string
		vocab []string
		embed func(context.Context, string) ([]float32, error)
		opts  Options
		want  string
	}{
		{"empty", nil, ft.embed, Options{}, "empty vocabulary"},
		{"no embed", distillVocab, nil, Options{}, "no embed"},
		{"all special", []string{"[PAD]", "##", ""}, ft.embed, Options{}, "all special"},
		{"weights", distillVocab, ft.embed, Options{Weights: []float32{1}}, "1 weights"},
		{"nan weight", distillVocab, ft.embed, Options{Weights: nanAt(len(distillVocab), 3)}, "weight of row 3 is NaN"},
		{"dims", distillVocab, ft.embed, Options{Dims: 7}, "7 dimensions asked"},
		{"default dims", distillVocab, ft.embed, Options{}, "256 dimensions asked"},
		{"negative dims", distillVocab, ft.embed, Options{Dims: -1}, "-1 dimensions"},
		{"error", distillVocab, func(ctx context.Context, s string) ([]float32, error) {
			if s == "court" {
				return nil, boom
			}
			return ft.embed(ctx, s)
		}, Options{Dims: 2, Workers: 2}, `embedding "court": boom`},
		{"ragged", distillVocab, func(ctx context.Context, s string) ([]float32, error) {
			v, err := ft.embed(ctx, s)
			if s == "court" {
				v = v[:5]
			}
			return v, err
		}, Options{Dims: 2}, "has 5 values"},
		{"nan", distillVocab, func(ctx context.Context, s string) ([]float32, error) {
			v, err := ft.embed(ctx, s)
			if s == "court" {
				v[2] = float32(math.NaN())
			}
			return v, err
		}, Options{Dims: 2}, "non-finite"},
		{"all zero", distillVocab, func(context.Context, string) ([]float32, error) { return make([]float32, 4), nil }, Options{Dims: 2}, "zero vector for every token"},
	}
	for _, c := range cases {
		_, err := Table(ctx, c.vocab, c.embed, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		if c.name == "error" && !errors.Is(err, boom) {
			t.Errorf("%s: %v does not wrap the embed error", c.name, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Table(cctx, distillVocab, ft.embed, Options{Dims: 2}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func nanAt(n, i int) []float32 {
	w := make([]float32, n)
	w[i] = float32(math.NaN())
	return w
}

func TestSurface(t *testing.T) {
	for tok, want := range map[string]string{"law": "law", "##ing": "ing", "##": "", "": "", "[PAD]": "", "[unused42]": "",
		"[": "[", "]": "]", "[]": "[]", "##[": "[", "##  ": ""} {
		got, ok := Surface(tok)
		if got != want || ok != (want != "") {
			t.Errorf("Surface(%q) = %q, %v; want %q", tok, got, ok, want)
		}
	}
}

func TestDistillExtraWords(t *testing.T) {
	var ft fakeTeacher
	extra := []string{"lawyers", "proteins", "court"} // "court" is also a token: both get its vector
	tab, err := Table(context.Background(), distillVocab, ft.embed, Options{Dims: 2, ExtraWords: extra})
	if err != nil {
		t.Fatal(err)
	}
	if tab.Rows() != len(distillVocab)+3 || tab.VocabSize() != len(distillVocab) || !slices.Equal(tab.ExtraWords(), extra) {
		t.Fatalf("%d rows, vocabulary %d, extra words %v", tab.Rows(), tab.VocabSize(), tab.ExtraWords())
	}
	if ft.seen["lawyers"] != 1 || ft.seen["court"] != 1 {
		t.Errorf("teacher calls %v: want each form once", ft.seen)
	}
	r, ok := tab.Word([]byte("court"))
	if !ok || r != int32(len(distillVocab)+2) || !slices.Equal(tab.Vector(r, nil), tab.Vector(row0(t, "court"), nil)) {
		t.Errorf("extra word court: row %d %v, vector %v; token court %v", r, ok, tab.Vector(r, nil), tab.Vector(row0(t, "court"), nil))
	}
	want := RankWeights(distillVocab, extra, 0)
	for i := range tab.Rows() {
		if got := tab.Weight(int32(i)); got != want[i] {
			t.Errorf("row %d: weight %v, RankWeights %v", i, got, want[i])
		}
	}
	if last := want[len(want)-1]; last <= want[row0(t, "s")] {
		t.Errorf("extra words rank after the vocabulary: %v <= %v", last, want[row0(t, "s")])
	}
	for _, bad := range [][]string{{"a", "a"}, {""}} {
		if _, err := Table(context.Background(), distillVocab, ft.embed, Options{Dims: 2, ExtraWords: bad}); err == nil || !strings.Contains(err.Error(), "empty or repeated") {
			t.Errorf("extra words %q: %v", bad, err)
		}
	}
	if _, err := Table(context.Background(), distillVocab, ft.embed, Options{Dims: 2, ExtraWords: extra, Weights: make([]float32, len(distillVocab))}); err == nil || !strings.Contains(err.Error(), "3 extra words") {
		t.Errorf("weights without the extra words: %v", err)
	}
}

func TestDistillNorm(t *testing.T) {
	var ft fakeTeacher
	ctx := context.Background()
	plain, err := Table(ctx, distillVocab, ft.embed, Options{Dims: 2})
	if err != nil {
		t.Fatal(err)
	}
	scaled, err := Table(ctx, distillVocab, ft.embed, Options{Dims: 2, Norm: 3})
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	n := 0
	k := 0.0
	for r := range int32(len(distillVocab)) {
		p, s := plain.Vector(r, nil), scaled.Vector(r, nil)
		if plain.Weight(r) != scaled.Weight(r) {
			t.Errorf("row %d: weight %v scaled, %v plain", r, scaled.Weight(r), plain.Weight(r))
		}
		if isZero(p) {
			if !isZero(s) {
				t.Errorf("row %d: zero row scaled to %v", r, s)
			}
			continue
		}
		sum += norm(s)
		n++
		if k == 0 {
			k = float64(s[0] / p[0])
		}
		for i := range p {
			if math.Abs(float64(s[i])-k*float64(p[i])) > 1e-5 {
				t.Errorf("row %d: scaled %v is not %v x plain %v", r, s, k, p)
			}
		}
	}
	if mean := sum / float64(n); math.Abs(mean-3) > 1e-5 {
		t.Errorf("mean norm %v, want 3", mean)
	}
	if !strings.Contains(scaled.Manifest.Notes, "mean norm of 3") {
		t.Errorf("notes %q", scaled.Manifest.Notes)
	}
	if _, err := Table(ctx, distillVocab, ft.embed, Options{Dims: 2, Norm: -1}); err == nil {
		t.Error("negative norm: no error")
	}
}

// TestWeightsFrom: a source table's weights replace the Zipf ones for the
// rows it weighs, vocabulary and extra words alike; rows it leaves at 0,
// and rows without a surface form, keep theirs.
func TestWeightsFrom(t *testing.T) {
	extra := []string{"lawyers", "proteins"}
	n := len(distillVocab)
	vecs := make([][]float32, n+1)
	weights := make([]float32, n+1)
	for i := range vecs {
		vecs[i] = []float32{1}
	}
	weights[row0(t, "court")] = 0.25 // a weighed token
	weights[row0(t, "[PAD]")] = 0.5  // a special: keeps weight 0
	weights[n] = 0.75                // the extra word "lawyers"
	src, err := models.NewTable(models.Manifest{}, n, []string{"lawyers"}, vecs, weights)
	if err != nil {
		t.Fatal(err)
	}
	w, from, err := WeightsFrom(src, distillVocab, extra, 0)
	if err != nil {
		t.Fatal(err)
	}
	rank := RankWeights(distillVocab, extra, 0)
	if from != 2 || w[row0(t, "court")] != 0.25 || w[n] != 0.75 || w[row0(t, "[PAD]")] != 0 || w[n+1] != rank[n+1] || w[row0(t, "law")] != rank[row0(t, "law")] {
		t.Fatalf("WeightsFrom = %v (from %d), rank weights %v", w, from, rank)
	}
	if _, _, err := WeightsFrom(src, distillVocab[:3], nil, 0); err == nil {
		t.Error("WeightsFrom accepted a table over another vocabulary")
	}
}
