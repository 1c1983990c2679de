package distill

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/sif"
)

// DefaultDims is the PCA target of Table when Options.Dims is 0:
// model2vec's default.
const DefaultDims = 256

// Options tune Table.
type Options struct {
	// Dims is the number of principal components kept (default
	// DefaultDims), at most the teacher's embedding length.
	Dims int
	// ExtraWords are whole words (already normalised as the tier-1
	// tokenizer normalises, distinct, none empty) to give rows of their own
	// after the vocabulary's: the table's extra words, for words the
	// vocabulary would split into pieces. Each is embedded as it is.
	ExtraWords []string
	// Norm, when positive, scales every vector by one factor so that the
	// rows with a vector have a mean L2 norm of Norm. PCA leaves a unit-length
	// teacher's rows at a mean norm under 1 (0.72 for USE lite at 256
	// dims); a tier that trains from the table (tuned tier 1, whose
	// learning rate suits GloVe's rows of mean norm 5.1) starts better
	// from rows of the scale it was tuned for. Zero leaves the PCA scale;
	// a tier that L2-normalises its features does not see the difference.
	Norm float64
	// Weights, when not nil, are the per-row weights (len(vocab) +
	// len(ExtraWords) of them), used as given for every row that gets a
	// vector (special tokens and rows without a vector get 0 whatever
	// Weights says). Nil means Zipf weights by rank: RankWeights with
	// sif.A, the extra words ranked after the vocabulary.
	Weights []float32
	// SIFA is the a of the Zipf weights a/(a+p(r)) when Weights is nil;
	// 0 means sif.A (1e-3, as for GloVe tables).
	SIFA float64
	// Limit, when positive, sends only the first Limit rows that would get
	// a vector (vocabulary tokens in id order, then extra words) through
	// the teacher; the other rows stay zero rows of weight 0 (for tests and
	// quick trials).
	Limit int
	// Workers is the number of embed calls in flight (default GOMAXPROCS).
	Workers int
	// Progress, if set, is called now and then with the surface forms
	// embedded so far and their total, and once at the end; never
	// concurrently.
	Progress func(done, total int)
}

