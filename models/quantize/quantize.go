package quantize

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/triagegw/triage/models/onnxpb"
)

// DefaultMinElements is Options.MinElements' default: a weight
// with fewer elements (a 128×128 matrix has 16,384) stays float32, where
// quantizing its input costs more than the integer product saves.
const DefaultMinElements = 16384

// Options tune Dynamic. The zero value is the recommended
// setting: int8 weights with one scale per output column, 1×1 Conv and
// embedding tables included.
type Options struct {
	// MinElements: weights with fewer elements stay float32; 0 means
	// DefaultMinElements.
	MinElements int
	// WeightType is how MatMul weights are stored: onnxpb.Int8 (the
	// default; symmetric, zero point 0) or onnxpb.Uint8 (asymmetric, with
	// zero points). ONNX Runtime's CPU MatMulInteger takes both with uint8
	// activations; int8 is the faster on x86 with VNNI and on ARM. Without
	// VNNI (older x86), MLAS's u8×s8 kernel can saturate 16-bit
	// intermediate sums, which uint8 weights avoid.
	WeightType onnxpb.DataType
	// PerTensor uses one scale (and zero point) per weight matrix, as ONNX
	// Runtime's quantize_dynamic does by default, instead of one per
	// output column.
	PerTensor bool
	// NoConv leaves 1×1 convolutions in float32. By default a Conv with a
	// constant [O, C, 1, 1] kernel (stride 1, no padding, one group), the
	// TF-converted form of a dense layer, is rewritten as a MatMul over
	// channels-last data and quantized like one.
	NoConv bool
	// NoEmbeddings leaves embedding tables (Gather on axis 0 of a float32
	// initializer of rank 2) in float32. By default they are stored as int8
	// with one scale per row: the Gather picks int8 rows and their scales,
	// and a Cast and a Mul restore them, so only the rows a Run reads are
	// dequantized. This shrinks the file; it does not speed the Run.
	NoEmbeddings bool
}

// Report says what Dynamic did.
type Report struct {
	// Weights are the weights quantized, in graph order.
	Weights []Weight
	// Skipped are the candidates left in float32, and why.
	Skipped []Skipped
	// ParamBytesBefore and ParamBytesAfter are the bytes of all
	// initializers before and after.
	ParamBytesBefore, ParamBytesAfter int64
	// NodesBefore and NodesAfter count the graph's nodes; NodesRemoved
	// the nodes left unused by the rewrites (constant transposes of
	// weights, transposes around a 1×1 Conv) and dropped.
	NodesBefore, NodesAfter, NodesRemoved int
}

// Weight is one weight Dynamic quantized.
type Weight struct {
	Node   string          // the node rewritten
	Op     string          // its op: MatMul, Gemm, Conv or Gather
	Weight string          // the float32 initializer
	Dims   []int64         // the weight's shape as the integer op reads it: [K, N], or [rows, dims] for a table
	Type   onnxpb.DataType // onnxpb.Int8 or onnxpb.Uint8
	Scales int             // 1 (per tensor), N (per column) or rows (a table)
	// RelErr is ‖W − dequantize(quantize(W))‖ / ‖W‖ (Frobenius): the
	// weight's own rounding error, not the model's.
	RelErr float64
}

// Skipped is a candidate Dynamic left alone.
type Skipped struct {
	Node, Op, Weight, Reason string
}

// Summary is a few lines for a person: counts, bytes, the largest errors.
func (r *Report) Summary() string {
	var b strings.Builder
	ops := map[string]int{}
	var params int64
	worst := 0.0
	for _, w := range r.Weights {
		ops[w.Op]++
		n := int64(1)
		for _, d := range w.Dims {
			n *= d
		}
		params += n
		worst = math.Max(worst, w.RelErr)
	}
	var parts []string
	for _, op := range []string{"MatMul", "Gemm", "Conv", "Gather"} {
		if ops[op] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", ops[op], op))
		}
	}
	if len(parts) == 0 {
		parts = []string{"nothing"}
	}
	fmt.Fprintf(&b, "quantized %s: %d parameters; largest weight rounding error %.2f%%\n", strings.Join(parts, ", "), params, 100*worst)
	fmt.Fprintf(&b, "parameter bytes %d -> %d (%.1f%%); nodes %d -> %d (%d unused removed)\n",
		r.ParamBytesBefore, r.ParamBytesAfter, 100*float64(r.ParamBytesAfter)/math.Max(1, float64(r.ParamBytesBefore)),
		r.NodesBefore, r.NodesAfter, r.NodesRemoved)
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "kept float32: %s %q (weight %q): %s\n", s.Op, s.Node, s.Weight, s.Reason)
	}
	return b.String()
}

