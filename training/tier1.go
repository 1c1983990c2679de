package training

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/models"
)

// Tier1Options say what Tier1 trains, on what, and where it writes.
type Tier1Options struct {
	// Data is the labelled JSONL ({"text", "label"}) to train on; every row
	// needs a label, and there must be two classes at least.
	Data string
	// Out is the heads artifact directory to write: heads.json and, for
	// the tuned method, the trained table. With Distill, heads.json also
	// keeps the teacher's tier 2.
	Out string
	// Name is the artifact's name (default: Out's base name).
	Name string
	// Eval, if set, is a labelled JSONL to report on; the reports go into
	// the artifact and the Result.
	Eval string
	// Table is the base table file; Tokenizer the tokenizer.json whose
	// vocabulary its rows follow.
	Table, Tokenizer string
	// Method is "tuned" (token vectors and head trained together,
	// fastText-style), "softmax" (softmax regression on the frozen table)
	// or "centroid" (nearest centroid).
	Method string

	// Tuned only: passes over the data, the initial learning rate (decayed
	// linearly to 0), hashed token-bigram buckets (0: unigrams only), token
	// dropout per step, whether to drop the base table's extra words no
	// training text uses, whether to weigh the mean by SIF row weights,
	// how many models to train (seeds Seed, Seed+1, ...) and average,
	// whether to store each row's class contributions instead of its
	// vectors (implied by Ensemble > 1), when a word split into pieces gets
	// a row of its own (0: never), and the trained table's storage.
	Epochs       int
	LearningRate float64
	Bigrams      int
	Dropout      float64
	Prune, SIF   bool
	Ensemble     int
	Fold         bool
	MinCount     int
	Quant        models.Quant

	// Distill, if set, trains the tuned method on a teacher's
	// probabilities (see Distillation); nil trains on the labels.
	Distill *Distillation

	// Balance weighs examples by inverse class frequency. Seed makes
	// training deterministic. MaxTokens caps the tokens a text
	// contributes. Holdout is the share of Data held out (by a hash of the
	// text) to fit the temperature.
	Balance   bool
	Seed      uint64
	MaxTokens int
	Holdout   float64

	// Confidence, for the tuned method, fits a per-text temperature on
	// each source of Data held out in turn (see fitConfidence): one more
	// model is trained per source.
	Confidence bool
	// FirstLines also trains on the first line of each multi-line text
	// to fit (a post's title, a question's stem) as a text of its own with
	// the same label, when it has three words or more: short questions in
	// every class, not only in the sources that ask short questions.
	FirstLines bool
	// Structure, for the tuned method, gives the table a row for each of
	// static.Markers and adds a text's structural features to its rows.
	Structure bool
	// CentroidRows are the rows of Data tier 1's class centroids are made
	// of (classifier.Centroids): classifier.CentroidRowsAll, or
	// CentroidRowsUser (default DefaultCentroidRows).
	CentroidRows string

	// At is the time stamped into the artifact (default now); Tool names
	// what made it. A fixed At makes the artifact's bytes a function of
	// its inputs.
	At   time.Time
	Tool string
	// Log receives progress, one line at a time (nil: none).
	Log io.Writer
}

// ErrEmptyHoldout is the error of a training whose hold-out share leaves
// no row to fit the temperature on.
var ErrEmptyHoldout = errors.New("left no rows to calibrate on")

// Result is what a training run wrote.
type Result struct {
	// Heads is the artifact as saved in the output directory.
	Heads *classifier.Heads
	// EvalName is the evaluation set's file name, the reports' name in
	// the artifact; Reports are the trained tier's figures on it, overall
	// (key "") and per realism (key "/realism=X"). Both are empty without
	// an evaluation set.
	EvalName string
	Reports  map[string]classifier.Report
}