// Table builds a float32 static table for a student vocabulary from a
// teacher sentence encoder, the model2vec way: every token's surface form is
// embedded by the teacher on its own (embed, the teacher's pooled output),
// the vectors are projected onto their first Dims principal components (PCA,
// which also centres them) and, with Norm, scaled, and each row gets a
// weight. No training data is needed.
//
// vocab is the student tokenizer's tokens in id order. A WordPiece
// continuation "##x" is embedded as "x" (so it shares the vector of the
// whole word x when the vocabulary has both: each distinct surface form is
// embedded once). Special tokens — "" (an unused id) and any "[X]" token
// such as [PAD], [UNK], [CLS], [SEP], [MASK] and [unusedN] — and a bare
// "##" are zero rows of weight 0, as is a token the teacher maps to the zero
// vector; none of them takes part in the PCA. Extra words
// (Options.ExtraWords) are embedded as they are and follow the
// vocabulary, as in any Table.
//
// Weights: with Options.Weights nil, a row's weight is the SIF
// weight a/(a+p(r)) of its Zipf frequency estimate p(r) = 1/(r·ln(1.78·N)),
// r its 1-based rank among the rows with a vector in row order (vocabulary
// ids, then extra words) and N their number (as RankWeights). This
// is current model2vec's weighting (SIF over a Zipf estimate from the id
// order, which for WordPiece and BPE vocabularies roughly follows
// frequency), with this package's a and Zipf normaliser so that distilled
// and GloVe tables weigh alike; model2vec's first releases scaled vectors by
// log(rank) instead, which also gives the frequent tokens at the head of the
// vocabulary little weight but never saturates. The weights are the table's
// per-row weights, not baked into the vectors, so a tier that ignores them
// (a tuned table's uniform mean) sees the plain vectors.
//
// The table has len(vocab) + len(ExtraWords) rows and no buckets. Its
// manifest's Method is "distill" and its Weighting and Notes say what was
// done (counts, timings, explained variance, scale); the caller sets Name,
// Source, TokenizerSHA256 and Created. The result does not depend on
// Workers or scheduling when embed is deterministic. Table stops at the
// first error of embed (or of ctx) and returns it.
func Table(ctx context.Context, vocab []string, embed func(ctx context.Context, text string) ([]float32, error), opts Options) (*models.Table, error) {
	if len(vocab) == 0 {
		return nil, errors.New("distill: empty vocabulary")
	}
	if embed == nil {
		return nil, errors.New("distill: no embed function")
	}
	rows := len(vocab) + len(opts.ExtraWords)
	if opts.Weights != nil && len(opts.Weights) != rows {
		return nil, fmt.Errorf("distill: %d weights for %d rows (%d vocabulary tokens + %d extra words)", len(opts.Weights), rows, len(vocab), len(opts.ExtraWords))
	}
	if i := models.FirstNonFinite(opts.Weights); i >= 0 {
		return nil, fmt.Errorf("distill: weight of row %d is %v", i, opts.Weights[i])
	}
	seenWord := make(map[string]bool, len(opts.ExtraWords))
	for i, w := range opts.ExtraWords {
		if w == "" || seenWord[w] {
			return nil, fmt.Errorf("distill: extra word %d (%q) is empty or repeated", i, w)
		}
		seenWord[w] = true
	}
	dims := opts.Dims
	if dims == 0 {
		dims = DefaultDims
	}
	if dims < 0 {
		return nil, fmt.Errorf("distill: %d dimensions", dims)
	}
	if opts.Norm < 0 || math.IsNaN(opts.Norm) || math.IsInf(opts.Norm, 0) {
		return nil, fmt.Errorf("distill: norm %v", opts.Norm)
	}
	if opts.SIFA < 0 || math.IsNaN(opts.SIFA) || math.IsInf(opts.SIFA, 0) {
		return nil, fmt.Errorf("distill: SIF a %v", opts.SIFA)
	}

	// The distinct surface forms, in order of first appearance; rowForm
	// maps each row to its form (-1: no vector).
	rowForm := make([]int, rows)
	formIndex := make(map[string]int)
	var forms []string
	specials, limited, kept := 0, 0, 0
	for i := range rows {
		var s string
		if i < len(vocab) {
			var ok bool
			if s, ok = Surface(vocab[i]); !ok {
				rowForm[i] = -1
				specials++
				continue
			}
		} else {
			s = opts.ExtraWords[i-len(vocab)]
		}
		if opts.Limit > 0 && kept >= opts.Limit {
			rowForm[i] = -1
			limited++
			continue
		}
		kept++
		f, seen := formIndex[s]
		if !seen {
			f = len(forms)
			formIndex[s] = f
			forms = append(forms, s)
		}
		rowForm[i] = f
	}
	if len(forms) == 0 {
		return nil, errors.New("distill: no token of the vocabulary has a surface form (all special)")
	}

	start := time.Now()
	vecs, err := embedAll(ctx, forms, embed, opts.Workers, opts.Progress)
	if err != nil {
		return nil, err
	}
	embedTime := time.Since(start)

	// Forms the teacher gives no vector (the zero vector) are dropped.
	var fit [][]float32
	fitOf := make([]int, len(forms)) // form -> row of fit, -1 if none
	zeros := 0
	for f, v := range vecs {
		if isZero(v) {
			fitOf[f] = -1
			zeros++
			continue
		}
		fitOf[f] = len(fit)
		fit = append(fit, v)
	}
	if len(fit) == 0 {
		return nil, errors.New("distill: the teacher gave the zero vector for every token")
	}
	teacherDims := len(fit[0])
	if dims > teacherDims {
		return nil, fmt.Errorf("distill: %d dimensions asked, the teacher's embeddings have %d", dims, teacherDims)
	}
	pcaStart := time.Now()
	proj, explained := PCA(fit, dims)
	pcaTime := time.Since(pcaStart)
	dims = len(proj[0]) // == dims: PCA caps it at teacherDims, checked above

	// Rows: the vector of the token's form, and a rank among the rows
	// with a vector.
	flat := make([]float32, rows*dims)
	hasVec := make([]bool, rows)
	for i, f := range rowForm {
		if f < 0 || fitOf[f] < 0 {
			continue
		}
		copy(flat[i*dims:i*dims+dims], proj[fitOf[f]])
		hasVec[i] = true
	}
	scale := 1.0
	if opts.Norm > 0 {
		var sum float64
		n := 0
		for i, h := range hasVec {
			if h {
				sum += norm(flat[i*dims : i*dims+dims])
				n++
			}
		}
		if mean := sum / float64(n); mean > 0 {
			scale = opts.Norm / mean
		}
		for i, h := range hasVec {
			if h {
				for j := range dims {
					flat[i*dims+j] = float32(float64(flat[i*dims+j]) * scale)
				}
			}
		}
	}
	a := opts.SIFA
	if a == 0 {
		a = sif.A
	}
	var weights []float32
	var weighting string
	if opts.Weights == nil {
		weights = rankWeights(hasVec, a)
		n := 0
		for _, h := range hasVec {
			if h {
				n++
			}
		}
		weighting = fmt.Sprintf("sif a/(a+p(r)), a=%g, zipf p(r)=1/(r*ln(1.78*N)) by rank r (1-based) in row order (vocabulary ids, then extra words) among the N=%d rows with a vector; other rows weight 0", a, n)
	} else {
		weights = make([]float32, rows)
		for i, h := range hasVec {
			if h {
				weights[i] = opts.Weights[i]
			}
		}
		weighting = "given per-row weights (distill.Options.Weights); rows without a vector weight 0"
	}

	var cum float64
	for _, e := range explained {
		cum += e
	}
	notes := fmt.Sprintf("%d vocabulary tokens, %d special (zero rows of weight 0); %d extra words", len(vocab), specials, len(opts.ExtraWords))
	if limited > 0 {
		notes += fmt.Sprintf(", %d past the limit of %d (zero rows of weight 0)", limited, opts.Limit)
	}
	notes += fmt.Sprintf("; %d distinct surface forms embedded by the teacher (## continuations as the bare piece) in %s", len(forms), embedTime.Round(time.Millisecond))
	if zeros > 0 {
		notes += fmt.Sprintf(", %d of them the zero vector (zero rows of weight 0)", zeros)
	}
	notes += fmt.Sprintf("; PCA %d -> %d dims on %d vectors in %s, explaining %.1f%% of the variance",
		teacherDims, dims, len(proj), pcaTime.Round(time.Millisecond), 100*cum)
	if opts.Norm > 0 {
		notes += fmt.Sprintf("; vectors scaled by %.4g to a mean norm of %g", scale, opts.Norm)
	}
	m := models.Manifest{Method: "distill", Weighting: weighting, Notes: notes}
	t, err := models.NewTable(m, len(vocab), opts.ExtraWords, flatRows(flat, dims), weights)
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	return t, nil
}

