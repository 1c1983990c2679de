package tfjs

import (
	"math"

	"github.com/triagegw/triage/models/onnxpb"
)

// Shape and layout ops: shapes, reshapes, joins and splits, gathers and
// scatters, slices, fills and tiles.

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
