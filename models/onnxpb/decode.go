package onnxpb

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrUnsupported is wrapped by Decode when a model uses a feature this
// package does not read (tensors stored in typed fields or externally,
// subgraph attributes, non-tensor value types, several opsets).
var ErrUnsupported = errors.New("onnxpb: unsupported")

// Decode reads an ONNX ModelProto written by Marshal, or any model limited
// to the same fields. Unknown fields are skipped; fields this package
// cannot represent (see ErrUnsupported) are errors, so that a model is
// never silently read as something else.
func Decode(b []byte) (*Model, error) {
	m := &Model{}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, s []byte) error {
		switch num {
		case 1:
			m.IRVersion = int64(v)
		case 2:
			m.Producer = string(s)
		case 3:
			m.ProducerVersion = string(s)
		case 6:
			m.Doc = string(s)
		case 7:
			return m.Graph.decode(s)
		case 8:
			var domain string
			var version int64
			if err := fields(s, func(num protowire.Number, _ protowire.Type, v uint64, s []byte) error {
				switch num {
				case 1:
					domain = string(s)
				case 2:
					version = int64(v)
				}
				return nil
			}); err != nil {
				return err
			}
			if domain != "" && domain != "ai.onnx" {
				return fmt.Errorf("%w: opset of domain %q", ErrUnsupported, domain)
			}
			m.Opset = version
		case 14:
			var k, val string
			if err := fields(s, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) error {
				switch num {
				case 1:
					k = string(s)
				case 2:
					val = string(s)
				}
				return nil
			}); err != nil {
				return err
			}
			if m.Metadata == nil {
				m.Metadata = map[string]string{}
			}
			m.Metadata[k] = val
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (g *Graph) decode(b []byte) error {
	return fields(b, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) error {
		switch num {
		case 1:
			var n Node
			if err := n.decode(s); err != nil {
				return err
			}
			g.Nodes = append(g.Nodes, n)
		case 2:
			g.Name = string(s)
		case 5:
			var t Tensor
			if err := t.decode(s); err != nil {
				return err
			}
			g.Initializers = append(g.Initializers, t)
		case 11, 12:
			var v ValueInfo
			if err := v.decode(s); err != nil {
				return err
			}
			if num == 11 {
				g.Inputs = append(g.Inputs, v)
			} else {
				g.Outputs = append(g.Outputs, v)
			}
		}
		return nil
	})
}

func (n *Node) decode(b []byte) error {
	return fields(b, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) error {
		switch num {
		case 1:
			n.Inputs = append(n.Inputs, string(s))
		case 2:
			n.Outputs = append(n.Outputs, string(s))
		case 3:
			n.Name = string(s)
		case 4:
			n.Op = string(s)
		case 5:
			var a Attr
			if err := a.decode(s); err != nil {
				return fmt.Errorf("node %q: %w", n.Name, err)
			}
			n.Attrs = append(n.Attrs, a)
		case 7:
			n.Domain = string(s)
		}
		return nil
	})
}

func (a *Attr) decode(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v uint64, s []byte) error {
		switch num {
		case 1:
			a.Name = string(s)
		case 2:
			a.F = math.Float32frombits(uint32(v))
		case 3:
			a.I = int64(v)
		case 4:
			a.S = append([]byte{}, s...)
		case 5:
			var t Tensor
			if err := t.decode(s); err != nil {
				return err
			}
			a.T = &t
		case 6, 10, 11:
			return fmt.Errorf("%w: attribute %q holds graphs or tensor lists", ErrUnsupported, a.Name)
		case 7:
			if typ == protowire.BytesType { // packed
				for len(s) >= 4 {
					a.Floats = append(a.Floats, math.Float32frombits(protowireFixed32(s)))
					s = s[4:]
				}
			} else {
				a.Floats = append(a.Floats, math.Float32frombits(uint32(v)))
			}
		case 8:
			var err error
			a.Ints, err = appendInt64s(a.Ints, typ, v, s)
			return err
		case 9:
			a.Strings = append(a.Strings, append([]byte{}, s...))
		case 20:
			a.Type = AttrType(v)
		}
		return nil
	})
}

// appendInt64s appends a repeated int64 field's values: one varint v, or
// a packed run of them in s.
func appendInt64s(dst []int64, typ protowire.Type, v uint64, s []byte) ([]int64, error) {
	if typ != protowire.BytesType {
		return append(dst, int64(v)), nil
	}
	for len(s) > 0 {
		x, n := protowire.ConsumeVarint(s)
		if n < 0 {
			return dst, protowire.ParseError(n)
		}
		dst, s = append(dst, int64(x)), s[n:]
	}
	return dst, nil
}

func protowireFixed32(b []byte) uint32 {
	v, _ := protowire.ConsumeFixed32(b)
	return v
}

func (t *Tensor) decode(b []byte) error {
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, s []byte) error {
		switch num {
		case 1:
			var err error
			t.Dims, err = appendInt64s(t.Dims, typ, v, s)
			return err
		case 2:
			t.Type = DataType(v)
		case 8:
			t.Name = string(s)
		case 9:
			t.Raw = append([]byte{}, s...)
		case 4, 5, 6, 7, 10, 11:
			return fmt.Errorf("%w: tensor %q stores its data in typed fields, not raw_data", ErrUnsupported, t.Name)
		case 13, 14:
			return fmt.Errorf("%w: tensor %q stores its data externally", ErrUnsupported, t.Name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if t.Raw == nil {
		t.Raw = []byte{}
	}
	return nil
}

func (v *ValueInfo) decode(b []byte) error {
	return fields(b, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) error {
		switch num {
		case 1:
			v.Name = string(s)
		case 2: // TypeProto
			return fields(s, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) error {
				if num != 1 {
					return fmt.Errorf("%w: value %q is not a tensor", ErrUnsupported, v.Name)
				}
				return fields(s, func(num protowire.Number, _ protowire.Type, x uint64, s []byte) error {
					switch num {
					case 1:
						v.Type = DataType(x)
					case 2:
						v.Dims = []Dim{}
						return fields(s, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) error {
							if num != 1 {
								return nil
							}
							var d Dim
							err := fields(s, func(num protowire.Number, _ protowire.Type, x uint64, s []byte) error {
								switch num {
								case 1:
									d.Value = int64(x)
								case 2:
									d.Param = string(s)
								}
								return nil
							})
							v.Dims = append(v.Dims, d)
							return err
						})
					}
					return nil
				})
			})
		}
		return nil
	})
}

// fields walks a message's fields, calling f with each field's number,
// wire type, scalar value (varint or fixed) and bytes (length-delimited).
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, s []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("onnxpb: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v uint64
		var s []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			s, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("onnxpb: field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, s); err != nil {
			return err
		}
	}
	return nil
}
