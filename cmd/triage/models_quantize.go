package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/onnxpb"
)

// quantizedSuffix marks a quantized encoder's name in its encoder.json.
const quantizedSuffix = "-int8"

// runModelsQuantize is "triage models quantize": write an int8 copy of a
// tier-2 model directory (models.QuantizeDynamic): the quantized graph, its
// encoder.json (name suffixed -int8, model_sha256 updated) and the
// tokenizer file, when the input directory has it. Whether the copy is
// accurate enough is for "triage eval" to say, with heads pointing at it.
func runModelsQuantize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("triage models quantize", flag.ContinueOnError)
	in := fset.String("in", "", "model directory to read: encoder.json and its graph (required)")
	out := fset.String("out", "", "model directory to write, not the input's (required)")
	minElems := fset.Int("min-elements", models.DefaultQuantMinElements, "weights with fewer elements stay float32")
	perTensor := fset.Bool("per-tensor", false, "one scale per weight matrix instead of one per output column")
	weights := fset.String("weights", "int8", "weight storage: int8 (symmetric) or uint8 (asymmetric; for x86 CPUs without VNNI)")
	noConv := fset.Bool("no-conv", false, "leave 1x1 convolutions in float32")
	noEmb := fset.Bool("no-embeddings", false, "leave embedding tables in float32")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "usage: triage models quantize --in DIR --out DIR [--per-tensor] [--weights int8|uint8] [--min-elements N] [--no-conv] [--no-embeddings]")
		fset.PrintDefaults()
	}
	if err := parseFlags(fset, args, stderr); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"in", *in}, {"out", *out}} {
		if f.v == "" {
			fmt.Fprintf(stderr, "--%s is required\n", f.name)
			fset.Usage()
			return errUsage
		}
	}
	opts := models.QuantOptions{MinElements: *minElems, PerTensor: *perTensor, NoConv: *noConv, NoEmbeddings: *noEmb}
	switch *weights {
	case "int8":
		opts.WeightType = onnxpb.Int8
	case "uint8":
		opts.WeightType = onnxpb.Uint8
	default:
		fmt.Fprintf(stderr, "--weights %q: want int8 or uint8\n", *weights)
		return errUsage
	}
	if *minElems < 1 {
		fmt.Fprintln(stderr, "--min-elements must be at least 1")
		return errUsage
	}
	if same, err := quantSameDir(*in, *out); err != nil {
		return err
	} else if same {
		fmt.Fprintln(stderr, "--out must not be the --in directory")
		return errUsage
	}
	start := time.Now()
	man, err := onnx.ReadManifest(*in)
	if err != nil {
		return err
	}
	modelFile := man.Model
	if modelFile == "" {
		modelFile = onnx.DefaultModelFile
	}
	src := filepath.Join(*in, modelFile)
	if man.ModelSHA256 != "" {
		sum, err := models.FileSHA256(src)
		if err != nil {
			return err
		}
		if sum != man.ModelSHA256 {
			return fmt.Errorf("%s: sha256 %s, but %s pins %s", src, sum, onnx.ManifestFile, man.ModelSHA256)
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	m, err := onnxpb.Decode(b)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	b = nil
	if err := ctx.Err(); err != nil {
		return err
	}
	qm, rep, err := models.QuantizeDynamic(m, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	if len(rep.Weights) == 0 {
		return fmt.Errorf("%s: nothing to quantize (no MatMul, Gemm, 1x1 Conv or embedding table with a float32 constant weight of %d elements or more)", src, opts.MinElements)
	}
	if qm.Producer == "" {
		qm.Producer = "triage"
	}
	qm.Doc = fmt.Sprintf("%s, int8 dynamic quantisation (triage models quantize)", qm.Doc)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dst := filepath.Join(*out, modelFile)
	if err := qm.WriteFile(dst); err != nil {
		return err
	}
	sum, err := models.FileSHA256(dst)
	if err != nil {
		return err
	}
	// The tokenizer travels with the model when the input directory holds
	// it; otherwise the manifest names it and Open finds it in the models
	// directory, as for the input.
	tokNote := "not in " + *in + ": looked up in the models directory, as for the input"
	if filepath.Base(man.Tokenizer) == man.Tokenizer {
		switch err := copyOut(filepath.Join(*in, man.Tokenizer), filepath.Join(*out, man.Tokenizer)); {
		case err == nil:
			tokNote = "copied"
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
	}
	q := *man
	q.Name = man.Name + quantizedSuffix
	q.Source = fmt.Sprintf("%s; int8 dynamic quantisation of %s (sha256 %s) by triage models quantize", man.Source, man.Name, man.ModelSHA256)
	q.Model = modelFile
	q.ModelSHA256 = sum
	if err := onnx.WriteManifest(*out, &q); err != nil {
		return err
	}
	before, after := quantFileSize(src), quantFileSize(dst)
	fmt.Fprint(stdout, rep.Summary())
	fmt.Fprintf(stdout, "tokenizer %s: %s\n", man.Tokenizer, tokNote)
	fmt.Fprintf(stdout, "wrote %s (%.2f MB, was %.2f MB; sha256 %s) and %s (%q) in %s\n",
		dst, float64(after)/1e6, float64(before)/1e6, sum, onnx.ManifestFile, q.Name, time.Since(start).Round(time.Millisecond))
	return nil
}

// quantSameDir reports whether a and b name the same directory (b need not
// exist).
func quantSameDir(a, b string) (bool, error) {
	aa, err := filepath.Abs(a)
	if err != nil {
		return false, err
	}
	bb, err := filepath.Abs(b)
	if err != nil {
		return false, err
	}
	if aa == bb {
		return true, nil
	}
	sa, err1 := os.Stat(aa)
	sb, err2 := os.Stat(bb)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb), nil
}

// quantFileSize is path's size, or 0.
func quantFileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
