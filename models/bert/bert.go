package bert

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/triagegw/triage/models/onnxpb"
)

// Config is the shape of a BERT encoder (Hugging Face's BertModel
// without the pooler), and the seed of its generated weights.
type Config struct {
	Layers       int // transformer layers
	Hidden       int // hidden size
	Heads        int // attention heads; must divide Hidden
	Intermediate int // feed-forward inner size
	Vocab        int // word-embedding rows (tokenizer vocabulary)
	MaxPos       int // position-embedding rows: the longest input
	TypeVocab    int // token-type (segment) embedding rows
	// Seed makes NewWeights deterministic: the same config and seed
	// always give the same weights, and Build the same bytes.
	Seed uint64
}

// BGESmall is the shape of BAAI/bge-small-en-v1.5 (and of BERT-small
// encoders of its kind): 12 layers, hidden 384, 12 heads, feed-forward
// 1536, the bert-base-uncased vocabulary of 30,522 WordPiece tokens, 512
// positions, 2 token types: 33.2 million parameters.
func BGESmall() Config {
	return Config{Layers: 12, Hidden: 384, Heads: 12, Intermediate: 1536, Vocab: 30522, MaxPos: 512, TypeVocab: 2, Seed: 1}
}

// LNEpsilon is the LayerNorm epsilon of BERT (layer_norm_eps).
const LNEpsilon = 1e-12

// MaskBias is what a masked-out key adds to the attention scores,
// (1 - attention_mask) · MaskBias, as in the original BERT.
const MaskBias = -1e4

// Validate checks that the shape is usable.
func (c Config) Validate() error {
	switch {
	case c.Layers < 1 || c.Hidden < 1 || c.Heads < 1 || c.Intermediate < 1:
		return fmt.Errorf("bert: layers %d, hidden %d, heads %d, intermediate %d: all must be at least 1", c.Layers, c.Hidden, c.Heads, c.Intermediate)
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("bert: hidden %d is not a multiple of heads %d", c.Hidden, c.Heads)
	case c.Vocab < 1 || c.MaxPos < 1 || c.TypeVocab < 1:
		return fmt.Errorf("bert: vocab %d, max positions %d, type vocab %d: all must be at least 1", c.Vocab, c.MaxPos, c.TypeVocab)
	}
	return nil
}

// Params is the number of parameters of the encoder.
func (c Config) Params() int {
	h, f := c.Hidden, c.Intermediate
	emb := (c.Vocab+c.MaxPos+c.TypeVocab)*h + 2*h
	layer := 4*(h*h+h) + 2*h + (h*f + f) + (f*h + h) + 2*h
	return emb + c.Layers*layer
}

// Weights are the parameters of a BERT encoder. Projection matrices are
// stored [in, out], row-major, ready for MatMul (Hugging Face's nn.Linear
// stores [out, in]: an importer transposes them).
type Weights struct {
	Word       []float32 // [Vocab, Hidden]
	Position   []float32 // [MaxPos, Hidden]
	TokenType  []float32 // [TypeVocab, Hidden]
	EmbLNScale []float32 // [Hidden]
	EmbLNBias  []float32 // [Hidden]
	Layers     []Layer
}

// Layer is one transformer layer's parameters.
type Layer struct {
	Q, K, V, O              []float32 // [Hidden, Hidden]
	QBias, KBias, VBias     []float32 // [Hidden]
	OBias                   []float32 // [Hidden]
	AttnLNScale, AttnLNBias []float32 // [Hidden]
	FF1                     []float32 // [Hidden, Intermediate]
	FF1Bias                 []float32 // [Intermediate]
	FF2                     []float32 // [Intermediate, Hidden]
	FF2Bias                 []float32 // [Hidden]
	OutLNScale, OutLNBias   []float32 // [Hidden]
}

// NewWeights draws the weights of an encoder of shape c from c.Seed:
// every matrix, embedding and bias from a normal distribution of standard
// deviation 0.02 (BERT's initializer range), LayerNorm scales 1 and biases
// 0. The weights carry no knowledge: they are for testing the runtime path
// and measuring its cost with the real model's shape, never for routing.
func NewWeights(c Config) (*Weights, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0xbe27))
	normal := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.02)
		}
		return v
	}
	fill := func(n int, x float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = x
		}
		return v
	}
	h, f := c.Hidden, c.Intermediate
	w := &Weights{
		Word:       normal(c.Vocab * h),
		Position:   normal(c.MaxPos * h),
		TokenType:  normal(c.TypeVocab * h),
		EmbLNScale: fill(h, 1),
		EmbLNBias:  fill(h, 0),
		Layers:     make([]Layer, c.Layers),
	}
	for i := range w.Layers {
		w.Layers[i] = Layer{
			Q: normal(h * h), QBias: normal(h),
			K: normal(h * h), KBias: normal(h),
			V: normal(h * h), VBias: normal(h),
			O: normal(h * h), OBias: normal(h),
			AttnLNScale: fill(h, 1), AttnLNBias: fill(h, 0),
			FF1: normal(h * f), FF1Bias: normal(f),
			FF2: normal(f * h), FF2Bias: normal(h),
			OutLNScale: fill(h, 1), OutLNBias: fill(h, 0),
		}
	}
	return w, nil
}

