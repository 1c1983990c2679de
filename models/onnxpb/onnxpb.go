// Package onnxpb writes ONNX models: the few protobuf messages of onnx.proto
// a graph needs (ModelProto, GraphProto, NodeProto, AttributeProto,
// TensorProto, ValueInfoProto), encoded by hand with protowire so that the
// project builds its own graphs (a BERT-shaped encoder with seeded weights,
// a converted TF.js model) without generated code or a Python toolchain.
//
// Field numbers follow onnx/onnx.proto (IR version 8). Tensors are stored
// as raw little-endian bytes. Marshal is deterministic: the same Model
// always gives the same bytes (metadata is written in key order), so a
// model's sha256 can be pinned.
//
// Decode reads back what Marshal writes (and any ONNX file limited to the
// same fields), for tests and for inspecting models.
package onnxpb

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/triagegw/triage/internal/atomicfile"
	"google.golang.org/protobuf/encoding/protowire"
)

// DataType is TensorProto.DataType.
type DataType int32

// The element types used here (onnx.proto TensorProto.DataType).
const (
	Float   DataType = 1
	Uint8   DataType = 2
	Int8    DataType = 3
	Int32   DataType = 6
	Int64   DataType = 7
	String  DataType = 8
	Bool    DataType = 9
	Float16 DataType = 10
	Double  DataType = 11
)

// Size is the number of bytes of one element (0 for String).
func (t DataType) Size() int {
	switch t {
	case Uint8, Int8, Bool:
		return 1
	case Float16:
		return 2
	case Float, Int32:
		return 4
	case Int64, Double:
		return 8
	}
	return 0
}

func (t DataType) String() string {
	switch t {
	case Float:
		return "float32"
	case Uint8:
		return "uint8"
	case Int8:
		return "int8"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	case String:
		return "string"
	case Bool:
		return "bool"
	case Float16:
		return "float16"
	case Double:
		return "float64"
	}
	return fmt.Sprintf("DataType(%d)", int32(t))
}

// Defaults of Model.
const (
	DefaultIRVersion = 8
	DefaultOpset     = 17
)

// Model is an ONNX model: one graph in the default ("ai.onnx") domain.
type Model struct {
	// IRVersion defaults to DefaultIRVersion, Opset to DefaultOpset.
	IRVersion int64
	Opset     int64
	Producer  string
	// ProducerVersion and Doc are free text.
	ProducerVersion string
	Doc             string
	Graph           Graph
	// Metadata is written as metadata_props, in key order.
	Metadata map[string]string
}

// Graph is a computation graph: nodes in topological order, constant
// initializers, and the graph's inputs and outputs.
type Graph struct {
	Name         string
	Nodes        []Node
	Initializers []Tensor
	Inputs       []ValueInfo
	Outputs      []ValueInfo
}

// Node is one operator application.
type Node struct {
	Name, Op, Domain string
	Inputs, Outputs  []string
	Attrs            []Attr
}

// AttrType is AttributeProto.AttributeType.
type AttrType int32

// Attribute types (onnx.proto AttributeProto.AttributeType).
const (
	AttrTypeFloat   AttrType = 1
	AttrTypeInt     AttrType = 2
	AttrTypeString  AttrType = 3
	AttrTypeTensor  AttrType = 4
	AttrTypeFloats  AttrType = 6
	AttrTypeInts    AttrType = 7
	AttrTypeStrings AttrType = 8
)

// Attr is a node attribute. Build one with AttrInt, AttrFloat, AttrInts,
// AttrFloats, AttrString, AttrStrings or AttrTensor.
type Attr struct {
	Name    string
	Type    AttrType
	F       float32
	I       int64
	S       []byte
	T       *Tensor
	Floats  []float32
	Ints    []int64
	Strings [][]byte
}

// AttrInt is an INT attribute.
func AttrInt(name string, v int64) Attr { return Attr{Name: name, Type: AttrTypeInt, I: v} }

// AttrFloat is a FLOAT attribute.
func AttrFloat(name string, v float32) Attr { return Attr{Name: name, Type: AttrTypeFloat, F: v} }

