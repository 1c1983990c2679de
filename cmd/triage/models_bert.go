package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/bert"
)

// The tokenizer a generated BERT encoder names: bert-base-uncased, as
// scripts/fetch-models.sh puts it in the models directory's tokenizer/
// (from the Go module github.com/clems4ever/all-minilm-l6-v2-go@v0.0.9).
const (
	bertTokenizerName   = "bert-base-uncased.json"
	bertTokenizerSHA256 = "da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0"
)

// genBERTFlags are the flags of "triage models gen-bert".
type genBERTFlags struct {
	out, pooling, tokenizer string
	config                  bert.Config
}

func parseGenBERTFlags(args []string, stderr io.Writer) (*genBERTFlags, error) {
	var f genBERTFlags
	fs := newFlagSet("triage models gen-bert", stderr)
	def := bert.BGESmall()
	c := &f.config
	fs.StringVar(&f.out, "out", "", "model directory to write: model.onnx and encoder.json (required)")
	fs.IntVar(&c.Layers, "layers", def.Layers, "transformer layers")
	fs.IntVar(&c.Hidden, "hidden", def.Hidden, "hidden size")
	fs.IntVar(&c.Heads, "heads", 0, "attention heads (default hidden/32)")
	fs.IntVar(&c.Intermediate, "intermediate", 0, "feed-forward size (default 4 x hidden)")
	fs.IntVar(&c.Vocab, "vocab", def.Vocab, "vocabulary size: the tokenizer's")
	fs.IntVar(&c.MaxPos, "max-pos", def.MaxPos, "longest input in tokens, [CLS] and [SEP] included")
	fs.Uint64Var(&c.Seed, "seed", def.Seed, "seed of the random weights")
	fs.StringVar(&f.pooling, "pooling", onnx.PoolCLS, "pooling the manifest records: cls or mean")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "tokenizer.json to name and pin (default "+bertTokenizerName+" with its pinned sha256; the file is not copied)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	if f.out == "" {
		fmt.Fprintln(stderr, "--out is required")
		fs.Usage()
		return nil, errUsage
	}
	c.TypeVocab = def.TypeVocab
	if c.Heads == 0 {
		c.Heads = max(1, c.Hidden/32)
	}
	if c.Intermediate == 0 {
		c.Intermediate = 4 * c.Hidden
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return nil, errUsage
	}
	if f.pooling != onnx.PoolCLS && f.pooling != onnx.PoolMean {
		fmt.Fprintf(stderr, "--pooling %q: want cls or mean\n", f.pooling)
		return nil, errUsage
	}
	return &f, nil
}

// runModelsGenBERT is "triage models gen-bert": write a BERT-shaped ONNX
// encoder with seeded random weights (bge-small-en-v1.5's shape unless
// told otherwise) and its encoder.json, for testing tier 2's runtime path
// and measuring its cost without the real weights. The embeddings it gives
// carry no meaning.
func runModelsGenBERT(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseGenBERTFlags(args, stderr)
	if err != nil {
		return err
	}
	c := f.config
	tokName, tokSum := bertTokenizerName, bertTokenizerSHA256
	if f.tokenizer != "" {
		sum, err := models.FileSHA256(f.tokenizer)
		if err != nil {
			return err
		}
		tokName, tokSum = filepath.Base(f.tokenizer), sum
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	path, sum, err := writeBERT(f.out, c)
	if err != nil {
		return err
	}
	man := &onnx.Manifest{
		Format: onnx.ManifestFormat,
		Name:   fmt.Sprintf("bert-random-l%d-h%d-s%d", c.Layers, c.Hidden, c.Seed),
		Source: fmt.Sprintf("triage models gen-bert: BERT encoder, %d layers, hidden %d, %d heads, feed-forward %d, vocabulary %d, "+
			"random weights (seed %d, %d parameters); shape only, no knowledge", c.Layers, c.Hidden, c.Heads, c.Intermediate, c.Vocab, c.Seed, c.Params()),
		Input: onnx.InputBERT, Pooling: f.pooling, Dims: c.Hidden, MaxTokens: c.MaxPos, Vocab: c.Vocab,
		Model: onnx.DefaultModelFile, ModelSHA256: sum,
		Tokenizer: tokName, TokenizerSHA256: tokSum,
	}
	if err := onnx.WriteManifest(f.out, man); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%d parameters, %.1f MB, sha256 %s) and %s in %s\n",
		path, c.Params(), float64(fi.Size())/1e6, sum, onnx.ManifestFile, time.Since(start).Round(time.Millisecond))
	return nil
}

// writeBERT writes the generated graph of c into dir and returns its path
// and sha256.
func writeBERT(dir string, c bert.Config) (path, sum string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, onnx.DefaultModelFile)
	if err := bert.Build(c).WriteFile(path); err != nil {
		return "", "", err
	}
	sum, err = models.FileSHA256(path)
	return path, sum, err
}
