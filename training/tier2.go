package training

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
)

// Encoder is the tier-2 encoder Tier2 embeds with, and what the artifact
// records of it.
type Encoder struct {
	Embedder
	// Name and Source are the model's, for the training's provenance.
	Name, Source string
	// Info is the tier's encoder entry in the artifact: Kind "onnx",
	// Model, ModelSHA256 (which also names the embedding cache),
	// Tokenizer, TokenizerSHA256, MaxTokens.
	Info classifier.Encoder
}

// Tier2Options say what Tier2 trains, on what, and where it writes.
type Tier2Options struct {
	// Data is the labelled JSONL to train on; Eval, if set, one to report
	// on. Out is the heads artifact directory: created when absent, its
	// tier 1 and floors kept when present (its classes must then be the
	// data's). Name names a new artifact (default: Out's base name).
	Data, Eval, Out, Name string
	// Open opens the encoder, once the data has been read and checked
	// (opening one takes seconds). The caller closes it after Tier2
	// returns.
	Open func() (*Encoder, error)
	// CacheDir keeps embeddings between runs, by model and data sha256
	// ("": no cache).
	CacheDir string
	// Workers is the number of texts embedded at once (default
	// GOMAXPROCS).
	Workers int
	// Head is the head on the embeddings: "mlp" (one hidden layer of
	// Hidden units, with Dropout) or "softmax" (regression). Epochs,
	// LearningRate and WeightDecay (L2 for softmax) are the head's; 0
	// takes its trainer's default (classifier.MLPOptions,
	// classifier.SoftmaxOptions).
	Head                               string
	Hidden, Epochs                     int
	LearningRate, WeightDecay, Dropout float64
	// Balance, Seed and Holdout are as for Tier1: the hold-out is the
	// same rows.
	Balance bool
	Seed    uint64
	Holdout float64
	// At, Tool and Log are as for Tier1; Progress, if set, follows the
	// embedding of each set (see Embed).
	At       time.Time
	Tool     string
	Log      io.Writer
	Progress func(done, total int)
}