// AttrInts is an INTS attribute.
func AttrInts(name string, v ...int64) Attr {
	return Attr{Name: name, Type: AttrTypeInts, Ints: append([]int64{}, v...)}
}

// AttrFloats is a FLOATS attribute.
func AttrFloats(name string, v ...float32) Attr {
	return Attr{Name: name, Type: AttrTypeFloats, Floats: append([]float32{}, v...)}
}

// AttrString is a STRING attribute.
func AttrString(name, v string) Attr { return Attr{Name: name, Type: AttrTypeString, S: []byte(v)} }

// AttrStrings is a STRINGS attribute.
func AttrStrings(name string, v ...string) Attr {
	a := Attr{Name: name, Type: AttrTypeStrings}
	for _, s := range v {
		a.Strings = append(a.Strings, []byte(s))
	}
	return a
}

// AttrTensor is a TENSOR attribute (Constant's value, say).
func AttrTensor(name string, t Tensor) Attr { return Attr{Name: name, Type: AttrTypeTensor, T: &t} }

// Tensor is a constant tensor: dims and raw little-endian bytes.
type Tensor struct {
	Name string
	Type DataType
	Dims []int64
	Raw  []byte
}

// NumElements is the product of the dims (1 for a scalar).
func (t *Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Check reports whether Raw holds exactly the elements Dims describes.
func (t *Tensor) Check() error {
	for _, d := range t.Dims {
		if d < 0 {
			return fmt.Errorf("onnxpb: tensor %q: negative dim in %v", t.Name, t.Dims)
		}
	}
	if sz := t.Type.Size(); sz == 0 {
		return fmt.Errorf("onnxpb: tensor %q: element type %v has no raw encoding here", t.Name, t.Type)
	} else if want := t.NumElements() * int64(sz); int64(len(t.Raw)) != want {
		return fmt.Errorf("onnxpb: tensor %q: %d bytes of data for dims %v of %v (want %d)", t.Name, len(t.Raw), t.Dims, t.Type, want)
	}
	return nil
}

// FloatTensor is a float32 tensor.
func FloatTensor(name string, dims []int64, v []float32) Tensor {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, Type: Float, Dims: append([]int64{}, dims...), Raw: raw}
}

// Int64Tensor is an int64 tensor.
func Int64Tensor(name string, dims []int64, v []int64) Tensor {
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	return Tensor{Name: name, Type: Int64, Dims: append([]int64{}, dims...), Raw: raw}
}

// Int32Tensor is an int32 tensor.
func Int32Tensor(name string, dims []int64, v []int32) Tensor {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(x))
	}
	return Tensor{Name: name, Type: Int32, Dims: append([]int64{}, dims...), Raw: raw}
}

// Floats decodes a float32 tensor's data.
func (t *Tensor) Floats() ([]float32, error) {
	if t.Type != Float {
		return nil, fmt.Errorf("onnxpb: tensor %q is %v, not float32", t.Name, t.Type)
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	v := make([]float32, len(t.Raw)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Raw[4*i:]))
	}
	return v, nil
}

// Int64s decodes an int64 tensor's data.
func (t *Tensor) Int64s() ([]int64, error) {
	if t.Type != Int64 {
		return nil, fmt.Errorf("onnxpb: tensor %q is %v, not int64", t.Name, t.Type)
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	v := make([]int64, len(t.Raw)/8)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(t.Raw[8*i:]))
	}
	return v, nil
}

// ValueInfo names a graph input or output and gives its type and shape.
type ValueInfo struct {
	Name string
	Type DataType
	Dims []Dim
}

// Dim is one dimension of a shape: a fixed Value, or a symbolic Param
// ("batch", "seq") when Param is set.
type Dim struct {
	Value int64
	Param string
}