// Check reports whether w has the sizes c asks for.
func (w *Weights) Check(c Config) error {
	h, f := c.Hidden, c.Intermediate
	type want struct {
		name string
		v    []float32
		n    int
	}
	ws := []want{{"word", w.Word, c.Vocab * h}, {"position", w.Position, c.MaxPos * h}, {"token_type", w.TokenType, c.TypeVocab * h},
		{"emb_ln.scale", w.EmbLNScale, h}, {"emb_ln.bias", w.EmbLNBias, h}}
	if len(w.Layers) != c.Layers {
		return fmt.Errorf("bert: %d layers of weights for a config of %d", len(w.Layers), c.Layers)
	}
	for i, l := range w.Layers {
		p := fmt.Sprintf("layer%d.", i)
		ws = append(ws, want{p + "q", l.Q, h * h}, want{p + "k", l.K, h * h}, want{p + "v", l.V, h * h}, want{p + "o", l.O, h * h},
			want{p + "q.bias", l.QBias, h}, want{p + "k.bias", l.KBias, h}, want{p + "v.bias", l.VBias, h}, want{p + "o.bias", l.OBias, h},
			want{p + "attn_ln.scale", l.AttnLNScale, h}, want{p + "attn_ln.bias", l.AttnLNBias, h},
			want{p + "ff1", l.FF1, h * f}, want{p + "ff1.bias", l.FF1Bias, f}, want{p + "ff2", l.FF2, f * h}, want{p + "ff2.bias", l.FF2Bias, h},
			want{p + "out_ln.scale", l.OutLNScale, h}, want{p + "out_ln.bias", l.OutLNBias, h})
	}
	for _, x := range ws {
		if len(x.v) != x.n {
			return fmt.Errorf("bert: %s has %d values, want %d", x.name, len(x.v), x.n)
		}
	}
	return nil
}

// Build is BuildFrom with the weights NewWeights draws from
// c.Seed: a BERT-shaped ONNX model with random weights, deterministic byte
// for byte. It panics if c is invalid (see Config.Validate).
func Build(c Config) *onnxpb.Model {
	w, err := NewWeights(c)
	if err != nil {
		panic(err)
	}
	m, err := BuildFrom(c, w)
	if err != nil {
		panic(err)
	}
	return m
}