// Tier2 fits a head on the tier-2 encoder's embeddings of o.Data and puts
// it, with the encoder's identity, in the heads artifact at o.Out.
func Tier2(ctx context.Context, o Tier2Options) (*Result, error) {
	if o.Head != "mlp" && o.Head != "softmax" {
		return nil, fmt.Errorf("training: head %q: want mlp or softmax", o.Head)
	}
	if o.Open == nil {
		return nil, errors.New("training: no encoder to open")
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.At.IsZero() {
		o.At = time.Now().UTC()
	}
	logf := logger(o.Log)
	set, h, err := readTier2Data(o)
	if err != nil {
		return nil, err
	}
	enc, err := o.Open()
	if err != nil {
		return nil, err
	}
	texts := make([]string, len(set.Rows))
	for i, r := range set.Rows {
		texts[i] = r.Text
	}
	start := time.Now()
	cache := o.cachePath(enc, set)
	x, err := cachedEmbeddings(ctx, cache, enc, texts, o.Workers, o.Progress)
	if err != nil {
		return nil, err
	}
	logf("train: embedded %d texts with %s in %s (cached in %s)", len(texts), enc.Name, time.Since(start).Round(time.Millisecond), cache)

	// The same deterministic hold-out as tier 1 fits the temperature.
	index := classifier.ClassIndex(h.Classes)
	fit, cal := holdOut(texts, o.Holdout)
	fit, cal = fit.of(set, index), cal.of(set, index)
	if len(cal.rows) == 0 {
		return nil, fmt.Errorf("holdout %v %w", o.Holdout, ErrEmptyHoldout)
	}
	head, params := fitHead(o, enc, rowsOf(x, fit.rows), fit.y, h.Classes, logf)
	calX := rowsOf(x, cal.rows)
	logits := make([][]float32, len(calX))
	for i, v := range calX {
		logits[i] = make([]float32, len(h.Classes))
		head.Logits(v, logits[i])
	}
	head.Temperature = classifier.FitTemperature(logits, cal.y)
	logf("train: head fitted on %d rows; temperature %.3f (fitted on %d held-out rows)", len(fit.rows), head.Temperature, len(cal.rows))

	tier := &classifier.Tier{Encoder: enc.Info, Head: *head,
		Training: classifier.Training{Data: filepath.Base(o.Data), DataSHA256: set.SHA256, Rows: len(fit.rows), Method: o.Head, Seed: o.Seed,
			At: o.At.Format(time.RFC3339), Tool: o.Tool, Params: params}}
	res := &Result{Heads: h}
	if o.Eval != "" {
		if tier.Eval, err = o.evaluate(ctx, res, enc, head); err != nil {
			return nil, err
		}
	}
	h.Tier2 = tier
	if err := h.Save(o.Out); err != nil {
		return nil, err
	}
	h.Dir = o.Out
	return res, nil
}

// readTier2Data reads the training data and the artifact the head joins (a
// new one when o.Out has none).
func readTier2Data(o Tier2Options) (*datasets.Set, *classifier.Heads, error) {
	set, err := datasets.ReadJSONL(o.Data)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range set.Rows {
		if r.Label == "" {
			return nil, nil, fmt.Errorf("%s: rows without a label", o.Data)
		}
	}
	classes := classifier.SortedClasses(set.Labels())
	if len(classes) < 2 {
		return nil, nil, fmt.Errorf("%s: %d classes, need at least 2", o.Data, len(classes))
	}
	if _, err := os.Stat(filepath.Join(o.Out, classifier.HeadsFile)); err == nil {
		h, err := classifier.LoadHeads(o.Out)
		if err != nil {
			return nil, nil, err
		}
		if fmt.Sprint(h.Classes) != fmt.Sprint(classes) {
			return nil, nil, fmt.Errorf("%s has classes %v, the data %v: tier 2 must judge the same classes as tier 1", o.Out, h.Classes, classes)
		}
		return set, h, nil
	}
	name := o.Name
	if name == "" {
		name = filepath.Base(filepath.Clean(o.Out))
	}
	return set, &classifier.Heads{Name: name, Version: o.At.Format("2006-01-02T150405Z"), Classes: classes, Floors: map[string]classifier.Floors{}}, nil
}

// cachePath is where the embeddings of set by enc are cached ("": not).
func (o *Tier2Options) cachePath(enc *Encoder, set *datasets.Set) string {
	sum := enc.Info.ModelSHA256
	if o.CacheDir == "" || len(sum) < 16 || len(set.SHA256) < 16 {
		return ""
	}
	return filepath.Join(o.CacheDir, sum[:16]+"-"+set.SHA256[:16]+"-"+textPrep+".f32")
}

// textPrep names the way tier 2 prepares a text before tokenizing it
// (classifier/onnx's prepare: whitespace collapsed, mostly-capital texts
// lower-cased): a cache of embeddings made another way is not read. Change
// it when that preparation changes.
const textPrep = "p1"

// fitHead trains o.Head on x and returns it with the parameters the
// artifact records.
func fitHead(o Tier2Options, enc *Encoder, x [][]float32, y []int, classes []string, logf func(string, ...any)) (*classifier.Linear, map[string]any) {
	params := map[string]any{"holdout": o.Holdout, "balance": o.Balance, "encoder": enc.Name, "encoder_source": enc.Source, "head": o.Head}
	if o.Head == "mlp" {
		mo := classifier.MLPOptions{Hidden: o.Hidden, Epochs: o.Epochs, LearningRate: float32(o.LearningRate), WeightDecay: float32(o.WeightDecay),
			Dropout: float32(o.Dropout), Balance: o.Balance, Seed: o.Seed, Workers: 2,
			Progress: func(e int, loss float64) { logf("train: head epoch %d loss %.4f", e, loss) }}
		head := classifier.TrainMLP(x, y, classes, mo)
		params["hidden"], params["epochs"], params["lr"], params["weight_decay"], params["dropout"] = head.Hidden, mo.Epochs, mo.LearningRate, mo.WeightDecay, mo.Dropout
		return head, params
	}
	so := classifier.SoftmaxOptions{Balance: o.Balance, Seed: o.Seed, Epochs: o.Epochs, LearningRate: float32(o.LearningRate), L2: float32(o.WeightDecay)}
	head := classifier.TrainSoftmax(x, y, classes, so)
	params["epochs"], params["lr"], params["l2"] = so.Epochs, so.LearningRate, so.L2
	return head, params
}

// evaluate reports on o.Eval with head on enc's embeddings.
func (o *Tier2Options) evaluate(ctx context.Context, res *Result, enc *Encoder, head *classifier.Linear) (map[string]classifier.Report, error) {
	ev, err := datasets.ReadJSONL(o.Eval)
	if err != nil {
		return nil, err
	}
	texts := make([]string, len(ev.Rows))
	for i, r := range ev.Rows {
		texts[i] = r.Text
	}
	x, err := cachedEmbeddings(ctx, o.cachePath(enc, ev), enc, texts, o.Workers, o.Progress)
	if err != nil {
		return nil, err
	}
	feats := make(map[string][]float32, len(texts))
	for i, t := range texts {
		feats[t] = x[i]
	}
	return res.report(o.Eval, evaluate(func(text string, out []float32) { head.Probs(feats[text], out) }, ev, head.Classes)), nil
}

// rowsOf picks rows of x.
func rowsOf(x [][]float32, rows []int) [][]float32 {
	out := make([][]float32, len(rows))
	for i, r := range rows {
		out[i] = x[r]
	}
	return out
}
