package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/progress"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/distill"
	"github.com/triagegw/triage/models/sif"
	"github.com/triagegw/triage/models/vocab"
)

const distillUsage = `usage: triage distill --teacher DIR --out FILE.tbl [--tokenizer FILE] [--dims 256] [--norm 5] [--weights-from TABLE.tbl] [--extra-words-from TABLE.tbl [--top-extra N]] [--quant i8|f16|f32] [--threads N] [--limit N]

distill builds a tier-1 static table from a tier-2 sentence encoder, the
model2vec way: every token of the tier-1 tokenizer's vocabulary (a "##x"
continuation as "x"; [PAD], [UNK], [CLS], [SEP], [MASK] and [unusedN] are
zero rows of weight 0) is embedded by the teacher on its own, the vectors
are reduced to --dims by PCA and scaled to a mean row norm of --norm, and
each row gets a weight: SIF over a Zipf estimate from the token's rank in
id order, or, with --weights-from, the SIF weights of an existing table for
the rows it weighs. With --extra-words-from, the table also gets rows for
the extra whole words of an existing table (say the GloVe one's 50,000
frequent words the vocabulary splits), each embedded as it is. The table
can then be the base of "triage train --table FILE.tbl". The teacher needs
a binary built with -tags ort.`

// distillFlags are the flags of "triage distill".
type distillFlags struct {
	teacher, out, models, tokenizer, weightsFrom, extraFrom, quant, name string
	dims, topExtra, threads, limit                                       int
	norm, sifA                                                           float64
}

func parseDistillFlags(args []string, stderr io.Writer) (*distillFlags, error) {
	var f distillFlags
	fs := newFlagSet("triage distill", stderr)
	fs.StringVar(&f.teacher, "teacher", "", "the teacher: a tier-2 model directory (encoder.json and its graph) (required)")
	fs.StringVar(&f.out, "out", "", "table file to write (required)")
	fs.StringVar(&f.models, "models", modelsDir(), "directory of model files built by setup ($TRIAGE_MODELS): the ONNX runtime, tokenizers")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "the student's tokenizer.json, whose vocabulary the rows follow (default MODELS/tokenizer/bert-base-uncased.json)")
	fs.IntVar(&f.dims, "dims", distill.DefaultDims, "dimensions kept by PCA (at most the teacher's)")
	fs.StringVar(&f.weightsFrom, "weights-from", "", "take the row weights from this table (same vocabulary) where it has them; Zipf-rank SIF weights for the other rows")
	fs.StringVar(&f.extraFrom, "extra-words-from", "", "give rows of their own to this table's extra words (whole words the vocabulary splits), embedded by the teacher")
	fs.IntVar(&f.topExtra, "top-extra", 0, "with --extra-words-from: only its first N extra words (0: all)")
	fs.Float64Var(&f.norm, "norm", 5, "scale the vectors to this mean row norm (the GloVe table's is 5.1, the scale tuned training is set for; 0: keep PCA's)")
	fs.Float64Var(&f.sifA, "sif-a", sif.A, "the a of the SIF weights a/(a+p) given by Zipf rank")
	fs.StringVar(&f.quant, "quant", "i8", "storage of the vectors: i8, f16 or f32")
	fs.IntVar(&f.threads, "threads", 0, "teacher runs in parallel (default: one per core)")
	fs.IntVar(&f.limit, "limit", 0, "embed only the first N tokens, leaving the rest zero rows of weight 0 (for tests and trials; 0: all)")
	fs.StringVar(&f.name, "name", "", "table name in its manifest (default distill-TEACHER-DIMSd)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, distillUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	for _, fl := range []struct{ name, v string }{{"teacher", f.teacher}, {"out", f.out}} {
		if fl.v == "" {
			fmt.Fprintf(stderr, "--%s is required\n", fl.name)
			fs.Usage()
			return nil, errUsage
		}
	}
	switch {
	case !models.Quant(f.quant).Valid():
		fmt.Fprintf(stderr, "--quant %q: want i8, f16 or f32\n", f.quant)
		return nil, errUsage
	case f.dims < 1:
		fmt.Fprintf(stderr, "--dims %d: want at least 1\n", f.dims)
		return nil, errUsage
	case f.norm < 0:
		fmt.Fprintf(stderr, "--norm %v: want 0 or more\n", f.norm)
		return nil, errUsage
	case f.sifA <= 0:
		fmt.Fprintf(stderr, "--sif-a %v: want a positive number\n", f.sifA)
		return nil, errUsage
	case f.limit < 0 || f.threads < 0 || f.topExtra < 0:
		fmt.Fprintln(stderr, "--limit, --threads and --top-extra must be >= 0")
		return nil, errUsage
	}
	if f.tokenizer == "" {
		f.tokenizer = filepath.Join(f.models, "tokenizer", "bert-base-uncased.json")
	}
	return &f, nil
}