// BuildFrom writes the ONNX graph (opset 17) of a post-LayerNorm BERT
// encoder of shape c with weights w, as Hugging Face's BertModel computes
// it (without the pooler):
//
//	inputs  input_ids, attention_mask, token_type_ids: int64 [batch, seq]
//	output  last_hidden_state: float32 [batch, seq, hidden]
//
// Embeddings are word + position (0..seq-1) + token type, then LayerNorm.
// Each layer is multi-head self-attention (scores scaled by 1/√head_dim,
// plus (1 - attention_mask) · -10000 on masked keys, softmax), an output
// projection, a residual and LayerNorm, then a feed-forward block with the
// exact (erf) GELU, a residual and LayerNorm. seq must not exceed c.MaxPos.
// ONNX Runtime fuses these patterns (attention, GELU, skip-LayerNorm) when
// it loads the model.
func BuildFrom(c Config, w *Weights) (*onnxpb.Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := w.Check(c); err != nil {
		return nil, err
	}
	h, f, nh := int64(c.Hidden), int64(c.Intermediate), int64(c.Heads)
	hd := h / nh
	b := &graphBuilder{}
	b.init("emb.word", []int64{int64(c.Vocab), h}, w.Word)
	b.init("emb.position", []int64{int64(c.MaxPos), h}, w.Position)
	b.init("emb.token_type", []int64{int64(c.TypeVocab), h}, w.TokenType)
	b.init("emb.ln.scale", []int64{h}, w.EmbLNScale)
	b.init("emb.ln.bias", []int64{h}, w.EmbLNBias)
	b.consts = append(b.consts,
		onnxpb.Int64Tensor("c.zero1", []int64{1}, []int64{0}),
		onnxpb.Int64Tensor("c.axes12", []int64{2}, []int64{1, 2}),
		onnxpb.Int64Tensor("c.heads_shape", []int64{4}, []int64{0, 0, nh, hd}),
		onnxpb.Int64Tensor("c.hidden_shape", []int64{3}, []int64{0, 0, h}),
		onnxpb.FloatTensor("c.one", nil, []float32{1}),
		onnxpb.FloatTensor("c.mask_bias", nil, []float32{MaskBias}),
		onnxpb.FloatTensor("c.scale", nil, []float32{float32(1 / math.Sqrt(float64(hd)))}),
		onnxpb.FloatTensor("c.half", nil, []float32{0.5}),
		onnxpb.FloatTensor("c.inv_sqrt2", nil, []float32{float32(1 / math.Sqrt2)}),
	)

	// Embeddings. Positions 0..seq-1 are the first seq rows of the
	// position table: Slice it up to seq = Shape(input_ids)[1].
	b.node("Gather", []string{"emb.word", "input_ids"}, "emb.w")
	b.node("Shape", []string{"input_ids"}, "emb.seq", onnxpb.AttrInt("start", 1), onnxpb.AttrInt("end", 2))
	b.node("Slice", []string{"emb.position", "c.zero1", "emb.seq", "c.zero1"}, "emb.p")
	b.node("Gather", []string{"emb.token_type", "token_type_ids"}, "emb.t")
	b.node("Add", []string{"emb.w", "emb.p"}, "emb.wp")
	b.node("Add", []string{"emb.wp", "emb.t"}, "emb.sum")
	x := b.layerNorm("emb.ln", "emb.sum", "emb.ln.scale", "emb.ln.bias")

	// The additive attention mask, [batch, 1, 1, seq].
	b.node("Cast", []string{"attention_mask"}, "mask.f", onnxpb.AttrInt("to", int64(onnxpb.Float)))
	b.node("Sub", []string{"c.one", "mask.f"}, "mask.inv")
	b.node("Mul", []string{"mask.inv", "c.mask_bias"}, "mask.add")
	b.node("Unsqueeze", []string{"mask.add", "c.axes12"}, "mask")

	for i, l := range w.Layers {
		p := fmt.Sprintf("l%d.", i)
		b.init(p+"q", []int64{h, h}, l.Q)
		b.init(p+"q.bias", []int64{h}, l.QBias)
		b.init(p+"k", []int64{h, h}, l.K)
		b.init(p+"k.bias", []int64{h}, l.KBias)
		b.init(p+"v", []int64{h, h}, l.V)
		b.init(p+"v.bias", []int64{h}, l.VBias)
		b.init(p+"o", []int64{h, h}, l.O)
		b.init(p+"o.bias", []int64{h}, l.OBias)
		b.init(p+"attn_ln.scale", []int64{h}, l.AttnLNScale)
		b.init(p+"attn_ln.bias", []int64{h}, l.AttnLNBias)
		b.init(p+"ff1", []int64{h, f}, l.FF1)
		b.init(p+"ff1.bias", []int64{f}, l.FF1Bias)
		b.init(p+"ff2", []int64{f, h}, l.FF2)
		b.init(p+"ff2.bias", []int64{h}, l.FF2Bias)
		b.init(p+"out_ln.scale", []int64{h}, l.OutLNScale)
		b.init(p+"out_ln.bias", []int64{h}, l.OutLNBias)

		// Self-attention: [b, s, h] → per head [b, nh, s, hd].
		q := b.linear(p+"q", x)
		k := b.linear(p+"k", x)
		v := b.linear(p+"v", x)
		b.node("Reshape", []string{q, "c.heads_shape"}, p+"q.r")
		b.node("Transpose", []string{p + "q.r"}, p+"q.t", onnxpb.AttrInts("perm", 0, 2, 1, 3))
		b.node("Reshape", []string{k, "c.heads_shape"}, p+"k.r")
		b.node("Transpose", []string{p + "k.r"}, p+"k.t", onnxpb.AttrInts("perm", 0, 2, 3, 1)) // [b, nh, hd, s]
		b.node("Reshape", []string{v, "c.heads_shape"}, p+"v.r")
		b.node("Transpose", []string{p + "v.r"}, p+"v.t", onnxpb.AttrInts("perm", 0, 2, 1, 3))
		b.node("MatMul", []string{p + "q.t", p + "k.t"}, p+"scores")
		b.node("Mul", []string{p + "scores", "c.scale"}, p+"scores.s")
		b.node("Add", []string{p + "scores.s", "mask"}, p+"scores.m")
		b.node("Softmax", []string{p + "scores.m"}, p+"probs", onnxpb.AttrInt("axis", -1))
		b.node("MatMul", []string{p + "probs", p + "v.t"}, p+"ctx")
		b.node("Transpose", []string{p + "ctx"}, p+"ctx.t", onnxpb.AttrInts("perm", 0, 2, 1, 3))
		b.node("Reshape", []string{p + "ctx.t", "c.hidden_shape"}, p+"ctx.r")
		o := b.linear(p+"o", p+"ctx.r")
		b.node("Add", []string{o, x}, p+"attn.res")
		x = b.layerNorm(p+"attn_ln", p+"attn.res", p+"attn_ln.scale", p+"attn_ln.bias")

		// Feed-forward with GELU(u) = 0.5 · u · (1 + erf(u / √2)).
		u := b.linear(p+"ff1", x)
		b.node("Mul", []string{u, "c.inv_sqrt2"}, p+"gelu.s")
		b.node("Erf", []string{p + "gelu.s"}, p+"gelu.erf")
		b.node("Add", []string{p + "gelu.erf", "c.one"}, p+"gelu.1p")
		b.node("Mul", []string{u, p + "gelu.1p"}, p+"gelu.m")
		b.node("Mul", []string{p + "gelu.m", "c.half"}, p+"gelu")
		d := b.linear(p+"ff2", p+"gelu")
		b.node("Add", []string{d, x}, p+"out.res")
		x = b.layerNorm(p+"out_ln", p+"out.res", p+"out_ln.scale", p+"out_ln.bias")
	}
	b.node("Identity", []string{x}, "last_hidden_state")

	ids := func(name string) onnxpb.ValueInfo {
		return onnxpb.ValueInfo{Name: name, Type: onnxpb.Int64, Dims: onnxpb.Dims("batch", "seq")}
	}
	m := &onnxpb.Model{
		Producer: "triage",
		Doc:      fmt.Sprintf("BERT encoder, %d layers, hidden %d, %d heads, seed %d", c.Layers, c.Hidden, c.Heads, c.Seed),
		Graph: onnxpb.Graph{
			Name:         "bert",
			Nodes:        b.nodes,
			Initializers: append(b.consts, b.inits...),
			Inputs:       []onnxpb.ValueInfo{ids("input_ids"), ids("attention_mask"), ids("token_type_ids")},
			Outputs: []onnxpb.ValueInfo{{Name: "last_hidden_state", Type: onnxpb.Float,
				Dims: onnxpb.Dims("batch", "seq", c.Hidden)}},
		},
		Metadata: map[string]string{
			"architecture": "bert",
			"layers":       fmt.Sprint(c.Layers),
			"hidden":       fmt.Sprint(c.Hidden),
			"heads":        fmt.Sprint(c.Heads),
			"intermediate": fmt.Sprint(c.Intermediate),
			"vocab":        fmt.Sprint(c.Vocab),
			"max_position": fmt.Sprint(c.MaxPos),
			"type_vocab":   fmt.Sprint(c.TypeVocab),
			"seed":         fmt.Sprint(c.Seed),
		},
	}
	return m, nil
}

