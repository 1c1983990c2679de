//go:build ort

package tfjs

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"
)

// ortLib is the ONNX Runtime shared library: $TRIAGE_ORT_LIB, else the one
// scripts/fetch-ort.sh puts under the models directory. The test skips
// without it unless TRIAGE_REQUIRE_ORT=1.
func ortLib(t *testing.T) string {
	t.Helper()
	lib := os.Getenv("TRIAGE_ORT_LIB")
	if lib == "" {
		root := os.Getenv("TRIAGE_MODELS")
		if root == "" {
			root = filepath.Join("..", "..", "var", "models")
		}
		lib = filepath.Join(root, "ort", "libonnxruntime.so.1")
	}
	if _, err := os.Stat(lib); err != nil {
		if os.Getenv("TRIAGE_REQUIRE_ORT") == "1" {
			t.Fatalf("TRIAGE_REQUIRE_ORT=1 but there is no ONNX Runtime library at %s: run scripts/fetch-ort.sh or set TRIAGE_ORT_LIB", lib)
		}
		t.Skipf("no ONNX Runtime library at %s (run scripts/fetch-ort.sh or set TRIAGE_ORT_LIB)", lib)
	}
	return lib
}

var ortOnce struct {
	sync.Once
	err error
}

// initORT initializes the ONNX Runtime environment once for the package's
// tests (it is process-wide; the test binary exits without destroying it).
func initORT(t *testing.T, lib string) {
	t.Helper()
	ortOnce.Do(func() {
		ort.SetSharedLibraryPath(lib)
		ortOnce.err = ort.InitializeEnvironment()
	})
	if ortOnce.err != nil {
		t.Fatalf("ONNX Runtime from %s: %v", lib, ortOnce.err)
	}
}

