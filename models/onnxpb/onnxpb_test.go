package onnxpb

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func sample() *Model {
	w := FloatTensor("w", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6.5})
	return &Model{
		Producer: "triage-test",
		Doc:      "x @ w + b",
		Metadata: map[string]string{"b": "2", "a": "1"},
		Graph: Graph{
			Name: "g",
			Nodes: []Node{
				{Name: "mm", Op: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"y"}},
				{Name: "c", Op: "Constant", Outputs: []string{"b"}, Attrs: []Attr{AttrTensor("value", FloatTensor("", []int64{3}, []float32{0.5, -1, 2}))}},
				{Name: "add", Op: "Add", Inputs: []string{"y", "b"}, Outputs: []string{"z"}},
				{Name: "r", Op: "ReduceSum", Inputs: []string{"z", ""}, Outputs: []string{"s"},
					Attrs: []Attr{AttrInt("keepdims", 0), AttrFloat("f", 0.25), AttrInts("axes", 1, -1), AttrFloats("fs", 1.5, -2),
						AttrString("mode", "sum"), AttrStrings("names", "p", "q")}},
			},
			Initializers: []Tensor{w, Int64Tensor("i", []int64{2}, []int64{-1, 7}), Int32Tensor("j", nil, []int32{3})},
			Inputs:       []ValueInfo{{Name: "x", Type: Float, Dims: Dims("batch", 2)}},
			Outputs:      []ValueInfo{{Name: "s", Type: Float, Dims: Dims("batch")}, {Name: "z", Type: Float}},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	m := sample()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	b := m.Marshal()
	if !bytes.Equal(b, sample().Marshal()) {
		t.Fatal("Marshal is not deterministic")
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := sample()
	want.IRVersion, want.Opset = DefaultIRVersion, DefaultOpset
	if !bytes.Equal(got.Marshal(), b) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if got.IRVersion != want.IRVersion || got.Opset != want.Opset || got.Producer != want.Producer ||
		len(got.Graph.Nodes) != 4 || got.Graph.Nodes[3].Attrs[2].Ints[1] != -1 || got.Graph.Nodes[3].Attrs[1].F != 0.25 ||
		got.Graph.Inputs[0].Dims[0].Param != "batch" || got.Graph.Inputs[0].Dims[1].Value != 2 || got.Metadata["b"] != "2" {
		t.Fatalf("round trip lost fields: %+v", got)
	}
	if v, _ := got.Graph.Initializers[0].Floats(); !reflect.DeepEqual(v, []float32{1, 2, 3, 4, 5, 6.5}) {
		t.Fatalf("floats %v", v)
	}
	if v, _ := got.Graph.Initializers[1].Int64s(); !reflect.DeepEqual(v, []int64{-1, 7}) {
		t.Fatalf("int64s %v", v)
	}
}

// TestWireBytes pins the encoding of small messages to bytes worked out by
// hand from onnx.proto, so that a round trip cannot hide a wrong field
// number or wire type.
func TestWireBytes(t *testing.T) {
	tensor := Int64Tensor("t", []int64{2}, []int64{1, 2})
	// dims=1 varint 2 | data_type=2 varint 7 | name=8 "t" | raw_data=9 16 bytes
	want := "0802" + "1007" + "420174" + "4a10" + "0100000000000000" + "0200000000000000"
	if got := hex.EncodeToString(tensor.marshal()); got != want {
		t.Errorf("tensor:\n got %s\nwant %s", got, want)
	}
	a := AttrInt("axis", -1)
	// name=1 "axis" | i=3 varint -1 (ten bytes) | type=20 varint 2
	want = "0a0461786973" + "18ffffffffffffffffff01" + "a00102"
	if got := hex.EncodeToString(a.marshal()); got != want {
		t.Errorf("attr:\n got %s\nwant %s", got, want)
	}
	v := ValueInfo{Name: "x", Type: Int64, Dims: Dims("n", 2)}
	// name "x" | type { tensor_type { elem_type 7, shape { dim{param "n"} dim{value 2} } } }
	want = "0a0178" + "120f" + "0a0d" + "0807" + "1209" + "0a03" + "12016e" + "0a02" + "0802"
	if got := hex.EncodeToString(v.marshal()); got != want {
		t.Errorf("value info:\n got %s\nwant %s", got, want)
	}
	// The model starts with ir_version 8 and carries opset 17 in the default domain.
	b := (&Model{}).Marshal()
	if !bytes.HasPrefix(b, []byte{0x08, 0x08}) {
		t.Errorf("model starts % x", b[:2])
	}
	if !bytes.Contains(b, []byte{0x42, 0x02, 0x10, 17}) {
		t.Errorf("no opset_import {version: 17} in % x", b)
	}
}

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(m *Model)
		want string
	}{
		"short data":      {func(m *Model) { m.Graph.Initializers[0].Raw = m.Graph.Initializers[0].Raw[:8] }, "8 bytes of data"},
		"no op":           {func(m *Model) { m.Graph.Nodes[0].Op = "" }, "has no op"},
		"unknown input":   {func(m *Model) { m.Graph.Nodes[0].Inputs[1] = "nope" }, `reads "nope"`},
		"produced twice":  {func(m *Model) { m.Graph.Nodes[2].Outputs[0] = "y" }, "produced by both"},
		"missing output":  {func(m *Model) { m.Graph.Outputs[0].Name = "gone" }, `"gone" is produced by no node`},
		"bad attr tensor": {func(m *Model) { m.Graph.Nodes[1].Attrs[0].T.Dims = []int64{4} }, "attribute \"value\""},
		"negative dim":    {func(m *Model) { m.Graph.Initializers[2].Dims = []int64{-1} }, "negative dim"},
	} {
		t.Run(name, func(t *testing.T) {
			m := sample()
			tc.edit(m)
			err := m.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.onnx")
	if err := sample().WriteFile(p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(b, sample().Marshal()) {
		t.Fatalf("file differs from Marshal (%v)", err)
	}
	bad := sample()
	bad.Graph.Nodes[0].Op = ""
	if err := bad.WriteFile(filepath.Join(dir, "bad.onnx")); err == nil {
		t.Fatal("an invalid model was written")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}

func TestDecodeRejects(t *testing.T) {
	// A tensor with float_data (field 4) instead of raw_data.
	var tb []byte
	tb = protowire.AppendTag(tb, 2, protowire.VarintType)
	tb = protowire.AppendVarint(tb, uint64(Float))
	tb = protowire.AppendTag(tb, 4, protowire.Fixed32Type)
	tb = protowire.AppendFixed32(tb, 0)
	var g []byte
	g = appendMessage(g, 5, tb)
	var m []byte
	m = appendMessage(m, 7, g)
	if _, err := Decode(m); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("typed tensor data: %v", err)
	}
	if _, err := Decode([]byte{0x0a, 0x05, 0x01}); err == nil {
		t.Fatal("a truncated message decoded")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(sample().Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same model.
		m2, err := Decode(m.Marshal())
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if m.IRVersion == 0 {
			m.IRVersion = DefaultIRVersion
		}
		if m.Opset == 0 {
			m.Opset = DefaultOpset
		}
		if !bytes.Equal(m.Marshal(), m2.Marshal()) {
			t.Fatalf("re-encode differs:\n%+v\n%+v", m, m2)
		}
	})
}
