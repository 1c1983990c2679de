package static

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/models"
)

// DefaultMaxTokens caps the tokens one text contributes: a 64 KB prompt then
// costs what a 3 KB one does.
const DefaultMaxTokens = 512

// TopK is how many classes a Result lists.
const TopK = 3

// Model is a loaded tier 1: tokenizer, table and head.
//
// With mean features ("mean" normalisation) the head is linear in each
// row's vector, so New folds it in: every row keeps its weighted logit
// contribution, W·(weight·vector), and classifying a text sums those (one
// value per class and row) instead of the vectors (one value per dimension
// and row). The result is the same up to float rounding; the vectors are
// then no longer needed. New does this when it is no larger than the
// vectors (classes × 4 bytes against the table's bytes per row).
type Model struct {
	tok       *tokenize.WordPiece
	words     *tokenize.WholeWords // the vocabulary's whole words and the table's extra words
	table     *models.Table        // nil when folded
	rows      int
	head      *classifier.Linear
	maxTokens int
	mean      bool      // divide by the weight sum instead of L2-normalising
	buckets   int       // bigram buckets: the table's last rows
	fold      []float32 // rows × classes: weight(r) · W·vector(r)
	weight    []float32 // rows: weight(r), when folded
	conf      *classifier.Confidence
	cent      *classifier.Centroids // nil: no distance in Classify's results
	structure bool                  // add the Markers' rows (see AppendMarkers)
	markers   [numMarkers]int32     // their rows
	piece     []bool                // by vocabulary id: a piece that continues a word (##...)
	pool      sync.Pool
}

type scratch struct {
	rows  []int32
	n     int // tokens in rows before the bigrams
	feat  []float32
	probs []float32
	phi   []float32
}

// Familiarity names the features a classifier.Confidence weighs, in
// order: the constant 1; the token count, ln(1+n)/ln(513) (a short text
// is little evidence); and the share of the tokens that continue a word
// the vocabulary splits (rare words, names, identifiers, typos: text the
// table knows less well). Both come from the rows Classify makes anyway.
var Familiarity = []string{"bias", "log_tokens", "pieces"}

// familiarity writes the Familiarity features of the first n rows of rows
// into phi.
func (m *Model) familiarity(rows []int32, n int, phi []float32) {
	var pieces int
	for _, r := range rows[:n] {
		if int(r) < len(m.piece) && m.piece[r] {
			pieces++
		}
	}
	phi[0], phi[1], phi[2] = 1, float32(math.Log1p(float64(n))/math.Log(513)), 0
	if n > 0 {
		phi[2] = float32(pieces) / float32(n)
	}
}

// New builds a Model. enc supplies MaxTokens, Normalize and Bigrams.
func New(tok *tokenize.WordPiece, table *models.Table, head *classifier.Linear, enc classifier.Encoder) (*Model, error) {
	return build(tok, table, head, enc, nil, false)
}

// NewWithCentroids builds a Model as New does that keeps its vectors
// (it never folds: Features works) and, with centroids (nil: none),
// reports each text's distance from its top class's centroid in
// Classify's Result.Distance.
func NewWithCentroids(tok *tokenize.WordPiece, table *models.Table, head *classifier.Linear, enc classifier.Encoder, c *classifier.Centroids) (*Model, error) {
	return build(tok, table, head, enc, c, true)
}

