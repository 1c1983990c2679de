//go:build ort

package bert_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/models/bert"
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

// writeTiny writes the tiny encoder's graph into a temporary directory.
func writeTiny(t *testing.T) string {
	t.Helper()
	c, w := tinyWeights(t)
	m, err := bert.BuildFrom(c, w)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBERTGraphMatchesReference runs the generated graph in ONNX Runtime on
// a batch of two sequences, the second padded (attention_mask 0) and both
// with both token types, and compares every hidden state with the plain-Go
// reference: this checks the graph (and the runtime path) against the
// definition of BERT.
func TestBERTGraphMatchesReference(t *testing.T) {
	requireORT(t)
	c, w := tinyWeights(t)
	path := writeTiny(t)
	const seq = 9
	ids := [][]int64{{2, 15, 77, 4, 99, 0, 31, 8, 3}, {2, 64, 5, 12, 3, 0, 0, 0, 0}}
	types := [][]int64{{0, 0, 0, 0, 1, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 0, 0, 0, 0}}
	mask := [][]int64{{1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 0, 0, 0, 0}}
	flat := func(v [][]int64) []int64 { return append(append([]int64{}, v[0]...), v[1]...) }
	shape := ort.NewShape(2, seq)
	var inputs []ort.Value
	for _, v := range [][][]int64{ids, mask, types} {
		tt, err := ort.NewTensor(shape, flat(v))
		if err != nil {
			t.Fatal(err)
		}
		defer tt.Destroy()
		inputs = append(inputs, tt)
	}
	out, err := ort.NewEmptyTensor[float32](ort.NewShape(2, seq, int64(c.Hidden)))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Destroy()
	sess, err := ort.NewDynamicAdvancedSession(path, []string{"input_ids", "attention_mask", "token_type_ids"}, []string{"last_hidden_state"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Destroy()
	if err := sess.Run(inputs, []ort.Value{out}); err != nil {
		t.Fatal(err)
	}
	got := out.GetData()
	worst := 0.0
	for b := range 2 {
		want := BERTForward(c, w, ids[b], types[b], mask[b])
		for s := range seq {
			if mask[b][s] == 0 {
				continue // a padding position's state is not used
			}
			row := got[(b*seq+s)*c.Hidden : (b*seq+s+1)*c.Hidden]
			worst = math.Max(worst, maxAbsDiff(row, want[s]))
		}
	}
	t.Logf("largest difference from the reference: %.2g", worst)
	if worst > 1e-4 {
		t.Fatalf("ONNX Runtime and the reference differ by %.3g (> 1e-4)", worst)
	}
	// The unpadded prefix of sequence 2, run alone, gives the same states.
	alone := BERTForward(c, w, ids[1][:5], types[1][:5], mask[1][:5])
	for s := range 5 {
		if d := maxAbsDiff(got[(seq+s)*c.Hidden:(seq+s+1)*c.Hidden], alone[s]); d > 1e-4 {
			t.Fatalf("padding changed token %d's state by %.3g", s, d)
		}
	}
}

// TestBERTEncoderMatchesReference goes through classifier/onnx's Encoder:
// the hidden states, and the cls and mean poolings, unit length.
func TestBERTEncoderMatchesReference(t *testing.T) {
	requireORT(t)
	c, w := tinyWeights(t)
	path := writeTiny(t)
	ids := []int32{2, 15, 77, 4, 99, 0, 31}
	i64 := make([]int64, len(ids))
	for i, id := range ids {
		i64[i] = int64(id)
	}
	ref := BERTForward(c, w, i64, make([]int64, len(ids)), []int64{1, 1, 1, 1, 1, 1, 1})
	for _, pooling := range []string{onnx.PoolCLS, onnx.PoolMean} {
		man := onnx.Manifest{Format: onnx.ManifestFormat, Name: "tiny", Input: onnx.InputBERT, Pooling: pooling,
			Dims: c.Hidden, MaxTokens: c.MaxPos, Tokenizer: "none.json"}
		enc, err := onnx.NewEncoder(path, man, onnx.Options{}, "")
		if err != nil {
			t.Fatal(err)
		}
		hs, err := enc.HiddenStates(context.Background(), ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		for s := range ids {
			if d := maxAbsDiff(hs[s*c.Hidden:(s+1)*c.Hidden], ref[s]); d > 1e-4 {
				t.Fatalf("hidden state %d differs by %.3g", s, d)
			}
		}
		want := make([]float32, c.Hidden)
		if pooling == onnx.PoolCLS {
			copy(want, ref[0])
		} else {
			for _, row := range ref {
				for i, v := range row {
					want[i] += v / float32(len(ref))
				}
			}
		}
		classifier.L2Normalize(want)
		got, err := enc.Embed(context.Background(), ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(got, want); d > 1e-5 {
			t.Errorf("%s pooling: embedding differs from the reference by %.3g", pooling, d)
		}
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
