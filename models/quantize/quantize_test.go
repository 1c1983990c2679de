package quantize

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/triagegw/triage/models/bert"
	"github.com/triagegw/triage/models/onnxpb"
)

// quantTestBERT is a BERT small enough to build in milliseconds whose
// projections (64×64, 64×256) and word table (300×64) all pass a
// MinElements of 4096.
func quantTestBERT() bert.Config {
	return bert.Config{Layers: 2, Hidden: 64, Heads: 4, Intermediate: 256, Vocab: 300, MaxPos: 32, TypeVocab: 2, Seed: 3}
}

func quantOpCounts(m *onnxpb.Model) map[string]int {
	ops := map[string]int{}
	for _, n := range m.Graph.Nodes {
		ops[n.Op]++
	}
	return ops
}

func quantInit(t *testing.T, m *onnxpb.Model, name string) *onnxpb.Tensor {
	t.Helper()
	for i := range m.Graph.Initializers {
		if m.Graph.Initializers[i].Name == name {
			return &m.Graph.Initializers[i]
		}
	}
	t.Fatalf("no initializer %q", name)
	return nil
}

func TestQuantizeColumns(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const k, n = 37, 11
	w := make([]float32, k*n)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * float64(1+i%n)) // columns of different ranges
	}
	for _, typ := range []onnxpb.DataType{onnxpb.Int8, onnxpb.Uint8} {
		for _, perTensor := range []bool{false, true} {
			q := quantizeColumns(w, k, n, typ, perTensor)
			if want := map[bool]int{false: n, true: 1}[perTensor]; len(q.scales) != want || len(q.zeros) != want {
				t.Fatalf("%v per-tensor %v: %d scales, %d zero points, want %d", typ, perTensor, len(q.scales), len(q.zeros), want)
			}
			for i, v := range w {
				g := i % n
				if perTensor {
					g = 0
				}
				s := float64(q.scales[g])
				var deq float64
				if typ == onnxpb.Int8 {
					if q.zeros[g] != 0 {
						t.Fatal("int8 weights must have zero point 0")
					}
					deq = float64(int8(q.data[i])) * s
				} else {
					deq = (float64(q.data[i]) - float64(q.zeros[g])) * s
				}
				if d := math.Abs(deq - float64(v)); d > s/2+1e-6 {
					t.Fatalf("%v per-tensor %v: element %d: %g dequantizes to %g (error %g > half a step %g)", typ, perTensor, i, v, deq, d, s/2)
				}
			}
			if !perTensor && q.relErr > 0.01 {
				t.Errorf("%v per-column: relative error %.4f", typ, q.relErr)
			}
		}
	}
	// A zero column gets scale 1, not a division by zero.
	q := quantizeColumns(make([]float32, 6), 3, 2, onnxpb.Int8, false)
	if q.scales[0] != 1 || q.relErr != 0 {
		t.Errorf("zero weights: scales %v, error %g", q.scales, q.relErr)
	}
}

func TestQuantizeRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, dims = 9, 16
	w := make([]float32, rows*dims)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * float64(1+i/dims))
	}
	q := quantizeRows(w, rows, dims)
	for i, v := range w {
		s := float64(q.scales[i/dims])
		if d := math.Abs(float64(int8(q.data[i]))*s - float64(v)); d > s/2+1e-6 {
			t.Fatalf("element %d: error %g > half a step %g", i, d, s/2)
		}
	}
}

func TestTransposeDense(t *testing.T) {
	v := make([]float32, 2*3*4)
	for i := range v {
		v[i] = float32(i)
	}
	got, dims, ok := transposeDense(v, []int64{2, 3, 4}, []int64{2, 0, 1})
	if !ok || dims[0] != 4 || dims[1] != 2 || dims[2] != 3 {
		t.Fatalf("dims %v ok %v", dims, ok)
	}
	for a := range 2 {
		for b := range 3 {
			for c := range 4 {
				if got[c*6+a*3+b] != v[a*12+b*4+c] {
					t.Fatalf("[%d %d %d] moved wrong", a, b, c)
				}
			}
		}
	}
	if _, _, ok := transposeDense(v, []int64{2, 3, 4}, []int64{0, 0, 1}); ok {
		t.Error("a repeated axis in perm was accepted")
	}
}

