package tfjs

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/triagegw/triage/models/onnxpb"
)

// Opset is the ONNX opset the converted models import.
const Opset = 17

// Options tune Convert.
type Options struct {
	// Outputs are the graph's outputs. Empty means every sink: the first
	// output of each node (not a Const or Placeholder) that nothing reads,
	// named after the node.
	Outputs []Output
	// Int64Inputs declares int32 placeholders as int64 graph inputs and
	// casts them to int32 inside, so that callers always feed int64.
	Int64Inputs bool
	// InputDims overrides the dims of graph inputs, by placeholder name.
	// Unknown dims of a placeholder (-1) otherwise become symbolic dims
	// named "<input>_<axis>".
	InputDims map[string][]onnxpb.Dim
	// GraphName, Producer, ProducerVersion, Doc and Metadata are copied into
	// the model.
	GraphName, Producer, ProducerVersion, Doc string
	Metadata                                  map[string]string
}

// Output selects one tensor of the TF.js graph as a graph output.
type Output struct {
	// Tensor is "node" (its first output) or "node:k".
	Tensor string
	// Name is the ONNX output's name; empty keeps Tensor.
	Name string
	// Dims, when set, are declared as the output's shape.
	Dims []onnxpb.Dim
}

// Convert translates the part of g that opt's outputs depend on into an ONNX
// model (opset 17). Nodes are emitted in dependency order and named after
// the TF nodes they come from; tensors keep their TF names ("node",
// "node:1"), and tensors the conversion adds are named "<node>/<what>".
// The result is a pure function of g and opt: the same input gives the
// same bytes.
func Convert(g *Graph, opt Options) (*onnxpb.Model, error) {
	c := &converter{
		g:       g,
		opt:     opt,
		byName:  map[string]*Node{},
		consts:  map[string]*Tensor{},
		types:   map[string]DType{},
		alias:   map[string]string{},
		emitted: map[string]bool{},
		taken:   map[string]bool{},
	}
	for _, n := range g.Nodes {
		c.byName[n.Name] = n
	}
	outs := opt.Outputs
	if len(outs) == 0 {
		var err error
		if outs, err = c.sinks(); err != nil {
			return nil, err
		}
	}
	var roots []string
	for _, o := range outs {
		node, _, err := splitRef(o.Tensor)
		if err != nil {
			return nil, err
		}
		if c.byName[node] == nil {
			return nil, fmt.Errorf("tfjs: output %q: the graph has no node %q", o.Tensor, node)
		}
		roots = append(roots, node)
	}
	order, err := c.order(roots)
	if err != nil {
		return nil, err
	}
	for _, n := range order {
		c.taken[n.Name] = true
	}
	for _, n := range order {
		if err := c.convert(n); err != nil {
			return nil, err
		}
	}
	var outputs []onnxpb.ValueInfo
	for _, o := range outs {
		node, k, _ := splitRef(o.Tensor)
		tf := tensorName(node, k)
		src, err := c.materialize(tf)
		if err != nil {
			return nil, fmt.Errorf("tfjs: output %q: %w", o.Tensor, err)
		}
		name := o.Name
		if name == "" {
			name = tf
		}
		if name != src {
			if c.taken[name] {
				return nil, fmt.Errorf("tfjs: output name %q is already the name of a tensor of the graph; choose another", name)
			}
			c.taken[name] = true
			c.nodes = append(c.nodes, onnxpb.Node{Name: c.fresh(name + "/output"), Op: "Identity", Inputs: []string{src}, Outputs: []string{name}})
		}
		ot, err := onnxType(c.types[src])
		if err != nil {
			return nil, fmt.Errorf("tfjs: output %q: %w", o.Tensor, err)
		}
		outputs = append(outputs, onnxpb.ValueInfo{Name: name, Type: ot, Dims: o.Dims})
	}
	m := &onnxpb.Model{
		IRVersion:       onnxpb.DefaultIRVersion,
		Opset:           Opset,
		Producer:        opt.Producer,
		ProducerVersion: opt.ProducerVersion,
		Doc:             opt.Doc,
		Metadata:        opt.Metadata,
		Graph: onnxpb.Graph{
			Name:         opt.GraphName,
			Nodes:        c.nodes,
			Initializers: c.inits,
			Inputs:       c.inputs,
			Outputs:      outputs,
		},
	}
	if m.Graph.Name == "" {
		m.Graph.Name = "tfjs"
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("tfjs: the converted graph is inconsistent (a bug in the converter): %w", err)
	}
	return m, nil
}

