package tfjs

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// builder writes small TF.js graph models for tests: nodes in the JSON form
// of model.json, constants as weights in one shard, the way the TF.js
// converter stores them.
type builder struct {
	nodes   []string
	weights []map[string]any
	data    []byte
}

// node adds a node; attrs is the JSON of its attr object without braces.
func (b *builder) node(name, op string, inputs []string, attrs string) string {
	in, _ := json.Marshal(inputs)
	b.nodes = append(b.nodes, fmt.Sprintf(`{"name":%q,"op":%q,"input":%s,"attr":{%s}}`, name, op, in, attrs))
	return name
}

// placeholder adds a graph input of dtype dt (a TF enum) and shape dims.
func (b *builder) placeholder(name string, dt DType, dims ...int) string {
	var ds []string
	for _, d := range dims {
		ds = append(ds, fmt.Sprintf(`{"size":"%d"}`, d))
	}
	return b.node(name, "Placeholder", nil, fmt.Sprintf(`"dtype":{"type":%d},"shape":{"shape":{"dim":[%s]}}`, dt, strings.Join(ds, ",")))
}

// f32 adds a float32 constant.
func (b *builder) f32(name string, shape []int, v ...float32) string {
	b.weights = append(b.weights, map[string]any{"name": name, "shape": shape, "dtype": "float32"})
	b.data = append(b.data, f32bytes(v...)...)
	var ds []string
	for _, d := range shape {
		ds = append(ds, fmt.Sprintf(`{"size":"%d"}`, d))
	}
	return b.node(name, "Const", nil, fmt.Sprintf(`"dtype":{"type":1},"value":{"tensor":{"dtype":1,"tensorShape":{"dim":[%s]}}}`, strings.Join(ds, ",")))
}

// ints adds an integer constant of dtype dt, stored as an int32 weight as
// the TF.js converter stores int64 constants too.
func (b *builder) ints(name string, dt DType, shape []int, v ...int32) string {
	b.weights = append(b.weights, map[string]any{"name": name, "shape": shape, "dtype": "int32"})
	b.data = append(b.data, i32bytes(v...)...)
	return b.node(name, "Const", nil, fmt.Sprintf(`"dtype":{"type":%d}`, dt))
}

