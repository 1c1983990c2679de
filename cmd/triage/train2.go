package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/internal/atomicfile"
	"github.com/triagegw/triage/models"
)

// tier2Train are the settings of "triage train --tier 2".
type tier2Train struct {
	data, out, encoder, eval, models, name string
	seed                                   uint64
	balance                                bool
	holdout                                float64
	threads, epochs, hidden                int
	lr, l2, dropout                        float64
	head                                   string
}

// DefaultTier2Model is the tier-2 model directory setup builds, under the
// models directory: Universal Sentence Encoder lite, converted to ONNX.
const DefaultTier2Model = "use"

// runTrainTier2 fits a softmax head on the tier-2 encoder's embeddings and
// puts it, with the encoder's identity, in the heads artifact at out
// (created when absent; its tier 1 and floors are kept when present, and
// its classes must match the data's).
func runTrainTier2(ctx context.Context, o tier2Train, stdout, stderr io.Writer) error {
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	if o.encoder == "" {
		o.encoder = filepath.Join(o.models, DefaultTier2Model)
	}
	if o.threads <= 0 {
		o.threads = runtime.GOMAXPROCS(0)
	}
	set, err := datasets.ReadJSONL(o.data)
	if err != nil {
		return err
	}
	for _, r := range set.Rows {
		if r.Label == "" {
			return fmt.Errorf("%s: rows without a label", o.data)
		}
	}
	classes := classifier.SortedClasses(set.Labels())
	if len(classes) < 2 {
		return fmt.Errorf("%s: %d classes, need at least 2", o.data, len(classes))
	}
	var h *classifier.Heads
	if _, err := os.Stat(filepath.Join(o.out, classifier.HeadsFile)); err == nil {
		if h, err = classifier.LoadHeads(o.out); err != nil {
			return err
		}
		if fmt.Sprint(h.Classes) != fmt.Sprint(classes) {
			return fmt.Errorf("%s has classes %v, the data %v: tier 2 must judge the same classes as tier 1", o.out, h.Classes, classes)
		}
	}
	at, err := buildTime()
	if err != nil {
		return err
	}
	if h == nil {
		name := o.name
		if name == "" {
			name = filepath.Base(filepath.Clean(o.out))
		}
		h = &classifier.Heads{Name: name, Version: at.Format("2006-01-02T150405Z"), Classes: classes, Floors: map[string]classifier.Floors{}}
	}

	m, err := onnx.Open(o.encoder, o.models, onnx.Options{Threads: 1, MaxConcurrent: o.threads})
	if err != nil {
		return err
	}
	defer m.Close()
	man := m.Encoder().Manifest()
	modelSum, err := models.FileSHA256(filepath.Join(o.encoder, man.Model))
	if err != nil {
		return err
	}
	index := classifier.ClassIndex(classes)
	texts := make([]string, len(set.Rows))
	for i, r := range set.Rows {
		texts[i] = r.Text
	}
	start := time.Now()
	cache := filepath.Join(o.models, "cache", "embeddings", modelSum[:16]+"-"+set.SHA256[:16]+".f32")
	x, err := cachedEmbeddings(ctx, cache, m, texts, o.threads, progressBar(stderr))
	if err != nil {
		return err
	}
	logf("train: embedded %d texts with %s in %s (cached in %s)", len(texts), man.Name, time.Since(start).Round(time.Millisecond), cache)

	// The same deterministic hold-out as tier 1 fits the temperature.
	var fitX, calX [][]float32
	var fitY, calY []int
	for i, r := range set.Rows {
		f := fnv.New32a()
		f.Write([]byte(r.Text))
		if float64(f.Sum32()%10000)/10000 < o.holdout {
			calX, calY = append(calX, x[i]), append(calY, index[r.Label])
		} else {
			fitX, fitY = append(fitX, x[i]), append(fitY, index[r.Label])
		}
	}
	if len(calX) == 0 {
		return fmt.Errorf("--holdout %v left no rows to calibrate on", o.holdout)
	}
	var head *classifier.Linear
	params := map[string]any{"holdout": o.holdout, "balance": o.balance, "encoder": man.Name, "encoder_source": man.Source, "head": o.head}
	switch o.head {
	case "mlp":
		mo := classifier.MLPOptions{Hidden: o.hidden, Epochs: o.epochs, LearningRate: float32(o.lr), WeightDecay: float32(o.l2),
			Dropout: float32(o.dropout), Balance: o.balance, Seed: o.seed, Workers: 2,
			Progress: func(e int, loss float64) { logf("train: head epoch %d loss %.4f", e, loss) }}
		head = classifier.TrainMLP(fitX, fitY, classes, mo)
		params["hidden"], params["epochs"], params["lr"], params["weight_decay"], params["dropout"] = head.Hidden, mo.Epochs, mo.LearningRate, mo.WeightDecay, mo.Dropout
	case "softmax":
		so := classifier.SoftmaxOptions{Balance: o.balance, Seed: o.seed, Epochs: o.epochs, LearningRate: float32(o.lr), L2: float32(o.l2)}
		head = classifier.TrainSoftmax(fitX, fitY, classes, so)
		params["epochs"], params["lr"], params["l2"] = so.Epochs, so.LearningRate, so.L2
	default:
		return fmt.Errorf("--head %q: want mlp or softmax", o.head)
	}
	logits := make([][]float32, len(calX))
	for i, v := range calX {
		logits[i] = make([]float32, len(classes))
		head.Logits(v, logits[i])
	}
	head.Temperature = classifier.FitTemperature(logits, calY)
	logf("train: head fitted on %d rows; temperature %.3f (fitted on %d held-out rows)", len(fitX), head.Temperature, len(calX))

	tier2 := &classifier.Tier{
		Encoder: classifier.Encoder{Kind: "onnx", Model: filepath.Base(filepath.Clean(o.encoder)), ModelSHA256: modelSum,
			Tokenizer: man.Tokenizer, TokenizerSHA256: man.TokenizerSHA256, MaxTokens: man.MaxTokens},
		Head: *head,
		Training: classifier.Training{Data: filepath.Base(o.data), DataSHA256: set.SHA256, Rows: len(fitX), Method: o.head, Seed: o.seed,
			At: at.Format(time.RFC3339), Tool: "triage " + versionString(), Params: params},
	}
	if o.eval != "" {
		ev, err := datasets.ReadJSONL(o.eval)
		if err != nil {
			return err
		}
		evTexts := make([]string, len(ev.Rows))
		for i, r := range ev.Rows {
			evTexts[i] = r.Text
		}
		evCache := filepath.Join(o.models, "cache", "embeddings", modelSum[:16]+"-"+ev.SHA256[:16]+".f32")
		evX, err := cachedEmbeddings(ctx, evCache, m, evTexts, o.threads, progressBar(stderr))
		if err != nil {
			return err
		}
		feats := make(map[string][]float32, len(evTexts))
		for i, t := range evTexts {
			feats[t] = evX[i]
		}
		reports := evaluate(func(text string, out []float32) { head.Probs(feats[text], out) }, ev, classes)
		tier2.Eval = map[string]classifier.Report{}
		for k, r := range reports {
			tier2.Eval[filepath.Base(o.eval)+k] = r
		}
		printReports(stdout, filepath.Base(o.eval), reports)
	}
	h.Tier2 = tier2
	if err := h.Save(o.out); err != nil {
		return err
	}
	logf("train: wrote tier 2 to %s", o.out)
	return nil
}

