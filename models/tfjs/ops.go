package tfjs

import (
	"math"
	"strconv"

	"github.com/triagegw/triage/models/onnxpb"
)

// handler converts one TF node (its inputs and attributes in x) to ONNX.
type handler func(x *nodeCtx) error

// handlers maps TF ops to their conversions. The op mapping, in short:
//
//	Placeholder              graph input (int32 ones optionally fed as int64 and cast)
//	Const                    initializer (on first use, in the Const's own dtype)
//	Identity, StopGradient   Identity
//	Add(V2), Sub, Mul, ...   the ONNX op of the same name (RealDiv→Div,
//	                         Maximum→Max, Minimum→Min, LogicalAnd→And, ...)
//	Square, Rsqrt            Mul(x, x); Reciprocal(Sqrt(x))
//	BiasAdd (NHWC)           Add
//	MatMul                   MatMul (Transpose first for transpose_a/b)
//	BatchMatMul(V2, V3)      MatMul, or Einsum "...ij,...kj->...ik" for adjoints
//	Conv2D (NHWC)            Transpose to NCHW, Conv (kernel HWIO→OIHW), Transpose back
//	Mean, Sum, Max, Min,     ReduceMean, ReduceSum, ReduceMax, ReduceMin,
//	Prod                     ReduceProd (constant axes; none → Identity)
//	Softmax, LogSoftmax      the same, on the last axis
//	Cast                     Cast
//	Shape                    Shape (+ Cast to int32 when out_type is int32)
//	Reshape                  Reshape (allowzero=1: a 0 is a 0, as in TF)
//	Squeeze, ExpandDims      Squeeze, Unsqueeze
//	ConcatV2, Pack, Unpack   Concat; Unsqueeze each + Concat; Split + Squeeze
//	SplitV, Split            Split
//	Transpose                Transpose (constant perm)
//	GatherV2, GatherNd       Gather (constant axis), GatherND
//	ScatterNd                ScatterND(reduction=add) into ConstantOfShape zeros
//	SparseToDense            ScatterND into Expand(default_value, shape)
//	Where (one input)        NonZero + Transpose: coordinates [n, rank], int64
//	SelectV2                 Where
//	StridedSlice             Slice (+ Squeeze for shrink_axis_mask, + Unsqueeze for
//	                         new_axis_mask; constant begin/end/strides, no ellipsis)
//	Slice                    Slice (constant begin/size; size -1 = to the end)
//	Range, Fill, Tile        Range, Expand, Tile
var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"Placeholder": placeholder,
		"Identity":    unary("Identity"), "StopGradient": unary("Identity"), "Snapshot": unary("Identity"),
		"Relu": unary("Relu"), "Tanh": unary("Tanh"), "Sigmoid": unary("Sigmoid"), "Sin": unary("Sin"),
		"Cos": unary("Cos"), "Exp": unary("Exp"), "Log": unary("Log"), "Sqrt": unary("Sqrt"),
		"Abs": unary("Abs"), "Neg": unary("Neg"), "Floor": unary("Floor"), "Ceil": unary("Ceil"),
		"Erf": unary("Erf"), "Reciprocal": unary("Reciprocal"), "Inv": unary("Reciprocal"),
		"Sign": unary("Sign"), "Softplus": unary("Softplus"), "Elu": unary("Elu"),
		"LogicalNot": unary("Not"),
		"Add":        binaryOp("Add"), "AddV2": binaryOp("Add"), "Sub": binaryOp("Sub"), "Mul": binaryOp("Mul"),
		"RealDiv": floatBinary("Div"), "Div": floatBinary("Div"), "Maximum": binaryOp("Max"), "Minimum": binaryOp("Min"),
		"Pow": binaryOp("Pow"), "Less": boolBinary("Less"), "LessEqual": boolBinary("LessOrEqual"),
		"Greater": boolBinary("Greater"), "GreaterEqual": boolBinary("GreaterOrEqual"), "Equal": equal(false),
		"NotEqual": equal(true), "LogicalAnd": boolBinary("And"), "LogicalOr": boolBinary("Or"),
		"AddN": addN, "Square": square, "Rsqrt": rsqrt, "SquaredDifference": squaredDifference,
		"Relu6": relu6, "LeakyRelu": leakyRelu,
		"BiasAdd": biasAdd, "MatMul": matMul, "BatchMatMul": batchMatMul, "BatchMatMulV2": batchMatMul,
		"BatchMatMulV3": batchMatMul, "Conv2D": conv2D,
		"Mean": reduce("ReduceMean"), "Sum": reduce("ReduceSum"), "Max": reduce("ReduceMax"),
		"Min": reduce("ReduceMin"), "Prod": reduce("ReduceProd"),
		"Softmax": softmax("Softmax"), "LogSoftmax": softmax("LogSoftmax"),
		"Cast": cast, "Shape": shape, "Reshape": reshape, "Squeeze": squeeze, "ExpandDims": expandDims,
		"ConcatV2": concat(false), "Concat": concat(true), "Pack": pack, "Unpack": unpack,
		"SplitV": splitV, "Split": split, "Transpose": transpose,
		"GatherV2": gather, "Gather": gather, "GatherNd": gatherNd, "ScatterNd": scatterNd,
		"SparseToDense": sparseToDense, "Where": where, "SelectV2": selectV2,
		"StridedSlice": stridedSlice, "Slice": slice, "Range": rangeOp, "Fill": fill, "Tile": tile,
	}
}