func (o *Tier1Options) check() error {
	switch {
	case o.Data == "" || o.Out == "":
		return errors.New("training: data and output directory are required")
	case o.Method != "tuned" && o.Method != "softmax" && o.Method != "centroid":
		return fmt.Errorf("training: method %q: want tuned, softmax or centroid", o.Method)
	case o.Method == "tuned" && !o.Quant.Valid():
		return fmt.Errorf("training: quant %q: want i8, f16 or f32", o.Quant)
	case o.Method == "tuned" && o.Ensemble < 1:
		return fmt.Errorf("training: ensemble %d: want at least 1", o.Ensemble)
	case o.Structure && o.Method != "tuned":
		return fmt.Errorf("training: method %s: structural markers train with the tuned method only", o.Method)
	case o.Confidence && o.Method != "tuned":
		return fmt.Errorf("training: method %s: confidence fits the tuned method only", o.Method)
	case o.Distill != nil && o.Method != "tuned":
		return fmt.Errorf("training: method %s: a teacher trains the tuned method only", o.Method)
	case o.CentroidRows != "" && o.CentroidRows != classifier.CentroidRowsAll && o.CentroidRows != classifier.CentroidRowsUser:
		return fmt.Errorf("training: centroid rows %q: want %s or %s", o.CentroidRows, classifier.CentroidRowsAll, classifier.CentroidRowsUser)
	}
	return nil
}

// tier1Data is what every method trains on.
type tier1Data struct {
	set      *datasets.Set
	classes  []string
	fit, cal split
	tok      *tokenize.WordPiece
	base     *models.Table
	tokSum   string
	// soft, with a teacher, replaces fit as what the tuned method learns.
	soft *distilled
}

// Tier1 trains tier 1 on o.Data and writes the heads artifact (and, for the
// tuned method, its table) into o.Out, replacing what was there.
func Tier1(ctx context.Context, o Tier1Options) (*Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Name == "" {
		o.Name = filepath.Base(filepath.Clean(o.Out))
	}
	if o.At.IsZero() {
		o.At = time.Now().UTC()
	}
	logf := logger(o.Log)
	d, err := readTier1Data(o)
	if err != nil {
		return nil, err
	}
	logf("train: %d rows, %d classes; %d to fit, %d held out for calibration", len(d.set.Rows), len(d.classes), len(d.fit.text), len(d.cal.text))
	tier := &classifier.Tier{Training: classifier.Training{
		Data: filepath.Base(o.Data), DataSHA256: d.set.SHA256, Rows: len(d.fit.text), Method: o.Method, Seed: o.Seed,
		At: o.At.Format(time.RFC3339), Tool: o.Tool,
		Params: map[string]any{"holdout": o.Holdout, "max_tokens": o.MaxTokens, "balance": o.Balance},
	}}
	if o.FirstLines {
		tier.Training.Params["first_lines"] = true
	}
	if o.Distill != nil {
		if d.soft, err = o.Distill.distill(ctx, d, logf); err != nil {
			return nil, err
		}
		for k, v := range d.soft.params {
			tier.Training.Params[k] = v
		}
	}
	start := time.Now()
	var model, vectors *static.Model
	if o.Method == "tuned" {
		model, vectors, err = tune(ctx, o, d, tier, logf)
	} else {
		model, err = fitFrozen(o, d, tier)
		vectors = model // l2 features: never folded
	}
	if err != nil {
		return nil, err
	}
	logf("train: fitted in %s", time.Since(start).Round(time.Millisecond))
	rows := o.CentroidRows
	if rows == "" {
		rows = DefaultCentroidRows
	}
	if tier.Centroids, err = centroids(vectors, d, rows); err != nil {
		return nil, err
	}
	logf("train: centroids of %s rows (%s)", tier.Centroids.Fit["rows"], rows)
	if o.Confidence {
		conf, err := fitConfidence(ctx, o, d, model, logf)
		if err != nil {
			return nil, err
		}
		if model, err = model.WithConfidence(conf); err != nil {
			return nil, err
		}
		tier.Encoder.Confidence = conf
		tier.Training.Params["confidence"] = true
	}

	// Temperature on the hold-out.
	head := model.Head()
	logits := make([][]float32, len(d.cal.text))
	for i, t := range d.cal.text {
		logits[i] = make([]float32, len(d.classes))
		model.Logits(t, logits[i])
	}
	head.Temperature = classifier.FitTemperature(logits, d.cal.y)
	logf("train: temperature %.3f (fitted on %d held-out rows)", head.Temperature, len(d.cal.text))
	tier.Head = *head

	h := &classifier.Heads{Name: o.Name, Version: o.At.Format("2006-01-02T150405Z"), Classes: d.classes, Tier1: tier, Floors: map[string]classifier.Floors{}}
	if o.Distill != nil {
		// The student's artifact pairs it with its teacher, ready for
		// calibration to fit the tier-1 floors.
		h.Tier2 = o.Distill.Teacher.Tier2
		for c, f := range o.Distill.Teacher.Floors {
			if f.Tier2 != nil {
				h.Floors[c] = classifier.Floors{Tier2: f.Tier2}
			}
		}
	}
	res := &Result{Heads: h}
	if o.Eval != "" {
		if tier.Eval, err = res.evaluate(o.Eval, model.Probs, d.classes); err != nil {
			return nil, err
		}
	}
	if err := h.Save(o.Out); err != nil {
		return nil, err
	}
	h.Dir = o.Out
	return res, nil
}