// golden is testdata/use-golden.json, written by scripts/golden-use.mjs.
type golden struct {
	Source  string `json:"source"`
	Runtime string `json:"runtime"`
	Rows    []struct {
		Text      string    `json:"text"`
		IDs       []int64   `json:"ids"`
		Embedding []float32 `json:"embedding"`
	} `json:"rows"`
	Batch struct {
		Rows       []int       `json:"rows"`
		Embeddings [][]float32 `json:"embeddings"`
	} `json:"batch"`
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

// embed runs the converted model on a batch of token id lists, fed as the
// package feeds them: indices [[s, p], ...] row-major, values the ids.
func embed(t *testing.T, s *ort.DynamicAdvancedSession, batch [][]int64) [][]float32 {
	t.Helper()
	var idx, vals []int64
	for si, ids := range batch {
		for p, id := range ids {
			idx = append(idx, int64(si), int64(p))
			vals = append(vals, id)
		}
	}
	it, err := ort.NewTensor(ort.NewShape(int64(len(vals)), 2), idx)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Destroy()
	vt, err := ort.NewTensor(ort.NewShape(int64(len(vals))), vals)
	if err != nil {
		t.Fatal(err)
	}
	defer vt.Destroy()
	out, err := ort.NewEmptyTensor[float32](ort.NewShape(int64(len(batch)), 512))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Destroy()
	if err := s.Run([]ort.Value{it, vt}, []ort.Value{out}); err != nil {
		t.Fatal(err)
	}
	data := out.GetData()
	res := make([][]float32, len(batch))
	for i := range res {
		res[i] = append([]float32(nil), data[i*512:(i+1)*512]...)
	}
	return res
}

// TestUSEMatchesGolden runs the converted model in ONNX Runtime on the token
// ids the package's own runtime fed the TF.js model and compares the
// embeddings with what that runtime computed.
func TestUSEMatchesGolden(t *testing.T) {
	lib := ortLib(t)
	_, m := convertUSE(t)
	raw, err := os.ReadFile(filepath.Join("testdata", "use-golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var gold golden
	if err := json.Unmarshal(raw, &gold); err != nil {
		t.Fatal(err)
	}
	if len(gold.Rows) < 30 {
		t.Fatalf("only %d golden rows", len(gold.Rows))
	}
	initORT(t, lib)
	opts, err := ort.NewSessionOptions()
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	if err := opts.SetIntraOpNumThreads(1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s, err := ort.NewDynamicAdvancedSessionWithONNXData(m.Marshal(), []string{"indices", "values"}, []string{"embedding"}, opts)
	if err != nil {
		t.Fatalf("ONNX Runtime rejects the converted model: %v", err)
	}
	defer s.Destroy()
	t.Logf("session created in %v", time.Since(start))

	minCos, maxCos, maxAbs := 2.0, -2.0, 0.0
	start = time.Now()
	for i, row := range gold.Rows {
		got := embed(t, s, [][]int64{row.IDs})[0]
		c := cosine(got, row.Embedding)
		for j := range got {
			maxAbs = math.Max(maxAbs, math.Abs(float64(got[j]-row.Embedding[j])))
		}
		minCos, maxCos = math.Min(minCos, c), math.Max(maxCos, c)
		if c < 0.9999 {
			t.Errorf("row %d (%d tokens, %.40q): cosine %.6f with the golden embedding, want >= 0.9999", i, len(row.IDs), row.Text, c)
		}
	}
	per := time.Since(start) / time.Duration(len(gold.Rows))
	t.Logf("%d sentences: cosine min %.9f (1-cos %.2g) max %.9f (1-cos %.2g), max |diff| %.2g, %v per sentence (1 thread)",
		len(gold.Rows), minCos, 1-minCos, maxCos, 1-maxCos, maxAbs, per)

	// The model keeps the first 128 tokens of a sentence (ClipToMaxLength):
	// feeding only those gives the same embedding.
	for i, row := range gold.Rows {
		if len(row.IDs) <= 128 {
			continue
		}
		full := embed(t, s, [][]int64{row.IDs})[0]
		clipped := embed(t, s, [][]int64{row.IDs[:128]})[0]
		if c := cosine(full, clipped); c < 0.999999 {
			t.Errorf("row %d: %d tokens and their first 128 embed differently (cosine %.6f)", i, len(row.IDs), c)
		}
	}

	var batch [][]int64
	for _, r := range gold.Batch.Rows {
		batch = append(batch, gold.Rows[r].IDs)
	}
	got := embed(t, s, batch)
	for i, r := range gold.Batch.Rows {
		if c := cosine(got[i], gold.Batch.Embeddings[i]); c < 0.9999 {
			t.Errorf("batch row %d (sentence %d): cosine %.6f with the golden batch embedding", i, r, c)
		}
		if c := cosine(got[i], gold.Rows[r].Embedding); c < 0.9999 {
			t.Errorf("batch row %d (sentence %d): cosine %.6f with the sentence embedded alone", i, r, c)
		}
	}
}

// TestOpsGraphInORT runs the mappings Universal Sentence Encoder lite does
// not use (opsGraph) in ONNX Runtime and checks every output's values.
func TestOpsGraphInORT(t *testing.T) {
	lib := ortLib(t)
	g, outs, want := opsGraph(t)
	m, err := Convert(g, Options{Outputs: outs})
	if err != nil {
		t.Fatal(err)
	}
	initORT(t, lib)
	var names []string
	for _, o := range outs {
		names = append(names, o.Name)
	}
	s, err := ort.NewDynamicAdvancedSessionWithONNXData(m.Marshal(), []string{"x"}, names, nil)
	if err != nil {
		t.Fatalf("ONNX Runtime rejects the converted graph: %v", err)
	}
	defer s.Destroy()
	x, err := ort.NewTensor(ort.NewShape(2, 3), []float32{1, 2, 3, 4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Destroy()
	results := make([]ort.Value, len(names))
	if err := s.Run([]ort.Value{x}, results); err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		v := results[i]
		defer v.Destroy()
		var got []float64
		switch tv := v.(type) {
		case *ort.Tensor[float32]:
			for _, f := range tv.GetData() {
				got = append(got, float64(f))
			}
		case *ort.Tensor[int32]:
			for _, n := range tv.GetData() {
				got = append(got, float64(n))
			}
		case *ort.Tensor[int64]:
			for _, n := range tv.GetData() {
				got = append(got, float64(n))
			}
		case *ort.Tensor[bool]:
			for _, b := range tv.GetData() {
				got = append(got, map[bool]float64{false: 0, true: 1}[b])
			}
		default:
			t.Errorf("%s: output of type %T", o.Tensor, v)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(want[o.Tensor]) {
			t.Errorf("%s = %v (shape %v), want %v", o.Tensor, got, v.GetShape(), want[o.Tensor])
		}
	}
}