func build(tok *tokenize.WordPiece, table *models.Table, head *classifier.Linear, enc classifier.Encoder, cent *classifier.Centroids, keep bool) (*Model, error) {
	if err := head.Validate(); err != nil {
		return nil, err
	}
	if head.Hidden > 0 {
		return nil, fmt.Errorf("static: tier 1 takes a linear head, not one with a hidden layer (%s)", head.Kind)
	}
	if head.Dims != table.Dims() {
		return nil, fmt.Errorf("static: head has %d dims, table %q has %d", head.Dims, table.Manifest.Name, table.Dims())
	}
	if table.VocabSize() != tok.VocabSize() {
		return nil, fmt.Errorf("static: table %q follows a vocabulary of %d tokens, the tokenizer has %d", table.Manifest.Name, table.VocabSize(), tok.VocabSize())
	}
	words, err := tok.WholeWords(table.ExtraWords(), int32(table.VocabSize()))
	if err != nil {
		return nil, fmt.Errorf("static: table %q: %w", table.Manifest.Name, err)
	}
	m := &Model{tok: tok, words: words, table: table, rows: table.Rows(), head: head, maxTokens: enc.MaxTokens,
		mean: enc.Normalize == "mean", buckets: enc.Bigrams}
	if m.maxTokens <= 0 {
		m.maxTokens = DefaultMaxTokens
	}
	if m.buckets < 0 || m.buckets >= table.Rows() {
		return nil, fmt.Errorf("static: %d bigram buckets in a table of %d rows", m.buckets, table.Rows())
	}
	if enc.Bigrams != table.Buckets() {
		return nil, fmt.Errorf("static: the head was trained with %d bigram buckets, table %q has %d", enc.Bigrams, table.Manifest.Name, table.Buckets())
	}
	if enc.Confidence != nil {
		if err := enc.Confidence.Validate(Familiarity); err != nil {
			return nil, fmt.Errorf("static: %w", err)
		}
		m.conf = enc.Confidence
	}
	if cent != nil {
		if err := cent.Validate(len(head.Classes), head.Dims); err != nil {
			return nil, fmt.Errorf("static: %w", err)
		}
		m.cent = cent
	}
	if enc.Structure {
		m.structure = true
		for i, w := range Markers {
			r, ok := table.Word([]byte(w))
			if !ok {
				return nil, fmt.Errorf("static: the head was trained with structural markers, table %q has no row for %s", table.Manifest.Name, w)
			}
			m.markers[i] = r
		}
	}
	m.piece = make([]bool, tok.VocabSize())
	for id := range m.piece {
		m.piece[id] = strings.HasPrefix(tok.Token(int32(id)), "##")
	}
	k, d := len(head.Classes), table.Dims()
	if m.mean && !keep && 4*k <= table.MemoryBytes()/table.Rows() {
		m.fold = make([]float32, m.rows*k)
		m.weight = make([]float32, m.rows)
		vec := make([]float32, d)
		for r := range m.rows {
			w := table.Weight(int32(r))
			m.weight[r] = w
			if w == 0 {
				continue
			}
			table.Vector(int32(r), vec)
			for i := range vec {
				vec[i] *= w
			}
			out := m.fold[r*k : r*k+k]
			for c := range k {
				row := head.W[c*d : c*d+d]
				var s float32
				for i, x := range vec {
					s += row[i] * x
				}
				out[c] = s
			}
		}
		m.table = nil // the vectors can go
	}
	m.pool.New = func() any {
		return &scratch{rows: make([]int32, 0, 2*m.maxTokens+64+numMarkers*maxMarkers), feat: make([]float32, d), probs: make([]float32, k),
			phi: make([]float32, len(Familiarity))}
	}
	return m, nil
}

// Classes are the head's classes.
func (m *Model) Classes() []string { return m.head.Classes }

// Head is the model's head.
func (m *Model) Head() *classifier.Linear { return m.head }

// Tokenizer is the model's tokenizer.
func (m *Model) Tokenizer() *tokenize.WordPiece { return m.tok }

// MaxTokens is the token cap.
func (m *Model) MaxTokens() int { return m.maxTokens }

// Folded reports whether the head was folded into the rows (see Model).
func (m *Model) Folded() bool { return m.fold != nil }

// Rows appends the table rows of text's tokens to dst, at most max of them:
// a word with a row of its own (a frequent word the vocabulary would split)
// is one row; any other word is its WordPiece ids.
func Rows(tok *tokenize.WordPiece, words tokenize.WordLookup, dst []int32, text string, max int) []int32 {
	return tok.EncodeWords(dst, text, max, words)
}

// AppendBigrams appends, for each pair of consecutive rows in doc, the row
// of its hash bucket: the last buckets rows of a table of rows rows.
func AppendBigrams(doc []int32, rows, buckets int) []int32 {
	if buckets <= 0 {
		return doc
	}
	base := uint64(rows - buckets)
	n := len(doc)
	for i := 0; i+1 < n; i++ {
		h := uint64(uint32(doc[i]))*0x9E3779B97F4A7C15 ^ uint64(uint32(doc[i+1]))
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		doc = append(doc, int32(base+h%uint64(buckets)))
	}
	return doc
}

// tokens fills s.rows with text's rows (bigrams and markers included) and
// returns the number of tokens.
func (m *Model) tokens(s *scratch, text string) int {
	s.rows = Rows(m.tok, m.words, s.rows[:0], text, m.maxTokens)
	n := len(s.rows)
	s.rows = AppendBigrams(s.rows, m.rows, m.buckets)
	if m.structure {
		s.rows = AppendMarkers(s.rows, text, &m.markers)
	}
	s.n = n
	return n
}

// Phi writes text's Familiarity features into phi (len(Familiarity)).
func (m *Model) Phi(text string, phi []float32) {
	s := m.pool.Get().(*scratch)
	n := m.tokens(s, text)
	m.familiarity(s.rows, n, phi)
	m.pool.Put(s)
}