// graphBuilder collects nodes and initializers, naming nodes after their
// first output.
type graphBuilder struct {
	nodes  []onnxpb.Node
	consts []onnxpb.Tensor
	inits  []onnxpb.Tensor
}

func (b *graphBuilder) init(name string, dims []int64, v []float32) {
	b.inits = append(b.inits, onnxpb.FloatTensor(name, dims, v))
}

func (b *graphBuilder) node(op string, in []string, out string, attrs ...onnxpb.Attr) {
	b.nodes = append(b.nodes, onnxpb.Node{Name: out, Op: op, Inputs: in, Outputs: []string{out}, Attrs: attrs})
}

// linear adds x·W + bias for the initializers name and name.bias and
// returns the result's name.
func (b *graphBuilder) linear(name, x string) string {
	b.node("MatMul", []string{x, name}, name+".mm")
	b.node("Add", []string{name + ".mm", name + ".bias"}, name+".out")
	return name + ".out"
}

// layerNorm adds a LayerNormalization over the last axis and returns the
// result's name.
func (b *graphBuilder) layerNorm(name, x, scale, bias string) string {
	b.node("LayerNormalization", []string{x, scale, bias}, name+".out",
		onnxpb.AttrInt("axis", -1), onnxpb.AttrFloat("epsilon", LNEpsilon))
	return name + ".out"
}