// Dynamic returns a copy of m with its weight products quantized as
// ONNX Runtime's dynamic quantization (quantize_dynamic) does: for each
// MatMul, Gemm and (unless opts.NoConv) 1×1 Conv whose weight is a float32
// constant with at least opts.MinElements elements,
//
//	A_q, A_scale, A_zp = DynamicQuantizeLinear(A)          // uint8, per Run
//	Y = Cast(MatMulInteger(A_q, W_q, A_zp, W_zp), float) · (A_scale · W_scale)
//
// with W_q the weight in int8 (or uint8) and W_scale one scale per output
// column unless opts.PerTensor. This is the pattern ONNX Runtime fuses, on
// load, into its MatMulIntegerToFloat / DynamicQuantizeMatMul kernels. A
// Gemm's bias, and a Conv's, become an Add. Embedding tables are stored
// int8 per row unless opts.NoEmbeddings (see Options).
//
// Activations are quantized per tensor at run time, so no calibration data
// is needed; the cost is accuracy, which the caller must measure on its
// task. m is not modified (the copy shares the initializers it keeps). The
// model needs opset 11 or later (DynamicQuantizeLinear).
func Dynamic(m *onnxpb.Model, opts Options) (*onnxpb.Model, Report, error) {
	var rep Report
	if m == nil {
		return nil, rep, errors.New("quantize: no model")
	}
	if opts.MinElements <= 0 {
		opts.MinElements = DefaultMinElements
	}
	switch opts.WeightType {
	case 0:
		opts.WeightType = onnxpb.Int8
	case onnxpb.Int8, onnxpb.Uint8:
	default:
		return nil, rep, fmt.Errorf("quantize: weight type %v: want int8 or uint8", opts.WeightType)
	}
	opset := m.Opset
	if opset == 0 {
		opset = onnxpb.DefaultOpset
	}
	if opset < 11 {
		return nil, rep, fmt.Errorf("quantize: opset %d: DynamicQuantizeLinear needs opset 11 or later", opset)
	}
	if err := m.Validate(); err != nil {
		return nil, rep, fmt.Errorf("quantize: %w", err)
	}
	q := newQuantizer(&m.Graph, opts)
	for i := range m.Graph.Initializers {
		rep.ParamBytesBefore += int64(len(m.Graph.Initializers[i].Raw))
	}
	rep.NodesBefore = len(m.Graph.Nodes)
	for i := range m.Graph.Nodes {
		q.rewrite(i)
	}
	out := *m
	out.Metadata = make(map[string]string, len(m.Metadata)+1)
	for k, v := range m.Metadata {
		out.Metadata[k] = v
	}
	g := onnxpb.Graph{Name: m.Graph.Name, Inputs: m.Graph.Inputs, Outputs: m.Graph.Outputs}
	g.Nodes, rep.NodesRemoved = pruneDead(q.nodes, m.Graph.Outputs)
	g.Initializers = usedInitializers(append(slices.Clip(m.Graph.Initializers), q.inits2...), g.Nodes, m.Graph.Outputs)
	out.Graph = g
	rep.Weights, rep.Skipped = q.done, q.skipped
	for i := range g.Initializers {
		rep.ParamBytesAfter += int64(len(g.Initializers[i].Raw))
	}
	rep.NodesAfter = len(g.Nodes)
	if len(rep.Weights) > 0 {
		mode := "per-column"
		if opts.PerTensor {
			mode = "per-tensor"
		}
		out.Metadata["quantization"] = fmt.Sprintf("dynamic: %d weights, %v %s, activations uint8 per tensor at run time", len(rep.Weights), opts.WeightType, mode)
	}
	if err := out.Validate(); err != nil {
		return nil, rep, fmt.Errorf("quantize: the rewritten graph is invalid (a bug): %w", err)
	}
	return &out, rep, nil
}