// readTier1Data reads the data, the tokenizer and the base table, and
// splits the data into the rows to fit and those held out.
func readTier1Data(o Tier1Options) (*tier1Data, error) {
	set, classes, err := readLabelled(o.Data)
	if err != nil {
		return nil, err
	}
	d := &tier1Data{set: set, classes: classes}
	if d.tok, err = tokenize.LoadWordPiece(o.Tokenizer); err != nil {
		return nil, err
	}
	if d.base, err = models.ReadTable(o.Table); err != nil {
		return nil, err
	}
	if d.tokSum, err = models.FileSHA256(o.Tokenizer); err != nil {
		return nil, err
	}
	index := classifier.ClassIndex(classes)
	texts := make([]string, len(set.Rows))
	for i, r := range set.Rows {
		texts[i] = r.Text
	}
	fit, cal := holdOut(texts, o.Holdout)
	d.fit, d.cal = fit.of(set, index), cal.of(set, index)
	if o.FirstLines {
		d.fit = d.fit.withFirstLines()
	}
	if len(d.cal.text) == 0 {
		return nil, fmt.Errorf("holdout %v %w", o.Holdout, ErrEmptyHoldout)
	}
	return d, nil
}

// readLabelled reads a labelled JSONL set whose every row has a label, and
// its classes (two at least), sorted.
func readLabelled(path string) (*datasets.Set, []string, error) {
	set, err := datasets.ReadJSONL(path)
	if err != nil {
		return nil, nil, err
	}
	var unlabelled int
	for _, r := range set.Rows {
		if r.Label == "" {
			unlabelled++
		}
	}
	if unlabelled > 0 {
		return nil, nil, fmt.Errorf("%s: %d rows have no label", path, unlabelled)
	}
	classes := classifier.SortedClasses(set.Labels())
	if len(classes) < 2 {
		return nil, nil, fmt.Errorf("%s: %d classes, need at least 2", path, len(classes))
	}
	return set, classes, nil
}

// split is a part of a labelled set: its texts and class indices.
type split struct {
	rows []int // indices into the set
	text []string
	y    []int
}

func (s split) of(set *datasets.Set, index map[string]int) split {
	for _, i := range s.rows {
		s.text = append(s.text, set.Rows[i].Text)
		s.y = append(s.y, index[set.Rows[i].Label])
	}
	return s
}

// withFirstLines appends, for each multi-line text of s, its first line
// (trimmed, of three words or more) with the same class and row. The
// copies follow the texts they come from in s.rows, so a source's rows
// keep its copies.
func (s split) withFirstLines() split {
	n := len(s.text)
	for i := range n {
		first, _, ok := strings.Cut(s.text[i], "\n")
		first = strings.TrimSpace(first)
		if !ok || len(strings.Fields(first)) < 3 {
			continue
		}
		s.rows = append(s.rows, s.rows[i])
		s.text = append(s.text, first)
		s.y = append(s.y, s.y[i])
	}
	return s
}

