package training

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/models"
)

// fixture writes a small labelled dataset (two topics, a topic word among
// fillers) and, for tier 1, a random table over the real tokenizer's
// vocabulary.
type fixture struct {
	dir, data, table, tokenizer string
}

var at = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, withTable bool) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	rng := rand.New(rand.NewPCG(1, 1))
	topics := map[string][]string{"music": {"guitar", "drums", "melody", "chord", "song"}, "sport": {"soccer", "goal", "referee", "stadium", "match"}}
	filler := []string{"the", "a", "is", "and", "what", "about", "my", "how", "do", "i"}
	var data bytes.Buffer
	for i := range 300 {
		label := []string{"music", "sport"}[i%2]
		var ws []string
		for range 4 {
			ws = append(ws, filler[rng.IntN(len(filler))])
		}
		ws = append(ws, topics[label][rng.IntN(5)], fmt.Sprint(i))
		fmt.Fprintf(&data, `{"text":%q,"label":%q,"realism":"synthetic","source":"s%d"}`+"\n", strings.Join(ws, " "), label, i%3)
	}
	f.data = filepath.Join(f.dir, "train.jsonl")
	if err := os.WriteFile(f.data, data.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if !withTable {
		return f
	}
	tokPath, err := tokenize.ModuleFile()
	if err != nil {
		t.Skipf("no tokenizer: %v", err)
	}
	tok, err := tokenize.LoadWordPiece(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	f.tokenizer = tokPath
	vecs := make([][]float32, tok.VocabSize())
	w := make([]float32, len(vecs))
	for i := range vecs {
		vecs[i] = make([]float32, 8)
		for j := range vecs[i] {
			vecs[i][j] = float32(rng.NormFloat64())
		}
		w[i] = 1
	}
	tb, err := models.NewTable(models.Manifest{Name: "tiny", Method: "glove"}, tok.VocabSize(), nil, vecs, w)
	if err != nil {
		t.Fatal(err)
	}
	f.table = filepath.Join(f.dir, "tiny.tbl")
	if _, err := tb.Quantize(models.QuantI8).WriteFile(f.table); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) tier1(out string) Tier1Options {
	return Tier1Options{Data: f.data, Out: out, Eval: f.data, Table: f.table, Tokenizer: f.tokenizer, Method: "tuned",
		Epochs: 3, LearningRate: 0.5, Bigrams: 16, Dropout: 0.2, Prune: true, Ensemble: 2, Quant: models.QuantI8,
		Seed: 1, MaxTokens: 64, Holdout: 0.2, At: at, Tool: "test"}
}

// TestTier1Reproducible: the same options give the same artifact, byte for
// byte; the reports come back to the caller, progress goes to Log.
func TestTier1Reproducible(t *testing.T) {
	f := newFixture(t, true)
	var files [2][2][]byte
	for i := range files {
		out := filepath.Join(f.dir, fmt.Sprint("run", i), "heads")
		var log bytes.Buffer
		o := f.tier1(out)
		o.Log = &log
		res, err := Tier1(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if res.EvalName != "train.jsonl" || res.Reports[""].N == 0 || res.Reports["/realism=synthetic"].N == 0 {
			t.Fatalf("reports %q %+v", res.EvalName, res.Reports)
		}
		if res.Heads.Dir != out || res.Heads.Tier1.Eval["train.jsonl"].Accuracy != res.Reports[""].Accuracy || res.Heads.Version != "2024-01-01T000000Z" {
			t.Fatalf("heads %+v", res.Heads)
		}
		for _, want := range []string{"train: 300 rows, 2 classes", "model 2/2 epoch 3/3", "train: temperature"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, log.String())
			}
		}
		for j, name := range []string{classifier.HeadsFile, "heads-tier1.tbl"} {
			if files[i][j], err = os.ReadFile(filepath.Join(out, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(files[0][0], files[1][0]) || !bytes.Equal(files[0][1], files[1][1]) {
		t.Fatal("two runs with the same options wrote different artifacts")
	}
}

func TestTier1Methods(t *testing.T) {
	f := newFixture(t, true)
	for _, method := range []string{"softmax", "centroid"} {
		o := f.tier1(filepath.Join(f.dir, method))
		o.Method, o.Eval = method, ""
		res, err := Tier1(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if res.EvalName != "" || res.Reports != nil || res.Heads.Tier1.Training.Method != method || res.Heads.Tier1.Encoder.Table != "tiny.tbl" {
			t.Fatalf("%s: %+v", method, res)
		}
	}
}

func TestTier1Errors(t *testing.T) {
	f := newFixture(t, true)
	write := func(name, body string) string {
		p := filepath.Join(f.dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		edit func(*Tier1Options)
		want string
	}{
		{"no data", func(o *Tier1Options) { o.Data = "" }, "required"},
		{"method", func(o *Tier1Options) { o.Method = "magic" }, `method "magic"`},
		{"quant", func(o *Tier1Options) { o.Quant = "q4" }, `quant "q4"`},
		{"ensemble", func(o *Tier1Options) { o.Ensemble = 0 }, "ensemble 0"},
		{"unlabelled", func(o *Tier1Options) { o.Data = write("u.jsonl", `{"text":"a","label":"x"}`+"\n"+`{"text":"b"}`+"\n") }, "1 rows have no label"},
		{"one class", func(o *Tier1Options) { o.Data = write("o.jsonl", `{"text":"a","label":"x"}`+"\n") }, "1 classes"},
		{"holdout", func(o *Tier1Options) { o.Holdout = 0 }, "left no rows to calibrate on"},
		{"table", func(o *Tier1Options) { o.Table = filepath.Join(f.dir, "absent.tbl") }, "absent.tbl"},
	} {
		o := f.tier1(filepath.Join(f.dir, "err"))
		c.edit(&o)
		_, err := Tier1(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
		if errors.Is(err, ErrEmptyHoldout) != (c.name == "holdout") {
			t.Errorf("%s: err = %v: errors.Is(err, ErrEmptyHoldout) = %v", c.name, err, !(c.name == "holdout"))
		}
	}
}

// hashEmbedder embeds a text as the sum of its words' hashed one-hot
// vectors: topic words separate the classes. It counts its calls.
type hashEmbedder struct{ calls atomic.Int64 }

func (e *hashEmbedder) Dims() int { return 32 }

func (e *hashEmbedder) Features(ctx context.Context, text string, dst []float32) ([]float32, error) {
	e.calls.Add(1)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v := make([]float32, e.Dims())
	for _, w := range strings.Fields(text) {
		h := fnv.New32a()
		h.Write([]byte(w))
		v[h.Sum32()%uint32(len(v))]++
	}
	return v, nil
}

func (f *fixture) tier2(out string, e *hashEmbedder) Tier2Options {
	enc := &Encoder{Embedder: e, Name: "hash", Source: "test",
		Info: classifier.Encoder{Kind: "onnx", Model: "hash", ModelSHA256: strings.Repeat("ab", 32)}}
	return Tier2Options{Data: f.data, Eval: f.data, Out: out, Open: func() (*Encoder, error) { return enc, nil },
		CacheDir: filepath.Join(f.dir, "cache"), Workers: 3, Head: "softmax", Epochs: 20, Seed: 1, Holdout: 0.2, At: at, Tool: "test"}
}

// TestTier2 adds a head on an encoder's embeddings to a new artifact, then
// reuses the cached embeddings; the artifact's classes must be the data's.
func TestTier2(t *testing.T) {
	f := newFixture(t, false)
	var e hashEmbedder
	out := filepath.Join(f.dir, "heads")
	res, err := Tier2(context.Background(), f.tier2(out, &e))
	if err != nil {
		t.Fatal(err)
	}
	h, err := classifier.LoadHeads(out)
	if err != nil {
		t.Fatal(err)
	}
	if h.Tier1 != nil || h.Tier2 == nil || h.Tier2.Encoder.Model != "hash" || h.Tier2.Training.Params["encoder"] != "hash" || h.Name != "heads" {
		t.Fatalf("heads %+v", h)
	}
	if acc := res.Reports[""].Accuracy; acc < 0.75 {
		t.Fatalf("accuracy %.3f on its own easy data", acc)
	}
	calls := e.calls.Load()
	if calls != 300 { // the eval set is the training set: cached
		t.Fatalf("%d embeddings, want 300", calls)
	}
	o := f.tier2(out, &e)
	o.Head, o.Hidden, o.Eval = "mlp", 8, ""
	if _, err := Tier2(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if e.calls.Load() != calls {
		t.Fatal("a second run embedded again: the cache was not used")
	}
	if h, err = classifier.LoadHeads(out); err != nil || h.Tier2.Head.Hidden != 8 {
		t.Fatalf("mlp head: %+v, %v", h.Tier2.Head.Hidden, err)
	}

	other := filepath.Join(f.dir, "other")
	h.Classes = []string{"a", "b"}
	h.Tier2.Head.Classes = h.Classes
	if err := h.Save(other); err != nil {
		t.Fatal(err)
	}
	if _, err := Tier2(context.Background(), f.tier2(other, &e)); err == nil || !strings.Contains(err.Error(), "same classes") {
		t.Errorf("classes differing from the artifact's: %v", err)
	}
	o = f.tier2(out, &e)
	o.Head = "forest"
	if _, err := Tier2(context.Background(), o); err == nil || !strings.Contains(err.Error(), `head "forest"`) {
		t.Errorf("bad head: %v", err)
	}
	o = f.tier2(out, &e)
	o.Open = func() (*Encoder, error) { return nil, errors.New("no such model") }
	if _, err := Tier2(context.Background(), o); err == nil || !strings.Contains(err.Error(), "no such model") {
		t.Errorf("encoder that does not open: %v", err)
	}
}

func TestEmbedStops(t *testing.T) {
	var e hashEmbedder
	texts := make([]string, 1000)
	for i := range texts {
		texts[i] = fmt.Sprint("text ", i)
	}
	var progress []int
	x, err := Embed(context.Background(), &e, texts, 4, func(done, total int) { progress = append(progress, done) })
	if err != nil || len(x) != len(texts) || x[999] == nil || progress[len(progress)-1] != 1000 {
		t.Fatalf("Embed: %d rows, %v, progress %v", len(x), err, progress)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Embed(ctx, &e, texts, 4, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Embed after cancel: %v", err)
	}
}

// TestCalibrate fits floors on a tier whose logits are given: known rows
// only, "other" never floored by default, the temperature kept unless
// refitted.
func TestCalibrate(t *testing.T) {
	classes := []string{"law", "other", "physics"}
	rng := rand.New(rand.NewPCG(5, 6))
	var rows []datasets.Row
	for i := range 600 {
		rows = append(rows, datasets.Row{Text: fmt.Sprint("t", i), Label: classes[i%3], Realism: []string{"exam", "post", ""}[i%4%3], Cols: map[string]string{"source": fmt.Sprint("s", i%2)}})
	}
	rows = append(rows, datasets.Row{Text: "unknown", Label: "astrology"})
	logits := func(_ context.Context, texts []string) ([][]float32, error) {
		out := make([][]float32, len(texts))
		for i := range texts {
			out[i] = make([]float32, 3)
			if i < 600 {
				out[i][i%3] = 2 + 3*float32(rng.Float64()) // mostly right, with varying confidence
				out[i][(i+1)%3] = 2 * float32(rng.Float64())
			}
		}
		return out, nil
	}
	o := CalibrateOptions{Classes: classes, Temperature: 1.5, Logits: logits, GroupBy: "source"}
	c, err := Calibrate(context.Background(), rows, o)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rows != 600 || c.OldTemperature != 1.5 || c.Temperature != 1.5 || c.OldECE != c.ECE || len(c.Floors.ByGroup) != 2 {
		t.Fatalf("without refit: %+v", c)
	}
	if f := c.FloorsByClass(); len(f) != 2 || f["law"] <= 0 {
		t.Fatalf("floors %v: want law and physics", f)
	}
	o.Refit = true
	if c, err = Calibrate(context.Background(), rows, o); err != nil || c.Temperature == 1.5 {
		t.Fatalf("refit: temperature %v, %v", c.Temperature, err)
	}
	// The reports on the rows fitted on are at the refitted temperature:
	// the same calibration error, keyed as training keys its held-out
	// reports, the unknown label left out.
	if all := c.Eval[""]; all.N != 600 || all.ECE != c.ECE || all.ECE == c.OldECE || all.Accuracy < 0.5 {
		t.Fatalf("Eval[\"\"] %+v; ECE %v, %v before", all, c.ECE, c.OldECE)
	}
	if n := c.Eval["/realism=exam"].N + c.Eval["/realism=post"].N; len(c.Eval) != 3 || n != 450 {
		t.Fatalf("Eval slices %v, %d rows in them", slices.Sorted(maps.Keys(c.Eval)), n)
	}
	if _, err := Calibrate(context.Background(), rows[:40], o); !errors.Is(err, ErrTooFewRows) || !strings.Contains(err.Error(), "40 rows") {
		t.Fatalf("40 rows: %v", err)
	}
}

// TestRefreshEval replaces a tier's reports on the calibration set, and
// only those: its slices go with it, a name it prefixes stays, and a tier
// without reports on the set gets none. The heads copied from keep theirs.
func TestRefreshEval(t *testing.T) {
	old := classifier.Report{N: 7}
	eval := map[string]classifier.Report{"dev.jsonl": old, "dev.jsonl/realism=exam": old, "dev.jsonl/realism=gone": old, "dev.jsonl2": old, "held.jsonl": old}
	h := &classifier.Heads{Tier1: &classifier.Tier{Eval: eval}}
	c := &Calibration{Eval: map[string]classifier.Report{"": {N: 600}, "/realism=exam": {N: 300}}}
	cal, err := h.Calibrated(1, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	kept := c.RefreshEval(cal, 1, "dev.jsonl")
	got := cal.Tier1.Eval
	if !slices.Equal(kept, []string{"dev.jsonl2", "held.jsonl"}) || len(got) != 4 || got["dev.jsonl"].N != 600 || got["dev.jsonl/realism=exam"].N != 300 || got["dev.jsonl2"].N != 7 || got["held.jsonl"].N != 7 {
		t.Fatalf("kept %v, eval %v", kept, got)
	}
	if len(eval) != 5 || eval["dev.jsonl"].N != 7 || h.Tier1.Eval["dev.jsonl"].N != 7 {
		t.Fatalf("the heads copied from changed: %v", eval)
	}
	kept = c.RefreshEval(cal, 1, "calib.jsonl")
	if len(kept) != 4 || len(cal.Tier1.Eval) != 4 || cal.Tier1.Eval["calib.jsonl"].N != 0 {
		t.Fatalf("a set the tier has no report on: kept %v, eval %v", kept, cal.Tier1.Eval)
	}
	if kept := c.RefreshEval(cal, 2, "dev.jsonl"); kept != nil {
		t.Fatalf("no tier 2: kept %v", kept)
	}
}

// teacherFixture trains a tier-2 head on the fixture's data with e and
// returns the artifact, as a teacher, and unlabelled texts: new ones, and
// two of the data's own, which distillation leaves out.
func (f *fixture) teacher(t *testing.T, e *hashEmbedder) (*classifier.Heads, string) {
	t.Helper()
	dir := filepath.Join(f.dir, "teacher")
	o := f.tier2(dir, e)
	o.Eval = ""
	if _, err := Tier2(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	h, err := classifier.LoadHeads(dir)
	if err != nil {
		t.Fatal(err)
	}
	floor := float32(0.8)
	h.Floors = map[string]classifier.Floors{"music": {Tier1: &floor, Tier2: &floor}}
	set, err := datasets.ReadJSONL(f.data)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("text,intent\n")
	for i := range 40 {
		fmt.Fprintf(&b, "my %s now %d,x\n", []string{"guitar", "soccer"}[i%2], i)
	}
	fmt.Fprintf(&b, "%q,x\n%q,x\n", set.Rows[0].Text, set.Rows[1].Text)
	path := filepath.Join(f.dir, "unlabelled.csv")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return h, path
}

// TestTier1Distill trains tier 1 on a teacher's probabilities: the same
// artifact twice, byte for byte, the second time from the teacher's cache
// without opening its encoder; the artifact keeps the teacher's tier 2
// and its tier-2 floors, and records the distillation.
func TestTier1Distill(t *testing.T) {
	f := newFixture(t, true)
	var e hashEmbedder
	h, unlabelled := f.teacher(t, &e)
	var files [2][2][]byte
	for i := range files {
		opened := 0
		out := filepath.Join(f.dir, fmt.Sprint("run", i), "heads")
		var log bytes.Buffer
		o := f.tier1(out)
		o.Log = &log
		o.Distill = &Distillation{Teacher: h, Open: func() (Embedder, error) { opened++; return &e, nil }, Unlabeled: []string{unlabelled},
			HardWeight: 0.5, CacheDir: filepath.Join(f.dir, "cache", "teacher"), Workers: 2}
		res, err := Tier1(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{1, 0}[i]; opened != want {
			t.Errorf("run %d opened the teacher %d times, want %d", i, opened, want)
		}
		got, err := classifier.LoadHeads(out)
		if err != nil {
			t.Fatal(err)
		}
		p := got.Tier1.Training.Params
		if got.Tier2 == nil || got.Tier2.Head.Dims != 32 || got.Floors["music"].Tier1 != nil || *got.Floors["music"].Tier2 != 0.8 ||
			p["hard_weight"] != 0.5 || p["unlabeled_rows"] != float64(40) || p["teacher_model_sha256"] != h.Tier2.Encoder.ModelSHA256 {
			t.Fatalf("artifact: tier 2 %v, floors %+v, params %v", got.Tier2 != nil, got.Floors, p)
		}
		if acc := res.Reports[""].Accuracy; acc < 0.75 {
			t.Errorf("accuracy %.3f on its own easy data", acc)
		}
		for _, want := range []string{"unlabelled.csv: 42 texts, 40 new", "243 labelled and 40 unlabelled texts to fit"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, log.String())
			}
		}
		for j, name := range []string{classifier.HeadsFile, "heads-tier1.tbl"} {
			if files[i][j], err = os.ReadFile(filepath.Join(out, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(files[0][0], files[1][0]) || !bytes.Equal(files[0][1], files[1][1]) {
		t.Fatal("a second distillation, from the cache, wrote a different artifact")
	}
}

// TestTier1DistillHardLabels: with the labels' whole weight and no
// unlabelled texts, distillation trains exactly what the labels do.
func TestTier1DistillHardLabels(t *testing.T) {
	f := newFixture(t, true)
	var e hashEmbedder
	h, _ := f.teacher(t, &e)
	plain, err := Tier1(context.Background(), f.tier1(filepath.Join(f.dir, "plain")))
	if err != nil {
		t.Fatal(err)
	}
	o := f.tier1(filepath.Join(f.dir, "hard"))
	o.Distill = &Distillation{Teacher: h, Open: func() (Embedder, error) { return &e, nil }, HardWeight: 1}
	hard, err := Tier1(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	a, b := plain.Heads.Tier1.Head, hard.Heads.Tier1.Head
	if fmt.Sprint(a.W, a.B, a.Temperature) != fmt.Sprint(b.W, b.B, b.Temperature) || plain.Reports[""].Accuracy != hard.Reports[""].Accuracy || plain.Reports[""].NLL != hard.Reports[""].NLL {
		t.Fatalf("hard weight 1 trained another head: temperature %v against %v, NLL %v against %v", b.Temperature, a.Temperature, hard.Reports[""].NLL, plain.Reports[""].NLL)
	}
}

func TestTier1DistillErrors(t *testing.T) {
	f := newFixture(t, true)
	var e hashEmbedder
	h, _ := f.teacher(t, &e)
	other := *h
	other.Classes = []string{"a", "b"}
	noTier2 := *h
	noTier2.Tier2 = nil
	for _, c := range []struct {
		name string
		edit func(*Tier1Options)
		want string
	}{
		{"method", func(o *Tier1Options) { o.Method = "softmax" }, "tuned method only"},
		{"no tier 2", func(o *Tier1Options) { o.Distill.Teacher = &noTier2 }, "no tier 2"},
		{"classes", func(o *Tier1Options) { o.Distill.Teacher = &other }, "classes [a b]"},
		{"hard weight", func(o *Tier1Options) { o.Distill.HardWeight = 1.5 }, "hard weight 1.5"},
		{"temperature", func(o *Tier1Options) { o.Distill.Temperature = -1 }, "temperature -1"},
		{"open", func(o *Tier1Options) {
			o.Distill.Open = func() (Embedder, error) { return nil, errors.New("no runtime") }
		}, "no runtime"},
		{"unlabelled", func(o *Tier1Options) { o.Distill.Unlabeled = []string{filepath.Join(f.dir, "absent.jsonl")} }, "absent.jsonl"},
	} {
		o := f.tier1(filepath.Join(f.dir, "err"))
		o.Distill = &Distillation{Teacher: h, Open: func() (Embedder, error) { return &e, nil }}
		c.edit(&o)
		if _, err := Tier1(context.Background(), o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// TestTier1Confidence: with Confidence, the artifact carries a per-text
// temperature fitted on each source held out, the tier it describes
// applies it (the probabilities differ from the same training without
// it), and the run is still reproducible byte for byte. Structure gives the
// table the markers' rows.
func TestTier1Confidence(t *testing.T) {
	f := newFixture(t, true)
	run := func(name string, conf bool) (*Result, []byte, string) {
		out := filepath.Join(f.dir, name, "heads")
		var log bytes.Buffer
		o := f.tier1(out)
		o.Confidence, o.Structure, o.Log = conf, true, &log
		res, err := Tier1(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, classifier.HeadsFile))
		if err != nil {
			t.Fatal(err)
		}
		return res, b, log.String()
	}
	res, a, log := run("a", true)
	enc := res.Heads.Tier1.Encoder
	if enc.Confidence == nil || !enc.Structure || len(enc.Confidence.W) != 3 || enc.Confidence.Fit["held_out"] != "s0,s1,s2" {
		t.Fatalf("encoder %+v, confidence %+v", enc, enc.Confidence)
	}
	for _, want := range []string{"confidence: held out s0", "confidence: held out s2", "confidence: bias"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if _, b, _ := run("b", true); !bytes.Equal(a, b) {
		t.Fatal("two runs with confidence wrote different artifacts")
	}
	plain, _, _ := run("c", false)
	if plain.Heads.Tier1.Encoder.Confidence != nil {
		t.Fatal("confidence without the option")
	}
	if res.Reports[""].NLL == plain.Reports[""].NLL {
		t.Fatalf("the same NLL (%v) with and without the per-text temperature: it was not applied", res.Reports[""].NLL)
	}
	o := f.tier1(filepath.Join(f.dir, "d"))
	o.Confidence, o.Method = true, "softmax"
	if _, err := Tier1(context.Background(), o); err == nil {
		t.Fatal("confidence with the softmax method: no error")
	}
}

func TestWithFirstLines(t *testing.T) {
	s := split{rows: []int{4, 7, 9, 12}, y: []int{0, 1, 2, 1}, text: []string{
		"Landlord kept my whole deposit\n\nI moved out in May and ...",
		"one line only, no title",
		"Too short\nthe body",
		"  Which of these is a prime?  \n(A) 4 (B) 6 (C) 7",
	}}
	got := s.withFirstLines()
	want := split{rows: []int{4, 7, 9, 12, 4, 12}, y: []int{0, 1, 2, 1, 0, 1}, text: append(slices.Clone(s.text),
		"Landlord kept my whole deposit", "Which of these is a prime?")}
	if !slices.Equal(got.rows, want.rows) || !slices.Equal(got.y, want.y) || !slices.Equal(got.text, want.text) {
		t.Fatalf("withFirstLines = %+v, want %+v", got, want)
	}
}