// quantizer holds the state of one Dynamic.
type quantizer struct {
	g         *onnxpb.Graph
	opts      Options
	inits     map[string]*onnxpb.Tensor // the original initializers, by name (never graph inputs: Validate)
	producer  map[string]int            // value name → index of the node producing it
	consumers map[string][]int          // value name → indices of the nodes reading it
	outputs   map[string]bool           // graph outputs
	names     map[string]bool           // every name in use
	absorbed  map[int]bool              // nodes (Transposes after a 1×1 Conv) whose output a rewrite now produces
	dql       map[string][3]string      // activation → its DynamicQuantizeLinear outputs, shared by its products
	nodes     []onnxpb.Node             // the rewritten graph's nodes, in order
	inits2    []onnxpb.Tensor           // the initializers the rewrites add
	done      []Weight
	skipped   []Skipped
}

func newQuantizer(g *onnxpb.Graph, opts Options) *quantizer {
	q := &quantizer{g: g, opts: opts, inits: map[string]*onnxpb.Tensor{},
		producer: map[string]int{}, consumers: map[string][]int{}, outputs: map[string]bool{},
		names: map[string]bool{}, absorbed: map[int]bool{}, dql: map[string][3]string{}}
	for i := range g.Initializers {
		t := &g.Initializers[i]
		q.inits[t.Name] = t
		q.names[t.Name] = true
	}
	for _, in := range g.Inputs {
		q.names[in.Name] = true
	}
	for _, out := range g.Outputs {
		q.outputs[out.Name] = true
	}
	for i, n := range g.Nodes {
		q.names[n.Name] = true
		for _, in := range n.Inputs {
			if in != "" {
				q.consumers[in] = append(q.consumers[in], i)
			}
		}
		for _, out := range n.Outputs {
			q.producer[out] = i
			q.names[out] = true
		}
	}
	return q
}

// name returns base, or base with a numeric suffix, unused so far, and
// reserves it.
func (q *quantizer) name(base string) string {
	n := base
	for i := 2; q.names[n]; i++ {
		n = fmt.Sprintf("%s_%d", base, i)
	}
	q.names[n] = true
	return n
}

func (q *quantizer) emit(n onnxpb.Node) { q.nodes = append(q.nodes, n) }

func (q *quantizer) addInit(t onnxpb.Tensor) { q.inits2 = append(q.inits2, t) }

func (q *quantizer) skip(n *onnxpb.Node, weight, reason string) {
	q.skipped = append(q.skipped, Skipped{Node: n.Name, Op: n.Op, Weight: weight, Reason: reason})
}

// constFloat resolves name to a float32 constant: an initializer, or a
// Transpose of one (folded here). ok is false for anything else.
func (q *quantizer) constFloat(name string) (vals []float32, dims []int64, ok bool) {
	if t, found := q.inits[name]; found {
		if t.Type != onnxpb.Float {
			return nil, nil, false
		}
		v, err := t.Floats()
		if err != nil {
			return nil, nil, false
		}
		return v, t.Dims, true
	}
	i, found := q.producer[name]
	if !found {
		return nil, nil, false
	}
	n := &q.g.Nodes[i]
	if n.Op != "Transpose" || n.Domain != "" || len(n.Inputs) != 1 {
		return nil, nil, false
	}
	v, d, ok := q.constFloat(n.Inputs[0])
	if !ok {
		return nil, nil, false
	}
	perm := attrInts(n, "perm")
	if perm == nil {
		for j := range d {
			perm = append(perm, int64(len(d)-1-j))
		}
	}
	return transposeDense(v, d, perm)
}

