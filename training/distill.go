package training

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
)

// Distillation makes Tier1 learn from a teacher, the tier 2 of a heads
// artifact (its encoder and head): every training text, and every text of
// the Unlabeled sets, gets the teacher's probabilities as its target. A
// labelled text's target mixes them with its label, HardWeight·onehot +
// (1-HardWeight)·teacher, which is the same mix of the two cross-entropy
// losses. The hold-out that fits the temperature keeps its labels and is
// never shown to the student.
type Distillation struct {
	// Teacher is the heads artifact whose tier 2 teaches; its classes must
	// be the data's. The trained artifact keeps its tier 2 and its tier-2
	// floors (the tier-1 floors are for calibration to fit again).
	Teacher *classifier.Heads
	// Open opens the teacher's encoder (opening takes seconds). Tier1
	// calls it only when some text's scores are not cached; the caller
	// closes what it opened after Tier1 returns.
	Open func() (Embedder, error)
	// Unlabeled are datasets (JSONL, or CSV with a text column) of more
	// texts for the teacher to label; their labels, if any, are ignored.
	// Texts of Data, and repeats, are left out.
	Unlabeled []string
	// HardWeight is the labels' share of a labelled text's target, in
	// [0, 1]: 0 learns the teacher alone, 1 the labels alone (the
	// unlabelled texts still learn the teacher).
	HardWeight float64
	// Temperature softens the teacher: its logits are divided by its
	// head's temperature times this (0 means 1).
	Temperature float64
	// CacheDir keeps the teacher's logits between runs, by the encoder's,
	// the head's and each dataset's sha256 ("": no cache). Scoring a
	// training set takes minutes; reading its scores, milliseconds.
	CacheDir string
	// Workers is the number of texts scored at once (default GOMAXPROCS).
	// Progress, if set, follows the scoring of each dataset (see Embed).
	Workers  int
	Progress func(done, total int)
}

func (o *Distillation) check(classes []string) error {
	t := o.Teacher
	switch {
	case t == nil || t.Tier2 == nil:
		return errors.New("training: the teacher has no tier 2")
	case o.Open == nil:
		return errors.New("training: no teacher encoder to open")
	case fmt.Sprint(t.Classes) != fmt.Sprint(classes):
		return fmt.Errorf("training: the teacher %s has classes %v, the data %v", t.Name, t.Classes, classes)
	case !(o.HardWeight >= 0 && o.HardWeight <= 1):
		return fmt.Errorf("training: hard weight %v: want 0 to 1", o.HardWeight)
	case !(o.Temperature >= 0):
		return fmt.Errorf("training: teacher temperature %v: want a positive number", o.Temperature)
	}
	return nil
}

// distilled is what distillation trains on: the fitted rows, then the
// kept unlabelled texts, with their targets, and what the artifact records
// of it.
type distilled struct {
	text    []string
	y       []int // a labelled row's label, an unlabelled text's teacher's top class (Balance weighs by it)
	targets [][]float32
	params  map[string]any
}