// holdOut splits rows deterministically, by a hash of the text: about
// share of them are held out (to fit the temperature), the rest fit.
func holdOut(texts []string, share float64) (fit, held split) {
	for i, t := range texts {
		h := fnv.New32a()
		h.Write([]byte(t))
		if float64(h.Sum32()%10000)/10000 < share {
			held.rows = append(held.rows, i)
		} else {
			fit.rows = append(fit.rows, i)
		}
	}
	return fit, held
}

// tune trains the token vectors and the head together (with an ensemble,
// folded into one table of class contributions) and writes the table into
// o.Out. It returns the model and the same model keeping its vectors
// (for the centroids; the model itself when it is not folded).
func tune(ctx context.Context, o Tier1Options, d *tier1Data, tier *classifier.Tier, logf func(string, ...any)) (model, vectors *static.Model, err error) {
	for k, v := range map[string]any{"epochs": o.Epochs, "lr": o.LearningRate, "bigrams": o.Bigrams, "dropout": o.Dropout,
		"min_count": o.MinCount, "prune": o.Prune, "sif": o.SIF, "ensemble": o.Ensemble, "base_table": d.base.Manifest.Name} {
		tier.Training.Params[k] = v
	}
	if o.Structure {
		tier.Training.Params["structure"] = true
	}
	start := time.Now()
	var members []*static.Model
	var tuned *models.Table
	var enc classifier.Encoder
	texts, y := d.fit.text, d.fit.y
	var targets [][]float32
	if d.soft != nil {
		texts, y, targets = d.soft.text, d.soft.y, d.soft.targets
	}
	for i := range o.Ensemble {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		var head *classifier.Linear
		tuned, head, enc, err = static.Tune(d.tok, d.base, texts, y, d.classes, static.TuneOptions{
			Epochs: o.Epochs, LearningRate: float32(o.LearningRate), Balance: o.Balance, Dropout: float32(o.Dropout),
			Seed: o.Seed + uint64(i), MaxTokens: o.MaxTokens, Bigrams: o.Bigrams, MinCount: o.MinCount, SIF: o.SIF, Prune: o.Prune,
			Structure: o.Structure, Targets: targets,
			Progress: func(e int, loss float64) {
				logf("train: model %d/%d epoch %d/%d loss %.4f (%s)", i+1, o.Ensemble, e, o.Epochs, loss, time.Since(start).Round(time.Second))
			},
		})
		if err != nil {
			return nil, nil, err
		}
		if o.Ensemble == 1 && !o.Fold {
			tuned = tuned.Quantize(o.Quant)
			if model, err = static.New(d.tok, tuned, head, enc); err != nil {
				return nil, nil, err
			}
			if vectors = model; model.Folded() {
				if vectors, err = static.NewWithCentroids(d.tok, tuned, head, enc, nil); err != nil {
					return nil, nil, err
				}
			}
			break
		}
		m, err := static.New(d.tok, tuned, head, enc) // f32 vectors: folds
		if err != nil {
			return nil, nil, err
		}
		members = append(members, m)
	}
	if members != nil {
		tuned = foldTable(tuned, members, d.classes)
		tuned = tuned.Quantize(o.Quant)
		enc.Weighting += ", folded"
		head := identityHead(d.classes, members)
		if model, err = static.New(d.tok, tuned, head, enc); err != nil {
			return nil, nil, err
		}
		if vectors = model; model.Folded() {
			if vectors, err = static.NewWithCentroids(d.tok, tuned, head, enc, nil); err != nil {
				return nil, nil, err
			}
		}
	}
	tuned.Manifest.Name = o.Name + "-tier1"
	tuned.Manifest.Created = o.At.Format(time.RFC3339)
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, nil, err
	}
	tableFile := o.Name + "-tier1.tbl"
	sum, err := tuned.WriteFile(filepath.Join(o.Out, tableFile))
	if err != nil {
		return nil, nil, err
	}
	enc.Table, enc.TableSHA256 = tableFile, sum
	enc.Tokenizer, enc.TokenizerSHA256 = filepath.Base(o.Tokenizer), d.tokSum
	tier.Encoder = enc
	return model, vectors, nil
}