// converter holds the state of one conversion.
type converter struct {
	g      *Graph
	opt    Options
	byName map[string]*Node
	// consts are the values of Const nodes, by node name.
	consts map[string]*Tensor
	// types are the TF dtypes of ONNX tensors.
	types map[string]DType
	// alias maps a TF tensor name to the ONNX tensor that holds it, where
	// they differ (a placeholder cast to its TF dtype).
	alias map[string]string
	// emitted marks constants already written as initializers.
	emitted map[string]bool
	// taken are the tensor and node names in use.
	taken  map[string]bool
	nodes  []onnxpb.Node
	inits  []onnxpb.Tensor
	inputs []onnxpb.ValueInfo
}

// splitRef parses an input reference "node" or "node:k".
func splitRef(ref string) (string, int, error) {
	node, idx, ok := strings.Cut(ref, ":")
	if !ok {
		return ref, 0, nil
	}
	k, err := strconv.Atoi(idx)
	if err != nil || k < 0 {
		return "", 0, fmt.Errorf("tfjs: input reference %q is not of the form node or node:k (function-library references are not supported)", ref)
	}
	return node, k, nil
}

// tensorName is the name of output k of node.
func tensorName(node string, k int) string {
	if k == 0 {
		return node
	}
	return node + ":" + strconv.Itoa(k)
}

// dataInputs are n's inputs without control dependencies, as tensor names.
func dataInputs(n *Node) ([]string, error) {
	var out []string
	for _, ref := range n.Inputs {
		if strings.HasPrefix(ref, "^") {
			continue
		}
		node, k, err := splitRef(ref)
		if err != nil {
			return nil, fmt.Errorf("tfjs: node %q: %w", n.Name, err)
		}
		out = append(out, tensorName(node, k))
	}
	return out, nil
}

// sinks are the default outputs: the nodes whose outputs nothing reads.
func (c *converter) sinks() ([]Output, error) {
	read := map[string]bool{}
	for _, n := range c.g.Nodes {
		for _, ref := range n.Inputs {
			node, _, err := splitRef(strings.TrimPrefix(ref, "^"))
			if err != nil {
				return nil, err
			}
			read[node] = true
		}
	}
	var outs []Output
	for _, n := range c.g.Nodes {
		switch n.Op {
		case "Const", "Placeholder", "NoOp":
			continue
		}
		if !read[n.Name] {
			outs = append(outs, Output{Tensor: n.Name})
		}
	}
	if len(outs) == 0 {
		return nil, fmt.Errorf("tfjs: the graph has no sink node to use as its output; name the outputs")
	}
	return outs, nil
}

