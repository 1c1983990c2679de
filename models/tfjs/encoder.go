package tfjs

import (
	"fmt"
	"strings"

	"github.com/triagegw/triage/models/onnxpb"
)

// EncoderOptions are the conversion options for a sentence encoder: a graph
// with exactly one sink, whose output becomes the graph output output with
// dims [batch, dim]; int32 inputs are fed as int64.
//
// For Universal Sentence Encoder lite the converted model's interface is:
//
//   - "values", int64 [n]: the token ids of every sentence of the batch, one
//     after the other. An id is the index of the piece in vocab.json (0..7999,
//     not offset; 0 is the unknown piece), as @energetic-ai/embeddings'
//     tokenizer returns it.
//   - "indices", int64 [n, 2]: for each id, (sentence, position), in
//     row-major order: sentence 0 positions 0, 1, ..., len0-1, then sentence
//     1, and so on. The graph scatters the ids' embeddings into the row-major
//     coordinates of a dense [batch, maxlen] matrix and masks each sentence
//     by its token count, so positions must start at 0 and have no gaps, and
//     every sentence must have at least one token.
//   - "embedding", float32 [batch, 512]: the sentence embeddings, already
//     L2-normalized; batch is the largest sentence index + 1.
//
// The graph keeps only positions below 128 (see MaxTokens): longer
// sentences embed as their first 128 tokens. The TF graph's placeholders
// are int64 themselves (TF.js feeds int32 because it has no int64), so no
// cast is added.
func EncoderOptions(g *Graph, output string, dim int64) (Options, error) {
	c := &converter{g: g}
	sinks, err := c.sinks()
	if err != nil {
		return Options{}, err
	}
	if len(sinks) != 1 {
		names := make([]string, len(sinks))
		for i, s := range sinks {
			names[i] = s.Tensor
		}
		return Options{}, fmt.Errorf("tfjs: the graph has %d sinks (%s); a sentence encoder has one output", len(sinks), strings.Join(names, ", "))
	}
	return Options{
		Outputs:     []Output{{Tensor: sinks[0].Tensor, Name: output, Dims: []onnxpb.Dim{{Param: "batch"}, {Value: dim}}}},
		Int64Inputs: true,
	}, nil
}

// MaxTokens is the number of tokens per sentence the graph keeps, when it
// clips its input as Universal Sentence Encoder lite does (a scalar Const
// named ".../ClipToMaxLength/Less/y": positions at or past it are dropped).
func MaxTokens(g *Graph) (int64, bool) {
	for _, n := range g.Nodes {
		if n.Op != "Const" || !strings.HasSuffix(n.Name, "/ClipToMaxLength/Less/y") {
			continue
		}
		t, err := g.constValue(n)
		if err != nil || len(t.Shape) != 0 || len(t.I64) != 1 {
			return 0, false
		}
		return t.I64[0], true
	}
	return 0, false
}