// Dims is a shorthand for fixed and symbolic dims: ints are values,
// strings are params.
func Dims(ds ...any) []Dim {
	out := make([]Dim, len(ds))
	for i, d := range ds {
		switch v := d.(type) {
		case int:
			out[i] = Dim{Value: int64(v)}
		case int64:
			out[i] = Dim{Value: v}
		case string:
			out[i] = Dim{Param: v}
		default:
			panic(fmt.Sprintf("onnxpb.Dims: %T is neither an int nor a string", d))
		}
	}
	return out
}

// Validate checks what a runtime would otherwise reject with a less
// helpful message: tensors whose data does not match their dims, nodes
// without an op, names produced twice, and inputs that nothing produces.
func (m *Model) Validate() error {
	g := &m.Graph
	produced := map[string]string{}
	add := func(name, by string) error {
		if name == "" {
			return nil
		}
		if prev, ok := produced[name]; ok {
			return fmt.Errorf("onnxpb: %q is produced by both %s and %s", name, prev, by)
		}
		produced[name] = by
		return nil
	}
	for _, in := range g.Inputs {
		if err := add(in.Name, "graph input"); err != nil {
			return err
		}
	}
	for i := range g.Initializers {
		t := &g.Initializers[i]
		if err := t.Check(); err != nil {
			return err
		}
		if err := add(t.Name, "an initializer"); err != nil {
			return err
		}
	}
	for i, n := range g.Nodes {
		if n.Op == "" {
			return fmt.Errorf("onnxpb: node %d (%q) has no op", i, n.Name)
		}
		for _, in := range n.Inputs {
			if _, ok := produced[in]; in != "" && !ok {
				return fmt.Errorf("onnxpb: node %q (%s) reads %q before anything produces it", n.Name, n.Op, in)
			}
		}
		for _, a := range n.Attrs {
			if a.T != nil {
				if err := a.T.Check(); err != nil {
					return fmt.Errorf("node %q attribute %q: %w", n.Name, a.Name, err)
				}
			}
		}
		for _, out := range n.Outputs {
			if err := add(out, fmt.Sprintf("node %q (%s)", n.Name, n.Op)); err != nil {
				return err
			}
		}
	}
	for _, out := range g.Outputs {
		if _, ok := produced[out.Name]; !ok {
			return fmt.Errorf("onnxpb: graph output %q is produced by no node", out.Name)
		}
	}
	return nil
}

// WriteFile validates and writes the model to path through a temporary
// file beside it, so that path is never half written.
func (m *Model) WriteFile(path string) error {
	if err := m.Validate(); err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, m.Marshal())
}

// Marshal encodes the model as an ONNX ModelProto.
func (m *Model) Marshal() []byte {
	ir, opset := m.IRVersion, m.Opset
	if ir == 0 {
		ir = DefaultIRVersion
	}
	if opset == 0 {
		opset = DefaultOpset
	}
	graph := m.Graph.marshal()
	b := make([]byte, 0, len(graph)+1024)
	b = protowire.AppendTag(b, 1, protowire.VarintType) // ir_version
	b = protowire.AppendVarint(b, uint64(ir))
	b = appendString(b, 2, m.Producer)
	b = appendString(b, 3, m.ProducerVersion)
	b = appendString(b, 6, m.Doc)
	b = appendMessage(b, 7, graph)
	var op []byte // OperatorSetIdProto{domain: "", version}
	op = protowire.AppendTag(op, 2, protowire.VarintType)
	op = protowire.AppendVarint(op, uint64(opset))
	b = appendMessage(b, 8, op) // opset_import
	keys := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var kv []byte
		kv = appendString(kv, 1, k)
		kv = appendString(kv, 2, m.Metadata[k])
		b = appendMessage(b, 14, kv) // metadata_props
	}
	return b
}

func (g *Graph) marshal() []byte {
	// The initializers are nearly all of it: size the buffer once for them,
	// not by doubling through a model's hundreds of megabytes.
	n := 4096 + 256*len(g.Nodes)
	for i := range g.Initializers {
		n += len(g.Initializers[i].Raw) + 64 + 8*len(g.Initializers[i].Dims) + len(g.Initializers[i].Name)
	}
	b := make([]byte, 0, n)
	for i := range g.Nodes {
		b = appendMessage(b, 1, g.Nodes[i].marshal())
	}
	b = appendString(b, 2, g.Name)
	for i := range g.Initializers {
		b = appendTensor(b, 5, &g.Initializers[i])
	}
	for i := range g.Inputs {
		b = appendMessage(b, 11, g.Inputs[i].marshal())
	}
	for i := range g.Outputs {
		b = appendMessage(b, 12, g.Outputs[i].marshal())
	}
	return b
}

