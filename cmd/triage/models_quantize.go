package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/onnxpb"
	"github.com/triagegw/triage/models/quantize"
)

// quantizedSuffix marks a quantized encoder's name in its encoder.json.
const quantizedSuffix = "-int8"

// quantizeFlags are the flags of "triage models quantize".
type quantizeFlags struct {
	in, out string
	opts    quantize.Options
}

func parseQuantizeFlags(args []string, stderr io.Writer) (*quantizeFlags, error) {
	var f quantizeFlags
	fset := newFlagSet("triage models quantize", stderr)
	fset.StringVar(&f.in, "in", "", "model directory to read: encoder.json and its graph (required)")
	fset.StringVar(&f.out, "out", "", "model directory to write, not the input's (required)")
	fset.IntVar(&f.opts.MinElements, "min-elements", quantize.DefaultMinElements, "weights with fewer elements stay float32")
	fset.BoolVar(&f.opts.PerTensor, "per-tensor", false, "one scale per weight matrix instead of one per output column")
	weights := fset.String("weights", "int8", "weight storage: int8 (symmetric) or uint8 (asymmetric; for x86 CPUs without VNNI)")
	fset.BoolVar(&f.opts.NoConv, "no-conv", false, "leave 1x1 convolutions in float32")
	fset.BoolVar(&f.opts.NoEmbeddings, "no-embeddings", false, "leave embedding tables in float32")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "usage: triage models quantize --in DIR --out DIR [--per-tensor] [--weights int8|uint8] [--min-elements N] [--no-conv] [--no-embeddings]")
		fset.PrintDefaults()
	}
	if err := parseFlags(fset, args, stderr); err != nil {
		return nil, err
	}
	for _, fl := range []struct{ name, v string }{{"in", f.in}, {"out", f.out}} {
		if fl.v == "" {
			fmt.Fprintf(stderr, "--%s is required\n", fl.name)
			fset.Usage()
			return nil, errUsage
		}
	}
	switch *weights {
	case "int8":
		f.opts.WeightType = onnxpb.Int8
	case "uint8":
		f.opts.WeightType = onnxpb.Uint8
	default:
		fmt.Fprintf(stderr, "--weights %q: want int8 or uint8\n", *weights)
		return nil, errUsage
	}
	if f.opts.MinElements < 1 {
		fmt.Fprintln(stderr, "--min-elements must be at least 1")
		return nil, errUsage
	}
	if same, err := quantSameDir(f.in, f.out); err != nil {
		return nil, err
	} else if same {
		fmt.Fprintln(stderr, "--out must not be the --in directory")
		return nil, errUsage
	}
	return &f, nil
}

// runModelsQuantize is "triage models quantize": write an int8 copy of a
// tier-2 model directory (quantize.Dynamic): the quantized graph, its
// encoder.json (name suffixed -int8, model_sha256 updated) and the
// tokenizer file, when the input directory has it. Whether the copy is
// accurate enough is for "triage eval" to say, with heads pointing at it.
func runModelsQuantize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseQuantizeFlags(args, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	q, err := quantizeModelDir(ctx, f.in, f.out, f.opts)
	if err != nil {
		return err
	}
	before, after := quantFileSize(q.src), quantFileSize(q.dst)
	fmt.Fprint(stdout, q.report.Summary())
	fmt.Fprintf(stdout, "tokenizer %s: %s\n", q.manifest.Tokenizer, q.tokNote)
	fmt.Fprintf(stdout, "wrote %s (%.2f MB, was %.2f MB; sha256 %s) and %s (%q) in %s\n",
		q.dst, float64(after)/1e6, float64(before)/1e6, q.manifest.ModelSHA256, onnx.ManifestFile, q.manifest.Name, time.Since(start).Round(time.Millisecond))
	return nil
}

// quantizedDir is what quantizeModelDir wrote.
type quantizedDir struct {
	src, dst string         // the graphs read and written
	manifest *onnx.Manifest // the copy's
	report   quantize.Report
	tokNote  string // what became of the tokenizer
}

// quantizeModelDir writes into out the int8 copy of the tier-2 model
// directory in: its graph quantized, its manifest and, when in holds it,
// its tokenizer.
func quantizeModelDir(ctx context.Context, in, out string, opts quantize.Options) (*quantizedDir, error) {
	man, modelFile, m, err := readModelDir(in)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	src := filepath.Join(in, modelFile)
	qm, rep, err := quantize.Dynamic(m, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	if len(rep.Weights) == 0 {
		return nil, fmt.Errorf("%s: nothing to quantize (no MatMul, Gemm, 1x1 Conv or embedding table with a float32 constant weight of %d elements or more)", src, opts.MinElements)
	}
	if qm.Producer == "" {
		qm.Producer = "triage"
	}
	qm.Doc = fmt.Sprintf("%s, int8 dynamic quantisation (triage models quantize)", qm.Doc)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q := &quantizedDir{src: src, dst: filepath.Join(out, modelFile), report: rep}
	if err := qm.WriteFile(q.dst); err != nil {
		return nil, err
	}
	sum, err := models.FileSHA256(q.dst)
	if err != nil {
		return nil, err
	}
	// The tokenizer travels with the model when the input directory holds
	// it; otherwise the manifest names it and Open finds it in the models
	// directory, as for the input.
	q.tokNote = "not in " + in + ": looked up in the models directory, as for the input"
	if filepath.Base(man.Tokenizer) == man.Tokenizer {
		switch err := copyOut(filepath.Join(in, man.Tokenizer), filepath.Join(out, man.Tokenizer)); {
		case err == nil:
			q.tokNote = "copied"
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
	}
	c := *man
	c.Name = man.Name + quantizedSuffix
	c.Source = fmt.Sprintf("%s; int8 dynamic quantisation of %s (sha256 %s) by triage models quantize", man.Source, man.Name, man.ModelSHA256)
	c.Model = modelFile
	c.ModelSHA256 = sum
	q.manifest = &c
	return q, onnx.WriteManifest(out, &c)
}

// readModelDir reads a tier-2 model directory's manifest and graph (and
// the graph's file name in dir), checking the graph against the sha256 the
// manifest pins.
func readModelDir(dir string) (man *onnx.Manifest, modelFile string, m *onnxpb.Model, err error) {
	man, err = onnx.ReadManifest(dir)
	if err != nil {
		return nil, "", nil, err
	}
	modelFile = man.Model
	if modelFile == "" {
		modelFile = onnx.DefaultModelFile
	}
	src := filepath.Join(dir, modelFile)
	if man.ModelSHA256 != "" {
		sum, err := models.FileSHA256(src)
		if err != nil {
			return nil, "", nil, err
		}
		if sum != man.ModelSHA256 {
			return nil, "", nil, fmt.Errorf("%s: sha256 %s, but %s pins %s", src, sum, onnx.ManifestFile, man.ModelSHA256)
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, "", nil, err
	}
	if m, err = onnxpb.Decode(b); err != nil {
		return nil, "", nil, fmt.Errorf("%s: %w", src, err)
	}
	return man, modelFile, m, nil
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
