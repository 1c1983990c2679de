package tfjs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/models/onnxpb"
)

// useDir is the TF.js model scripts/fetch-use.sh extracts; without it the
// test is skipped (or failed, see testenv.Models).
func useDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(testenv.Models(t, "use/tfjs/model.json"), "use", "tfjs")
}

// useModel is Universal Sentence Encoder lite, loaded and converted once
// for the tests of the package.
var useModel struct {
	once sync.Once
	g    *Graph
	m    *onnxpb.Model
	err  error
	log  string
}

// convertUSE loads and converts Universal Sentence Encoder lite as
// `triage models import tfjs` does.
func convertUSE(t testing.TB) (*Graph, *onnxpb.Model) {
	t.Helper()
	dir := useDir(t)
	u := &useModel
	u.once.Do(func() {
		start := time.Now()
		if u.g, u.err = Load(dir); u.err != nil {
			return
		}
		loaded := time.Since(start)
		var opt Options
		if opt, u.err = EncoderOptions(u.g, "embedding", 512); u.err != nil {
			return
		}
		u.m, u.err = Convert(u.g, opt)
		u.log = fmt.Sprintf("loaded %d nodes, %d weights (%d bytes) in %v; converted in %v",
			len(u.g.Nodes), len(u.g.Weights), u.g.WeightBytes, loaded, time.Since(start)-loaded)
	})
	if u.err != nil {
		t.Fatal(u.err)
	}
	t.Log(u.log)
	return u.g, u.m
}

func TestConvertUSEStructure(t *testing.T) {
	g, m := convertUSE(t)
	if m.Opset != 17 {
		t.Errorf("opset %d", m.Opset)
	}
	gr := &m.Graph
	if len(gr.Inputs) != 2 || gr.Inputs[0].Name != "indices" || gr.Inputs[1].Name != "values" {
		t.Fatalf("inputs %+v, want indices and values", gr.Inputs)
	}
	for _, in := range gr.Inputs {
		if in.Type != onnxpb.Int64 {
			t.Errorf("input %s is %v, want int64", in.Name, in.Type)
		}
	}
	if d := gr.Inputs[0].Dims; len(d) != 2 || d[0].Param == "" || d[1].Value != 2 {
		t.Errorf("indices dims %+v, want [n, 2]", d)
	}
	if len(gr.Outputs) != 1 || gr.Outputs[0].Name != "embedding" || gr.Outputs[0].Type != onnxpb.Float {
		t.Fatalf("outputs %+v, want embedding float32", gr.Outputs)
	}
	if d := gr.Outputs[0].Dims; len(d) != 2 || d[0].Param != "batch" || d[1].Value != 512 {
		t.Errorf("output dims %+v, want [batch, 512]", d)
	}
	params := int64(0)
	for i := range gr.Initializers {
		if gr.Initializers[i].Type == onnxpb.Float {
			params += gr.Initializers[i].NumElements()
		}
	}
	if params < 6_900_000 || params > 7_100_000 {
		t.Errorf("%d float parameters, want about 6.98M", params)
	}
	ops := map[string]int{}
	for _, n := range gr.Nodes {
		ops[n.Op]++
	}
	for _, want := range []string{"ScatterND", "GatherND", "NonZero", "Conv", "Einsum", "MatMul", "Sin", "Cos", "Softmax", "Tanh"} {
		if ops[want] == 0 {
			t.Errorf("no %s node; ops %v", want, ops)
		}
	}
	t.Logf("%d TF nodes -> %d ONNX nodes, %d initializers, %d float params; ops %v", len(g.Nodes), len(gr.Nodes), len(gr.Initializers), params, ops)
	if n, ok := MaxTokens(g); !ok || n != 128 {
		t.Errorf("MaxTokens = %d, %v; want 128", n, ok)
	}
	// The same input gives the same bytes.
	b := m.Marshal()
	opt, _ := EncoderOptions(g, "embedding", 512)
	m2, err := Convert(g, opt)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(b) != sha256.Sum256(m2.Marshal()) {
		t.Error("two conversions of the same graph differ")
	}
	t.Logf("model.onnx: %d bytes, sha256 %x", len(b), sha256.Sum256(b))
}

// tiny is a graph model written inline: nodes as JSON, one weight group.
type tiny struct {
	nodes   string
	weights []map[string]any
	data    []byte
}

func (m tiny) graph(t *testing.T) (*Graph, error) {
	t.Helper()
	manifest, _ := json.Marshal([]map[string]any{{"paths": []string{"shard"}, "weights": m.weights}})
	js := fmt.Sprintf(`{"format":"graph-model","modelTopology":{"node":[%s]},"weightsManifest":%s}`, m.nodes, manifest)
	return Parse([]byte(js), func(p string) ([]byte, error) {
		if p != "shard" {
			return nil, os.ErrNotExist
		}
		return m.data, nil
	})
}