// Surface returns the text Table sends to the teacher for a
// vocabulary token: the token itself, or x for a WordPiece continuation
// "##x"; ok is false for the tokens that get no vector (the empty token, a
// bare "##", and special tokens written "[X]": [PAD], [UNK], [CLS], [SEP],
// [MASK], [unusedN], ...).
func Surface(tok string) (surface string, ok bool) {
	if tok == "" || (len(tok) > 2 && tok[0] == '[' && tok[len(tok)-1] == ']') {
		return "", false
	}
	s := strings.TrimPrefix(tok, "##")
	if strings.TrimSpace(s) == "" {
		return "", false
	}
	return s, true
}

// RankWeights returns the Zipf-rank SIF weights Table gives vocab
// and extra words by default, ignoring the teacher: a/(a+p(r)) with p(r) =
// 1/(r·ln(1.78·N)), r the row's 1-based rank in row order (vocabulary ids,
// then the extra words) among the rows that have a surface form
// (Surface; every non-empty extra word) and N their number; 0 for the
// others. a = 0 means sif.A. Use it to fill in the rows that a weight source
// (say an existing table's SIF weights) lacks.
func RankWeights(vocab, extraWords []string, a float64) []float32 {
	has := make([]bool, len(vocab)+len(extraWords))
	for i, tok := range vocab {
		_, has[i] = Surface(tok)
	}
	for i, w := range extraWords {
		has[len(vocab)+i] = w != ""
	}
	if a == 0 {
		a = sif.A
	}
	return rankWeights(has, a)
}