// rewrite handles node i of the original graph: it emits its quantized
// form, or the node itself (nothing for a Transpose a Conv absorbed).
func (q *quantizer) rewrite(i int) {
	n := q.g.Nodes[i]
	if q.absorbed[i] {
		return // a rewritten 1×1 Conv produces its output already
	}
	if n.Domain == "" || n.Domain == "ai.onnx" {
		done := false
		switch n.Op {
		case "MatMul":
			done = q.matMul(&n)
		case "Gemm":
			done = q.gemm(&n)
		case "Conv":
			done = !q.opts.NoConv && q.conv(i, &n)
		case "Gather":
			done = !q.opts.NoEmbeddings && q.gather(&n)
		}
		if done {
			return
		}
	}
	q.emit(n)
}

// weightFor reports whether name is a quantizable float32 constant of rank
// 2 for node n, recording why not.
func (q *quantizer) weightFor(n *onnxpb.Node, name string) ([]float32, []int64, bool) {
	v, d, ok := q.constFloat(name)
	if !ok {
		if _, isInit := q.inits[name]; isInit {
			q.skip(n, name, "the weight is not float32")
		}
		return nil, nil, false
	}
	if len(v) < q.opts.MinElements {
		q.skip(n, name, fmt.Sprintf("%d elements, fewer than %d", len(v), q.opts.MinElements))
		return nil, nil, false
	}
	return v, d, true
}

// matMul rewrites MatMul(A, W) with W a constant of rank 2.
func (q *quantizer) matMul(n *onnxpb.Node) bool {
	if len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return false
	}
	w, d, ok := q.weightFor(n, n.Inputs[1])
	if !ok {
		return false
	}
	if len(d) != 2 {
		q.skip(n, n.Inputs[1], fmt.Sprintf("weight of rank %d, not 2", len(d)))
		return false
	}
	q.intMatMul(n, n.Inputs[0], n.Inputs[1], w, d[0], d[1], 1, n.Outputs[0])
	return true
}

// gemm rewrites Gemm(A, B, C) with transA 0: alpha is folded into the
// weight scales, transB into the weight, and C (beta 1) becomes an Add.
func (q *quantizer) gemm(n *onnxpb.Node) bool {
	if len(n.Inputs) < 2 || len(n.Outputs) != 1 {
		return false
	}
	if attrInt(n, "transA", 0) != 0 {
		if _, isInit := q.inits[n.Inputs[1]]; isInit {
			q.skip(n, n.Inputs[1], "transA is set")
		}
		return false
	}
	hasC := len(n.Inputs) > 2 && n.Inputs[2] != ""
	if beta := attrFloat(n, "beta", 1); hasC && beta != 1 {
		q.skip(n, n.Inputs[1], fmt.Sprintf("beta %g is not 1", beta))
		return false
	}
	w, d, ok := q.weightFor(n, n.Inputs[1])
	if !ok {
		return false
	}
	if len(d) != 2 {
		q.skip(n, n.Inputs[1], fmt.Sprintf("weight of rank %d, not 2", len(d)))
		return false
	}
	if attrInt(n, "transB", 0) != 0 {
		w, d, _ = transposeDense(w, d, []int64{1, 0})
	}
	alpha := attrFloat(n, "alpha", 1)
	out := n.Outputs[0]
	if hasC {
		out = q.name(n.Outputs[0] + "_nobias")
	}
	q.intMatMul(n, n.Inputs[0], n.Inputs[1], w, d[0], d[1], alpha, out)
	if hasC {
		q.emit(onnxpb.Node{Name: q.name(n.Name + "_bias"), Op: "Add", Inputs: []string{out, n.Inputs[2]}, Outputs: []string{n.Outputs[0]}})
	}
	return true
}

