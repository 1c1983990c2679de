//go:build ort

package quantize_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/bert"
	"github.com/triagegw/triage/models/onnxpb"
	"github.com/triagegw/triage/models/quantize"
)

// requireORT loads the ONNX Runtime library, or skips the test when it is
// not there (scripts/fetch-ort.sh fetches it) unless TRIAGE_REQUIRE_ORT=1,
// when a missing runtime fails the test.
func requireORT(t testing.TB) {
	t.Helper()
	md := os.Getenv("TRIAGE_MODELS")
	if md == "" {
		_, file, _, _ := runtime.Caller(0)
		md = filepath.Join(filepath.Dir(file), "..", "..", "var", "models")
	}
	lib := onnx.LibraryPath(onnx.Options{}, md)
	err := onnx.Init(lib)
	switch {
	case err == nil:
	case os.Getenv("TRIAGE_REQUIRE_ORT") == "1":
		t.Fatalf("TRIAGE_REQUIRE_ORT=1 and the runtime did not load: %v", err)
	case errors.Is(err, classifier.ErrUnavailable):
		t.Skipf("no ONNX Runtime (run scripts/fetch-ort.sh or set TRIAGE_ORT_LIB): %v", err)
	default:
		t.Fatal(err)
	}
}

// tinyWeights are a small BERT's weights with every LayerNorm scale and
// bias drawn at random too, so that a rewrite that swapped or dropped them
// would show.
func tinyWeights(t testing.TB) (bert.Config, *bert.Weights) {
	t.Helper()
	c := bert.Config{Layers: 2, Hidden: 32, Heads: 4, Intermediate: 64, Vocab: 100, MaxPos: 24, TypeVocab: 2, Seed: 7}
	w, err := bert.NewWeights(c)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	jitter := func(v []float32, base float32) {
		for i := range v {
			v[i] = base + float32(rng.NormFloat64()*0.1)
		}
	}
	jitter(w.EmbLNScale, 1)
	jitter(w.EmbLNBias, 0)
	for i := range w.Layers {
		l := &w.Layers[i]
		jitter(l.AttnLNScale, 1)
		jitter(l.AttnLNBias, 0)
		jitter(l.OutLNScale, 1)
		jitter(l.OutLNBias, 0)
	}
	return c, w
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// quantCosine is the cosine similarity of a and b.
func quantCosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// TestQuantizedBERTCloseToFloat runs the tiny BERT, float and quantized
// (every projection and both embedding tables it Gathers), through ONNX
// Runtime and classifier/onnx's Encoder: the mean-pooled embeddings and
// every token's hidden state must stay within cosine 0.99 of the float
// ones, per-column and per-tensor, int8 and uint8 weights.
func TestQuantizedBERTCloseToFloat(t *testing.T) {
	requireORT(t)
	c, w := tinyWeights(t)
	m, err := bert.BuildFrom(c, w)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, m *onnxpb.Model) string {
		p := filepath.Join(dir, name)
		if err := m.WriteFile(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	man := onnx.Manifest{Format: onnx.ManifestFormat, Name: "tiny", Input: onnx.InputBERT, Pooling: onnx.PoolMean,
		Dims: c.Hidden, MaxTokens: c.MaxPos, Tokenizer: "none.json"}
	open := func(path string) *onnx.Encoder {
		e, err := onnx.NewEncoder(path, man, onnx.Options{}, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	float := open(write("float.onnx", m))
	rng := rand.New(rand.NewPCG(3, 4))
	var inputs [][]int32
	for _, n := range []int{3, 9, 17, c.MaxPos} {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(rng.IntN(c.Vocab))
		}
		inputs = append(inputs, ids)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts quantize.Options
	}{
		{"int8-per-column", quantize.Options{MinElements: 1}},
		{"int8-per-tensor", quantize.Options{MinElements: 1, PerTensor: true}},
		{"uint8-per-column", quantize.Options{MinElements: 1, WeightType: onnxpb.Uint8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qm, rep, err := quantize.Dynamic(m, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(rep.Weights), 6*c.Layers+2; got != want {
				t.Fatalf("quantized %d weights, want %d (6 per layer, word and token-type tables)", got, want)
			}
			q := open(write(tc.name+".onnx", qm))
			worst, worstRow, diff := 1.0, 1.0, 0.0
			for _, ids := range inputs {
				a, err := float.Embed(ctx, ids, nil)
				if err != nil {
					t.Fatal(err)
				}
				b, err := q.Embed(ctx, ids, nil)
				if err != nil {
					t.Fatal(err)
				}
				worst = math.Min(worst, quantCosine(a, b))
				// Every token's hidden state, not only their mean.
				ha, err := float.HiddenStates(ctx, ids, nil)
				if err != nil {
					t.Fatal(err)
				}
				hb, err := q.HiddenStates(ctx, ids, nil)
				if err != nil {
					t.Fatal(err)
				}
				for s := range ids {
					ra, rb := ha[s*c.Hidden:(s+1)*c.Hidden], hb[s*c.Hidden:(s+1)*c.Hidden]
					worstRow = math.Min(worstRow, quantCosine(ra, rb))
					diff = math.Max(diff, maxAbsDiff(ra, rb))
				}
			}
			t.Logf("%s: lowest cosine to float: embedding %.5f, token state %.5f (largest difference %.3g); %s",
				tc.name, worst, worstRow, diff, rep.Summary())
			if worst < 0.99 || worstRow < 0.99 {
				t.Fatalf("the quantized encoder's outputs are as far as cosine %.4f (embedding), %.4f (token state) from float's (< 0.99)", worst, worstRow)
			}
			if diff == 0 {
				t.Fatal("the quantized encoder's outputs equal float's: was the graph quantized?")
			}
		})
	}
}

// TestQuantizedConvGemmGatherCloseToFloat runs a small graph with every
// form Dynamic rewrites besides MatMul, float and quantized,
// through ONNX Runtime:
//
//	e  = Gather(table, ids)                              [1, S, C]
//	y1 = Transpose(Conv(Transpose(Unsqueeze(e)), Transpose(W1)) + b1) → Reshape [S, O]
//	     (the TF-converted 1×1 Conv: its transposes cancel)
//	o1 = Gemm(y1, B, bias, alpha 0.5, transB 1)          [S, P]
//	o2 = Conv(x, W2, b2)                                  [1, O, 1, S] (a plain 1×1 Conv)
func TestQuantizedConvGemmGatherCloseToFloat(t *testing.T) {
	requireORT(t)
	const V, S, C, O, P = 50, 7, 32, 48, 40
	rng := rand.New(rand.NewPCG(5, 6))
	normal := func(n int, sd float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * sd)
		}
		return v
	}
	m := &onnxpb.Model{Graph: onnxpb.Graph{
		Name: "convgemm",
		Initializers: []onnxpb.Tensor{
			onnxpb.FloatTensor("table", []int64{V, C}, normal(V*C, 1)),
			onnxpb.Int64Tensor("axis1", []int64{1}, []int64{1}),
			onnxpb.FloatTensor("w1_hwio", []int64{1, 1, C, O}, normal(C*O, 0.2)),
			onnxpb.FloatTensor("b1", []int64{O}, normal(O, 0.1)),
			onnxpb.Int64Tensor("shape_so", []int64{2}, []int64{S, O}),
			onnxpb.FloatTensor("gemm_b", []int64{P, O}, normal(P*O, 0.2)),
			onnxpb.FloatTensor("gemm_c", []int64{P}, normal(P, 0.1)),
			onnxpb.FloatTensor("w2", []int64{O, C, 1, 1}, normal(O*C, 0.2)),
			onnxpb.FloatTensor("b2", []int64{O}, normal(O, 0.1)),
		},
		Nodes: []onnxpb.Node{
			{Name: "emb", Op: "Gather", Inputs: []string{"table", "ids"}, Outputs: []string{"e"}},
			{Name: "unsq", Op: "Unsqueeze", Inputs: []string{"e", "axis1"}, Outputs: []string{"e4"}},
			{Name: "to_nchw", Op: "Transpose", Inputs: []string{"e4"}, Outputs: []string{"nchw"}, Attrs: []onnxpb.Attr{onnxpb.AttrInts("perm", 0, 3, 1, 2)}},
			{Name: "w1_oihw", Op: "Transpose", Inputs: []string{"w1_hwio"}, Outputs: []string{"w1"}, Attrs: []onnxpb.Attr{onnxpb.AttrInts("perm", 3, 2, 0, 1)}},
			{Name: "conv1", Op: "Conv", Inputs: []string{"nchw", "w1", "b1"}, Outputs: []string{"c1"},
				Attrs: []onnxpb.Attr{onnxpb.AttrInts("strides", 1, 1), onnxpb.AttrInts("pads", 0, 0, 0, 0)}},
			{Name: "to_nhwc", Op: "Transpose", Inputs: []string{"c1"}, Outputs: []string{"c1t"}, Attrs: []onnxpb.Attr{onnxpb.AttrInts("perm", 0, 2, 3, 1)}},
			{Name: "flat", Op: "Reshape", Inputs: []string{"c1t", "shape_so"}, Outputs: []string{"y1"}},
			{Name: "gemm", Op: "Gemm", Inputs: []string{"y1", "gemm_b", "gemm_c"}, Outputs: []string{"o1"},
				Attrs: []onnxpb.Attr{onnxpb.AttrFloat("alpha", 0.5), onnxpb.AttrInt("transB", 1)}},
			{Name: "conv2", Op: "Conv", Inputs: []string{"x", "w2", "b2"}, Outputs: []string{"o2"}},
		},
		Inputs: []onnxpb.ValueInfo{
			{Name: "ids", Type: onnxpb.Int64, Dims: onnxpb.Dims(1, S)},
			{Name: "x", Type: onnxpb.Float, Dims: onnxpb.Dims(1, C, 1, S)},
		},
		Outputs: []onnxpb.ValueInfo{
			{Name: "o1", Type: onnxpb.Float, Dims: onnxpb.Dims(S, P)},
			{Name: "o2", Type: onnxpb.Float, Dims: onnxpb.Dims(1, O, 1, S)},
		},
	}}
	qm, rep, err := quantize.Dynamic(m, quantize.Options{MinElements: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Weights) != 4 {
		t.Fatalf("quantized %d weights, want 4:\n%s", len(rep.Weights), rep.Summary())
	}
	ops := map[string]int{}
	for _, n := range qm.Graph.Nodes {
		ops[n.Op]++
	}
	// conv1's transposes and its kernel's cancel; conv2 gets two.
	if ops["Conv"] != 0 || ops["Gemm"] != 0 || ops["Transpose"] != 2 || ops["MatMulInteger"] != 3 {
		t.Errorf("ops after quantization: %v", ops)
	}
	dir := t.TempDir()
	ids := []int64{0, 3, 49, 7, 7, 20, 11}
	x := normal(C*S, 1)
	run := func(m *onnxpb.Model, name string) (o1, o2 []float32) {
		path := filepath.Join(dir, name)
		if err := m.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		idT, err := ort.NewTensor(ort.NewShape(1, S), ids)
		if err != nil {
			t.Fatal(err)
		}
		defer idT.Destroy()
		xT, err := ort.NewTensor(ort.NewShape(1, C, 1, S), x)
		if err != nil {
			t.Fatal(err)
		}
		defer xT.Destroy()
		out1, err := ort.NewEmptyTensor[float32](ort.NewShape(S, P))
		if err != nil {
			t.Fatal(err)
		}
		defer out1.Destroy()
		out2, err := ort.NewEmptyTensor[float32](ort.NewShape(1, O, 1, S))
		if err != nil {
			t.Fatal(err)
		}
		defer out2.Destroy()
		sess, err := ort.NewDynamicAdvancedSession(path, []string{"ids", "x"}, []string{"o1", "o2"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Destroy()
		if err := sess.Run([]ort.Value{idT, xT}, []ort.Value{out1, out2}); err != nil {
			t.Fatal(err)
		}
		return append([]float32{}, out1.GetData()...), append([]float32{}, out2.GetData()...)
	}
	f1, f2 := run(m, "float.onnx")
	q1, q2 := run(qm, "int8.onnx")
	for _, c := range []struct {
		name string
		f, q []float32
	}{{"gather→conv→gemm", f1, q1}, {"conv", f2, q2}} {
		cos := quantCosine(c.f, c.q)
		t.Logf("%s: cosine %.5f, largest difference %.3g", c.name, cos, maxAbsDiff(c.f, c.q))
		if cos < 0.999 {
			t.Errorf("%s: quantized output at cosine %.5f from float's (< 0.999)", c.name, cos)
		}
	}
}

// The benchmarks compare float and int8 encoders side by side, one
// intra-op thread:
//
//	go test -tags ort -run '^$' -bench Quantized -benchtime 30x -count 3 ./models/quantize
//
// USE lite comes from $TRIAGE_MODELS/use (var/models/use; skipped when
// missing); the bge-small-shaped BERT is generated (about 10 s) unless
// $TRIAGE_BENCH_BERT names a directory gen-bert wrote. The int8 form is
// quantized in the process with the default options (the bytes
// scripts/fetch-use.sh pins for var/models/use-int8), or with uint8
// weights when $TRIAGE_BENCH_WEIGHTS is uint8 (models quantize --weights
// uint8: for x86 CPUs without VNNI).
var (
	benchQMu   sync.Mutex
	benchQEncs = map[string]*onnx.Encoder{}
)

// benchQuantOptions are the options the benchmarks quantize with.
func benchQuantOptions(b *testing.B) quantize.Options {
	switch w := os.Getenv("TRIAGE_BENCH_WEIGHTS"); w {
	case "", "int8":
		return quantize.Options{}
	case "uint8":
		return quantize.Options{WeightType: onnxpb.Uint8}
	default:
		b.Fatalf("TRIAGE_BENCH_WEIGHTS=%q: want int8 or uint8", w)
		return quantize.Options{}
	}
}

// quantBenchEncoder opens the float or int8 form of the named model
// ("use" or "bge-small") once per process.
func quantBenchEncoder(b *testing.B, model string, int8 bool) *onnx.Encoder {
	b.Helper()
	requireORT(b)
	key := fmt.Sprint(model, int8)
	benchQMu.Lock()
	defer benchQMu.Unlock()
	if e, ok := benchQEncs[key]; ok {
		return e
	}
	var dir string
	switch model {
	case "use":
		dir = filepath.Join(testenv.Models(b, "use/"+onnx.ManifestFile), "use")
	case "bge-small":
		dir = os.Getenv("TRIAGE_BENCH_BERT")
		if dir == "" {
			dir = b.TempDir()
			c := bert.BGESmall()
			if err := bert.Build(c).WriteFile(filepath.Join(dir, onnx.DefaultModelFile)); err != nil {
				b.Fatal(err)
			}
			man := &onnx.Manifest{Format: onnx.ManifestFormat, Name: "bge-small-random", Input: onnx.InputBERT, Pooling: onnx.PoolCLS,
				Dims: c.Hidden, MaxTokens: c.MaxPos, Tokenizer: "bert-base-uncased.json"}
			if err := onnx.WriteManifest(dir, man); err != nil {
				b.Fatal(err)
			}
		}
	}
	man, err := onnx.ReadManifest(dir)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, man.Model)
	if man.Model == "" {
		path = filepath.Join(dir, onnx.DefaultModelFile)
	}
	if int8 {
		raw, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		m, err := onnxpb.Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		qm, rep, err := quantize.Dynamic(m, benchQuantOptions(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: %s", model, rep.Summary())
		path = filepath.Join(b.TempDir(), "int8.onnx")
		if err := qm.WriteFile(path); err != nil {
			b.Fatal(err)
		}
	}
	e, err := onnx.NewEncoder(path, *man, onnx.Options{Threads: 1}, "")
	if err != nil {
		b.Fatal(err)
	}
	if st, err := os.Stat(path); err == nil {
		b.Logf("%s int8=%v: %.2f MB, session load %v", model, int8, float64(st.Size())/1e6, e.LoadTime().Round(time.Millisecond))
	}
	benchQEncs[key] = e
	return e
}

// quantBenchIDs are n ids below vocab, deterministic; for a BERT, [CLS]
// first and [SEP] last.
func quantBenchIDs(n, vocab int, bert bool) []int32 {
	rng := rand.New(rand.NewPCG(uint64(n), 2))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(1000 + rng.IntN(vocab-1000))
	}
	if bert {
		ids[0], ids[n-1] = 101, 102
	}
	return ids
}

// BenchmarkQuantizedEmbed times float and int8 forms of USE lite (12 and
// 128 SentencePiece ids) and of the bge-small-shaped BERT (20 and 128
// tokens) side by side: each iteration runs one Embed of each, in
// alternating order, so that both see the same load on a shared machine.
// It reports each one's median (f32-p50-ms, int8-p50-ms), their ratio
// (speedup) and the cosine of the two embeddings.
func BenchmarkQuantizedEmbed(b *testing.B) {
	for _, c := range []struct {
		model  string
		vocab  int
		tokens []int
	}{{"use", 8002, []int{12, 128}}, {"bge-small", 30522, []int{20, 128}}} {
		for _, n := range c.tokens {
			b.Run(fmt.Sprintf("%s/tokens=%d", c.model, n), func(b *testing.B) {
				encs := [2]*onnx.Encoder{quantBenchEncoder(b, c.model, false), quantBenchEncoder(b, c.model, true)}
				ids := quantBenchIDs(n, c.vocab, c.model != "use")
				ctx := context.Background()
				dst := [2][]float32{make([]float32, encs[0].Dims()), make([]float32, encs[1].Dims())}
				var times [2][]time.Duration
				i := 0
				for b.Loop() {
					for k := range 2 {
						j := (i + k) % 2
						start := time.Now()
						var err error
						if dst[j], err = encs[j].Embed(ctx, ids, dst[j]); err != nil {
							b.Fatal(err)
						}
						times[j] = append(times[j], time.Since(start))
					}
					i++
				}
				p50 := func(d []time.Duration) float64 {
					slices.Sort(d)
					return float64(d[len(d)/2].Microseconds()) / 1000
				}
				f, q := p50(times[0]), p50(times[1])
				b.ReportMetric(f, "f32-p50-ms")
				b.ReportMetric(q, "int8-p50-ms")
				b.ReportMetric(f/q, "speedup")
				b.ReportMetric(quantCosine(dst[0], dst[1]), "cosine")
			})
		}
	}
}

// BenchmarkQuantizedUSEDev measures what int8 USE lite changes for the
// default heads' tier-2 head (models/heads/subjects, trained on float
// embeddings; the heads name the int8 form, use-int8), the float graph
// (use) against its int8 form quantized here, on a labelled dataset,
// $TRIAGE_QUANT_DEV (JSON lines with "text" and
// "label"; an absolute path, as go test runs in models/; skipped when
// unset):
//
//	TRIAGE_QUANT_DEV=$PWD/../shared/datasets/subjects/dev.jsonl \
//	  go test -tags ort -run '^$' -bench QuantizedUSEDev -benchtime 1x ./models/quantize
//
// It reports both tier-2 accuracies (f32-acc, int8-acc), the share of
// texts whose predicted class is the same (agreement), and the mean and
// lowest cosine between the float and int8 embeddings ($TRIAGE_BENCH_WEIGHTS
// as for BenchmarkQuantizedEmbed).
func BenchmarkQuantizedUSEDev(b *testing.B) {
	path := os.Getenv("TRIAGE_QUANT_DEV")
	if path == "" {
		b.Skip("set TRIAGE_QUANT_DEV to a labelled .jsonl")
	}
	requireORT(b)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	md := os.Getenv("TRIAGE_MODELS")
	if md == "" {
		md = filepath.Join(root, "var", "models")
	}
	h, err := classifier.LoadHeads(filepath.Join(root, "models", "heads", "subjects"))
	if err != nil {
		b.Fatal(err)
	}
	if h.Tier2 == nil || (h.Tier2.Encoder.Model != "use" && h.Tier2.Encoder.Model != "use-int8") {
		b.Skip("the default heads' tier 2 is not on USE lite")
	}
	// The float model directory, and the heads naming it.
	useDir, err := h.Resolve("use", md)
	if err != nil {
		testenv.Missing(b, err.Error(), "run make setup (scripts/fetch-use.sh)")
	}
	man, err := onnx.ReadManifest(useDir)
	if err != nil {
		b.Fatal(err)
	}
	hf, tf := *h, *h.Tier2
	tf.Encoder.Model, tf.Encoder.ModelSHA256 = "use", man.ModelSHA256
	hf.Tier2 = &tf
	h = &hf
	// The int8 model directory, beside a copy of the heads naming it.
	qdir := b.TempDir()
	raw, err := os.ReadFile(filepath.Join(useDir, man.Model))
	if err != nil {
		b.Fatal(err)
	}
	m, err := onnxpb.Decode(raw)
	if err != nil {
		b.Fatal(err)
	}
	qm, _, err := quantize.Dynamic(m, benchQuantOptions(b))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(qdir, "use-int8"), 0o755); err != nil {
		b.Fatal(err)
	}
	qpath := filepath.Join(qdir, "use-int8", man.Model)
	if err := qm.WriteFile(qpath); err != nil {
		b.Fatal(err)
	}
	qman := *man
	if qman.ModelSHA256, err = models.FileSHA256(qpath); err != nil {
		b.Fatal(err)
	}
	if err := onnx.WriteManifest(filepath.Join(qdir, "use-int8"), &qman); err != nil {
		b.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(useDir, man.Tokenizer))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(qdir, "use-int8", man.Tokenizer), tok, 0o644); err != nil {
		b.Fatal(err)
	}
	h2, t2 := *h, *h.Tier2
	t2.Encoder.Model, t2.Encoder.ModelSHA256 = "use-int8", qman.ModelSHA256
	h2.Tier2, h2.Dir = &t2, qdir

	var cls [2]*onnx.Classifier
	for i, hh := range []*classifier.Heads{h, &h2} {
		if cls[i], err = onnx.Load(hh, md, onnx.Options{Threads: 1}); err != nil {
			b.Fatal(err)
		}
		defer cls[i].Close()
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	type row struct{ Text, Label string }
	var rows []row
	dec := json.NewDecoder(f)
	for dec.More() {
		var r row
		if err := dec.Decode(&r); err != nil {
			b.Fatal(err)
		}
		rows = append(rows, r)
	}
	ctx := context.Background()
	var right [2]int
	var same int
	var cosSum float64
	cosMin := 1.0
	var emb [2][]float32
	var pred [2]string
	probs := make([]float32, len(h.Tier2.Head.Classes))
	for b.Loop() {
		right, same, cosSum, cosMin = [2]int{}, 0, 0, 1
		for _, r := range rows {
			for i := range 2 {
				if emb[i], err = cls[i].Features(ctx, r.Text, emb[i]); err != nil {
					b.Fatal(err)
				}
				cls[i].Head().Probs(emb[i], probs)
				best := 0
				for j, p := range probs {
					if p > probs[best] {
						best = j
					}
				}
				pred[i] = cls[i].Classes()[best]
				if pred[i] == r.Label {
					right[i]++
				}
			}
			if pred[0] == pred[1] {
				same++
			}
			if cs := quantCosine(emb[0], emb[1]); !math.IsNaN(cs) { // the empty text embeds to zeros
				cosSum += cs
				cosMin = math.Min(cosMin, cs)
			}
		}
	}
	n := float64(len(rows))
	b.ReportMetric(float64(right[0])/n, "f32-acc")
	b.ReportMetric(float64(right[1])/n, "int8-acc")
	b.ReportMetric(float64(same)/n, "agreement")
	b.ReportMetric(cosSum/n, "mean-cosine")
	b.ReportMetric(cosMin, "min-cosine")
}