func (b *builder) graph(t testing.TB) *Graph {
	t.Helper()
	manifest, _ := json.Marshal([]map[string]any{{"paths": []string{"shard"}, "weights": b.weights}})
	js := fmt.Sprintf(`{"format":"graph-model","modelTopology":{"node":[%s]},"weightsManifest":%s}`, strings.Join(b.nodes, ","), manifest)
	g, err := Parse([]byte(js), func(p string) ([]byte, error) {
		if p != "shard" {
			return nil, os.ErrNotExist
		}
		return b.data, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// opsGraph exercises mappings Universal Sentence Encoder lite does not use.
// x is float32 [2, 3] = [[1, 2, 3], [4, 5, 6]] when fed by the tests; want
// gives each output's expected value, flattened (ints as float64).
func opsGraph(t testing.TB) (*Graph, []Output, map[string][]float64) {
	var b builder
	const f, i32, i64 = `"T":{"type":1}`, `"T":{"type":3}`, `"T":{"type":9}`
	x := b.placeholder("x", DTFloat, 2, 3)
	ss := func(name string, begin, end, strides []int32, bm, em, na, sh int) string {
		n := len(begin)
		return b.node(name, "StridedSlice", []string{x,
			b.ints(name+"/b", DTInt32, []int{n}, begin...), b.ints(name+"/e", DTInt32, []int{n}, end...), b.ints(name+"/s", DTInt32, []int{n}, strides...)},
			fmt.Sprintf(`%s,"Index":{"type":3},"begin_mask":{"i":"%d"},"end_mask":{"i":"%d"},"ellipsis_mask":{"i":"0"},"new_axis_mask":{"i":"%d"},"shrink_axis_mask":{"i":"%d"}`, f, bm, em, na, sh))
	}
	ss(("last_col"), []int32{0, -1}, []int32{0, 0}, []int32{1, 1}, 1, 1, 0, 2)       // x[:, -1]
	ss("reversed", []int32{0}, []int32{0}, []int32{-1}, 1, 1, 0, 0)                  // x[::-1]
	ss("new_axis", []int32{0, 0, 1}, []int32{0, 0, 0}, []int32{1, 1, 1}, 1, 5, 2, 0) // x[:, None, 1:]
	b.node("packed", "Pack", []string{x, x}, f+`,"axis":{"i":"1"},"N":{"i":"2"}`)
	b.node("rows", "Unpack", []string{x}, f+`,"num":{"i":"2"},"axis":{"i":"0"}`)
	two := b.f32("two", []int{}, 2)
	b.node("relu6", "Relu6", []string{b.node("doubled", "Mul", []string{x, two}, f)}, f)
	x3 := b.node("x3", "ExpandDims", []string{x, b.ints("zero", DTInt32, []int{}, 0)}, f+`,"Tdim":{"type":3}`)
	b.node("gram", "BatchMatMulV2", []string{x3, x3}, f+`,"adj_x":{"b":false},"adj_y":{"b":true}`)
	b.node("gram_t", "BatchMatMulV2", []string{x3, x3}, f+`,"adj_x":{"b":true},"adj_y":{"b":false}`)
	b.node("xtx", "MatMul", []string{x, x}, f+`,"transpose_a":{"b":true},"transpose_b":{"b":false}`)
	b.node("sliced", "Slice", []string{x, b.ints("sl/b", DTInt32, []int{2}, 0, 1), b.ints("sl/s", DTInt32, []int{2}, -1, 1)}, f+`,"Index":{"type":3}`)
	b.node("split", "SplitV", []string{x, b.ints("sp/s", DTInt32, []int{2}, 1, 2), b.ints("one", DTInt32, []int{}, 1)}, f+`,"Tlen":{"type":3},"num_split":{"i":"2"}`)
	b.node("tiled", "Tile", []string{x, b.ints("reps", DTInt32, []int{2}, 1, 2)}, f+`,"Tmultiples":{"type":3}`)
	b.node("dense", "SparseToDense", []string{b.ints("sd/i", DTInt64, []int{2, 2}, 0, 1, 1, 0), b.ints("sd/shape", DTInt64, []int{2}, 2, 3),
		b.ints("sd/v", DTInt32, []int{2}, 7, 8), b.ints("sd/d", DTInt32, []int{}, -1)}, i32+`,"Tindices":{"type":9},"validate_indices":{"b":true}`)
	b.node("big", "Where", []string{b.node("gt3", "Greater", []string{x, b.f32("three", []int{}, 3)}, f)}, `"T":{"type":10}`)
	b.node("scattered", "ScatterNd", []string{b.ints("sn/i", DTInt32, []int{3, 1}, 0, 0, 2), b.ints("sn/u", DTInt64, []int{3}, 1, 2, 3),
		b.ints("sn/shape", DTInt32, []int{1}, 4)}, i64+`,"Tindices":{"type":3}`)
	b.node("ne", "NotEqual", []string{x, two}, f)
	b.node("filled", "Fill", []string{b.ints("fill/dims", DTInt32, []int{2}, 1, 2), two}, f+`,"index_type":{"type":3}`)
	b.node("colsum", "Sum", []string{x, b.ints("axis0", DTInt32, []int{1}, 0)}, f+`,"Tidx":{"type":3},"keep_dims":{"b":false}`)
	b.node("squared_diff", "SquaredDifference", []string{x, two}, f)
	b.node("conv", "Conv2D", []string{
		b.node("img", "Reshape", []string{x, b.ints("img/shape", DTInt32, []int{4}, 1, 2, 3, 1)}, f+`,"Tshape":{"type":3}`),
		b.f32("k", []int{2, 2, 1, 1}, 1, 1, 1, 1)},
		f+`,"strides":{"list":{"i":["1","1","1","1"]}},"dilations":{"list":{"i":["1","1","1","1"]}},"padding":{"s":"U0FNRQ=="},"data_format":{"s":"TkhXQw=="}`)
	want := map[string][]float64{
		"last_col":     {3, 6},
		"reversed":     {4, 5, 6, 1, 2, 3},
		"new_axis":     {2, 3, 5, 6},
		"packed":       {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6},
		"rows":         {1, 2, 3},
		"rows:1":       {4, 5, 6},
		"relu6":        {2, 4, 6, 6, 6, 6},
		"gram":         {14, 32, 32, 77},
		"gram_t":       {17, 22, 27, 22, 29, 36, 27, 36, 45},
		"xtx":          {17, 22, 27, 22, 29, 36, 27, 36, 45},
		"sliced":       {2, 5},
		"split":        {1, 4},
		"split:1":      {2, 3, 5, 6},
		"tiled":        {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6},
		"dense":        {-1, 7, -1, 8, -1, -1},
		"big":          {1, 0, 1, 1, 1, 2},
		"scattered":    {3, 0, 3, 0},
		"ne":           {1, 0, 1, 1, 1, 1},
		"filled":       {2, 2},
		"colsum":       {5, 7, 9},
		"squared_diff": {1, 0, 1, 4, 9, 16},
		// SAME padding puts the odd row and column at the end: each output
		// sums the 2x2 window starting at it.
		"conv": {12, 16, 9, 9, 11, 6},
	}
	var outs []Output
	for _, name := range []string{"last_col", "reversed", "new_axis", "packed", "rows", "rows:1", "relu6", "gram", "gram_t", "xtx",
		"sliced", "split", "split:1", "tiled", "dense", "big", "scattered", "ne", "filled", "colsum", "squared_diff", "conv"} {
		outs = append(outs, Output{Tensor: name, Name: "out_" + strings.ReplaceAll(name, ":", "_")})
	}
	return b.graph(t), outs, want
}

func TestConvertOpsGraph(t *testing.T) {
	g, outs, _ := opsGraph(t)
	m, err := Convert(g, Options{Outputs: outs})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Graph.Outputs) != len(outs) {
		t.Fatalf("%d outputs", len(m.Graph.Outputs))
	}
}
