package tfjs

import (
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