func f32bytes(v ...float32) []byte {
	var b bytes.Buffer
	for _, x := range v {
		binary.Write(&b, binary.LittleEndian, x)
	}
	return b.Bytes()
}

func i32bytes(v ...int32) []byte {
	var b bytes.Buffer
	for _, x := range v {
		binary.Write(&b, binary.LittleEndian, x)
	}
	return b.Bytes()
}

const (
	phFloat = `{"name":"x","op":"Placeholder","attr":{"dtype":{"type":1},"shape":{"shape":{"dim":[{"size":"-1"},{"size":"3"}]}}}}`
	phInt32 = `{"name":"ids","op":"Placeholder","attr":{"dtype":{"type":"DT_INT32"},"shape":{"shape":{"dim":[{"size":"-1"}]}}}}`
)

func TestConvertSmallGraph(t *testing.T) {
	m := tiny{
		nodes: strings.Join([]string{
			phFloat, phInt32,
			`{"name":"w","op":"Const","attr":{"dtype":{"type":1},"value":{"tensor":{"dtype":1,"tensorShape":{"dim":[{"size":"3"},{"size":"2"}]}}}}}`,
			`{"name":"axis","op":"Const","attr":{"dtype":{"type":9},"value":{"tensor":{"dtype":9,"tensorShape":{}}}}}`,
			`{"name":"mm","op":"MatMul","input":["x","w"],"attr":{"T":{"type":1},"transpose_a":{"b":false},"transpose_b":{"b":false}}}`,
			`{"name":"sq","op":"Square","input":["mm","^ids"],"attr":{"T":{"type":1}}}`,
			`{"name":"sum","op":"Sum","input":["sq","axis"],"attr":{"T":{"type":1},"Tidx":{"type":9},"keep_dims":{"b":true}}}`,
			`{"name":"g","op":"GatherV2","input":["sum","ids","axis"],"attr":{"Tparams":{"type":1},"Tindices":{"type":3},"Taxis":{"type":9},"batch_dims":{"i":"0"}}}`,
		}, ","),
		weights: []map[string]any{
			{"name": "w", "shape": []int{3, 2}, "dtype": "float32"},
			{"name": "axis", "shape": []int{}, "dtype": "int32"},
		},
		data: append(f32bytes(1, 2, 3, 4, 5, 6), i32bytes(0)...),
	}
	g, err := m.graph(t)
	if err != nil {
		t.Fatal(err)
	}
	if w := g.Weights["w"]; w == nil || w.F32[5] != 6 {
		t.Fatalf("weight w = %+v", w)
	}
	model, err := Convert(g, Options{Int64Inputs: true})
	if err != nil {
		t.Fatal(err)
	}
	gr := model.Graph
	if len(gr.Inputs) != 2 || gr.Inputs[1].Name != "ids" || gr.Inputs[1].Type != onnxpb.Int64 {
		t.Fatalf("inputs %+v: want ids declared int64", gr.Inputs)
	}
	if len(gr.Outputs) != 1 || gr.Outputs[0].Name != "g" || gr.Outputs[0].Type != onnxpb.Float {
		t.Fatalf("outputs %+v", gr.Outputs)
	}
	var ops []string
	for _, n := range gr.Nodes {
		ops = append(ops, n.Op)
	}
	if got, want := strings.Join(ops, " "), "MatMul Mul ReduceSum Cast Gather"; got != want {
		t.Errorf("ops %q, want %q", got, want)
	}
	// The int64 Const (stored as an int32 weight by the TF.js converter)
	// becomes an int64 axes initializer; w stays float.
	for _, in := range gr.Initializers {
		if in.Name == "w" && in.Type != onnxpb.Float {
			t.Errorf("w is %v", in.Type)
		}
		if strings.Contains(in.Name, "axes") && in.Type != onnxpb.Int64 {
			t.Errorf("%s is %v", in.Name, in.Type)
		}
	}
}