// distill scores d's texts and the unlabelled sets with the teacher and
// builds the targets.
func (o *Distillation) distill(ctx context.Context, d *tier1Data, logf func(string, ...any)) (*distilled, error) {
	if err := o.check(d.classes); err != nil {
		return nil, err
	}
	start := time.Now()
	t, err := newTeacher(o)
	if err != nil {
		return nil, err
	}
	texts := d.set.Texts()
	logits, err := t.logits(ctx, d.set.SHA256, texts)
	if err != nil {
		return nil, err
	}
	hard := float32(o.HardWeight)
	out := &distilled{params: map[string]any{
		"teacher": o.Teacher.Name + " " + o.Teacher.Version, "teacher_model_sha256": o.Teacher.Tier2.Encoder.ModelSHA256,
		"teacher_head_sha256": t.headSum, "teacher_temperature": t.soft, "hard_weight": o.HardWeight,
	}}
	for i, r := range d.fit.rows {
		q := t.probs(logits[r])
		for j := range q {
			q[j] *= 1 - hard
		}
		q[d.fit.y[i]] += hard
		out.text, out.y, out.targets = append(out.text, d.fit.text[i]), append(out.y, d.fit.y[i]), append(out.targets, q)
	}
	seen := make(map[string]bool, len(texts))
	for _, s := range texts {
		seen[s] = true
	}
	var sets []map[string]any
	for _, path := range o.Unlabeled {
		set, err := datasets.Read(path, datasets.Columns{})
		if err != nil {
			return nil, err
		}
		texts := set.Texts()
		logits, err := t.logits(ctx, set.SHA256, texts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		kept := 0
		for i, s := range texts {
			if seen[s] {
				continue
			}
			seen[s] = true
			q := t.probs(logits[i])
			out.text, out.y, out.targets = append(out.text, s), append(out.y, classifier.Argmax(q)), append(out.targets, q)
			kept++
		}
		logf("train: %s: %d texts, %d new", path, len(texts), kept)
		sets = append(sets, map[string]any{"data": filepath.Base(path), "data_sha256": set.SHA256, "rows": kept})
	}
	if sets != nil {
		out.params["unlabeled"] = sets
	}
	out.params["unlabeled_rows"] = len(out.text) - len(d.fit.rows)
	logf("train: tier 2 of %s scored %d texts (%d read from the cache) in %s; %d labelled and %d unlabelled texts to fit",
		o.Teacher.Name, t.scored+t.cached, t.cached, time.Since(start).Round(time.Millisecond), len(d.fit.rows), len(out.text)-len(d.fit.rows))
	return out, nil
}

// teacher scores texts with the teacher's head on its encoder's
// embeddings, opening the encoder on first need, through the cache.
type teacher struct {
	o              *Distillation
	head           *classifier.Linear
	headSum        string
	soft           float64 // the softening (Distillation.Temperature)
	temperature    float32 // the head's times the softening
	enc            Embedder
	scored, cached int
}

func newTeacher(o *Distillation) (*teacher, error) {
	head := o.Teacher.Tier2.Head
	b, err := json.Marshal(&head)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	soft := o.Temperature
	if soft == 0 {
		soft = 1
	}
	temp := head.Temperature
	if temp == 0 {
		temp = 1
	}
	return &teacher{o: o, head: &head, headSum: hex.EncodeToString(sum[:]), soft: soft, temperature: temp * float32(soft)}, nil
}

// cachePath is where the teacher's logits on the dataset with sha256
// dataSum are cached ("": not).
func (t *teacher) cachePath(dataSum string) string {
	model := t.o.Teacher.Tier2.Encoder.ModelSHA256
	if t.o.CacheDir == "" || len(model) < 16 || len(dataSum) < 16 {
		return ""
	}
	return filepath.Join(t.o.CacheDir, model[:16]+"-"+t.headSum[:16]+"-"+dataSum[:16]+".f32")
}

// logits returns the teacher's logits for texts, the rows of the dataset
// with sha256 dataSum.
func (t *teacher) logits(ctx context.Context, dataSum string, texts []string) ([][]float32, error) {
	k := len(t.head.Classes)
	path := t.cachePath(dataSum)
	if x, ok := readRows(path, len(texts), k); ok {
		t.cached += len(texts)
		return x, nil
	}
	if t.enc == nil {
		enc, err := t.o.Open()
		if err != nil {
			return nil, err
		}
		if enc.Dims() != t.head.Dims {
			return nil, fmt.Errorf("training: the teacher's head takes %d dims, its encoder gives %d", t.head.Dims, enc.Dims())
		}
		t.enc = enc
	}
	workers := t.o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	x, err := Embed(ctx, t.enc, texts, workers, t.o.Progress)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(x))
	for i, v := range x {
		out[i] = make([]float32, k)
		t.head.Logits(v, out[i])
	}
	t.scored += len(texts)
	if path != "" {
		writeRows(path, out)
	}
	return out, nil
}

// probs are the teacher's (softened) probabilities from its logits.
func (t *teacher) probs(logits []float32) []float32 {
	p := append([]float32(nil), logits...)
	classifier.Softmax(p, t.temperature)
	return p
}