// conv rewrites a 1×1 Conv with a constant kernel as a MatMul over
// channels-last data: Transpose(x, [0,2,3,1]) · W[C, O] (+ bias), then
// Transpose back. A Transpose to channels-first before it, and one to
// channels-last after it (the form TF-converted graphs take), cancel and
// are dropped.
func (q *quantizer) conv(i int, n *onnxpb.Node) bool {
	if len(n.Inputs) < 2 || len(n.Outputs) != 1 {
		return false
	}
	w, d, ok := q.constFloat(n.Inputs[1])
	if !ok {
		return false
	}
	reason := ""
	switch {
	case len(d) != 4 || d[2] != 1 || d[3] != 1:
		reason = fmt.Sprintf("kernel %v is not 1×1", d)
	case attrInt(n, "group", 1) != 1:
		reason = "grouped"
	case !allEqual(attrInts(n, "strides"), 1) || !allEqual(attrInts(n, "dilations"), 1) || !allEqual(attrInts(n, "pads"), 0):
		reason = "strided, dilated or padded"
	case len(attrBytes(n, "auto_pad")) > 0 && string(attrBytes(n, "auto_pad")) != "NOTSET" && string(attrBytes(n, "auto_pad")) != "VALID":
		reason = "auto_pad " + string(attrBytes(n, "auto_pad"))
	case len(w) < q.opts.MinElements:
		reason = fmt.Sprintf("%d elements, fewer than %d", len(w), q.opts.MinElements)
	}
	if reason != "" {
		q.skip(n, n.Inputs[1], reason)
		return false
	}
	o, c := d[0], d[1]
	w2, _, _ := transposeDense(w, []int64{o, c}, []int64{1, 0}) // [C, O]

	// Channels-last input.
	x := n.Inputs[0]
	var nhwc string
	if p, ok := q.producer[x]; ok && isTranspose(&q.g.Nodes[p], 0, 3, 1, 2) {
		nhwc = q.g.Nodes[p].Inputs[0]
	} else {
		nhwc = q.name(x + "_nhwc")
		q.emit(onnxpb.Node{Name: q.name(n.Name + "_to_nhwc"), Op: "Transpose", Inputs: []string{x}, Outputs: []string{nhwc},
			Attrs: []onnxpb.Attr{onnxpb.AttrInts("perm", 0, 2, 3, 1)}})
	}
	// Channels-last output: the Conv's one consumer, if it transposes
	// back, or a new Transpose to channels-first.
	y := n.Outputs[0]
	final, back := "", -1
	if cs := q.consumers[y]; len(cs) == 1 && !q.outputs[y] && cs[0] > i && isTranspose(&q.g.Nodes[cs[0]], 0, 2, 3, 1) {
		back = cs[0]
		final = q.g.Nodes[back].Outputs[0]
	} else {
		final = q.name(y + "_nhwc")
	}
	mm := final
	hasBias := len(n.Inputs) > 2 && n.Inputs[2] != ""
	if hasBias {
		mm = q.name(n.Name + "_nobias")
	}
	weight := n.Inputs[1]
	if _, ok := q.inits[weight]; !ok { // a Transpose of one: name it after that
		weight = q.g.Nodes[q.producer[weight]].Inputs[0]
	}
	q.intMatMul(n, nhwc, weight, w2, c, o, 1, mm)
	if hasBias {
		q.emit(onnxpb.Node{Name: q.name(n.Name + "_bias"), Op: "Add", Inputs: []string{mm, n.Inputs[2]}, Outputs: []string{final}})
	}
	if back >= 0 {
		q.absorbed[back] = true
	} else {
		q.emit(onnxpb.Node{Name: q.name(n.Name + "_to_nchw"), Op: "Transpose", Inputs: []string{final}, Outputs: []string{y},
			Attrs: []onnxpb.Attr{onnxpb.AttrInts("perm", 0, 3, 1, 2)}})
	}
	return true
}