// TestQuantizeDynamicBERT checks the rewrite of a BERT graph: which nodes
// it adds, that the weights it stores dequantize to the float ones, that
// the input is untouched and that the output is deterministic and survives
// Marshal and Decode.
func TestQuantizeDynamicBERT(t *testing.T) {
	c := quantTestBERT()
	m := bert.Build(c)
	before := m.Marshal()
	qm, rep, err := Dynamic(m, Options{MinElements: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, m.Marshal()) {
		t.Fatal("Dynamic modified its input")
	}
	ops := quantOpCounts(qm)
	orig := quantOpCounts(m)
	// Six projections per layer; Q, K and V share their input's
	// DynamicQuantizeLinear: four per layer. The attention products
	// (activation × activation) stay MatMul. The word table (300×64) is
	// quantized, the token-type table (2×64) is not.
	want := map[string]int{
		"MatMulInteger":         6 * c.Layers,
		"DynamicQuantizeLinear": 4 * c.Layers,
		"MatMul":                2 * c.Layers,
		"Gather":                orig["Gather"] + 1,
		"Cast":                  orig["Cast"] + 6*c.Layers + 1,
		"Mul":                   orig["Mul"] + 12*c.Layers + 1,
	}
	for op, n := range want {
		if ops[op] != n {
			t.Errorf("%d %s nodes, want %d (all: %v)", ops[op], op, n, ops)
		}
	}
	if len(rep.Weights) != 6*c.Layers+1 || len(rep.Skipped) != 1 || rep.Skipped[0].Weight != "emb.token_type" {
		t.Errorf("report: %d weights, skipped %+v", len(rep.Weights), rep.Skipped)
	}
	for _, w := range rep.Weights {
		if w.RelErr <= 0 || w.RelErr > 0.01 {
			t.Errorf("%s: relative rounding error %g", w.Weight, w.RelErr)
		}
	}
	if rep.ParamBytesAfter*3 > rep.ParamBytesBefore {
		t.Errorf("parameter bytes %d -> %d: not a third", rep.ParamBytesBefore, rep.ParamBytesAfter)
	}
	if !strings.Contains(rep.Summary(), "12 MatMul, 1 Gather") {
		t.Errorf("summary: %s", rep.Summary())
	}
	for _, t0 := range qm.Graph.Initializers {
		if t0.Name == "l0.q" || t0.Name == "emb.word" {
			t.Errorf("float weight %q is still in the graph", t0.Name)
		}
	}

	// l0.q dequantizes to the float weight, column by column.
	w, err := quantInit(t, m, "l0.q").Floats()
	if err != nil {
		t.Fatal(err)
	}
	wq := quantInit(t, qm, "l0.q_quantized")
	scales, err := quantInit(t, qm, "l0.q_scale").Floats()
	if err != nil {
		t.Fatal(err)
	}
	if wq.Type != onnxpb.Int8 || len(wq.Dims) != 2 || wq.Dims[0] != int64(c.Hidden) || len(scales) != c.Hidden {
		t.Fatalf("l0.q_quantized: %v %v, %d scales", wq.Type, wq.Dims, len(scales))
	}
	for i, v := range w {
		s := scales[i%c.Hidden]
		if d := math.Abs(float64(int8(wq.Raw[i]))*float64(s) - float64(v)); d > float64(s)/2+1e-7 {
			t.Fatalf("l0.q[%d]: dequantized off by %g", i, d)
		}
	}
	if zp := quantInit(t, qm, "l0.q_zero_point"); zp.Type != onnxpb.Int8 || len(zp.Dims) != 0 || len(zp.Raw) != 1 || zp.Raw[0] != 0 {
		t.Errorf("zero point %+v", zp)
	}
	// The word table: int8 rows and one scale per row.
	if tq := quantInit(t, qm, "emb.word_quantized"); tq.Type != onnxpb.Int8 || tq.NumElements() != int64(c.Vocab*c.Hidden) {
		t.Errorf("word table %v %v", tq.Type, tq.Dims)
	}
	if rs := quantInit(t, qm, "emb.word_row_scale"); len(rs.Dims) != 2 || rs.Dims[0] != int64(c.Vocab) || rs.Dims[1] != 1 {
		t.Errorf("row scales %v", rs.Dims)
	}

	// Deterministic, and the bytes survive Decode.
	b := qm.Marshal()
	qm2, _, err := Dynamic(m, Options{MinElements: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, qm2.Marshal()) {
		t.Error("two quantizations of one model differ")
	}
	back, err := onnxpb.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, back.Marshal()) {
		t.Error("Decode and Marshal changed the quantized model")
	}
	if qm.Metadata["quantization"] == "" || qm.Metadata["architecture"] != "bert" {
		t.Errorf("metadata %v", qm.Metadata)
	}
}

func TestQuantizeDynamicUint8PerTensor(t *testing.T) {
	m := bert.Build(quantTestBERT())
	qm, _, err := Dynamic(m, Options{MinElements: 4096, WeightType: onnxpb.Uint8, PerTensor: true, NoEmbeddings: true})
	if err != nil {
		t.Fatal(err)
	}
	if wq := quantInit(t, qm, "l1.ff2_quantized"); wq.Type != onnxpb.Uint8 {
		t.Errorf("weights %v, want uint8", wq.Type)
	}
	if s := quantInit(t, qm, "l1.ff2_scale"); len(s.Dims) != 0 {
		t.Errorf("per-tensor scale of dims %v, want a scalar", s.Dims)
	}
	if zp := quantInit(t, qm, "l1.ff2_zero_point"); zp.Type != onnxpb.Uint8 || len(zp.Dims) != 0 || zp.Raw[0] == 0 {
		t.Errorf("uint8 zero point %v %v %v: want a scalar near 128", zp.Type, zp.Dims, zp.Raw)
	}
	if ops := quantOpCounts(qm); ops["Gather"] != quantOpCounts(m)["Gather"] {
		t.Errorf("NoEmbeddings: Gathers %d", ops["Gather"])
	}
}

func TestQuantizeDynamicSkips(t *testing.T) {
	m := bert.Build(quantTestBERT())
	// The default minimum (16,384) keeps everything but the feed-forward
	// matrices (64×256) and the word table (300×64 = 19,200).
	qm, rep, err := Dynamic(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := quantOpCounts(qm)["MatMulInteger"]; got != 4 {
		t.Errorf("%d MatMulInteger, want 4 (ff1, ff2 in two layers)", got)
	}
	var tooSmall int
	for _, s := range rep.Skipped {
		if strings.Contains(s.Reason, "fewer than 16384") {
			tooSmall++
		}
	}
	if tooSmall != 4*2+1 { // q, k, v, o per layer; token types
		t.Errorf("%d skipped as too small: %+v", tooSmall, rep.Skipped)
	}

	if _, _, err := Dynamic(&onnxpb.Model{Opset: 10}, Options{}); err == nil {
		t.Error("opset 10 accepted")
	}
	if _, _, err := Dynamic(m, Options{WeightType: onnxpb.Float}); err == nil {
		t.Error("float32 weight type accepted")
	}
}

// quantGemmModel is Y = Gemm(X, B, C) with the given attributes, B [8, 16]
// ([16, 8] when transB), and a 1×1 Conv.
func quantGemmModel(attrs ...onnxpb.Attr) *onnxpb.Model {
	w := make([]float32, 128)
	for i := range w {
		w[i] = float32(i%7) - 3
	}
	transB := false
	for _, a := range attrs {
		transB = transB || (a.Name == "transB" && a.I == 1)
	}
	dims := []int64{8, 16}
	if transB {
		dims = []int64{16, 8}
	}
	return &onnxpb.Model{Graph: onnxpb.Graph{
		Initializers: []onnxpb.Tensor{onnxpb.FloatTensor("B", dims, w), onnxpb.FloatTensor("C", []int64{16}, w[:16]),
			onnxpb.FloatTensor("W", []int64{16, 8, 1, 1}, w), onnxpb.FloatTensor("X_quantized", []int64{1}, w[:1])},
		Nodes: []onnxpb.Node{
			{Name: "g", Op: "Gemm", Inputs: []string{"X", "B", "C"}, Outputs: []string{"Y"}, Attrs: attrs},
			{Name: "c", Op: "Conv", Inputs: []string{"Z", "W"}, Outputs: []string{"V"}},
		},
		Inputs: []onnxpb.ValueInfo{{Name: "X", Type: onnxpb.Float, Dims: onnxpb.Dims(4, 8)},
			{Name: "Z", Type: onnxpb.Float, Dims: onnxpb.Dims(1, 8, 2, 3)}},
		Outputs: []onnxpb.ValueInfo{{Name: "Y", Type: onnxpb.Float}, {Name: "V", Type: onnxpb.Float}},
	}}
}

func TestQuantizeDynamicGemmAndConv(t *testing.T) {
	qm, rep, err := Dynamic(quantGemmModel(onnxpb.AttrFloat("alpha", 2), onnxpb.AttrInt("transB", 1)), Options{MinElements: 1})
	if err != nil {
		t.Fatal(err)
	}
	ops := quantOpCounts(qm)
	if ops["Gemm"] != 0 || ops["Conv"] != 0 || ops["MatMulInteger"] != 2 || ops["Add"] != 1 || ops["Transpose"] != 2 {
		t.Errorf("ops %v", ops)
	}
	if len(rep.Weights) != 2 {
		t.Fatalf("weights %+v", rep.Weights)
	}
	// transB: the stored weight is B transposed, [8, 16]; alpha is in the
	// scales: B's values are -3..3, so 2·3/127 per column.
	if wq := quantInit(t, qm, "B_quantized"); wq.Dims[0] != 8 || wq.Dims[1] != 16 {
		t.Errorf("Gemm weight dims %v, want [8 16]", wq.Dims)
	}
	s, _ := quantInit(t, qm, "B_scale").Floats()
	if math.Abs(float64(s[0])-6.0/127) > 1e-6 {
		t.Errorf("scale %g, want alpha folded in (%g)", s[0], 6.0/127)
	}
	// The name X_quantized was taken: the activation's got a suffix.
	found := false
	for _, n := range qm.Graph.Nodes {
		if n.Op == "DynamicQuantizeLinear" && n.Inputs[0] == "X" {
			found = n.Outputs[0] == "X_quantized_2"
		}
	}
	if !found {
		t.Error("DynamicQuantizeLinear of X does not avoid the taken name X_quantized")
	}
	// The Conv's output keeps its name, channels-first, through a
	// Transpose back.
	for _, n := range qm.Graph.Nodes {
		if n.Outputs[0] == "V" && (n.Op != "Transpose" || n.Attrs[0].Ints[1] != 3) {
			t.Errorf("V is produced by %s %v", n.Op, n.Attrs)
		}
	}

	for _, tc := range []struct {
		attr   onnxpb.Attr
		reason string
	}{{onnxpb.AttrInt("transA", 1), "transA"}, {onnxpb.AttrFloat("beta", 0.5), "beta"}} {
		_, rep, err := Dynamic(quantGemmModel(tc.attr), Options{MinElements: 1, NoConv: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Weights) != 0 || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0].Reason, tc.reason) {
			t.Errorf("%s: weights %+v, skipped %+v", tc.reason, rep.Weights, rep.Skipped)
		}
	}
}

// TestQuantizeDynamicTiedWeight: a table both Gathered and used as a
// MatMul weight (tied embeddings) is quantized for each use, and its
// float32 form dropped.
func TestQuantizeDynamicTiedWeight(t *testing.T) {
	w := make([]float32, 64*32)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)))
	}
	m := &onnxpb.Model{Graph: onnxpb.Graph{
		Initializers: []onnxpb.Tensor{onnxpb.FloatTensor("E", []int64{64, 32}, w)},
		Nodes: []onnxpb.Node{
			{Name: "g", Op: "Gather", Inputs: []string{"E", "ids"}, Outputs: []string{"e"}},
			{Name: "t", Op: "Transpose", Inputs: []string{"e"}, Outputs: []string{"et"}, Attrs: []onnxpb.Attr{onnxpb.AttrInts("perm", 1, 0)}},
			{Name: "mm", Op: "MatMul", Inputs: []string{"x", "E"}, Outputs: []string{"y"}},
		},
		Inputs:  []onnxpb.ValueInfo{{Name: "ids", Type: onnxpb.Int64}, {Name: "x", Type: onnxpb.Float}},
		Outputs: []onnxpb.ValueInfo{{Name: "et", Type: onnxpb.Float}, {Name: "y", Type: onnxpb.Float}},
	}}
	qm, rep, err := Dynamic(m, Options{MinElements: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Weights) != 2 {
		t.Errorf("weights %+v", rep.Weights)
	}
	for _, t0 := range qm.Graph.Initializers {
		if t0.Name == "E" {
			t.Error("the float32 table is still there")
		}
	}
	if rep.ParamBytesAfter >= rep.ParamBytesBefore {
		t.Errorf("bytes %d -> %d", rep.ParamBytesBefore, rep.ParamBytesAfter)
	}
}
