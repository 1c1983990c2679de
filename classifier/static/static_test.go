package static

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/models"
)

func modelsDir() string { return testenv.ModelsDir() }

var (
	tokOnce sync.Once
	tok     *tokenize.WordPiece
	tokErr  error
)

func tokenizer(t testing.TB) *tokenize.WordPiece {
	t.Helper()
	tokOnce.Do(func() {
		var p string
		if p, tokErr = tokenize.ModuleFile(); tokErr == nil {
			tok, tokErr = tokenize.LoadWordPiece(p)
		}
	})
	if tokErr != nil {
		t.Fatalf("tokenizer: %v", tokErr)
	}
	return tok
}

// tinyTable is a table over the real vocabulary with dims random values per
// row, plus extra words.
func tinyTable(t testing.TB, tk *tokenize.WordPiece, dims int, extra []string, buckets int) *models.Table {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 5))
	rows := tk.VocabSize() + len(extra) + buckets
	vecs := make([][]float32, rows)
	w := make([]float32, rows)
	for i := range vecs {
		vecs[i] = make([]float32, dims)
		for j := range vecs[i] {
			vecs[i][j] = float32(rng.NormFloat64())
		}
		w[i] = 1
	}
	tb, err := models.NewTable(models.Manifest{Name: "tiny", Buckets: buckets}, tk.VocabSize(), extra, vecs, w)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestRowsWordsPiecesAndCap(t *testing.T) {
	tk := tokenizer(t)
	tb := tinyTable(t, tk, 4, []string{"landlord", "rebase"}, 0)
	rows := Rows(tk, tb, nil, "My landlord won't let me rebase; unaffable!", 100)
	var words []string
	for _, r := range rows {
		if int(r) >= tk.VocabSize() {
			words = append(words, tb.ExtraWords()[int(r)-tk.VocabSize()])
		} else {
			words = append(words, tk.Token(r))
		}
	}
	got := strings.Join(words, " ")
	if !strings.Contains(got, "landlord") || !strings.Contains(got, "rebase") || !strings.Contains(got, "##") {
		t.Fatalf("Rows = %q: want the extra words whole and other rare words as pieces", got)
	}
	ids := tk.Encode(nil, "My landlord", 0)
	if len(ids) < 2 || rows[0] != ids[0] {
		t.Fatalf("first row %d, the tokenizer's first id is %v", rows[0], ids)
	}
	long := strings.Repeat("the cat sat on the mat ", 5000) // 30,000 tokens
	if n := len(Rows(tk, tb, nil, long, 512)); n != 512 {
		t.Fatalf("Rows capped at 512 gave %d", n)
	}
}

func TestAppendBigrams(t *testing.T) {
	doc := []int32{5, 9, 5, 9}
	out := AppendBigrams(append([]int32(nil), doc...), 1000, 100)
	if len(out) != 7 {
		t.Fatalf("%d rows, want 4 unigrams + 3 bigrams", len(out))
	}
	for _, r := range out[4:] {
		if r < 900 || r >= 1000 {
			t.Fatalf("bigram row %d outside the last 100 rows", r)
		}
	}
	if out[4] != out[6] || out[4] == out[5] {
		t.Fatalf("bigrams %v: (5,9) twice must hash alike, (9,5) apart (order matters)", out[4:])
	}
	if got := AppendBigrams(doc, 1000, 0); len(got) != 4 {
		t.Fatal("no buckets, no bigrams")
	}
}

func newTiny(t testing.TB, buckets int) *Model {
	tk := tokenizer(t)
	tb := tinyTable(t, tk, 8, []string{"landlord"}, buckets)
	classes := []string{"a", "b", "c"}
	head := &classifier.Linear{Kind: "softmax", Classes: classes, Dims: 8, W: make([]float32, 24), B: []float32{0, 0, 0}, Temperature: 1}
	for i := range head.W {
		head.W[i] = float32(i%7) - 3
	}
	m, err := New(tk, tb, head, classifier.Encoder{Kind: "static", MaxTokens: 64, Normalize: "mean", Bigrams: buckets})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const classifyText = "Can my landlord keep my deposit for normal wear and tear? Café naïve 日本"

func TestClassifyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector: make test checks allocations without it")
	}
	m := newTiny(t, 50)
	var r classifier.Result
	m.Classify(context.Background(), classifyText, &r)
	if n := testing.AllocsPerRun(200, func() { m.Classify(context.Background(), classifyText, &r) }); n != 0 {
		t.Fatalf("Classify allocates %v times per call in steady state", n)
	}
}

