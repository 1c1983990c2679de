package onnx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/models"
)

// Model is a loaded tier-2 encoder with its tokenizer: text in, one
// unit-length feature vector out. It is safe for concurrent use.
type Model struct {
	man      Manifest // the encoder's
	tok      Tokenizer
	enc      *Encoder // nil for a remote encoder
	remote   *remote  // nil for a local one
	maxText  int      // text tokens: the encoder's max less the special tokens
	specials bool     // wrap the ids in [CLS] … [SEP]
	cls, sep int32
	scratch  sync.Pool  // *textScratch
	sched    *scheduler // nil unless the encoder's Options.Schedule
}

// New builds a Model from a tokenizer and an encoder. A bert encoder's
// tokenizer must also give the ids of its special tokens (an
// ID(string) (int32, bool) method, as tokenize.WordPiece has).
func New(tok Tokenizer, enc *Encoder) (*Model, error) {
	if enc == nil {
		return nil, errors.New("onnx: no encoder")
	}
	m := enc.Manifest()
	md := &Model{man: m, tok: tok, enc: enc, maxText: m.MaxTokens}
	if m.Input == InputBERT {
		st, ok := tok.(specialTokens)
		if !ok {
			return nil, fmt.Errorf("onnx: encoder %s takes bert input, but its tokenizer (%T) cannot look up %s and %s", m.Name, tok, m.CLSToken, m.SEPToken)
		}
		var okc, oks bool
		md.cls, okc = st.ID(m.CLSToken)
		md.sep, oks = st.ID(m.SEPToken)
		if !okc || !oks {
			return nil, fmt.Errorf("onnx: encoder %s: the tokenizer has no %s or %s token", m.Name, m.CLSToken, m.SEPToken)
		}
		md.specials, md.maxText = true, m.MaxTokens-2
	}
	md.scratch.New = func() any { return &textScratch{ids: make([]int32, 0, m.MaxTokens)} }
	if o := enc.Options(); o.Schedule && available {
		md.sched = md.newScheduler(o)
	}
	return md, nil
}

// newScheduler starts the Model's scheduler, its cost model seeded by
// timing a short and a longer input (the second of two Runs of each: the
// first also warms the session).
func (m *Model) newScheduler(o Options) *scheduler {
	man := m.enc.Manifest()
	batch := o.MaxBatch
	if man.Input != InputUSE {
		batch = 1 // a bert batch would need padding and per-row masks
	}
	var prior [2]costPoint
	for i, n := range []int{8, min(64, m.maxText)} {
		ids := make([]int32, 0, n+2)
		if m.specials {
			ids = append(ids, m.cls)
		}
		for range n {
			ids = append(ids, 1000)
		}
		if m.specials {
			ids = append(ids, m.sep)
		}
		var dst []float32
		prior[i] = costPoint{tokens: len(ids), took: time.Millisecond * time.Duration(1+n/16)}
		for k := range 2 {
			start := time.Now()
			if _, err := m.enc.Embed(context.Background(), ids, dst); err != nil {
				break
			}
			if k == 1 {
				prior[i].took = time.Since(start)
			}
		}
	}
	cpu := 0.0
	if o.CPUShare > 0 && o.CPUShare < 1 {
		cpu = o.CPUShare * float64(runtime.GOMAXPROCS(0))
	}
	cfg := schedConfig{workers: o.MaxConcurrent, maxBatch: batch, maxPadded: o.BatchTokens,
		queueLen: o.QueueLen, cpuShare: cpu, nice: o.Nice, threads: o.Threads}
	return newScheduler(cfg, m.runBatch, prior)
}

// runBatch is the scheduler's Run: one text alone, or a use encoder's
// batch in one Run.
func (m *Model) runBatch(batch [][]int32, dst [][]float32) error {
	if len(batch) == 1 {
		_, err := m.enc.Embed(context.Background(), batch[0], dst[0])
		return err
	}
	_, err := m.enc.embedBatch(context.Background(), batch, dst)
	return err
}

