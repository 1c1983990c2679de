package model2vec

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/vocab"
)

// Tensor is one tensor of a safetensors file, converted to float32.
type Tensor struct {
	DType string // as stored: "F32", "F16", "BF16" or "F64"
	Shape []int
	Data  []float32 // row-major
}

// ReadSafetensors reads the named tensors (all floating-point tensors if
// names is empty) from a safetensors file: an 8-byte little-endian header
// length, a JSON header {"name":{"dtype","shape","data_offsets":[b,e]},
// "__metadata__":{...}}, then the raw little-endian data, offsets relative
// to its start. A named tensor that is absent is not an error: the caller
// checks the map.
func ReadSafetensors(path string, names ...string) (map[string]Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	out, err := readSafetensors(f, st.Size(), names)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func readSafetensors(r io.ReaderAt, size int64, names []string) (map[string]Tensor, error) {
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors header length: %w", err)
	}
	hlen := binary.LittleEndian.Uint64(lb[:])
	if hlen > 100<<20 || int64(hlen) > size-8 {
		return nil, fmt.Errorf("safetensors header length %d out of range (file is %d bytes)", hlen, size)
	}
	hb := make([]byte, hlen)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return nil, fmt.Errorf("safetensors header: %w", err)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return nil, fmt.Errorf("safetensors header: %w", err)
	}
	base := 8 + int64(hlen)
	out := map[string]Tensor{}
	for name, raw := range hdr {
		if name == "__metadata__" || (len(names) > 0 && !slices.Contains(names, name)) {
			continue
		}
		var info struct {
			DType   string  `json:"dtype"`
			Shape   []int   `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &info); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		var width int64
		switch info.DType {
		case "F32":
			width = 4
		case "F16", "BF16":
			width = 2
		case "F64":
			width = 8
		default:
			if len(names) == 0 {
				continue
			}
			return nil, fmt.Errorf("tensor %q: dtype %s (want F32, F16, BF16 or F64)", name, info.DType)
		}
		n := int64(1)
		for _, d := range info.Shape {
			if d < 0 || (d > 0 && n > math.MaxInt32/int64(d)) {
				return nil, fmt.Errorf("tensor %q: bad shape %v", name, info.Shape)
			}
			n *= int64(d)
		}
		if len(info.Offsets) != 2 || info.Offsets[0] < 0 || info.Offsets[1]-info.Offsets[0] != n*width || base+info.Offsets[1] > size {
			return nil, fmt.Errorf("tensor %q: data_offsets %v do not hold %v %s in a %d-byte file", name, info.Offsets, info.Shape, info.DType, size)
		}
		raw := make([]byte, n*width)
		if _, err := r.ReadAt(raw, base+info.Offsets[0]); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		data := make([]float32, n)
		for i := range data {
			switch info.DType {
			case "F32":
				data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			case "F16":
				data[i] = models.HalfToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
			case "BF16":
				data[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
			case "F64":
				data[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:])))
			}
		}
		out[name] = Tensor{DType: info.DType, Shape: info.Shape, Data: data}
	}
	return out, nil
}

// Import builds a float32 table from a model2vec (potion) model
// directory: model.safetensors with tensor "embeddings" [V, D] (F32, F16,
// BF16 or F64) and optionally "weights" [V], and tokenizer.json whose
// model.vocab maps the model's tokens to embedding rows. Rows follow tokens
// (our tokenizer's tokens in id order): a token the model has gets its
// vector and weight ("weights" if present, else 1); the others are zero
// rows of weight 0. If no token matches, the error lists some of the
// model's tokens; otherwise the counts go into Manifest.Notes. The table
// has no extra words. The caller sets TokenizerSHA256.
func Import(dir string, tokens []string) (*models.Table, error) {
	if len(tokens) == 0 {
		return nil, errors.New("model2vec: Import: empty vocabulary")
	}
	tokPath := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(tokPath)
	if err != nil {
		return nil, fmt.Errorf("model2vec: Import: %w", err)
	}
	mvocab, err := vocab.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("model2vec: Import: %s: %w", tokPath, err)
	}
	stPath := filepath.Join(dir, "model.safetensors")
	ts, err := ReadSafetensors(stPath, "embeddings", "weights")
	if err != nil {
		return nil, fmt.Errorf("model2vec: Import: %w", err)
	}
	emb, ok := ts["embeddings"]
	if !ok {
		return nil, fmt.Errorf("model2vec: Import: %s has no \"embeddings\" tensor", stPath)
	}
	if len(emb.Shape) != 2 || emb.Shape[0] == 0 || emb.Shape[1] == 0 || emb.Shape[1] > models.MaxDims {
		return nil, fmt.Errorf("model2vec: Import: %s: embeddings shape %v, want [vocab, dims]", stPath, emb.Shape)
	}
	nrows, dims := emb.Shape[0], emb.Shape[1]
	if len(mvocab) > nrows {
		return nil, fmt.Errorf("model2vec: Import: %s has %d tokens, the embeddings only %d rows", tokPath, len(mvocab), nrows)
	}
	if i := models.FirstNonFinite(emb.Data); i >= 0 {
		return nil, fmt.Errorf("model2vec: Import: %s: embeddings row %d is not finite", stPath, i/dims)
	}
	var mweights []float32
	if wt, ok := ts["weights"]; ok {
		if len(wt.Data) != nrows {
			return nil, fmt.Errorf("model2vec: Import: %s: weights shape %v, want [%d]", stPath, wt.Shape, nrows)
		}
		if i := models.FirstNonFinite(wt.Data); i >= 0 {
			return nil, fmt.Errorf("model2vec: Import: %s: weight %d is not finite", stPath, i)
		}
		mweights = wt.Data
	}
	mid := make(map[string]int, len(mvocab))
	for id, tok := range mvocab {
		if tok != "" {
			mid[tok] = id
		}
	}
	flat := make([]float32, len(tokens)*dims)
	weights := make([]float32, len(tokens))
	matched, missing := 0, 0
	used := make([]bool, len(mvocab))
	for row, tok := range tokens {
		id, ok := mid[tok]
		if tok == "" || !ok {
			if tok != "" {
				missing++
			}
			continue
		}
		used[id] = true
		matched++
		copy(flat[row*dims:row*dims+dims], emb.Data[id*dims:id*dims+dims])
		weights[row] = 1
		if mweights != nil {
			weights[row] = mweights[id]
		}
	}
	var extra []string
	for id, tok := range mvocab {
		if tok != "" && !used[id] {
			extra = append(extra, tok)
		}
	}
	if matched == 0 {
		return nil, fmt.Errorf("model2vec: Import: none of the %d tokens of %s is in the vocabulary; the model's tokens include %s",
			len(mid), tokPath, quoteSome(extra, 20))
	}
	sum, err := models.FileSHA256(stPath)
	if err != nil {
		return nil, fmt.Errorf("model2vec: Import: %w", err)
	}
	weighting := "1 for every token the model has (model2vec bakes its weighting into the vectors), 0 for the others"
	if mweights != nil {
		weighting = "the model's \"weights\" tensor for its tokens, 0 for the others"
	}
	abs, _ := filepath.Abs(dir)
	base := filepath.Base(abs)
	m := models.Manifest{
		Name: "model2vec-" + base, Version: "1", Method: "model2vec",
		// No absolute path: the same model gives the same table anywhere.
		Source:    fmt.Sprintf("model2vec model %s: model.safetensors sha256 %s (embeddings %s %v)", base, sum, emb.DType, emb.Shape),
		Weighting: weighting,
		Created:   time.Now().UTC().Format(time.RFC3339),
		Notes: fmt.Sprintf("%d of %d vocabulary tokens found in the model; %d vocabulary tokens missing (zero rows of weight 0); %d model tokens not in the vocabulary (dropped)",
			matched, len(tokens), missing, len(extra)),
	}
	t, err := models.NewTable(m, len(tokens), nil, rows(flat, dims), weights)
	if err != nil {
		return nil, fmt.Errorf("model2vec: Import: %w", err)
	}
	return t, nil
}

func quoteSome(s []string, n int) string {
	var b strings.Builder
	for i, w := range s {
		if i == n {
			fmt.Fprintf(&b, " ... (%d more)", len(s)-n)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", w)
	}
	return b.String()
}

// rows views a flat row-major slice as rows of dims values.
func rows(flat []float32, dims int) [][]float32 {
	r := make([][]float32, len(flat)/dims)
	for i := range r {
		r[i] = flat[i*dims : (i+1)*dims : (i+1)*dims]
	}
	return r
}