// fitFrozen fits a softmax or centroid head on the frozen base table's
// features.
func fitFrozen(o Tier1Options, d *tier1Data, tier *classifier.Tier) (*static.Model, error) {
	sum, err := models.FileSHA256(o.Table)
	if err != nil {
		return nil, err
	}
	enc := classifier.Encoder{Kind: "static", Table: filepath.Base(o.Table), TableSHA256: sum,
		Tokenizer: filepath.Base(o.Tokenizer), TokenizerSHA256: d.tokSum, MaxTokens: o.MaxTokens, Weighting: "table", Normalize: "l2"}
	tier.Encoder = enc
	// Features from the frozen table; the head is fitted on them.
	probe, err := static.New(d.tok, d.base, placeholderHead(d.classes, d.base.Dims()), enc)
	if err != nil {
		return nil, err
	}
	x := make([][]float32, len(d.fit.text))
	for i, t := range d.fit.text {
		x[i] = make([]float32, d.base.Dims())
		probe.Features(t, x[i])
	}
	var head *classifier.Linear
	if o.Method == "softmax" {
		head = classifier.TrainSoftmax(x, d.fit.y, d.classes, classifier.SoftmaxOptions{Balance: o.Balance, Seed: o.Seed})
	} else {
		head = classifier.TrainCentroid(x, d.fit.y, d.classes)
	}
	return static.New(d.tok, d.base, head, enc)
}

// foldTable averages the members' folded heads into a table whose rows are
// class contributions (dims = classes): the ensemble's mean logits are then
// the mean of a text's rows, exactly what one member computes, at one
// member's cost. Row weights carry over (the members share them).
func foldTable(layout *models.Table, members []*static.Model, classes []string) *models.Table {
	k := len(classes)
	rows := layout.Rows()
	vecs := make([][]float32, rows)
	weights := make([]float32, rows)
	for r := range rows {
		weights[r] = layout.Weight(int32(r))
		v := make([]float32, k)
		for _, m := range members {
			c, _ := m.Fold()
			for j := range v {
				v[j] += c[r*k+j]
			}
		}
		inv := 1 / float32(len(members))
		if weights[r] > 0 {
			inv /= weights[r] // the fold holds weight x contribution; the table applies the weight
		}
		for j := range v {
			v[j] *= inv
		}
		vecs[r] = v
	}
	m := layout.Manifest
	m.Dims, m.VocabSize, m.ExtraWords, m.Quant = 0, 0, 0, ""
	m.Method = "tuned-folded"
	m.Notes = fmt.Sprintf("rows are the class contributions (logits) of %d tuned model(s), averaged; classes %v", len(members), classes)
	t, err := models.NewTable(m, layout.VocabSize(), layout.ExtraWords(), vecs, weights)
	if err != nil {
		panic(err) // same layout as a table that built: cannot fail
	}
	return t
}

// identityHead passes folded contributions through, with the members' mean
// bias.
func identityHead(classes []string, members []*static.Model) *classifier.Linear {
	k := len(classes)
	h := &classifier.Linear{Kind: "softmax", Classes: classes, Dims: k, W: make([]float32, k*k), B: make([]float32, k), Temperature: 1}
	for c := range k {
		h.W[c*k+c] = 1
	}
	for _, m := range members {
		_, b := m.Fold()
		for c := range k {
			h.B[c] += b[c] / float32(len(members))
		}
	}
	return h
}

// placeholderHead lets a Model compute features before its head exists.
func placeholderHead(classes []string, dims int) *classifier.Linear {
	return &classifier.Linear{Kind: "softmax", Classes: classes, Dims: dims, W: make([]float32, len(classes)*dims), B: make([]float32, len(classes))}
}

// logger writes a line per call to w; nil w: nowhere.
func logger(w io.Writer) func(format string, a ...any) {
	if w == nil {
		return func(string, ...any) {}
	}
	return func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
}
