package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/models"
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

// runDistill is "triage distill": a static table distilled from an ONNX
// encoder (models.Distill) for the tier-1 tokenizer's vocabulary.
func runDistill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage distill", flag.ContinueOnError)
	teacher := fs.String("teacher", "", "the teacher: a tier-2 model directory (encoder.json and its graph) (required)")
	out := fs.String("out", "", "table file to write (required)")
	mdir := fs.String("models", modelsDir(), "directory of model files built by setup ($TRIAGE_MODELS): the ONNX runtime, tokenizers")
	tokPath := fs.String("tokenizer", "", "the student's tokenizer.json, whose vocabulary the rows follow (default MODELS/tokenizer/bert-base-uncased.json)")
	dims := fs.Int("dims", models.DefaultDistillDims, "dimensions kept by PCA (at most the teacher's)")
	weightsFrom := fs.String("weights-from", "", "take the row weights from this table (same vocabulary) where it has them; Zipf-rank SIF weights for the other rows")
	extraFrom := fs.String("extra-words-from", "", "give rows of their own to this table's extra words (whole words the vocabulary splits), embedded by the teacher")
	topExtra := fs.Int("top-extra", 0, "with --extra-words-from: only its first N extra words (0: all)")
	normFlag := fs.Float64("norm", 5, "scale the vectors to this mean row norm (the GloVe table's is 5.1, the scale tuned training is set for; 0: keep PCA's)")
	sifA := fs.Float64("sif-a", models.SIFA, "the a of the SIF weights a/(a+p) given by Zipf rank")
	quant := fs.String("quant", "i8", "storage of the vectors: i8, f16 or f32")
	threads := fs.Int("threads", 0, "teacher runs in parallel (default: one per core)")
	limit := fs.Int("limit", 0, "embed only the first N tokens, leaving the rest zero rows of weight 0 (for tests and trials; 0: all)")
	name := fs.String("name", "", "table name in its manifest (default distill-TEACHER-DIMSd)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, distillUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"teacher", *teacher}, {"out", *out}} {
		if f.v == "" {
			fmt.Fprintf(stderr, "--%s is required\n", f.name)
			fs.Usage()
			return errUsage
		}
	}
	switch {
	case !models.Quant(*quant).Valid():
		fmt.Fprintf(stderr, "--quant %q: want i8, f16 or f32\n", *quant)
		return errUsage
	case *dims < 1:
		fmt.Fprintf(stderr, "--dims %d: want at least 1\n", *dims)
		return errUsage
	case *normFlag < 0:
		fmt.Fprintf(stderr, "--norm %v: want 0 or more\n", *normFlag)
		return errUsage
	case *sifA <= 0:
		fmt.Fprintf(stderr, "--sif-a %v: want a positive number\n", *sifA)
		return errUsage
	case *limit < 0 || *threads < 0 || *topExtra < 0:
		fmt.Fprintln(stderr, "--limit, --threads and --top-extra must be >= 0")
		return errUsage
	}
	if *tokPath == "" {
		*tokPath = filepath.Join(*mdir, "tokenizer", "bert-base-uncased.json")
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "distill: "+format+"\n", a...) }
	start := time.Now()
	vocab, tokSHA, err := models.ReadTokenizerVocab(*tokPath)
	if err != nil {
		return err
	}
	opts := models.DistillOptions{Dims: *dims, Norm: *normFlag, SIFA: *sifA, Limit: *limit, Workers: *threads}
	if *extraFrom != "" {
		src, err := models.ReadTable(*extraFrom)
		if err != nil {
			return err
		}
		opts.ExtraWords = src.ExtraWords()
		if *topExtra > 0 && *topExtra < len(opts.ExtraWords) {
			opts.ExtraWords = opts.ExtraWords[:*topExtra]
		}
		logf("%d extra words from %s", len(opts.ExtraWords), *extraFrom)
	}
	var weightNote string
	if *weightsFrom != "" {
		if opts.Weights, weightNote, err = distillWeightsFrom(*weightsFrom, vocab, opts.ExtraWords, tokSHA, *sifA, logf); err != nil {
			return err
		}
	}

	m, err := onnx.Open(*teacher, *mdir, onnx.Options{Threads: 1, MaxConcurrent: *threads})
	if err != nil {
		return fmt.Errorf("teacher %s: %w", *teacher, err)
	}
	defer m.Close()
	tm := m.Encoder().Manifest()
	logf("teacher %s (%d dims), student vocabulary %s (%d tokens, %d extra words)", tm.Name, m.Dims(), *tokPath, len(vocab), len(opts.ExtraWords))
	last := time.Now()
	opts.Progress = func(done, total int) {
		if done == total || time.Since(last) >= 5*time.Second {
			last = time.Now()
			logf("%d/%d surface forms embedded (%s)", done, total, time.Since(start).Round(time.Second))
		}
	}
	embed := func(ctx context.Context, text string) ([]float32, error) { return m.Features(ctx, text, nil) }
	t, err := models.Distill(ctx, vocab, embed, opts)
	if err != nil {
		return err
	}

	if *name == "" {
		*name = fmt.Sprintf("distill-%s-%dd", tm.Name, t.Dims())
	}
	sum := tm.ModelSHA256
	if sum == "" {
		if sum, err = models.FileSHA256(filepath.Join(*teacher, "model.onnx")); err != nil {
			sum = "unknown"
		}
	}
	t.Manifest.Name, t.Manifest.Version = *name, "1"
	t.Manifest.Source = fmt.Sprintf("distilled from the encoder %s (%s; graph sha256 %s) in %s, student tokenizer %s",
		tm.Name, tm.Source, sum, filepath.Base(filepath.Clean(*teacher)), filepath.Base(*tokPath))
	t.Manifest.Created = time.Now().UTC().Format(time.RFC3339)
	if weightNote != "" {
		t.Manifest.Weighting = weightNote
	}
	if *extraFrom != "" {
		t.Manifest.Notes += fmt.Sprintf("; the extra words are the first %d of %s", len(opts.ExtraWords), filepath.Base(*extraFrom))
	}
	f := importFlags{tokenizer: *tokPath, quant: *quant, out: *out}
	return f.write(t, tokSHA, start, stdout)
}

// distillWeightsFrom returns the row weights of the table at path for the
// vocabulary rows and extra words it weighs (weight > 0) and the Zipf-rank
// SIF weights for the others, with a description for the manifest.
func distillWeightsFrom(path string, vocab, extra []string, tokSHA string, a float64, logf func(string, ...any)) ([]float32, string, error) {
	src, err := models.ReadTable(path)
	if err != nil {
		return nil, "", err
	}
	if src.VocabSize() != len(vocab) {
		return nil, "", fmt.Errorf("--weights-from %s: its rows follow a vocabulary of %d tokens, the tokenizer has %d", path, src.VocabSize(), len(vocab))
	}
	if s := src.Manifest.TokenizerSHA256; s != "" && s != tokSHA {
		logf("warning: %s was built for a tokenizer with sha256 %s, not this one (%s); its rows are taken as the same ids", path, s, tokSHA)
	}
	w := models.DistillRankWeights(vocab, extra, a)
	from := 0
	take := func(i int, row int32) {
		if tw := src.Weight(row); tw > 0 && w[i] > 0 {
			w[i] = tw
			from++
		}
	}
	for i := range vocab {
		take(i, int32(i))
	}
	for i, x := range extra {
		if row, ok := src.Word([]byte(x)); ok {
			take(len(vocab)+i, row)
		}
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