// WithConfidence returns a copy of m that divides its logits by c's
// per-text scale (nil: none). m is unchanged; the copy shares its table.
func (m *Model) WithConfidence(c *classifier.Confidence) (*Model, error) {
	if c != nil {
		if err := c.Validate(Familiarity); err != nil {
			return nil, fmt.Errorf("static: %w", err)
		}
	}
	cp := &Model{tok: m.tok, words: m.words, table: m.table, rows: m.rows, head: m.head, maxTokens: m.maxTokens,
		mean: m.mean, buckets: m.buckets, fold: m.fold, weight: m.weight, conf: c, cent: m.cent, piece: m.piece,
		structure: m.structure, markers: m.markers}
	cp.pool.New = m.pool.New
	return cp, nil
}

// Centroids are the model's class centroids, nil without them.
func (m *Model) Centroids() *classifier.Centroids { return m.cent }

// Confidence is the model's per-text temperature, nil without one.
func (m *Model) Confidence() *classifier.Confidence { return m.conf }

// Features writes text's feature vector into feat (len Dims) and returns the
// number of tokens used. It needs the vectors: ok is false for a folded
// model.
func (m *Model) Features(text string, feat []float32) (tokens int, ok bool) {
	if m.table == nil {
		return 0, false
	}
	s := m.pool.Get().(*scratch)
	n := m.tokens(s, text)
	m.features(s, feat)
	m.pool.Put(s)
	return n, true
}

func (m *Model) features(s *scratch, feat []float32) {
	clear(feat)
	wsum := m.table.AccumulateRows(feat, s.rows)
	if !m.mean {
		classifier.L2Normalize(feat)
		return
	}
	if wsum > 0 {
		inv := 1 / wsum
		for i := range feat {
			feat[i] *= inv
		}
	}
}

// logits writes the head's logits for the rows in s into out, divided
// by the text's Confidence scale when the model has one.
func (m *Model) logits(s *scratch, out []float32) {
	m.rawLogits(s, out)
	if m.conf == nil {
		return
	}
	m.familiarity(s.rows, s.n, s.phi)
	inv := 1 / m.conf.Scale(s.phi)
	for i := range out {
		out[i] *= inv
	}
}

func (m *Model) rawLogits(s *scratch, out []float32) {
	if m.fold == nil {
		m.features(s, s.feat)
		m.head.Logits(s.feat, out)
		return
	}
	k := len(out)
	clear(out)
	var wsum float32
	for _, r := range s.rows {
		c := m.fold[int(r)*k : int(r)*k+k]
		for i := range out {
			out[i] += c[i]
		}
		wsum += m.weight[r]
	}
	inv := float32(0)
	if wsum > 0 {
		inv = 1 / wsum
	}
	for i := range out {
		out[i] = out[i]*inv + m.head.B[i]
	}
}

// Logits writes the head's logits (before temperature and softmax; after
// the Confidence scale, when the model has one) for text into out and
// returns the number of tokens used.
func (m *Model) Logits(text string, out []float32) int {
	s := m.pool.Get().(*scratch)
	n := m.tokens(s, text)
	m.logits(s, out)
	m.pool.Put(s)
	return n
}

// Classify scores text and fills r (reusing r.Top's capacity). Tier 1 takes
// microseconds: it does not look at ctx and never fails.
func (m *Model) Classify(_ context.Context, text string, r *classifier.Result) error {
	s := m.pool.Get().(*scratch)
	r.Tokens = m.tokens(s, text)
	m.logits(s, s.probs)
	classifier.Softmax(s.probs, m.head.Temperature)
	r.Tier = 1
	r.SetTop(m.head.Classes, s.probs, TopK)
	r.SetProbs(s.probs)
	r.Distance = 0
	if m.cent != nil {
		// s.feat holds the features: a model with centroids is never
		// folded, so logits computed them.
		r.Distance = m.cent.Distance(s.feat, classifier.Argmax(s.probs))
	}
	m.pool.Put(s)
	return nil
}

// Probs writes the class probabilities of text into out.
func (m *Model) Probs(text string, out []float32) {
	m.Logits(text, out)
	classifier.Softmax(out, m.head.Temperature)
}

// ReleasePages drops the pages of the model's table that lookups made
// resident, when the table is mapped from its file
// (models.Table.ReleasePages): for a gateway whose traffic stopped. Safe
// concurrently with Classify.
func (m *Model) ReleasePages() {
	if m.table != nil {
		m.table.ReleasePages()
	}
}

// Fold returns the folded form of the model's head (see Model): rows ×
// classes logit contributions and the bias; nil if the model is not folded.
func (m *Model) Fold() (contrib []float32, bias []float32) {
	if m.fold == nil {
		return nil, nil
	}
	return m.fold, m.head.B
}