// outT is the node's dtype attribute T.
func (x *nodeCtx) outT() DType { return x.typeAttr("T") }

func placeholder(x *nodeCtx) error {
	dt := x.typeAttr("dtype")
	ot, err := onnxType(dt)
	if err != nil {
		return x.errorf("%v", err)
	}
	var dims []onnxpb.Dim
	if d, ok := x.c.opt.InputDims[x.n.Name]; ok {
		dims = d
	} else if a := x.attr("shape"); a != nil && a.Shape != nil {
		if ds := a.Shape.Dims(); ds != nil {
			dims = make([]onnxpb.Dim, len(ds))
			for i, v := range ds {
				if v < 0 {
					dims[i] = onnxpb.Dim{Param: x.n.Name + "_" + strconv.Itoa(i)}
				} else {
					dims[i] = onnxpb.Dim{Value: v}
				}
			}
		}
	}
	x.used["shape"] = true
	name := x.out(0)
	if x.c.opt.Int64Inputs && dt == DTInt32 {
		x.c.inputs = append(x.c.inputs, onnxpb.ValueInfo{Name: name, Type: onnxpb.Int64, Dims: dims})
		x.c.types[name] = DTInt64
		x.c.alias[name] = x.cast(name, DTInt32)
		return nil
	}
	x.c.inputs = append(x.c.inputs, onnxpb.ValueInfo{Name: name, Type: ot, Dims: dims})
	x.c.types[name] = dt
	return nil
}