// order returns the nodes roots depend on (through data inputs), each after
// its inputs, in a deterministic order.
func (c *converter) order(roots []string) ([]*Node, error) {
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var order []*Node
	var visit func(name, from string) error
	visit = func(name, from string) error {
		n := c.byName[name]
		if n == nil {
			return fmt.Errorf("tfjs: node %q reads %q, which the graph does not define", from, name)
		}
		switch state[name] {
		case done:
			return nil
		case active:
			return fmt.Errorf("tfjs: the graph has a cycle through %q (control flow loops are not supported)", name)
		}
		state[name] = active
		ins, err := dataInputs(n)
		if err != nil {
			return err
		}
		for _, in := range ins {
			node, _, _ := splitRef(in)
			if err := visit(node, name); err != nil {
				return err
			}
		}
		state[name] = done
		order = append(order, n)
		return nil
	}
	for _, r := range roots {
		if err := visit(r, "the outputs"); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// materialize makes sure TF tensor tf exists in the ONNX graph (writing a
// constant as an initializer on its first use) and returns its ONNX name.
func (c *converter) materialize(tf string) (string, error) {
	if a, ok := c.alias[tf]; ok {
		return a, nil
	}
	if t, ok := c.consts[tf]; ok {
		if !c.emitted[tf] {
			ot, err := tensorOf(tf, t)
			if err != nil {
				return "", err
			}
			c.inits = append(c.inits, ot)
			c.emitted[tf] = true
			c.types[tf] = t.DType
		}
		return tf, nil
	}
	if _, ok := c.types[tf]; !ok {
		return "", fmt.Errorf("tfjs: tensor %q is read but no converted node produces it (the node has fewer outputs)", tf)
	}
	return tf, nil
}

// fresh returns an unused name starting with base.
func (c *converter) fresh(base string) string {
	name := base
	for i := 1; c.taken[name]; i++ {
		name = base + "_" + strconv.Itoa(i)
	}
	c.taken[name] = true
	return name
}

// addInit adds an initializer under a fresh name based on base.
func (c *converter) addInit(base string, t *Tensor) (string, error) {
	name := c.fresh(base)
	ot, err := tensorOf(name, t)
	if err != nil {
		return "", err
	}
	c.inits = append(c.inits, ot)
	c.types[name] = t.DType
	return name, nil
}

// ignoredAttrs carry nothing the ONNX graph needs: dtypes that follow from
// the inputs, counts that follow from the input list, and hints.
var ignoredAttrs = map[string]bool{
	"T": true, "Tidx": true, "Tindices": true, "Tparams": true, "Taxis": true, "Tshape": true,
	"Tperm": true, "Tdim": true, "Tlen": true, "SrcT": true, "DstT": true, "out_type": true,
	"dtype": true, "N": true, "Index": true, "Tpaddings": true, "Tmultiples": true, "Tout": true,
	"_output_shapes": true, "_class": true, "use_cudnn_on_gpu": true, "num_split": true, "index_type": true,
}

// convert emits the ONNX nodes of one TF node.
func (c *converter) convert(n *Node) error {
	ins, err := dataInputs(n)
	if err != nil {
		return err
	}
	x := &nodeCtx{c: c, n: n, ins: ins, used: map[string]bool{}}
	switch n.Op {
	case "Const":
		t, err := c.g.constValue(n)
		if err != nil {
			return err
		}
		c.consts[n.Name] = t
		x.used["value"] = true
		return x.checkAttrs()
	case "NoOp":
		return nil
	}
	if t := n.Attrs["T"]; t != nil && t.Type != nil {
		switch *t.Type {
		case DTString:
			return x.errorf("string tensors are not supported")
		case DTInvalid:
			return x.errorf("attribute T has no type")
		}
	}
	h, ok := handlers[n.Op]
	if !ok {
		return x.errorf("op %s is not supported by the converter (supported: %s)", n.Op, strings.Join(supportedOps(), ", "))
	}
	if err := h(x); err != nil {
		return err
	}
	return x.checkAttrs()
}

func supportedOps() []string {
	ops := []string{"Const", "NoOp"}
	for op := range handlers {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}

// nodeCtx is one TF node being converted.
type nodeCtx struct {
	c    *converter
	n    *Node
	ins  []string
	used map[string]bool
	seq  int
}

func (x *nodeCtx) errorf(format string, args ...any) error {
	return fmt.Errorf("tfjs: node %q (%s): %s", x.n.Name, x.n.Op, fmt.Sprintf(format, args...))
}

// checkAttrs fails on attributes the conversion did not interpret.
func (x *nodeCtx) checkAttrs() error {
	var bad []string
	for name := range x.n.Attrs {
		if !x.used[name] && !ignoredAttrs[name] {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return x.errorf("attribute(s) %s not supported by the converter", strings.Join(bad, ", "))
	}
	return nil
}

// attr returns an attribute (nil if absent) and marks it interpreted.
func (x *nodeCtx) attr(name string) *AttrValue {
	x.used[name] = true
	return x.n.Attrs[name]
}

func (x *nodeCtx) intAttr(name string, def int64) int64 {
	if a := x.attr(name); a != nil && a.I != nil {
		return int64(*a.I)
	}
	return def
}

func (x *nodeCtx) boolAttr(name string, def bool) bool {
	if a := x.attr(name); a != nil && a.B != nil {
		return *a.B
	}
	return def
}

func (x *nodeCtx) floatAttr(name string, def float32) float32 {
	if a := x.attr(name); a != nil && a.F != nil {
		return float32(*a.F)
	}
	return def
}

func (x *nodeCtx) stringAttr(name, def string) string {
	if a := x.attr(name); a != nil && a.S != nil {
		return string(*a.S)
	}
	return def
}

func (x *nodeCtx) intsAttr(name string) []int64 {
	a := x.attr(name)
	if a == nil || a.List == nil {
		return nil
	}
	out := make([]int64, len(a.List.I))
	for i, v := range a.List.I {
		out[i] = int64(v)
	}
	return out
}

// typeAttr is a type attribute's value, DTInvalid if absent.
func (x *nodeCtx) typeAttr(name string) DType {
	if a := x.attr(name); a != nil && a.Type != nil {
		return *a.Type
	}
	return DTInvalid
}

// wantInputs checks the number of data inputs.
func (x *nodeCtx) wantInputs(n int) error {
	if len(x.ins) != n {
		return x.errorf("has %d inputs, want %d", len(x.ins), n)
	}
	return nil
}

// in is the ONNX name of data input i.
func (x *nodeCtx) in(i int) (string, error) {
	if i >= len(x.ins) {
		return "", x.errorf("has %d inputs, wants input %d", len(x.ins), i)
	}
	name, err := x.c.materialize(x.ins[i])
	if err != nil {
		return "", fmt.Errorf("tfjs: node %q (%s): %w", x.n.Name, x.n.Op, err)
	}
	return name, nil
}

// inType is the TF dtype of data input i.
func (x *nodeCtx) inType(i int) DType {
	tf := x.ins[i]
	if t, ok := x.c.consts[tf]; ok {
		return t.DType
	}
	if a, ok := x.c.alias[tf]; ok {
		tf = a
	}
	return x.c.types[tf]
}

// constIn returns the value of data input i, which must be a constant
// (possibly through Identity nodes); what says what the input is for.
func (x *nodeCtx) constIn(i int, what string) (*Tensor, error) {
	tf := x.ins[i]
	for {
		if t, ok := x.c.consts[tf]; ok {
			return t, nil
		}
		node, _, _ := splitRef(tf)
		n := x.c.byName[node]
		if n == nil || (n.Op != "Identity" && n.Op != "StopGradient") {
			break
		}
		ins, err := dataInputs(n)
		if err != nil || len(ins) != 1 {
			break
		}
		tf = ins[0]
	}
	return nil, x.errorf("input %d (%s, the %s) is computed; only a constant is supported there", i, x.ins[i], what)
}

// constInts returns constant integer input i as int64 values.
func (x *nodeCtx) constInts(i int, what string) ([]int64, error) {
	t, err := x.constIn(i, what)
	if err != nil {
		return nil, err
	}
	if t.I64 == nil && t.Len() > 0 {
		return nil, x.errorf("input %d (the %s) is %v, want integers", i, what, t.DType)
	}
	return t.I64, nil
}

// int64In is data input i as an int64 tensor: a constant becomes an int64
// initializer, anything else is cast when it is not int64 already.
func (x *nodeCtx) int64In(i int) (string, error) {
	tf := x.ins[i]
	if t, ok := x.c.consts[tf]; ok && t.DType != DTInt64 {
		t64, err := t.As(DTInt64)
		if err != nil {
			return "", x.errorf("input %d: %v", i, err)
		}
		return x.c.addInit(tf+"/int64", t64)
	}
	name, err := x.in(i)
	if err != nil {
		return "", err
	}
	if x.inType(i) == DTInt64 {
		return name, nil
	}
	return x.cast(name, DTInt64), nil
}

// ints64 adds an int64 initializer.
func (x *nodeCtx) ints64(what string, dims []int64, v ...int64) string {
	name, _ := x.c.addInit(x.n.Name+"/"+what, &Tensor{DType: DTInt64, Shape: dims, I64: v})
	return name
}

// scalar adds a scalar initializer of dtype dt.
func (x *nodeCtx) scalar(what string, dt DType, v float64) (string, error) {
	t := &Tensor{DType: dt, Shape: nil}
	switch {
	case dt.isFloat():
		t.F32 = []float32{float32(v)}
	case isIntType(dt):
		t.I64 = []int64{int64(v)}
	case dt == DTBool:
		t.Bool = []bool{v != 0}
	default:
		return "", x.errorf("cannot make a %v constant", dt)
	}
	return x.c.addInit(x.n.Name+"/"+what, t)
}

// out is the ONNX name of output k of the node.
func (x *nodeCtx) out(k int) string {
	name := tensorName(x.n.Name, k)
	x.c.taken[name] = true
	return name
}

// tmp is a fresh name for an intermediate tensor.
func (x *nodeCtx) tmp(what string) string { return x.c.fresh(x.n.Name + "/" + what) }

// emit adds an ONNX node; outs get dtype dt.
func (x *nodeCtx) emit(op string, ins, outs []string, dt DType, attrs ...onnxpb.Attr) {
	x.seq++
	name := x.n.Name
	if x.seq > 1 {
		name = x.c.fresh(x.n.Name + "/" + op)
	}
	x.c.nodes = append(x.c.nodes, onnxpb.Node{Name: name, Op: op, Inputs: ins, Outputs: outs, Attrs: attrs})
	for _, o := range outs {
		x.c.types[o] = dt
	}
}

// op1 emits a node with one output named what and returns that name.
func (x *nodeCtx) op1(op, what string, ins []string, dt DType, attrs ...onnxpb.Attr) string {
	o := x.tmp(what)
	x.emit(op, ins, []string{o}, dt, attrs...)
	return o
}

// cast converts name to dt.
func (x *nodeCtx) cast(name string, dt DType) string {
	ot, _ := onnxType(dt)
	return x.op1("Cast", "cast", []string{name}, dt, onnxpb.AttrInt("to", int64(ot)))
}

// onnxType maps a TF dtype to an ONNX element type.
func onnxType(d DType) (onnxpb.DataType, error) {
	switch d {
	case DTFloat:
		return onnxpb.Float, nil
	case DTDouble:
		return onnxpb.Double, nil
	case DTHalf:
		return onnxpb.Float16, nil
	case DTInt32:
		return onnxpb.Int32, nil
	case DTInt64:
		return onnxpb.Int64, nil
	case DTUint8:
		return onnxpb.Uint8, nil
	case DTInt8:
		return onnxpb.Int8, nil
	case DTInt16:
		return onnxpb.DataType(5), nil
	case DTUint16:
		return onnxpb.DataType(4), nil
	case DTBool:
		return onnxpb.Bool, nil
	}
	return 0, fmt.Errorf("TF dtype %v has no ONNX equivalent here", d)
}

// tensorOf encodes a constant as an ONNX initializer.
func tensorOf(name string, t *Tensor) (onnxpb.Tensor, error) {
	dims := slices.Clone(t.Shape)
	if dims == nil {
		dims = []int64{}
	}
	switch t.DType {
	case DTFloat:
		return onnxpb.FloatTensor(name, dims, t.F32), nil
	case DTInt64:
		return onnxpb.Int64Tensor(name, dims, t.I64), nil
	case DTInt32:
		v := make([]int32, len(t.I64))
		for i, x := range t.I64 {
			if x < math.MinInt32 || x > math.MaxInt32 {
				return onnxpb.Tensor{}, fmt.Errorf("tfjs: constant %q: %d does not fit int32", name, x)
			}
			v[i] = int32(x)
		}
		return onnxpb.Int32Tensor(name, dims, v), nil
	case DTBool:
		raw := make([]byte, len(t.Bool))
		for i, b := range t.Bool {
			if b {
				raw[i] = 1
			}
		}
		return onnxpb.Tensor{Name: name, Type: onnxpb.Bool, Dims: dims, Raw: raw}, nil
	case DTUint8, DTInt8:
		raw := make([]byte, len(t.I64))
		for i, x := range t.I64 {
			raw[i] = byte(x)
		}
		ot, _ := onnxType(t.DType)
		return onnxpb.Tensor{Name: name, Type: ot, Dims: dims, Raw: raw}, nil
	}
	return onnxpb.Tensor{}, fmt.Errorf("tfjs: constant %q has dtype %v, which cannot be written", name, t.DType)
}