// WeightsFrom returns the row weights of src, a table over the same
// vocabulary, for the vocabulary rows and extra words it weighs (weight >
// 0) among those RankWeights(vocab, extra, a) weighs, and the Zipf-rank
// weights for the others; from counts the rows taken from src. Extra words
// are looked up in src by their text.
func WeightsFrom(src *models.Table, vocab, extra []string, a float64) (w []float32, from int, err error) {
	if src.VocabSize() != len(vocab) {
		return nil, 0, fmt.Errorf("distill: WeightsFrom: the table's rows follow a vocabulary of %d tokens, not %d", src.VocabSize(), len(vocab))
	}
	w = RankWeights(vocab, extra, a)
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
	return w, from, nil
}

// rankWeights is SIF over Zipf ranks of the rows with has set.
func rankWeights(has []bool, a float64) []float32 {
	ranks := make([]int, len(has))
	n := 0
	for i, h := range has {
		if h {
			n++
			ranks[i] = n
		}
	}
	return sif.Weights(ranks, n, a)
}

// embedAll embeds texts with workers goroutines; out[i] is texts[i]'s
// vector. Every vector must be finite and as long as the first.
func embedAll(ctx context.Context, texts []string, embed func(context.Context, string) ([]float32, error), workers int, progress func(done, total int)) ([][]float32, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(texts))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([][]float32, len(texts))
	var (
		next, done atomic.Int64
		mu         sync.Mutex // guards firstErr and progress calls
		firstErr   error
		wg         sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	const every = 256
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(texts) || ctx.Err() != nil {
					return
				}
				v, err := embed(ctx, texts[i])
				if err != nil {
					fail(fmt.Errorf("distill: embedding %q: %w", texts[i], err))
					return
				}
				if j := models.FirstNonFinite(v); j >= 0 {
					fail(fmt.Errorf("distill: the embedding of %q has a non-finite value %v at %d", texts[i], v[j], j))
					return
				}
				out[i] = append([]float32(nil), v...) // embed may reuse its buffer
				if n := done.Add(1); progress != nil && n%every == 0 {
					mu.Lock()
					if firstErr == nil {
						progress(int(n), len(texts))
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	d := len(out[0])
	if d == 0 {
		return nil, fmt.Errorf("distill: the embedding of %q is empty", texts[0])
	}
	for i, v := range out {
		if len(v) != d {
			return nil, fmt.Errorf("distill: the embedding of %q has %d values, that of %q %d", texts[i], len(v), texts[0], d)
		}
	}
	if progress != nil {
		progress(len(texts), len(texts))
	}
	return out, nil
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func isZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

// flatRows views a flat row-major slice as rows of dims values.
func flatRows(flat []float32, dims int) [][]float32 {
	r := make([][]float32, len(flat)/dims)
	for i := range r {
		r[i] = flat[i*dims : (i+1)*dims : (i+1)*dims]
	}
	return r
}