// intMatMul emits the dynamic-quantization form of x · W (W [k, n],
// row-major) scaled by alpha, producing out.
func (q *quantizer) intMatMul(n *onnxpb.Node, x, weight string, w []float32, k, cols int64, alpha float32, out string) {
	qt := quantizeColumns(w, int(k), int(cols), q.opts.WeightType, q.opts.PerTensor)
	if alpha != 1 {
		for j := range qt.scales {
			qt.scales[j] *= alpha
		}
	}
	wq := q.name(weight + "_quantized")
	ws := q.name(weight + "_scale")
	wz := q.name(weight + "_zero_point")
	scaleDims := []int64{int64(len(qt.scales))}
	if len(qt.scales) == 1 {
		scaleDims = nil // a scalar
	}
	q.addInit(onnxpb.Tensor{Name: wq, Type: q.opts.WeightType, Dims: []int64{k, cols}, Raw: qt.data})
	q.addInit(onnxpb.FloatTensor(ws, scaleDims, qt.scales))
	zpDims := scaleDims
	if q.opts.WeightType == onnxpb.Int8 {
		zpDims, qt.zeros = nil, qt.zeros[:1] // all zero: one scalar
	}
	q.addInit(onnxpb.Tensor{Name: wz, Type: q.opts.WeightType, Dims: zpDims, Raw: qt.zeros})

	a, ok := q.dql[x]
	if !ok {
		a = [3]string{q.name(x + "_quantized"), q.name(x + "_scale"), q.name(x + "_zero_point")}
		q.dql[x] = a
		q.emit(onnxpb.Node{Name: q.name(x + "_QuantizeLinear"), Op: "DynamicQuantizeLinear", Inputs: []string{x}, Outputs: a[:]})
	}
	base := n.Name
	if base == "" {
		base = out
	}
	mmI := q.name(base + "_MatMulInteger_out")
	mmF := q.name(base + "_MatMulInteger_float")
	mult := q.name(base + "_scale_product")
	q.emit(onnxpb.Node{Name: q.name(base + "_MatMulInteger"), Op: "MatMulInteger", Inputs: []string{a[0], wq, a[2], wz}, Outputs: []string{mmI}})
	q.emit(onnxpb.Node{Name: q.name(base + "_cast"), Op: "Cast", Inputs: []string{mmI}, Outputs: []string{mmF},
		Attrs: []onnxpb.Attr{onnxpb.AttrInt("to", int64(onnxpb.Float))}})
	q.emit(onnxpb.Node{Name: q.name(base + "_scale_mul"), Op: "Mul", Inputs: []string{a[1], ws}, Outputs: []string{mult}})
	q.emit(onnxpb.Node{Name: q.name(base + "_output_mul"), Op: "Mul", Inputs: []string{mmF, mult}, Outputs: []string{out}})
	q.done = append(q.done, Weight{Node: n.Name, Op: n.Op, Weight: weight, Dims: []int64{k, cols},
		Type: q.opts.WeightType, Scales: len(qt.scales), RelErr: qt.relErr})
}

// gather rewrites an embedding lookup in a float32 table as a lookup in
// an int8 table and in its per-row scales, multiplied.
func (q *quantizer) gather(n *onnxpb.Node) bool {
	if len(n.Inputs) != 2 || len(n.Outputs) != 1 || attrInt(n, "axis", 0) != 0 {
		return false
	}
	t, ok := q.inits[n.Inputs[0]]
	if !ok || t.Type != onnxpb.Float || len(t.Dims) != 2 {
		return false
	}
	w, d, ok := q.weightFor(n, n.Inputs[0])
	if !ok {
		return false
	}
	rows, dims := int(d[0]), int(d[1])
	tq := quantizeRows(w, rows, dims)
	table := n.Inputs[0]
	tn := q.name(table + "_quantized")
	sn := q.name(table + "_row_scale")
	q.addInit(onnxpb.Tensor{Name: tn, Type: onnxpb.Int8, Dims: []int64{d[0], d[1]}, Raw: tq.data})
	q.addInit(onnxpb.FloatTensor(sn, []int64{d[0], 1}, tq.scales))
	base := n.Name
	if base == "" {
		base = n.Outputs[0]
	}
	gq, gf, gs := q.name(base+"_int8"), q.name(base+"_float"), q.name(base+"_scale")
	q.emit(onnxpb.Node{Name: q.name(base + "_quantized"), Op: "Gather", Inputs: []string{tn, n.Inputs[1]}, Outputs: []string{gq}})
	q.emit(onnxpb.Node{Name: q.name(base + "_cast"), Op: "Cast", Inputs: []string{gq}, Outputs: []string{gf},
		Attrs: []onnxpb.Attr{onnxpb.AttrInt("to", int64(onnxpb.Float))}})
	q.emit(onnxpb.Node{Name: q.name(base + "_row_scale"), Op: "Gather", Inputs: []string{sn, n.Inputs[1]}, Outputs: []string{gs}})
	q.emit(onnxpb.Node{Name: q.name(base + "_dequantize"), Op: "Mul", Inputs: []string{gf, gs}, Outputs: []string{n.Outputs[0]}})
	q.done = append(q.done, Weight{Node: n.Name, Op: n.Op, Weight: table, Dims: []int64{d[0], d[1]},
		Type: onnxpb.Int8, Scales: rows, RelErr: tq.relErr})
	return true
}