func (n *Node) marshal() []byte {
	var b []byte
	for _, in := range n.Inputs {
		b = protowire.AppendTag(b, 1, protowire.BytesType) // empty names (optional inputs) included
		b = protowire.AppendString(b, in)
	}
	for _, out := range n.Outputs {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, out)
	}
	b = appendString(b, 3, n.Name)
	b = appendString(b, 4, n.Op)
	for i := range n.Attrs {
		b = appendMessage(b, 5, n.Attrs[i].marshal())
	}
	b = appendString(b, 7, n.Domain)
	return b
}

func (a *Attr) marshal() []byte {
	var b []byte
	b = appendString(b, 1, a.Name)
	switch a.Type {
	case AttrTypeFloat:
		b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.F))
	case AttrTypeInt:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.I))
	case AttrTypeString:
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, a.S)
	case AttrTypeTensor:
		if a.T != nil {
			b = appendMessage(b, 5, a.T.marshal())
		}
	case AttrTypeFloats:
		for _, f := range a.Floats {
			b = protowire.AppendTag(b, 7, protowire.Fixed32Type)
			b = protowire.AppendFixed32(b, math.Float32bits(f))
		}
	case AttrTypeInts:
		for _, v := range a.Ints {
			b = protowire.AppendTag(b, 8, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(v))
		}
	case AttrTypeStrings:
		for _, s := range a.Strings {
			b = protowire.AppendTag(b, 9, protowire.BytesType)
			b = protowire.AppendBytes(b, s)
		}
	}
	b = protowire.AppendTag(b, 20, protowire.VarintType) // type
	b = protowire.AppendVarint(b, uint64(a.Type))
	return b
}

func (t *Tensor) marshal() []byte {
	b := t.marshalHead()
	b = protowire.AppendTag(b, 9, protowire.BytesType) // raw_data
	return protowire.AppendBytes(b, t.Raw)
}

// marshalHead is the tensor's fields before raw_data.
func (t *Tensor) marshalHead() []byte {
	var b []byte
	for _, d := range t.Dims {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType) // data_type
	b = protowire.AppendVarint(b, uint64(t.Type))
	return appendString(b, 8, t.Name)
}

func (v *ValueInfo) marshal() []byte {
	var shape []byte // TensorShapeProto
	for _, d := range v.Dims {
		var dim []byte
		if d.Param != "" {
			dim = appendString(dim, 2, d.Param)
		} else {
			dim = protowire.AppendTag(dim, 1, protowire.VarintType)
			dim = protowire.AppendVarint(dim, uint64(d.Value))
		}
		shape = appendMessage(shape, 1, dim)
	}
	var tt []byte // TypeProto.Tensor
	tt = protowire.AppendTag(tt, 1, protowire.VarintType)
	tt = protowire.AppendVarint(tt, uint64(v.Type))
	if v.Dims != nil {
		tt = appendMessage(tt, 2, shape)
	}
	var typ []byte // TypeProto
	typ = appendMessage(typ, 1, tt)
	var b []byte
	b = appendString(b, 1, v.Name)
	b = appendMessage(b, 2, typ)
	return b
}

// appendTensor appends t as field num, encoding it in place: a tensor's
// data is copied once, not once per level of nesting.
func appendTensor(b []byte, num protowire.Number, t *Tensor) []byte {
	head := t.marshalHead()
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(head)+protowire.SizeTag(9)+protowire.SizeBytes(len(t.Raw))))
	b = append(b, head...)
	b = protowire.AppendTag(b, 9, protowire.BytesType) // raw_data
	return protowire.AppendBytes(b, t.Raw)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}