// inRange materializes data inputs lo..hi-1.
func (x *nodeCtx) inRange(lo, hi int) ([]string, error) {
	out := make([]string, 0, hi-lo)
	for i := lo; i < hi; i++ {
		s, err := x.in(i)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// simple emits op over all inputs into output 0, of dtype dt.
func (x *nodeCtx) simple(op string, n int, dt DType, attrs ...onnxpb.Attr) error {
	if err := x.wantInputs(n); err != nil {
		return err
	}
	ins, err := x.inRange(0, n)
	if err != nil {
		return err
	}
	x.emit(op, ins, []string{x.out(0)}, dt, attrs...)
	return nil
}

func unary(op string) handler {
	return func(x *nodeCtx) error {
		var attrs []onnxpb.Attr
		if op == "Elu" {
			attrs = append(attrs, onnxpb.AttrFloat("alpha", 1))
		}
		dt := x.outT()
		if op == "Not" {
			dt = DTBool
		}
		if dt == DTInvalid && len(x.ins) == 1 {
			dt = x.inType(0)
		}
		return x.simple(op, 1, dt, attrs...)
	}
}

func binaryOp(op string) handler {
	return func(x *nodeCtx) error { return x.simple(op, 2, x.outT()) }
}

func floatBinary(op string) handler {
	return func(x *nodeCtx) error {
		if !x.outT().isFloat() {
			return x.errorf("%s of %v is not supported (only floating-point division maps to ONNX Div exactly)", x.n.Op, x.outT())
		}
		return x.simple(op, 2, x.outT())
	}
}

func boolBinary(op string) handler {
	return func(x *nodeCtx) error { return x.simple(op, 2, DTBool) }
}

func equal(negate bool) handler {
	return func(x *nodeCtx) error {
		if !x.boolAttr("incompatible_shape_error", true) {
			return x.errorf("incompatible_shape_error=false is not supported")
		}
		if !negate {
			return x.simple("Equal", 2, DTBool)
		}
		if err := x.wantInputs(2); err != nil {
			return err
		}
		ins, err := x.inRange(0, 2)
		if err != nil {
			return err
		}
		eq := x.op1("Equal", "equal", ins, DTBool)
		x.emit("Not", []string{eq}, []string{x.out(0)}, DTBool)
		return nil
	}
}

func addN(x *nodeCtx) error {
	if len(x.ins) == 0 {
		return x.errorf("has no inputs")
	}
	return x.simple("Sum", len(x.ins), x.outT())
}

func square(x *nodeCtx) error {
	if err := x.wantInputs(1); err != nil {
		return err
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	x.emit("Mul", []string{a, a}, []string{x.out(0)}, x.outT())
	return nil
}

func rsqrt(x *nodeCtx) error {
	if err := x.wantInputs(1); err != nil {
		return err
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	s := x.op1("Sqrt", "sqrt", []string{a}, x.outT())
	x.emit("Reciprocal", []string{s}, []string{x.out(0)}, x.outT())
	return nil
}

func squaredDifference(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	ins, err := x.inRange(0, 2)
	if err != nil {
		return err
	}
	d := x.op1("Sub", "sub", ins, x.outT())
	x.emit("Mul", []string{d, d}, []string{x.out(0)}, x.outT())
	return nil
}

func relu6(x *nodeCtx) error {
	if err := x.wantInputs(1); err != nil {
		return err
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	lo, err := x.scalar("zero", x.outT(), 0)
	if err != nil {
		return err
	}
	hi, err := x.scalar("six", x.outT(), 6)
	if err != nil {
		return err
	}
	x.emit("Clip", []string{a, lo, hi}, []string{x.out(0)}, x.outT())
	return nil
}

func leakyRelu(x *nodeCtx) error {
	return x.simple("LeakyRelu", 1, x.outT(), onnxpb.AttrFloat("alpha", x.floatAttr("alpha", 0.2)))
}

func biasAdd(x *nodeCtx) error {
	if f := x.stringAttr("data_format", "NHWC"); f != "NHWC" {
		return x.errorf("data_format %q is not supported (only NHWC, where the bias broadcasts over the last axis)", f)
	}
	return x.simple("Add", 2, x.outT())
}

func matMul(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	ins, err := x.inRange(0, 2)
	if err != nil {
		return err
	}
	for i, flag := range []string{"transpose_a", "transpose_b"} {
		if x.boolAttr(flag, false) {
			ins[i] = x.op1("Transpose", flag, []string{ins[i]}, x.outT(), onnxpb.AttrInts("perm", 1, 0))
		}
	}
	x.emit("MatMul", ins, []string{x.out(0)}, x.outT())
	return nil
}

func batchMatMul(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	dt := x.outT()
	if x.n.Op == "BatchMatMulV3" {
		ta, tb, tout := x.typeAttr("Ta"), x.typeAttr("Tb"), x.typeAttr("Tout")
		if ta != tb || ta != tout {
			return x.errorf("mixed types Ta=%v Tb=%v Tout=%v are not supported", ta, tb, tout)
		}
		dt = tout
	}
	// grad_x and grad_y are hints for gradient computation.
	x.used["grad_x"], x.used["grad_y"] = true, true
	ins, err := x.inRange(0, 2)
	if err != nil {
		return err
	}
	adjX, adjY := x.boolAttr("adj_x", false), x.boolAttr("adj_y", false)
	if !adjX && !adjY {
		x.emit("MatMul", ins, []string{x.out(0)}, dt)
		return nil
	}
	// Transposing the last two axes of a tensor of unknown rank: Einsum's
	// ellipsis covers the batch axes, with MatMul's broadcasting.
	a, b := "...ij", "...jk"
	if adjX {
		a = "...ji"
	}
	if adjY {
		b = "...kj"
	}
	x.emit("Einsum", ins, []string{x.out(0)}, dt, onnxpb.AttrString("equation", a+","+b+"->...ik"))
	return nil
}

func conv2D(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	format := x.stringAttr("data_format", "NHWC")
	if format != "NHWC" && format != "NCHW" {
		return x.errorf("data_format %q is not supported", format)
	}
	hw := [2]int{1, 2} // positions of H and W in strides, dilations
	if format == "NCHW" {
		hw = [2]int{2, 3}
	}
	spatial := func(name string) ([]int64, error) {
		v := x.intsAttr(name)
		if v == nil {
			return []int64{1, 1}, nil
		}
		if len(v) != 4 {
			return nil, x.errorf("%s %v: want 4 values", name, v)
		}
		for i, s := range v {
			if i != hw[0] && i != hw[1] && s != 1 {
				return nil, x.errorf("%s %v: only the spatial axes may differ from 1", name, v)
			}
		}
		return []int64{v[hw[0]], v[hw[1]]}, nil
	}
	strides, err := spatial("strides")
	if err != nil {
		return err
	}
	dilations, err := spatial("dilations")
	if err != nil {
		return err
	}
	attrs := []onnxpb.Attr{onnxpb.AttrInts("strides", strides...), onnxpb.AttrInts("dilations", dilations...)}
	switch p := x.stringAttr("padding", ""); p {
	case "VALID":
		attrs = append(attrs, onnxpb.AttrInts("pads", 0, 0, 0, 0))
	case "SAME":
		// TF puts the odd padding at the end, as SAME_UPPER does.
		attrs = append(attrs, onnxpb.AttrString("auto_pad", "SAME_UPPER"))
	case "EXPLICIT":
		ep := x.intsAttr("explicit_paddings")
		if len(ep) != 8 {
			return x.errorf("explicit_paddings %v: want 8 values", ep)
		}
		h, w := 2*hw[0], 2*hw[1]
		attrs = append(attrs, onnxpb.AttrInts("pads", ep[h], ep[w], ep[h+1], ep[w+1]))
	default:
		return x.errorf("padding %q is not supported", p)
	}
	if ep := x.intsAttr("explicit_paddings"); len(ep) > 0 && x.stringAttr("padding", "") != "EXPLICIT" {
		return x.errorf("explicit_paddings %v without padding EXPLICIT", ep)
	}
	ins, err := x.inRange(0, 2)
	if err != nil {
		return err
	}
	dt := x.outT()
	in := ins[0]
	if format == "NHWC" {
		in = x.op1("Transpose", "nchw", []string{in}, dt, onnxpb.AttrInts("perm", 0, 3, 1, 2))
	}
	kernel := x.op1("Transpose", "oihw", []string{ins[1]}, dt, onnxpb.AttrInts("perm", 3, 2, 0, 1))
	if format == "NCHW" {
		x.emit("Conv", []string{in, kernel}, []string{x.out(0)}, dt, attrs...)
		return nil
	}
	y := x.op1("Conv", "conv", []string{in, kernel}, dt, attrs...)
	x.emit("Transpose", []string{y}, []string{x.out(0)}, dt, onnxpb.AttrInts("perm", 0, 2, 3, 1))
	return nil
}

// reduce maps TF's reductions. In opset 17 ReduceSum takes its axes as an
// input and the others as an attribute.
func reduce(op string) handler {
	return func(x *nodeCtx) error {
		if err := x.wantInputs(2); err != nil {
			return err
		}
		axes, err := x.constInts(1, "reduction axes")
		if err != nil {
			return err
		}
		a, err := x.in(0)
		if err != nil {
			return err
		}
		keep := int64(0)
		if x.boolAttr("keep_dims", false) {
			keep = 1
		}
		dt := x.outT()
		if len(axes) == 0 { // TF reduces nothing; ONNX would reduce everything
			x.emit("Identity", []string{a}, []string{x.out(0)}, dt)
			return nil
		}
		if op == "ReduceSum" {
			x.emit(op, []string{a, x.ints64("axes", []int64{int64(len(axes))}, axes...)}, []string{x.out(0)}, dt, onnxpb.AttrInt("keepdims", keep))
			return nil
		}
		x.emit(op, []string{a}, []string{x.out(0)}, dt, onnxpb.AttrInts("axes", axes...), onnxpb.AttrInt("keepdims", keep))
		return nil
	}
}

func softmax(op string) handler {
	return func(x *nodeCtx) error { return x.simple(op, 1, x.outT(), onnxpb.AttrInt("axis", -1)) }
}

func cast(x *nodeCtx) error {
	dst := x.typeAttr("DstT")
	if x.boolAttr("Truncate", false) && dst == DTHalf {
		return x.errorf("Truncate=true to float16 is not supported (ONNX Cast rounds)")
	}
	ot, err := onnxType(dst)
	if err != nil {
		return x.errorf("%v", err)
	}
	return x.simple("Cast", 1, dst, onnxpb.AttrInt("to", int64(ot)))
}

func shape(x *nodeCtx) error {
	if err := x.wantInputs(1); err != nil {
		return err
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	dt := x.typeAttr("out_type")
	if dt == DTInvalid {
		dt = DTInt32
	}
	if dt == DTInt64 {
		x.emit("Shape", []string{a}, []string{x.out(0)}, DTInt64)
		return nil
	}
	s := x.op1("Shape", "shape", []string{a}, DTInt64)
	ot, err := onnxType(dt)
	if err != nil {
		return x.errorf("%v", err)
	}
	x.emit("Cast", []string{s}, []string{x.out(0)}, dt, onnxpb.AttrInt("to", int64(ot)))
	return nil
}

func reshape(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	s, err := x.int64In(1)
	if err != nil {
		return err
	}
	x.emit("Reshape", []string{a, s}, []string{x.out(0)}, x.outT(), onnxpb.AttrInt("allowzero", 1))
	return nil
}

func squeeze(x *nodeCtx) error {
	if err := x.wantInputs(1); err != nil {
		return err
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	axes := x.intsAttr("squeeze_dims")
	if more := x.intsAttr("axis"); len(more) > 0 {
		axes = append(axes, more...)
	}
	ins := []string{a}
	if len(axes) > 0 {
		ins = append(ins, x.ints64("axes", []int64{int64(len(axes))}, axes...))
	}
	x.emit("Squeeze", ins, []string{x.out(0)}, x.outT())
	return nil
}

func expandDims(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	var axes string
	if t, err := x.constIn(1, "axis"); err == nil {
		if len(t.I64) != 1 {
			return x.errorf("axis %v: want one integer", t.I64)
		}
		axes = x.ints64("axes", []int64{1}, t.I64[0])
	} else {
		d, err := x.int64In(1)
		if err != nil {
			return err
		}
		axes = x.op1("Reshape", "axes", []string{d, x.ints64("one", []int64{1}, 1)}, DTInt64)
	}
	x.emit("Unsqueeze", []string{a, axes}, []string{x.out(0)}, x.outT())
	return nil
}

// concat is ConcatV2 (values..., axis) or, old style, Concat (axis, values...).
func concat(axisFirst bool) handler {
	return func(x *nodeCtx) error {
		if len(x.ins) < 2 {
			return x.errorf("has %d inputs, want values and an axis", len(x.ins))
		}
		ai, lo, hi := len(x.ins)-1, 0, len(x.ins)-1
		if axisFirst {
			ai, lo, hi = 0, 1, len(x.ins)
		}
		axis, err := x.constInts(ai, "axis")
		if err != nil {
			return err
		}
		if len(axis) != 1 {
			return x.errorf("axis %v: want one integer", axis)
		}
		ins, err := x.inRange(lo, hi)
		if err != nil {
			return err
		}
		x.emit("Concat", ins, []string{x.out(0)}, x.outT(), onnxpb.AttrInt("axis", axis[0]))
		return nil
	}
}

func pack(x *nodeCtx) error {
	if len(x.ins) == 0 {
		return x.errorf("has no inputs")
	}
	axis := x.intAttr("axis", 0)
	ins, err := x.inRange(0, len(x.ins))
	if err != nil {
		return err
	}
	axes := x.ints64("axes", []int64{1}, axis)
	dt := x.outT()
	parts := make([]string, len(ins))
	for i, in := range ins {
		parts[i] = x.op1("Unsqueeze", "unsqueeze", []string{in, axes}, dt)
	}
	x.emit("Concat", parts, []string{x.out(0)}, dt, onnxpb.AttrInt("axis", axis))
	return nil
}

func unpack(x *nodeCtx) error {
	if err := x.wantInputs(1); err != nil {
		return err
	}
	num, axis := x.intAttr("num", 0), x.intAttr("axis", 0)
	if num <= 0 {
		return x.errorf("num %d: want a positive count", num)
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	dt := x.outT()
	parts := make([]string, num)
	for i := range parts {
		parts[i] = x.tmp("part")
	}
	x.emit("Split", []string{a}, parts, dt, onnxpb.AttrInt("axis", axis))
	axes := x.ints64("axes", []int64{1}, axis)
	for i, p := range parts {
		x.emit("Squeeze", []string{p, axes}, []string{x.out(i)}, dt)
	}
	return nil
}

func splitV(x *nodeCtx) error {
	if err := x.wantInputs(3); err != nil {
		return err
	}
	sizes, err := x.constInts(1, "size_splits")
	if err != nil {
		return err
	}
	for _, s := range sizes {
		if s < 0 {
			return x.errorf("size_splits %v: an inferred (-1) size is not supported; give every size", sizes)
		}
	}
	axis, err := x.constInts(2, "axis")
	if err != nil {
		return err
	}
	if len(axis) != 1 {
		return x.errorf("axis %v: want one integer", axis)
	}
	if n := x.intAttr("num_split", int64(len(sizes))); n != int64(len(sizes)) {
		return x.errorf("num_split %d but %d sizes", n, len(sizes))
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	outs := make([]string, len(sizes))
	for i := range outs {
		outs[i] = x.out(i)
	}
	x.emit("Split", []string{a, x.ints64("split", []int64{int64(len(sizes))}, sizes...)}, outs, x.outT(), onnxpb.AttrInt("axis", axis[0]))
	return nil
}

func split(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	axis, err := x.constInts(0, "axis")
	if err != nil {
		return err
	}
	if len(axis) != 1 {
		return x.errorf("axis %v: want one integer", axis)
	}
	n := x.intAttr("num_split", 0)
	if n <= 0 {
		return x.errorf("num_split %d: want a positive count", n)
	}
	a, err := x.in(1)
	if err != nil {
		return err
	}
	outs := make([]string, n)
	for i := range outs {
		outs[i] = x.out(i)
	}
	x.emit("Split", []string{a}, outs, x.outT(), onnxpb.AttrInt("axis", axis[0]))
	return nil
}

func transpose(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	perm, err := x.constInts(1, "permutation")
	if err != nil {
		return err
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	x.emit("Transpose", []string{a}, []string{x.out(0)}, x.outT(), onnxpb.AttrInts("perm", perm...))
	return nil
}

func gather(x *nodeCtx) error {
	axis := int64(0)
	dt := x.typeAttr("Tparams")
	if x.n.Op == "GatherV2" {
		if err := x.wantInputs(3); err != nil {
			return err
		}
		if b := x.intAttr("batch_dims", 0); b != 0 {
			return x.errorf("batch_dims %d is not supported", b)
		}
		v, err := x.constInts(2, "axis")
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return x.errorf("axis %v: want one integer", v)
		}
		axis = v[0]
	} else {
		if err := x.wantInputs(2); err != nil {
			return err
		}
		x.used["validate_indices"] = true
	}
	ins, err := x.inRange(0, 2)
	if err != nil {
		return err
	}
	if dt == DTInvalid {
		dt = x.inType(0)
	}
	x.emit("Gather", ins, []string{x.out(0)}, dt, onnxpb.AttrInt("axis", axis))
	return nil
}

func gatherNd(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	if p := x.stringAttr("bad_indices_policy", ""); p != "" && p != "DEFAULT" && p != "ERROR" {
		return x.errorf("bad_indices_policy %q is not supported", p)
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	idx, err := x.int64In(1)
	if err != nil {
		return err
	}
	x.emit("GatherND", []string{a, idx}, []string{x.out(0)}, x.typeAttr("Tparams"))
	return nil
}

// zeroTensor is a one-element tensor of dtype dt holding zero, for
// ConstantOfShape.
func zeroTensor(dt DType) (onnxpb.Tensor, error) {
	t := &Tensor{DType: dt, Shape: []int64{1}}
	switch {
	case dt.isFloat():
		t.F32 = []float32{0}
	case dt == DTBool:
		t.Bool = []bool{false}
	default:
		t.I64 = []int64{0}
	}
	return tensorOf("", t)
}

// scatterNd: TF adds the updates into zeros (duplicate indices sum), which
// is ScatterND with reduction "add" over ConstantOfShape zeros.
func scatterNd(x *nodeCtx) error {
	if err := x.wantInputs(3); err != nil {
		return err
	}
	if p := x.stringAttr("bad_indices_policy", ""); p != "" && p != "DEFAULT" && p != "ERROR" {
		return x.errorf("bad_indices_policy %q is not supported", p)
	}
	dt := x.outT()
	zero, err := zeroTensor(dt)
	if err != nil {
		return x.errorf("%v", err)
	}
	shape64, err := x.int64In(2)
	if err != nil {
		return err
	}
	idx, err := x.int64In(0)
	if err != nil {
		return err
	}
	upd, err := x.in(1)
	if err != nil {
		return err
	}
	zeros := x.op1("ConstantOfShape", "zeros", []string{shape64}, dt, onnxpb.AttrTensor("value", zero))
	x.emit("ScatterND", []string{zeros, idx, upd}, []string{x.out(0)}, dt, onnxpb.AttrString("reduction", "add"))
	return nil
}

// sparseToDense(indices, output_shape, values, default_value): indices may
// be a scalar, a vector or [n, rank]; reshaping them to [-1, rank] (rank =
// the length of output_shape) covers all three, and values (a scalar or
// [n]) are expanded to [n]. TF rejects repeated indices when
// validate_indices is set; ONNX leaves their order undefined.
func sparseToDense(x *nodeCtx) error {
	if err := x.wantInputs(4); err != nil {
		return err
	}
	x.used["validate_indices"] = true
	dt := x.outT()
	shape64, err := x.int64In(1)
	if err != nil {
		return err
	}
	idx64, err := x.int64In(0)
	if err != nil {
		return err
	}
	vals, err := x.in(2)
	if err != nil {
		return err
	}
	def, err := x.in(3)
	if err != nil {
		return err
	}
	dense := x.op1("Expand", "default", []string{def, shape64}, dt)
	rank := x.op1("Shape", "rank", []string{shape64}, DTInt64)
	idxShape := x.op1("Concat", "indices_shape", []string{x.ints64("minus_one", []int64{1}, -1), rank}, DTInt64, onnxpb.AttrInt("axis", 0))
	idx := x.op1("Reshape", "indices", []string{idx64, idxShape}, DTInt64)
	idxDims := x.op1("Shape", "indices_dims", []string{idx}, DTInt64)
	n := x.op1("Slice", "count", []string{idxDims, x.ints64("zero", []int64{1}, 0), x.ints64("one", []int64{1}, 1)}, DTInt64)
	upd := x.op1("Expand", "values", []string{vals, n}, dt)
	x.emit("ScatterND", []string{dense, idx, upd}, []string{x.out(0)}, dt)
	return nil
}

// where with one input returns the coordinates of the true (non-zero)
// elements, [n, rank] int64 in row-major order: NonZero gives [rank, n].
func where(x *nodeCtx) error {
	if len(x.ins) != 1 {
		return x.errorf("has %d inputs; Where with x and y is Select/SelectV2", len(x.ins))
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	nz := x.op1("NonZero", "nonzero", []string{a}, DTInt64)
	x.emit("Transpose", []string{nz}, []string{x.out(0)}, DTInt64, onnxpb.AttrInts("perm", 1, 0))
	return nil
}

func selectV2(x *nodeCtx) error { return x.simple("Where", 3, x.outT()) }

// stridedSlice supports constant begin, end and strides with the begin,
// end, shrink-axis and new-axis masks; the ellipsis mask needs the input's
// rank, which the converter does not infer.
func stridedSlice(x *nodeCtx) error {
	if err := x.wantInputs(4); err != nil {
		return err
	}
	begin, err := x.constInts(1, "begin")
	if err != nil {
		return err
	}
	end, err := x.constInts(2, "end")
	if err != nil {
		return err
	}
	strides, err := x.constInts(3, "strides")
	if err != nil {
		return err
	}
	if len(begin) != len(end) || len(begin) != len(strides) {
		return x.errorf("begin %v, end %v and strides %v differ in length", begin, end, strides)
	}
	bm, em := x.intAttr("begin_mask", 0), x.intAttr("end_mask", 0)
	ellipsis, newAxis, shrink := x.intAttr("ellipsis_mask", 0), x.intAttr("new_axis_mask", 0), x.intAttr("shrink_axis_mask", 0)
	if ellipsis != 0 {
		return x.errorf("ellipsis_mask %d is not supported", ellipsis)
	}
	var starts, ends, axes, steps, squeezeAxes, unsqueezeAxes []int64
	dim, outDim := int64(0), int64(0)
	for i := range begin {
		bit := int64(1) << i
		if newAxis&bit != 0 {
			unsqueezeAxes = append(unsqueezeAxes, outDim)
			outDim++
			continue
		}
		b, e, s := begin[i], end[i], strides[i]
		switch {
		case shrink&bit != 0:
			// As in TF's ValidateStridedSliceOp: a masked begin is 0, and
			// the axis keeps the one element at begin.
			if bm&bit != 0 {
				b = 0
			}
			e = b + 1
			if b == -1 {
				e = math.MaxInt64
			}
			s = 1
			squeezeAxes = append(squeezeAxes, dim)
		case s == 0:
			return x.errorf("stride 0 on axis %d", dim)
		default:
			if bm&bit != 0 {
				b = 0
				if s < 0 {
					b = math.MaxInt64
				}
			}
			if em&bit != 0 {
				e = math.MaxInt64
				if s < 0 {
					e = math.MinInt64
				}
			}
			outDim++
		}
		if !(b == 0 && e == math.MaxInt64 && s == 1) { // a full axis needs no slicing
			starts, ends, axes, steps = append(starts, b), append(ends, e), append(axes, dim), append(steps, s)
		}
		dim++
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	type step struct {
		op    string
		extra []string
	}
	var chain []step
	if len(axes) > 0 {
		n := []int64{int64(len(axes))}
		chain = append(chain, step{"Slice", []string{x.ints64("starts", n, starts...), x.ints64("ends", n, ends...),
			x.ints64("axes", n, axes...), x.ints64("steps", n, steps...)}})
	}
	if len(squeezeAxes) > 0 {
		chain = append(chain, step{"Squeeze", []string{x.ints64("squeeze_axes", []int64{int64(len(squeezeAxes))}, squeezeAxes...)}})
	}
	if len(unsqueezeAxes) > 0 {
		chain = append(chain, step{"Unsqueeze", []string{x.ints64("unsqueeze_axes", []int64{int64(len(unsqueezeAxes))}, unsqueezeAxes...)}})
	}
	if len(chain) == 0 {
		chain = append(chain, step{"Identity", nil})
	}
	dt := x.outT()
	cur := a
	for i, st := range chain {
		ins := append([]string{cur}, st.extra...)
		if i == len(chain)-1 {
			x.emit(st.op, ins, []string{x.out(0)}, dt)
		} else {
			cur = x.op1(st.op, st.op, ins, dt)
		}
	}
	return nil
}

// slice: TF's size -1 means "to the end".
func slice(x *nodeCtx) error {
	if err := x.wantInputs(3); err != nil {
		return err
	}
	begin, err := x.constInts(1, "begin")
	if err != nil {
		return err
	}
	size, err := x.constInts(2, "size")
	if err != nil {
		return err
	}
	if len(begin) != len(size) {
		return x.errorf("begin %v and size %v differ in length", begin, size)
	}
	ends := make([]int64, len(size))
	axes := make([]int64, len(size))
	for i, s := range size {
		axes[i] = int64(i)
		switch {
		case s == -1:
			ends[i] = math.MaxInt64
		case s < 0:
			return x.errorf("size %v: negative size", size)
		default:
			ends[i] = begin[i] + s
		}
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	n := []int64{int64(len(size))}
	x.emit("Slice", []string{a, x.ints64("starts", n, begin...), x.ints64("ends", n, ends...), x.ints64("axes", n, axes...)},
		[]string{x.out(0)}, x.outT())
	return nil
}

func rangeOp(x *nodeCtx) error {
	dt := x.typeAttr("Tidx")
	if dt == DTInvalid {
		dt = x.inType(0)
	}
	return x.simple("Range", 3, dt)
}

func fill(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	dims, err := x.int64In(0)
	if err != nil {
		return err
	}
	v, err := x.in(1)
	if err != nil {
		return err
	}
	x.emit("Expand", []string{v, dims}, []string{x.out(0)}, x.outT())
	return nil
}

func tile(x *nodeCtx) error {
	if err := x.wantInputs(2); err != nil {
		return err
	}
	a, err := x.in(0)
	if err != nil {
		return err
	}
	m, err := x.int64In(1)
	if err != nil {
		return err
	}
	x.emit("Tile", []string{a, m}, []string{x.out(0)}, x.outT())
	return nil
}