func TestConvertStridedSlice(t *testing.T) {
	cst := func(name string, v ...int32) (string, map[string]any, []byte) {
		return fmt.Sprintf(`{"name":%q,"op":"Const","attr":{"dtype":{"type":3}}}`, name),
			map[string]any{"name": name, "shape": []int{len(v)}, "dtype": "int32"}, i32bytes(v...)
	}
	var nodes []string
	var weights []map[string]any
	var data []byte
	for _, c := range []struct {
		name string
		v    []int32
	}{{"b", []int32{0, 1}}, {"e", []int32{0, 2}}, {"s", []int32{1, 1}}} {
		n, w, d := cst(c.name, c.v...)
		nodes, weights, data = append(nodes, n), append(weights, w), append(data, d...)
	}
	nodes = append(nodes, phFloat,
		`{"name":"ss","op":"StridedSlice","input":["x","b","e","s"],"attr":{"T":{"type":1},"Index":{"type":3},"begin_mask":{"i":"1"},"end_mask":{"i":"1"},"ellipsis_mask":{"i":"0"},"new_axis_mask":{"i":"0"},"shrink_axis_mask":{"i":"2"}}}`)
	g, err := tiny{nodes: strings.Join(nodes, ","), weights: weights, data: data}.graph(t)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Convert(g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// x[:, 1]: Slice axis 1 from 1 to 2, then Squeeze axis 1.
	var ops []string
	for _, n := range m.Graph.Nodes {
		ops = append(ops, n.Op)
	}
	if got := strings.Join(ops, " "); got != "Slice Squeeze" {
		t.Fatalf("ops %q", got)
	}
	vals := map[string][]int64{}
	for i := range m.Graph.Initializers {
		in := &m.Graph.Initializers[i]
		v, err := in.Int64s()
		if err != nil {
			t.Fatal(err)
		}
		vals[in.Name[strings.LastIndex(in.Name, "/")+1:]] = v
	}
	want := map[string][]int64{"starts": {1}, "ends": {2}, "axes": {1}, "steps": {1}, "squeeze_axes": {1}}
	for k, w := range want {
		if fmt.Sprint(vals[k]) != fmt.Sprint(w) {
			t.Errorf("%s = %v, want %v", k, vals[k], w)
		}
	}
}

func TestConvertErrors(t *testing.T) {
	cases := []struct {
		name, nodes, want string
	}{
		{"unsupported op", phFloat + `,{"name":"y","op":"FFT","input":["x"],"attr":{"T":{"type":1}}}`, `node "y" (FFT): op FFT is not supported`},
		{"unsupported attr", phFloat + `,{"name":"y","op":"Relu","input":["x"],"attr":{"T":{"type":1},"frobnicate":{"b":true}}}`, "frobnicate not supported"},
		{"computed axis", phFloat + `,` + phInt32 + `,{"name":"y","op":"ConcatV2","input":["x","x","ids"],"attr":{"T":{"type":1}}}`, "is computed; only a constant"},
		{"unknown input", `{"name":"y","op":"Relu","input":["nope"],"attr":{"T":{"type":1}}}`, `reads "nope"`},
		{"cycle", `{"name":"a","op":"Relu","input":["b"],"attr":{"T":{"type":1}}},{"name":"b","op":"Relu","input":["a"],"attr":{"T":{"type":1}}},{"name":"c","op":"Relu","input":["b"],"attr":{"T":{"type":1}}}`, "cycle"},
		{"NCHW bias", phFloat + `,{"name":"y","op":"BiasAdd","input":["x","x"],"attr":{"T":{"type":1},"data_format":{"s":"TkNIVw=="}}}`, `data_format "NCHW"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := tiny{nodes: c.nodes}.graph(t)
			if err == nil {
				_, err = Convert(g, Options{})
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	w := []map[string]any{{"name": "w", "shape": []int{4}, "dtype": "float32"}}
	if _, err := (tiny{nodes: phFloat, weights: w, data: f32bytes(1, 2, 3)}).graph(t); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("short shard: %v", err)
	}
	if _, err := (tiny{nodes: phFloat, weights: w, data: f32bytes(1, 2, 3, 4, 5)}).graph(t); err == nil || !strings.Contains(err.Error(), "do not match") {
		t.Errorf("long shard: %v", err)
	}
	if _, err := Parse([]byte(`{"format":"layers-model","modelTopology":{}}`), nil); err == nil || !strings.Contains(err.Error(), "layers") {
		t.Errorf("layers model: %v", err)
	}
	q := []map[string]any{{"name": "w", "shape": []int{3}, "dtype": "float32", "quantization": map[string]any{"dtype": "uint8", "scale": 0.5, "min": -1.0}}}
	g, err := tiny{nodes: phFloat, weights: q, data: []byte{0, 2, 255}}.graph(t)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Weights["w"].F32; got[0] != -1 || got[1] != 0 || got[2] != 126.5 {
		t.Errorf("dequantized %v", got)
	}
	if got := halfToFloat32(0x3c00); got != 1 {
		t.Errorf("half 1.0 = %v", got)
	}
	if got := halfToFloat32(0xc000); got != -2 {
		t.Errorf("half -2.0 = %v", got)
	}
	if got := halfToFloat32(0x0001); math.Abs(float64(got)-5.960464477539063e-08) > 1e-15 {
		t.Errorf("smallest subnormal = %v", got)
	}
}
