//go:build cgo && ort

package onnx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/onnxpb"
)

func openSmall(t *testing.T, pooling string, opts Options) *Model {
	t.Helper()
	requireORT(t)
	m, err := Open(modelDir(t, smallBERT(), pooling), "", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func TestEmbed(t *testing.T) {
	m := openSmall(t, PoolCLS, Options{})
	e := m.Encoder()
	ctx := context.Background()
	a, err := e.Embed(ctx, []int32{101, 7592, 2088, 102}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 32 || math.Abs(norm(a)-1) > 1e-5 {
		t.Fatalf("embedding of %d values, norm %v: want 32, unit length", len(a), norm(a))
	}
	again, err := e.Embed(ctx, []int32{101, 7592, 2088, 102}, make([]float32, 3, 64))
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(a, again); d != 0 {
		t.Errorf("the same ids gave embeddings %g apart", d)
	}
	b, err := e.Embed(ctx, []int32{101, 7592, 3011, 102}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if maxDiff(a, b) < 1e-4 {
		t.Error("other ids gave the same embedding")
	}
	if e.LoadTime() <= 0 {
		t.Errorf("load time %v", e.LoadTime())
	}
	if RuntimeVersion() == "" {
		t.Error("no runtime version")
	}
}

func TestEmbedLimits(t *testing.T) {
	e := openSmall(t, PoolCLS, Options{}).Encoder()
	ctx := context.Background()
	if _, err := e.Embed(ctx, nil, nil); err == nil {
		t.Error("no error for no tokens")
	}
	long := make([]int32, 33)
	if _, err := e.Embed(ctx, long, nil); err == nil || !strings.Contains(err.Error(), "at most 32") {
		t.Errorf("33 tokens for a 32-token encoder: %v", err)
	}
	if _, err := e.Embed(ctx, long[:32], nil); err != nil {
		t.Errorf("32 tokens: %v", err)
	}
	// An id past the vocabulary is the runtime's error, returned.
	if _, err := e.Embed(ctx, []int32{101, 40000, 102}, nil); err == nil {
		t.Error("no error for an id past the vocabulary")
	}
}

func TestEmbedContext(t *testing.T) {
	e := openSmall(t, PoolCLS, Options{MaxConcurrent: 1}).Encoder()
	ids := []int32{101, 7592, 102}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Embed(ctx, ids, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	// With the only slot taken, Embed waits until its deadline.
	e.sem <- struct{}{}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.Embed(ctx, ids, nil)
	<-e.sem
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for a slot past the deadline: %v", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("Embed returned %v after its deadline", el)
	}
	if _, err := e.Embed(context.Background(), ids, nil); err != nil {
		t.Errorf("after the slot is free: %v", err)
	}
}

// TestEmbedConcurrent runs many Embeds at once on one session (more
// goroutines than slots) and checks each against the same input run alone.
func TestEmbedConcurrent(t *testing.T) {
	e := openSmall(t, PoolMean, Options{MaxConcurrent: 2}).Encoder()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := make([][]int32, 16)
	want := make([][]float32, len(inputs))
	for i := range inputs {
		n := 2 + rng.IntN(30)
		ids := make([]int32, n)
		for j := range ids {
			ids[j] = int32(1000 + rng.IntN(29000))
		}
		inputs[i] = ids
		v, err := e.Embed(ctx, ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = v
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			var buf []float32
			for k := range 3 * len(inputs) {
				i := (g + k) % len(inputs)
				var err error
				if buf, err = e.Embed(ctx, inputs[i], buf); err != nil {
					errs <- err
					return
				}
				if d := maxDiff(buf, want[i]); d > 1e-6 {
					errs <- fmt.Errorf("input %d: %g from its embedding run alone", i, d)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestClose(t *testing.T) {
	requireORT(t)
	m, err := Open(modelDir(t, smallBERT(), PoolCLS), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := m.Features(context.Background(), "hello", nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Features after Close: %v", err)
	}
}

// randomHead is a softmax head over the small encoder's features.
func randomHead(dims int) *classifier.Linear {
	classes := []string{"code", "law", "math", "other"}
	rng := rand.New(rand.NewPCG(9, 9))
	h := &classifier.Linear{Kind: "softmax", Classes: classes, Dims: dims, W: make([]float32, len(classes)*dims),
		B: make([]float32, len(classes)), Temperature: 0.1}
	for i := range h.W {
		h.W[i] = float32(rng.NormFloat64())
	}
	return h
}

func TestClassify(t *testing.T) {
	m := openSmall(t, PoolCLS, Options{})
	c, err := NewClassifier(m, randomHead(32))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	text := "Why does my Python list comprehension raise a TypeError?"
	var r classifier.Result
	if err := c.Classify(ctx, text, &r); err != nil {
		t.Fatal(err)
	}
	wantTokens := len(m.tok.Encode(nil, text, 0))
	if r.Tier != 2 || len(r.Top) != TopK || r.Tokens != wantTokens {
		t.Fatalf("result %+v: want tier 2, %d classes, %d tokens", r, TopK, wantTokens)
	}
	feat, err := m.Features(ctx, text, nil)
	if err != nil {
		t.Fatal(err)
	}
	probs := make([]float32, 4)
	c.Head().Probs(feat, probs)
	best := classifier.Argmax(probs)
	if r.Class != c.Classes()[best] || math.Abs(float64(r.Score-probs[best])) > 1e-6 {
		t.Errorf("Classify says %s %.4f, the head on Features %s %.4f", r.Class, r.Score, c.Classes()[best], probs[best])
	}
	for i := 1; i < len(r.Top); i++ {
		if r.Top[i].Score > r.Top[i-1].Score {
			t.Errorf("top not in descending order: %+v", r.Top)
		}
	}
	// A long text is cut to the encoder's 32 tokens: 30 of text.
	if err := c.Classify(ctx, strings.Repeat("contract law ", 500), &r); err != nil {
		t.Fatal(err)
	}
	if r.Tokens != 30 {
		t.Errorf("a long text used %d tokens, want 30", r.Tokens)
	}
	if _, err := NewClassifier(m, randomHead(16)); err == nil {
		t.Error("NewClassifier accepted a head of the wrong size")
	}
}

// heads writes a heads artifact whose tier 2 uses the model directory dir
// (by its name, found in the artifact's directory) and returns it.
func heads(t *testing.T, dir string, edit func(*classifier.Encoder)) *classifier.Heads {
	t.Helper()
	sum, err := models.FileSHA256(filepath.Join(dir, DefaultModelFile))
	if err != nil {
		t.Fatal(err)
	}
	head := randomHead(32)
	enc := classifier.Encoder{Kind: "onnx", Model: filepath.Base(dir), ModelSHA256: sum}
	if edit != nil {
		edit(&enc)
	}
	h := &classifier.Heads{Name: "t", Version: "1", Classes: head.Classes,
		Tier2: &classifier.Tier{Encoder: enc, Head: *head}}
	hd := filepath.Dir(dir)
	if err := h.Save(hd); err != nil {
		t.Fatal(err)
	}
	loaded, err := classifier.LoadHeads(hd)
	if err != nil {
		t.Fatal(err)
	}
	return loaded
}

func TestLoad(t *testing.T) {
	requireORT(t)
	dir := modelDir(t, smallBERT(), PoolMean)
	c, err := Load(heads(t, dir, nil), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var r classifier.Result
	if err := c.Classify(context.Background(), "Can my landlord keep my deposit?", &r); err != nil {
		t.Fatal(err)
	}
	if r.Tier != 2 || r.Class == "" {
		t.Errorf("result %+v", r)
	}
	if got := c.Encoder().Manifest().Pooling; got != PoolMean {
		t.Errorf("pooling %q", got)
	}

	c2, err := Load(heads(t, dir, func(e *classifier.Encoder) { e.MaxTokens = 10 }), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Classify(context.Background(), strings.Repeat("word ", 100), &r); err != nil {
		t.Fatal(err)
	}
	if r.Tokens != 8 {
		t.Errorf("max_tokens 10 in the heads: %d text tokens, want 8", r.Tokens)
	}

	for name, edit := range map[string]func(*classifier.Encoder){
		"sha256":    func(e *classifier.Encoder) { e.ModelSHA256 = strings.Repeat("0", 64) },
		"not found": func(e *classifier.Encoder) { e.Model = "no-such-model" },
		"want onnx": func(e *classifier.Encoder) { e.Kind = "static" },
		"tokenizer.json": func(e *classifier.Encoder) {
			e.Tokenizer, e.TokenizerSHA256 = "bert-base-uncased.json", strings.Repeat("1", 64)
		},
	} {
		_, err := Load(heads(t, dir, edit), "", Options{})
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if name == "tokenizer.json" {
			name = "sha256" // the heads' tokenizer pin is checked
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not mention %q", err, name)
		}
	}
}

func TestOpenChecksManifest(t *testing.T) {
	requireORT(t)
	src := modelDir(t, smallBERT(), PoolCLS)
	dir := t.TempDir()
	for _, f := range []string{DefaultModelFile, ManifestFile, "bert-base-uncased.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	bad := *m
	bad.ModelSHA256 = strings.Repeat("0", 64)
	if err := WriteManifest(dir, &bad); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "", Options{}); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("model sha256 mismatch: %v", err)
	}
	bad = *m
	bad.Tokenizer = "missing.json"
	if err := WriteManifest(dir, &bad); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "", Options{}); err == nil || !strings.Contains(err.Error(), "missing.json not found") {
		t.Errorf("missing tokenizer: %v", err)
	}
	bad = *m
	bad.Vocab = 100
	if err := WriteManifest(dir, &bad); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "", Options{}); err == nil || !strings.Contains(err.Error(), "vocabulary of 100 tokens") {
		t.Errorf("vocabulary mismatch: %v", err)
	}

	// The tokenizer is found in the models directory's tokenizer/ too.
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	md := t.TempDir()
	if err := os.Mkdir(filepath.Join(md, "tokenizer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "bert-base-uncased.json"), filepath.Join(md, "tokenizer", "bert-base-uncased.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "", Options{}); err == nil {
		t.Error("opened without its tokenizer")
	}
	good, err := Open(dir, md, Options{})
	if err != nil {
		t.Fatalf("tokenizer in the models directory: %v", err)
	}
	good.Close()
}

func TestInitOtherLibrary(t *testing.T) {
	requireORT(t)
	err := Init("/nonexistent/libonnxruntime.so")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libonnxruntime.so") {
		t.Errorf("Init of another library: %v", err)
	}
}

// wordLenTokenizer gives each space-separated word the id of its length.
type wordLenTokenizer struct{}

func (wordLenTokenizer) Encode(dst []int32, text string, max int) []int32 {
	for _, w := range strings.Fields(text) {
		if max > 0 && len(dst) >= max {
			break
		}
		dst = append(dst, int32(len(w)))
	}
	return dst
}

// TestUSEInput runs the "use" input kind through a stand-in graph of the
// same signature: indices [n, 2] and values [n] in, [1, dims] out, here
// the mean of the values' embedding rows plus the sum of the positions
// (so that both inputs show in the output).
func TestUSEInput(t *testing.T) {
	requireORT(t)
	const vocab, dims = 16, 8
	emb := make([]float32, vocab*dims)
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range emb {
		emb[i] = float32(rng.NormFloat64())
	}
	g := onnxpb.Graph{
		Name:         "use-standin",
		Initializers: []onnxpb.Tensor{onnxpb.FloatTensor("emb", []int64{vocab, dims}, emb)},
		Inputs: []onnxpb.ValueInfo{{Name: "indices", Type: onnxpb.Int64, Dims: onnxpb.Dims("n", 2)},
			{Name: "values", Type: onnxpb.Int64, Dims: onnxpb.Dims("n")}},
		Outputs: []onnxpb.ValueInfo{{Name: "outputs", Type: onnxpb.Float, Dims: onnxpb.Dims(1, dims)}},
		Nodes: []onnxpb.Node{
			{Op: "Gather", Inputs: []string{"emb", "values"}, Outputs: []string{"rows"}},
			{Op: "ReduceMean", Inputs: []string{"rows"}, Outputs: []string{"mean"}, Attrs: []onnxpb.Attr{onnxpb.AttrInts("axes", 0), onnxpb.AttrInt("keepdims", 1)}},
			{Op: "Cast", Inputs: []string{"indices"}, Outputs: []string{"idx.f"}, Attrs: []onnxpb.Attr{onnxpb.AttrInt("to", int64(onnxpb.Float))}},
			{Op: "ReduceSum", Inputs: []string{"idx.f"}, Outputs: []string{"possum"}, Attrs: []onnxpb.Attr{onnxpb.AttrInt("keepdims", 0)}},
			{Op: "Add", Inputs: []string{"mean", "possum"}, Outputs: []string{"outputs"}},
		},
	}
	path := filepath.Join(t.TempDir(), "use.onnx")
	if err := (&onnxpb.Model{Producer: "test", Graph: g}).WriteFile(path); err != nil {
		t.Fatal(err)
	}
	enc, err := NewEncoder(path, Manifest{Format: 1, Name: "use-standin", Input: InputUSE, Dims: dims, MaxTokens: 4, Tokenizer: "spm.model"}, Options{}, "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(wordLenTokenizer{}, enc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, err := m.Features(context.Background(), "a bb cccc dd eeeee", nil) // 5 words, 4 kept
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, dims)
	for _, id := range []int{1, 2, 4, 2} {
		for i := range want {
			want[i] += emb[id*dims+i] / 4
		}
	}
	for i := range want {
		want[i] += 0 + 1 + 2 + 3
	}
	classifier.L2Normalize(want)
	if d := maxDiff(got, want); d > 1e-5 {
		t.Errorf("use input: %v, want %v", got, want)
	}
}

// TestUSEModel opens the converted USE-lite model that scripts/fetch-use.sh
// builds, if it is there, through Open (vocab.json read by
// tokenize.Unigram): paraphrases land closer than unrelated texts, and the
// empty text gets the zero vector.
func TestUSEModel(t *testing.T) {
	requireORT(t)
	dir := filepath.Join(testenv.Models(t, "use/"+ManifestFile), "use")
	m, err := Open(dir, modelsDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	var vs [][]float32
	for _, s := range []string{
		"How do I fix a TypeError in my Python list comprehension?",
		"My python code raises a type error in a list comprehension",
		"Can my landlord keep my security deposit?",
	} {
		v, err := m.Features(ctx, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(norm(v)-1) > 1e-5 {
			t.Fatalf("%q: norm %v", s, norm(v))
		}
		vs = append(vs, v)
	}
	dot := func(a, b []float32) (s float64) {
		for i := range a {
			s += float64(a[i]) * float64(b[i])
		}
		return s
	}
	if para, unrel := dot(vs[0], vs[1]), dot(vs[0], vs[2]); para < unrel+0.3 {
		t.Errorf("paraphrase cosine %.3f, unrelated %.3f", para, unrel)
	}
	v, err := m.Features(ctx, "", nil)
	if err != nil || norm(v) != 0 {
		t.Errorf("empty text: %v, norm %v", err, norm(v))
	}
}