// RunStats reports the scheduler's queue, Runs and the texts it did not
// serve in time, and a remote encoder's failures (false: this Model runs
// unscheduled).
func (m *Model) RunStats() (classifier.RunStats, bool) {
	if m.sched == nil {
		return classifier.RunStats{}, false
	}
	s := m.sched.stats()
	if r := m.remote; r != nil {
		s.Failed, s.Refused, s.Down = r.failed.Load(), r.refused.Load(), r.br.open()
	}
	return s, true
}

// Open loads the model directory dir (see the package documentation): its
// manifest, its graph (checked against the manifest's model_sha256 when
// it records one) and its tokenizer, found in dir, then in modelsDir and
// modelsDir/tokenizer, and checked against tokenizer_sha256: a
// tokenizer.json (WordPiece) for a bert encoder, USE-lite's vocab.json
// (tokenize.Unigram) for a use encoder.
func Open(dir, modelsDir string, opts Options) (*Model, error) {
	if !available {
		return nil, errNotBuilt
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if m.ModelSHA256 != "" {
		if err := checkSHA256(filepath.Join(dir, m.withDefaults().Model), m.ModelSHA256, "its manifest records"); err != nil {
			return nil, err
		}
	}
	return open(dir, modelsDir, m, m.Tokenizer, m.TokenizerSHA256, 0, opts, []string{dir})
}

// open loads the graph of dir with the tokenizer tokName (pinned by tokSum
// when set, looked up in tokDirs, then modelsDir) and the token cap
// maxTokens (0: the manifest's).
func open(dir, modelsDir string, m *Manifest, tokName, tokSum string, maxTokens int, opts Options, tokDirs []string) (*Model, error) {
	tokPath, err := findFile(tokName, modelsDir, tokDirs...)
	if err != nil {
		return nil, err
	}
	if tokSum != "" {
		if err := checkSHA256(tokPath, tokSum, "the encoder was built with"); err != nil {
			return nil, err
		}
	}
	var tok Tokenizer
	var vocab int
	switch m.Input {
	case InputBERT:
		wp, err := tokenize.LoadWordPiece(tokPath)
		if err != nil {
			return nil, fmt.Errorf("onnx: tokenizer: %w", err)
		}
		tok, vocab = wp, wp.VocabSize()
	case InputUSE:
		u, err := tokenize.LoadUnigram(tokPath)
		if err != nil {
			return nil, fmt.Errorf("onnx: tokenizer: %w", err)
		}
		tok, vocab = unigramTokenizer{u}, u.VocabSize()
	default:
		return nil, fmt.Errorf("onnx: %s: input %q", dir, m.Input)
	}
	if m.Vocab > 0 && vocab != m.Vocab {
		return nil, fmt.Errorf("onnx: %s: the graph embeds a vocabulary of %d tokens, the tokenizer %s has %d", dir, m.Vocab, tokPath, vocab)
	}
	mm := *m
	if maxTokens > 0 && maxTokens < mm.MaxTokens {
		mm.MaxTokens = maxTokens
		if mm.Input == InputBERT {
			mm.MaxTokens = max(maxTokens, 3)
		}
	}
	enc, err := NewEncoder(filepath.Join(dir, m.withDefaults().Model), mm, opts, modelsDir)
	if err != nil {
		return nil, err
	}
	md, err := New(tok, enc)
	if err != nil {
		enc.Close()
		return nil, err
	}
	return md, nil
}

// unigramTokenizer is a tokenize.Unigram (USE-lite's SentencePiece) as a
// Tokenizer: cut to max ids.
type unigramTokenizer struct{ u *tokenize.Unigram }

func (t unigramTokenizer) Encode(dst []int32, text string, limit int) []int32 {
	n := len(dst)
	dst = t.u.Encode(dst, text)
	if limit > 0 && len(dst) > limit {
		dst = dst[:max(limit, n)]
	}
	return dst
}

// findFile looks name up in dirs, then modelsDir and modelsDir/tokenizer.
func findFile(name, modelsDir string, dirs ...string) (string, error) {
	var cands []string
	for _, d := range dirs {
		cands = append(cands, filepath.Join(d, name))
	}
	if modelsDir != "" {
		cands = append(cands, filepath.Join(modelsDir, name), filepath.Join(modelsDir, "tokenizer", name))
	}
	for _, c := range cands {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("onnx: %s not found in %v (run scripts/setup.sh to fetch model files)", name, cands)
}

func checkSHA256(path, want, whose string) error {
	got, err := models.FileSHA256(path)
	if err != nil {
		return fmt.Errorf("onnx: %w", err)
	}
	if got != want {
		return fmt.Errorf("onnx: %s has sha256 %s, not the %s %s was made with: rebuild or re-fetch it", path, got, want, whose)
	}
	return nil
}

// Encoder is the model's local encoder (nil for a remote one).
func (m *Model) Encoder() *Encoder { return m.enc }

// Manifest is the encoder's manifest, optional fields filled in.
func (m *Model) Manifest() Manifest { return m.man }

// Remote reports whether the encoder is a remote one.
func (m *Model) Remote() bool { return m.remote != nil }

// Dims is the feature vector's length.
func (m *Model) Dims() int { return m.man.Dims }

// Close stops the scheduler (texts waiting fail) and releases the
// encoder's session once the Runs in flight end (a remote encoder's idle
// connections at once).
func (m *Model) Close() error {
	if m.sched != nil {
		m.sched.close()
	}
	if m.remote != nil {
		m.remote.client.CloseIdleConnections()
		return nil
	}
	return m.enc.Close()
}

// Features writes text's unit-length feature vector into dst (grown to
// Dims) and returns it: the input for training and using tier-2 heads.
func (m *Model) Features(ctx context.Context, text string, dst []float32) ([]float32, error) {
	dst, _, err := m.features(ctx, text, dst)
	return dst, err
}

// Encode is Features that also returns the number of the text's tokens
// the encoder read (without [CLS] and [SEP]; a remote encoder's, an
// estimate). With a scheduled Model (Options.Schedule) and a deadline on
// ctx the text goes through the scheduler, as the gateway's do: admitted
// only if it can finish by the deadline (else classifier.ErrShed),
// batched with the texts queued beside it.
func (m *Model) Encode(ctx context.Context, text string, dst []float32) ([]float32, int, error) {
	return m.features(ctx, text, dst)
}

// features returns the vector and the number of text tokens used.
func (m *Model) features(ctx context.Context, text string, dst []float32) ([]float32, int, error) {
	if m.remote != nil {
		return m.remoteFeatures(ctx, text, dst)
	}
	dl, scheduled := ctx.Deadline()
	scheduled = scheduled && m.sched != nil
	if scheduled && m.sched.hopeless(dl) {
		return dst, 0, classifier.ErrShed
	}
	s := m.scratch.Get().(*textScratch)
	ids := s.ids[:0]
	if m.specials {
		ids = append(ids, m.cls)
	}
	if b, changed := prepare(s.text[:0], text); changed {
		// The tokenizer copies what it reads and keeps none of it, so
		// it may read s.text in place.
		s.text = b
		text = unsafe.String(unsafe.SliceData(b), len(b))
	}
	ids = m.tok.Encode(ids, text, len(ids)+m.maxText)
	n := len(ids)
	if m.specials {
		n--
		ids = append(ids, m.sep)
	}
	var err error
	if scheduled && len(ids) > 0 {
		dst, err = m.sched.embed(ctx, dl, ids, dst, m.man.Dims)
	} else {
		dst, err = m.enc.Embed(ctx, ids, dst)
	}
	s.ids = ids
	if cap(s.text) <= 1<<16 { // else a huge text's buffer: let it go
		m.scratch.Put(s)
	}
	return dst, n, err
}

// textScratch is what features reuses from one text to the next: the
// prepared text (see prepare) and its ids.
type textScratch struct {
	text []byte
	ids  []int32
}

// Classifier is tier 2: a Model and a linear head. It implements
// classifier.Classifier and is safe for concurrent use.
type Classifier struct {
	*Model
	head    *classifier.Linear
	scratch sync.Pool // *clsScratch
}

type clsScratch struct {
	feat, probs []float32
}

// NewClassifier puts head on m.
func NewClassifier(m *Model, head *classifier.Linear) (*Classifier, error) {
	if err := head.Validate(); err != nil {
		return nil, err
	}
	if head.Dims != m.Dims() {
		return nil, fmt.Errorf("onnx: the head has %d dims, the encoder %s gives %d", head.Dims, m.man.Name, m.Dims())
	}
	c := &Classifier{Model: m, head: head}
	c.scratch.New = func() any {
		return &clsScratch{feat: make([]float32, head.Dims), probs: make([]float32, len(head.Classes))}
	}
	return c, nil
}

// Head is the classifier's head.
func (c *Classifier) Head() *classifier.Linear { return c.head }

// Classes are the head's classes.
func (c *Classifier) Classes() []string { return c.head.Classes }

// Classify scores text and fills r (reusing r.Top's capacity): Tier 2, the
// TopK classes, Tokens the text's tokens used (without [CLS] and [SEP]).
// It returns ctx's error if ctx ends before or during the encoder's Run
// (see Encoder.Embed), and an error wrapping classifier.ErrUnavailable in
// a build without the runtime.
func (c *Classifier) Classify(ctx context.Context, text string, r *classifier.Result) error {
	s := c.scratch.Get().(*clsScratch)
	defer c.scratch.Put(s)
	feat, n, err := c.features(ctx, text, s.feat)
	if err != nil {
		return err
	}
	s.feat = feat
	c.head.Probs(feat, s.probs)
	r.Tier = 2
	r.Tokens = n
	r.SetTop(c.head.Classes, s.probs, TopK)
	r.SetProbs(s.probs)
	return nil
}

// Load builds tier 2 from a heads artifact whose tier-2 encoder has kind
// "onnx": it finds the model directory Encoder.Model names (in the
// artifact's directory, then in modelsDir), checks its graph against
// Encoder.ModelSHA256 and the tokenizer against the recorded sha256, and
// loads them with the tier-2 head.
func Load(h *classifier.Heads, modelsDir string, opts Options) (*Classifier, error) {
	t := h.Tier2
	if t == nil {
		return nil, fmt.Errorf("onnx: heads %s have no tier-2 head", h.Dir)
	}
	if t.Encoder.Kind != "onnx" {
		return nil, fmt.Errorf("onnx: heads %s: tier-2 encoder is %q, want onnx", h.Dir, t.Encoder.Kind)
	}
	if t.Encoder.Model == "" {
		return nil, fmt.Errorf("onnx: heads %s name no tier-2 model directory (encoder.model)", h.Dir)
	}
	if !available {
		return nil, errNotBuilt
	}
	dir, err := h.Resolve(t.Encoder.Model, modelsDir)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if sum := t.Encoder.ModelSHA256; sum != "" {
		p := filepath.Join(dir, m.withDefaults().Model)
		got, err := models.FileSHA256(p)
		if err != nil {
			return nil, fmt.Errorf("onnx: %w", err)
		}
		if got != sum {
			return nil, fmt.Errorf("onnx: %s has sha256 %s, the heads in %s were trained with %s: rebuild the model or retrain the heads", p, got, h.Dir, sum)
		}
	}
	// The heads' own tokenizer, if they name one, is looked up in their
	// directory, then beside the graph; else the manifest's, beside the
	// graph. Then in the models directory.
	tokName, tokSum, tokDirs := m.Tokenizer, m.TokenizerSHA256, []string{dir}
	if t.Encoder.Tokenizer != "" {
		tokName, tokSum, tokDirs = t.Encoder.Tokenizer, t.Encoder.TokenizerSHA256, []string{h.Dir, dir}
	}
	md, err := open(dir, modelsDir, m, tokName, tokSum, t.Encoder.MaxTokens, opts, tokDirs)
	if err != nil {
		return nil, err
	}
	head := t.Head
	c, err := NewClassifier(md, &head)
	if err != nil {
		md.Close()
		return nil, err
	}
	return c, nil
}