// runDistill is "triage distill": a static table distilled from an ONNX
// encoder (distill.Table) for the tier-1 tokenizer's vocabulary.
func runDistill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseDistillFlags(args, stderr)
	if err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "distill: "+format+"\n", a...) }
	start := time.Now()
	tokens, tokSHA, err := vocab.ReadFile(f.tokenizer)
	if err != nil {
		return err
	}
	opts, weightNote, err := f.options(tokens, tokSHA, logf)
	if err != nil {
		return err
	}
	m, err := onnx.Open(f.teacher, f.models, onnx.Options{Threads: 1, MaxConcurrent: f.threads})
	if err != nil {
		return fmt.Errorf("teacher %s: %w", f.teacher, err)
	}
	defer m.Close()
	tm := m.Encoder().Manifest()
	logf("teacher %s (%d dims), student vocabulary %s (%d tokens, %d extra words)", tm.Name, m.Dims(), f.tokenizer, len(tokens), len(opts.ExtraWords))
	report, finish := progress.Func(stderr, progress.Options{Unit: "surface forms"}, "distill: embedding the vocabulary with "+tm.Name)
	opts.Progress = report
	embed := func(ctx context.Context, text string) ([]float32, error) { return m.Features(ctx, text, nil) }
	t, err := distill.Table(ctx, tokens, embed, opts)
	finish()
	if err != nil {
		return err
	}
	name := f.name
	if name == "" {
		name = fmt.Sprintf("distill-%s-%dd", tm.Name, t.Dims())
	}
	sum := tm.ModelSHA256
	if sum == "" {
		if sum, err = models.FileSHA256(filepath.Join(f.teacher, "model.onnx")); err != nil {
			sum = "unknown"
		}
	}
	t.Manifest.Name, t.Manifest.Version = name, "1"
	t.Manifest.Source = fmt.Sprintf("distilled from the encoder %s (%s; graph sha256 %s) in %s, student tokenizer %s",
		tm.Name, tm.Source, sum, filepath.Base(filepath.Clean(f.teacher)), filepath.Base(f.tokenizer))
	t.Manifest.Created = time.Now().UTC().Format(time.RFC3339)
	if weightNote != "" {
		t.Manifest.Weighting = weightNote
	}
	if f.extraFrom != "" {
		t.Manifest.Notes += fmt.Sprintf("; the extra words are the first %d of %s", len(opts.ExtraWords), filepath.Base(f.extraFrom))
	}
	w := importFlags{tokenizer: f.tokenizer, quant: f.quant, out: f.out}
	return w.write(t, tokSHA, start, stdout)
}

// options are the distillation's options (but Progress) for the student
// vocabulary tokens, with the extra words and row weights the flags take
// from other tables, and what the manifest says of those weights.
func (f *distillFlags) options(tokens []string, tokSHA string, logf func(string, ...any)) (distill.Options, string, error) {
	opts := distill.Options{Dims: f.dims, Norm: f.norm, SIFA: f.sifA, Limit: f.limit, Workers: f.threads}
	if f.extraFrom != "" {
		src, err := models.ReadTable(f.extraFrom)
		if err != nil {
			return opts, "", err
		}
		opts.ExtraWords = src.ExtraWords()
		if f.topExtra > 0 && f.topExtra < len(opts.ExtraWords) {
			opts.ExtraWords = opts.ExtraWords[:f.topExtra]
		}
		logf("%d extra words from %s", len(opts.ExtraWords), f.extraFrom)
	}
	if f.weightsFrom == "" {
		return opts, "", nil
	}
	var note string
	var err error
	opts.Weights, note, err = distillWeightsFrom(f.weightsFrom, tokens, opts.ExtraWords, tokSHA, f.sifA, logf)
	return opts, note, err
}

// distillWeightsFrom returns the row weights of the table at path for the
// vocabulary rows and extra words it weighs (weight > 0) and the Zipf-rank
// SIF weights for the others (distill.WeightsFrom), with a description for
// the manifest.
func distillWeightsFrom(path string, tokens, extra []string, tokSHA string, a float64, logf func(string, ...any)) ([]float32, string, error) {
	src, err := models.ReadTable(path)
	if err != nil {
		return nil, "", err
	}
	if src.VocabSize() != len(tokens) {
		return nil, "", fmt.Errorf("--weights-from %s: its rows follow a vocabulary of %d tokens, the tokenizer has %d", path, src.VocabSize(), len(tokens))
	}
	if s := src.Manifest.TokenizerSHA256; s != "" && s != tokSHA {
		logf("warning: %s was built for a tokenizer with sha256 %s, not this one (%s); its rows are taken as the same ids", path, s, tokSHA)
	}
	w, from, err := distill.WeightsFrom(src, tokens, extra, a)
	if err != nil {
		return nil, "", err
	}
	note := fmt.Sprintf("the row weights of %s (%s) for the %d rows it weighs; for the other rows with a vector, sif a/(a+p(r)), a=%g, zipf p(r)=1/(r*ln(1.78*N)) by rank r in row order (vocabulary ids, then extra words) among the N rows with a surface form; special rows 0",
		filepath.Base(path), src.Manifest.Name, from, a)
	logf("weights: %d rows from %s, %d by Zipf rank", from, path, countPositive(w)-from)
	return w, note, nil
}

func countPositive(w []float32) int {
	n := 0
	for _, x := range w {
		if x > 0 {
			n++
		}
	}
	return n
}