// quantized is a quantized weight: raw int8 or uint8 data, its scales and
// zero points (raw, one byte each), and its relative rounding error.
type quantized struct {
	data   []byte
	scales []float32
	zeros  []byte
	relErr float64
}

// quantizeColumns quantizes w ([k, n], row-major) with one scale and zero
// point per column, or one in all if perTensor: int8 symmetric in
// [-127, 127] with zero point 0, or uint8 asymmetric over [min, max]
// widened to include 0 (so that 0 is exact, as ONNX Runtime does).
func quantizeColumns(w []float32, k, n int, typ onnxpb.DataType, perTensor bool) quantized {
	groups := n
	if perTensor {
		groups = 1
	}
	col := func(idx int) int {
		if perTensor {
			return 0
		}
		return idx % n
	}
	lo, hi := make([]float64, groups), make([]float64, groups)
	for i, v := range w {
		g := col(i)
		lo[g], hi[g] = math.Min(lo[g], float64(v)), math.Max(hi[g], float64(v))
	}
	r := quantized{data: make([]byte, len(w)), scales: make([]float32, groups), zeros: make([]byte, groups)}
	zp := make([]float64, groups)
	for g := range groups {
		var s float64
		if typ == onnxpb.Int8 {
			s = math.Max(-lo[g], hi[g]) / 127
		} else {
			s = (hi[g] - lo[g]) / 255
		}
		if s == 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			s = 1
		}
		r.scales[g] = float32(s)
		if typ == onnxpb.Uint8 {
			zp[g] = math.Max(0, math.Min(255, math.Round(-lo[g]/float64(r.scales[g]))))
			r.zeros[g] = byte(zp[g])
		}
	}
	var num, den float64
	for i, v := range w {
		g := col(i)
		s := float64(r.scales[g])
		var deq float64
		if typ == onnxpb.Int8 {
			x := math.Max(-127, math.Min(127, math.Round(float64(v)/s)))
			r.data[i] = byte(int8(x))
			deq = x * s
		} else {
			x := math.Max(0, math.Min(255, math.Round(float64(v)/s)+zp[g]))
			r.data[i] = byte(x)
			deq = (x - zp[g]) * s
		}
		e := float64(v) - deq
		num += e * e
		den += float64(v) * float64(v)
	}
	if den > 0 {
		r.relErr = math.Sqrt(num / den)
	}
	return r
}

// quantizeRows quantizes a table ([rows, dims]) to int8, symmetric, one
// scale per row.
func quantizeRows(w []float32, rows, dims int) quantized {
	r := quantized{data: make([]byte, len(w)), scales: make([]float32, rows)}
	var num, den float64
	for i := range rows {
		row := w[i*dims : (i+1)*dims]
		m := 0.0
		for _, v := range row {
			m = math.Max(m, math.Abs(float64(v)))
		}
		s := m / 127
		if s == 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			s = 1
		}
		r.scales[i] = float32(s)
		s = float64(r.scales[i])
		for j, v := range row {
			x := math.Max(-127, math.Min(127, math.Round(float64(v)/s)))
			r.data[i*dims+j] = byte(int8(x))
			e := float64(v) - x*s
			num += e * e
			den += float64(v) * float64(v)
		}
	}
	if den > 0 {
		r.relErr = math.Sqrt(num / den)
	}
	return r
}

