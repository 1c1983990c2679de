package bert_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/triagegw/triage/models/bert"
	"github.com/triagegw/triage/models/onnxpb"
)

// tinyBERT is the shape the tests run: small enough for the plain-Go
// reference to take milliseconds.
func tinyBERT() bert.Config {
	return bert.Config{Layers: 2, Hidden: 32, Heads: 4, Intermediate: 64, Vocab: 100, MaxPos: 24, TypeVocab: 2, Seed: 7}
}

// tinyWeights are tinyBERT's weights with every LayerNorm scale and bias
// drawn at random too, so that a graph that swapped or dropped them would
// not match the reference.
func tinyWeights(t testing.TB) (bert.Config, *bert.Weights) {
	t.Helper()
	c := tinyBERT()
	w, err := bert.NewWeights(c)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	jitter := func(v []float32, base float32) {
		for i := range v {
			v[i] = base + float32(rng.NormFloat64()*0.1)
		}
	}
	jitter(w.EmbLNScale, 1)
	jitter(w.EmbLNBias, 0)
	for i := range w.Layers {
		l := &w.Layers[i]
		jitter(l.AttnLNScale, 1)
		jitter(l.AttnLNBias, 0)
		jitter(l.OutLNScale, 1)
		jitter(l.OutLNBias, 0)
	}
	return c, w
}

func TestBGESmallShape(t *testing.T) {
	c := bert.BGESmall()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// bge-small-en-v1.5 has 33,360,000 parameters with its pooler (a
	// 384x384 dense layer and bias, 147,840), which an embedding model
	// does not use.
	if got, want := c.Params(), 33360000-147840; got != want {
		t.Errorf("BGESmall has %d parameters, want %d", got, want)
	}
}

func TestBERTParamsMatchWeights(t *testing.T) {
	c := tinyBERT()
	w, err := bert.NewWeights(c)
	if err != nil {
		t.Fatal(err)
	}
	n := len(w.Word) + len(w.Position) + len(w.TokenType) + len(w.EmbLNScale) + len(w.EmbLNBias)
	for _, l := range w.Layers {
		for _, v := range [][]float32{l.Q, l.K, l.V, l.O, l.QBias, l.KBias, l.VBias, l.OBias, l.AttnLNScale, l.AttnLNBias,
			l.FF1, l.FF1Bias, l.FF2, l.FF2Bias, l.OutLNScale, l.OutLNBias} {
			n += len(v)
		}
	}
	if n != c.Params() {
		t.Errorf("weights hold %d values, Params says %d", n, c.Params())
	}
	if err := w.Check(c); err != nil {
		t.Error(err)
	}
	w.Layers[1].FF2 = w.Layers[1].FF2[1:]
	if err := w.Check(c); err == nil {
		t.Error("Check accepted a short matrix")
	}
	if _, err := bert.BuildFrom(c, w); err == nil {
		t.Error("BuildFrom accepted a short matrix")
	}
}

func TestBERTConfigValidate(t *testing.T) {
	for _, c := range []bert.Config{
		{Layers: 1, Hidden: 30, Heads: 4, Intermediate: 8, Vocab: 10, MaxPos: 8, TypeVocab: 2},
		{Layers: 0, Hidden: 32, Heads: 4, Intermediate: 8, Vocab: 10, MaxPos: 8, TypeVocab: 2},
		{Layers: 1, Hidden: 32, Heads: 4, Intermediate: 8, Vocab: 0, MaxPos: 8, TypeVocab: 2},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func TestBuildBERTDeterministic(t *testing.T) {
	c := tinyBERT()
	a, b := bert.Build(c).Marshal(), bert.Build(c).Marshal()
	if !bytes.Equal(a, b) {
		t.Fatal("the same config and seed gave different bytes")
	}
	c.Seed++
	if bytes.Equal(a, bert.Build(c).Marshal()) {
		t.Fatal("another seed gave the same bytes")
	}
	m, err := onnxpb.Decode(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	var ins []string
	for _, in := range m.Graph.Inputs {
		ins = append(ins, in.Name)
		if in.Type != onnxpb.Int64 || len(in.Dims) != 2 || in.Dims[0].Param != "batch" || in.Dims[1].Param != "seq" {
			t.Errorf("input %s: %v %+v, want int64 [batch, seq]", in.Name, in.Type, in.Dims)
		}
	}
	if got := len(ins); got != 3 || ins[0] != "input_ids" || ins[1] != "attention_mask" || ins[2] != "token_type_ids" {
		t.Errorf("inputs %q", ins)
	}
	if out := m.Graph.Outputs; len(out) != 1 || out[0].Name != "last_hidden_state" || len(out[0].Dims) != 3 || out[0].Dims[2].Value != int64(c.Hidden) {
		t.Errorf("outputs %+v", out)
	}
	var floats int64
	for _, in := range m.Graph.Initializers {
		if in.Type == onnxpb.Float && len(in.Dims) > 0 {
			floats += in.NumElements()
		}
	}
	if floats != int64(c.Params()) {
		t.Errorf("the graph's weights hold %d values, want %d", floats, c.Params())
	}
	ln := 0
	for _, n := range m.Graph.Nodes {
		if n.Op == "LayerNormalization" {
			ln++
		}
	}
	if ln != 1+2*c.Layers {
		t.Errorf("%d LayerNormalization nodes, want %d", ln, 1+2*c.Layers)
	}
}

// TestBERTForwardMask checks the reference itself: a masked-out token
// changes nothing in the other tokens' states, and every state is a
// LayerNorm output.
func TestBERTForwardMask(t *testing.T) {
	c, w := tinyWeights(t)
	ids := []int64{1, 17, 42, 99, 3, 8}
	types := []int64{0, 0, 1, 1, 0, 1}
	mask := []int64{1, 1, 1, 1, 1, 0}
	a := BERTForward(c, w, ids, types, mask)
	ids[5] = 64
	b := BERTForward(c, w, ids, types, mask)
	for s := range 5 {
		for i := range a[s] {
			if a[s][i] != b[s][i] {
				t.Fatalf("token %d dim %d: %v then %v after changing a masked-out token", s, i, a[s][i], b[s][i])
			}
		}
	}
	mask[5] = 1
	d := BERTForward(c, w, ids, types, mask)
	if maxAbsDiff(b[0], d[0]) < 1e-4 {
		t.Error("unmasking a token changed nothing")
	}
	// With scale 1 and bias 0 in the last LayerNorm, each row has mean 0
	// and variance 1.
	last := &w.Layers[len(w.Layers)-1]
	for i := range last.OutLNScale {
		last.OutLNScale[i], last.OutLNBias[i] = 1, 0
	}
	for s, row := range BERTForward(c, w, ids, types, mask) {
		var m, v float64
		for _, z := range row {
			m += float64(z)
		}
		m /= float64(len(row))
		for _, z := range row {
			v += (float64(z) - m) * (float64(z) - m)
		}
		v /= float64(len(row))
		if math.Abs(m) > 1e-5 || math.Abs(v-1) > 1e-4 {
			t.Errorf("row %d: mean %v variance %v", s, m, v)
		}
	}
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}