// embedAll embeds texts on workers goroutines, in order.
func embedAll(ctx context.Context, m *onnx.Model, texts []string, workers int, progress func(done, total int)) ([][]float32, error) {
	out := make([][]float32, len(texts))
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	done := 0
	next := make(chan int)
	for range max(workers, 1) {
		wg.Go(func() {
			for i := range next {
				v, err := m.Features(ctx, texts[i], nil)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("embedding text %d: %w", i+1, err)
					cancel()
				}
				out[i] = v
				done++
				if progress != nil && (done%64 == 0 || done == len(texts)) {
					progress(done, len(texts))
				}
				mu.Unlock()
			}
		})
	}
feed:
	for i := range texts {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := parent.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// cachedEmbeddings embeds texts, or reads their embeddings from path where
// an earlier run left them: the file is named by the model's and the
// data's sha256, and holds len(texts) rows of float32, little-endian.
// Embedding a training set takes minutes; fitting a head on it, seconds.
func cachedEmbeddings(ctx context.Context, path string, m *onnx.Model, texts []string, workers int, progress func(done, total int)) ([][]float32, error) {
	d := m.Dims()
	if b, err := os.ReadFile(path); err == nil && len(b) == 4*d*len(texts) {
		x := make([][]float32, len(texts))
		for i := range x {
			x[i] = make([]float32, d)
			for j := range x[i] {
				x[i][j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*(i*d+j):]))
			}
		}
		return x, nil
	}
	x, err := embedAll(ctx, m, texts, workers, progress)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 4*d*len(texts))
	for _, v := range x {
		for _, f := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
	}
	// A cache that cannot be written costs the next run time, nothing else.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		_ = atomicfile.WriteBytes(path, b)
	}
	return x, nil
}