// transposeDense permutes a dense row-major tensor.
func transposeDense(v []float32, dims, perm []int64) ([]float32, []int64, bool) {
	r := len(dims)
	if len(perm) != r {
		return nil, nil, false
	}
	seen := make([]bool, r)
	for _, p := range perm {
		if p < 0 || int(p) >= r || seen[p] {
			return nil, nil, false
		}
		seen[p] = true
	}
	out := make([]int64, r)
	for i, p := range perm {
		out[i] = dims[p]
	}
	stride := make([]int64, r) // of the input
	s := int64(1)
	for i := r - 1; i >= 0; i-- {
		stride[i] = s
		s *= dims[i]
	}
	if s != int64(len(v)) {
		return nil, nil, false
	}
	res := make([]float32, len(v))
	idx := make([]int64, r) // index into out
	for o := range res {
		src := int64(0)
		for i := range r {
			src += idx[i] * stride[perm[i]]
		}
		res[o] = v[src]
		for i := r - 1; i >= 0; i-- {
			idx[i]++
			if idx[i] < out[i] {
				break
			}
			idx[i] = 0
		}
	}
	return res, out, true
}

// pruneDead drops the nodes none of whose outputs is read (by a later node
// or as a graph output), in one backward pass over the topological order.
func pruneDead(nodes []onnxpb.Node, outputs []onnxpb.ValueInfo) ([]onnxpb.Node, int) {
	used := map[string]bool{}
	for _, o := range outputs {
		used[o.Name] = true
	}
	keep := make([]bool, len(nodes))
	kept := 0
	for i := len(nodes) - 1; i >= 0; i-- {
		for _, o := range nodes[i].Outputs {
			if used[o] {
				keep[i] = true
				break
			}
		}
		if keep[i] {
			kept++
			for _, in := range nodes[i].Inputs {
				used[in] = true
			}
		}
	}
	out := make([]onnxpb.Node, 0, kept)
	for i, n := range nodes {
		if keep[i] {
			out = append(out, n)
		}
	}
	return out, len(nodes) - kept
}

// usedInitializers keeps the initializers that a node reads or that are
// graph outputs, in order.
func usedInitializers(inits []onnxpb.Tensor, nodes []onnxpb.Node, outputs []onnxpb.ValueInfo) []onnxpb.Tensor {
	used := map[string]bool{}
	for _, o := range outputs {
		used[o.Name] = true
	}
	for _, n := range nodes {
		for _, in := range n.Inputs {
			used[in] = true
		}
	}
	var out []onnxpb.Tensor
	for _, t := range inits {
		if used[t.Name] {
			out = append(out, t)
		}
	}
	return out
}

func attrOf(n *onnxpb.Node, name string) *onnxpb.Attr {
	for i := range n.Attrs {
		if n.Attrs[i].Name == name {
			return &n.Attrs[i]
		}
	}
	return nil
}

func attrInt(n *onnxpb.Node, name string, def int64) int64 {
	if a := attrOf(n, name); a != nil {
		return a.I
	}
	return def
}

func attrFloat(n *onnxpb.Node, name string, def float32) float32 {
	if a := attrOf(n, name); a != nil {
		return a.F
	}
	return def
}

func attrInts(n *onnxpb.Node, name string) []int64 {
	if a := attrOf(n, name); a != nil {
		return a.Ints
	}
	return nil
}

func attrBytes(n *onnxpb.Node, name string) []byte {
	if a := attrOf(n, name); a != nil {
		return a.S
	}
	return nil
}

func allEqual(v []int64, x int64) bool {
	for _, e := range v {
		if e != x {
			return false
		}
	}
	return true
}

func isTranspose(n *onnxpb.Node, perm ...int64) bool {
	return n.Op == "Transpose" && (n.Domain == "" || n.Domain == "ai.onnx") && len(n.Inputs) == 1 && slices.Equal(attrInts(n, "perm"), perm)
}