func TestClassifyConcurrent(t *testing.T) {
	m := newTiny(t, 50)
	var r classifier.Result
	text := classifyText
	m.Classify(context.Background(), text, &r)
	if r.Tier != 1 || len(r.Top) != TopK || r.Class != r.Top[0].Class || r.Tokens == 0 {
		t.Fatalf("Classify = %+v", r)
	}
	var sum float32
	p := make([]float32, 3)
	m.Probs(text, p)
	for _, v := range p {
		sum += v
	}
	if sum < 0.999 || sum > 1.001 {
		t.Fatalf("probabilities sum to %v", sum)
	}
	// Concurrent callers get what a single caller gets.
	want := r
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			var rr classifier.Result
			for range 200 {
				m.Classify(context.Background(), text, &rr)
				if rr.Class != want.Class || rr.Score != want.Score {
					t.Errorf("concurrent Classify = %s %v, want %s %v", rr.Class, rr.Score, want.Class, want.Score)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestNewRejectsMismatches(t *testing.T) {
	tk := tokenizer(t)
	tb := tinyTable(t, tk, 8, nil, 0)
	head := &classifier.Linear{Kind: "softmax", Classes: []string{"a", "b"}, Dims: 4, W: make([]float32, 8), B: make([]float32, 2)}
	if _, err := New(tk, tb, head, classifier.Encoder{}); err == nil || !strings.Contains(err.Error(), "dims") {
		t.Fatalf("New(head 4 dims, table 8) = %v", err)
	}
	head = &classifier.Linear{Kind: "softmax", Classes: []string{"a", "b"}, Dims: 8, W: make([]float32, 16), B: make([]float32, 2)}
	if _, err := New(tk, tb, head, classifier.Encoder{Bigrams: tb.Rows() + 1}); err == nil {
		t.Fatal("New accepted more bigram buckets than rows")
	}
}

func TestTuneLearnsAndIsDeterministic(t *testing.T) {
	tk := tokenizer(t)
	base := tinyTable(t, tk, 8, []string{"zzyzx"}, 0)
	rng := rand.New(rand.NewPCG(1, 1))
	topics := map[int][]string{0: {"guitar", "drums", "melody", "chord"}, 1: {"soccer", "goal", "referee", "stadium"}}
	filler := []string{"the", "a", "is", "and", "what", "about", "my", "zzyzx"}
	var texts []string
	var y []int
	for i := range 600 {
		c := i % 2
		var w []string
		for range 6 {
			w = append(w, filler[rng.IntN(len(filler))])
		}
		w = append(w, topics[c][rng.IntN(4)])
		texts, y = append(texts, strings.Join(w, " ")), append(y, c)
	}
	o := TuneOptions{Epochs: 10, LearningRate: 0.5, Bigrams: 64, Prune: true}
	tuned, head, enc, err := Tune(tk, base, texts, y, []string{"music", "sport"}, o)
	if err != nil {
		t.Fatal(err)
	}
	if tuned.Buckets() != 64 || tuned.Manifest.Method != "tuned" || len(tuned.ExtraWords()) != 1 {
		t.Fatalf("tuned table: %d buckets, method %q, extra words %v", tuned.Buckets(), tuned.Manifest.Method, tuned.ExtraWords())
	}
	m, err := New(tk, tuned, head, enc)
	if err != nil {
		t.Fatal(err)
	}
	var r classifier.Result
	for _, tc := range []struct{ text, want string }{{"what about the chord and melody", "music"}, {"my referee and the stadium", "sport"}} {
		m.Classify(context.Background(), tc.text, &r)
		if r.Class != tc.want {
			t.Fatalf("Classify(%q) = %s (%v), want %s", tc.text, r.Class, r.Score, tc.want)
		}
	}
	tuned2, _, _, _ := Tune(tk, base, texts, y, []string{"music", "sport"}, o)
	a, b := make([]float32, 8), make([]float32, 8)
	for _, row := range []int32{0, 1000, int32(tuned.Rows() - 1)} {
		tuned.Vector(row, a)
		tuned2.Vector(row, b)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("Tune is not deterministic (row %d)", row)
			}
		}
	}
}

// The default heads, when setup has built them: the accuracy this repository
// reports must hold.
func TestDefaultHeadsOnDev(t *testing.T) {
	h, m := defaultModel(t)
	shared := testenv.Shared(t, "datasets/subjects/dev.jsonl")
	dev, err := datasets.ReadJSONL(filepath.Join(shared, "datasets", "subjects", "dev.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	index := classifier.ClassIndex(h.Classes)
	hit := 0
	var r classifier.Result
	for _, row := range dev.Rows {
		m.Classify(context.Background(), row.Text, &r)
		if index[r.Class] == index[row.Label] && r.Class == row.Label {
			hit++
		}
	}
	acc := float64(hit) / float64(len(dev.Rows))
	recorded := h.Tier1.Eval["dev.jsonl"].Accuracy
	if acc < 0.82 || (recorded > 0 && acc < recorded-1e-9) {
		t.Fatalf("default tier 1 accuracy on dev = %.4f (recorded %.4f), want >= 0.82 and as recorded", acc, recorded)
	}
	t.Logf("default tier 1: dev accuracy %.4f over %d rows", acc, len(dev.Rows))
}

func defaultModel(t testing.TB) (*classifier.Heads, *Model) {
	t.Helper()
	h, err := classifier.LoadHeads(filepath.Join(testenv.Root(), "models", "heads", "subjects"))
	if err != nil {
		t.Fatal(err)
	}
	// The default heads' table, built by setup.
	testenv.Models(t, "tables/"+h.Tier1.Encoder.Table)
	m, err := Load(h, modelsDir())
	if err != nil {
		t.Fatal(err)
	}
	return h, m
}
