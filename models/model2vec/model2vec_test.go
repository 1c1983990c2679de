package model2vec

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/triagegw/triage/models"
)

// writeSafetensors writes tensors (name -> shape and values) in dtype
// ("F32" or "F16") as a safetensors file.
func writeSafetensors(t *testing.T, path, dtype string, tensors map[string][]int, data map[string][]float32) {
	t.Helper()
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var raw []byte
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		start := len(raw)
		for _, x := range data[n] {
			if dtype == "F16" {
				raw = binary.LittleEndian.AppendUint16(raw, models.Float32ToHalf(x))
			} else {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(x))
			}
		}
		hdr[n] = map[string]any{"dtype": dtype, "shape": tensors[n], "data_offsets": []int{start, len(raw)}}
	}
	hj, _ := json.Marshal(hdr)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
	out = append(append(out, hj...), raw...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeTokenizer(t *testing.T, path string, vocab map[string]int) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"version": "1.0", "model": map[string]any{"type": "WordPiece", "unk_token": "[UNK]", "vocab": vocab}})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestImport(t *testing.T) {
	// The model's ids differ from ours; "extra" is not in our vocabulary.
	model := map[string]int{"[PAD]": 0, "law": 1, "court": 2, "##s": 3, "extra": 4}
	ours := []string{"[PAD]", "[UNK]", "court", "law", "##s", "missing"}
	const dims = 3
	emb := make([]float32, len(model)*dims)
	for id := range len(model) {
		for j := range dims {
			emb[id*dims+j] = float32(id) + float32(j)/4 // exact in f16
		}
	}
	for _, dtype := range []string{"F32", "F16"} {
		for _, withWeights := range []bool{false, true} {
			dir := t.TempDir()
			shapes := map[string][]int{"embeddings": {len(model), dims}}
			data := map[string][]float32{"embeddings": emb}
			if withWeights {
				shapes["weights"] = []int{len(model)}
				data["weights"] = []float32{0.5, 0.25, 0.125, 2, 3}
			}
			writeSafetensors(t, filepath.Join(dir, "model.safetensors"), dtype, shapes, data)
			writeTokenizer(t, filepath.Join(dir, "tokenizer.json"), model)
			tb, err := Import(dir, ours)
			if err != nil {
				t.Fatal(err)
			}
			if tb.Rows() != len(ours) || tb.Dims() != dims || tb.Manifest.Method != "model2vec" {
				t.Fatalf("%s: rows %d dims %d %+v", dtype, tb.Rows(), tb.Dims(), tb.Manifest)
			}
			for row, tok := range ours {
				v := tb.Vector(int32(row), nil)
				id, ok := model[tok]
				var want []float32
				wantW := float32(0)
				if ok {
					want = emb[id*dims : id*dims+dims]
					wantW = 1
					if withWeights {
						wantW = data["weights"][id]
					}
				} else {
					want = make([]float32, dims)
				}
				if !slices.Equal(v, want) || tb.Weight(int32(row)) != wantW {
					t.Errorf("%s weights=%v row %d %q: %v weight %v, want %v weight %v", dtype, withWeights, row, tok, v, tb.Weight(int32(row)), want, wantW)
				}
			}
			if !strings.Contains(tb.Manifest.Notes, "4 of 6 vocabulary tokens") || !strings.Contains(tb.Manifest.Notes, "1 model tokens not in the vocabulary") ||
				!strings.Contains(tb.Manifest.Source, dtype) {
				t.Errorf("manifest %+v", tb.Manifest)
			}
		}
	}

	// No token in common: the error lists the model's tokens.
	dir := t.TempDir()
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), "F32", map[string][]int{"embeddings": {2, 1}}, map[string][]float32{"embeddings": {1, 2}})
	writeTokenizer(t, filepath.Join(dir, "tokenizer.json"), map[string]int{"foo": 0, "bar": 1})
	if _, err := Import(dir, ours); err == nil || !strings.Contains(err.Error(), `"bar"`) || !strings.Contains(err.Error(), `"foo"`) {
		t.Errorf("no match: %v", err)
	}
	// Missing tensor, bad shape, truncated data.
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), "F32", map[string][]int{"other": {2, 1}}, map[string][]float32{"other": {1, 2}})
	if _, err := Import(dir, ours); err == nil || !strings.Contains(err.Error(), `no "embeddings" tensor`) {
		t.Errorf("no embeddings: %v", err)
	}
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), "F32", map[string][]int{"embeddings": {3, 1}}, map[string][]float32{"embeddings": {1, 2}})
	if _, err := Import(dir, ours); err == nil || !strings.Contains(err.Error(), "data_offsets") {
		t.Errorf("bad offsets: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{'}, 0o644)
	if _, err := Import(dir, ours); err == nil || !strings.Contains(err.Error(), "header length") {
		t.Errorf("bad header: %v", err)
	}
}
