package tokenize

import (
	"math"
	"sync"
	"unicode/utf8"
)

// WordPiece is BERT's WordPiece tokenizer with Hugging Face's
// BertNormalizer and BertPreTokenizer, read from a tokenizer.json. It
// reproduces the ids of Hugging Face's tokenizers (without special tokens,
// truncation or padding) and does not allocate while encoding. It is
// immutable after LoadWordPiece and safe for concurrent use.
type WordPiece struct {
	vocab    map[string]int32
	tokens   []string
	unkID    int32
	prefix   string
	maxChars int // max_input_chars_per_word, in runes
	maxKey   int // length in bytes of the longest vocabulary entry
	norm     normFlags
	added    []addedToken // longest first
	// Byte classes for the ASCII fast path; bytes >= 0x80 are clsHigh and
	// first bytes of added tokens clsAdded (their own class in base).
	cls      [256]uint8
	base     [256]uint8
	lower    [128]byte
	punctIDs [128]int32 // ids of the one-character words of ASCII punctuation
	// info is bmpInfo when the normalizer has all options on (the fast
	// path for non-ASCII runes), else nil.
	info *[0x10000]runeInfo
	// alpha holds the runes >= 0x80 that occur in the vocabulary: a word
	// with any other rune is unk without a search.
	alpha   [0x10000 / 64]uint64
	alphaHi map[rune]bool
	pool    sync.Pool // *scanner
}

const (
	clsWord  = iota // part of a word (lower maps it)
	clsSpace        // separates words
	clsPunct        // a word on its own
	clsDel          // removed by clean_text
	clsHigh         // first byte of a non-ASCII rune (or an invalid byte)
	clsAdded        // may start an added token
)

// LoadWordPiece reads a Hugging Face tokenizer.json with a WordPiece model,
// a BertNormalizer and a BertPreTokenizer: the vocabulary, unk token,
// continuing-subword prefix, max_input_chars_per_word, the normalizer's
// options and the added tokens (which, as in Hugging Face, are matched in
// the raw text and encoded as their own ids). Truncation and padding are
// ignored.
func LoadWordPiece(path string) (*WordPiece, error) {
	c, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	t := &WordPiece{
		vocab:    c.vocab,
		unkID:    c.vocab[c.unk],
		prefix:   c.prefix,
		maxChars: c.maxChars,
		norm:     c.norm,
		added:    c.added,
	}
	n := 0
	for tok, id := range c.vocab {
		n = max(n, int(id)+1)
		t.maxKey = max(t.maxKey, len(tok))
	}
	for _, a := range c.added {
		n = max(n, int(a.id)+1)
	}
	t.tokens = make([]string, n)
	t.alphaHi = make(map[rune]bool)
	for tok, id := range c.vocab {
		t.tokens[id] = tok
		for _, r := range tok {
			switch {
			case r < utf8.RuneSelf:
			case r < 0x10000:
				t.alpha[r/64] |= 1 << (r % 64)
			default:
				t.alphaHi[r] = true
			}
		}
	}
	if f := c.norm; f.cleanText && f.handleCJK && f.stripAccents && f.lowercase {
		t.info = bmpInfo()
	}
	for _, a := range c.added {
		t.tokens[a.id] = a.content
	}
	for b := 0; b < 256; b++ {
		r := rune(b)
		var k uint8
		switch {
		case b >= utf8.RuneSelf:
			k = clsHigh
		case c.norm.cleanText && (r == 0 || isBertControl(r)):
			k = clsDel
		case isWhitespace(r):
			k = clsSpace
		case isPunct(r):
			k = clsPunct
		default:
			k = clsWord
		}
		t.base[b], t.cls[b] = k, k
		if b < utf8.RuneSelf {
			t.lower[b] = byte(b)
			if c.norm.lowercase && 'A' <= b && b <= 'Z' {
				t.lower[b] += 'a' - 'A'
			}
		}
	}
	for _, a := range c.added {
		t.cls[a.content[0]] = clsAdded
	}
	t.pool.New = func() any {
		return &scanner{t: t, buf: make([]byte, len(t.prefix), len(t.prefix)+4*t.maxChars+8)}
	}
	for b := 0; b < utf8.RuneSelf; b++ {
		if t.base[b] == clsPunct {
			t.punctIDs[b] = t.AppendPieces(nil, []byte{t.lower[b]})[0]
		}
	}
	return t, nil
}

// VocabSize is the number of ids: the vocabulary with the added tokens.
func (t *WordPiece) VocabSize() int { return len(t.tokens) }

// Token returns the token of id, or "" if there is none.
func (t *WordPiece) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// ID returns the id of the vocabulary entry or added token tok.
func (t *WordPiece) ID(tok string) (int32, bool) {
	if id, ok := t.vocab[tok]; ok {
		return id, true
	}
	for _, a := range t.added {
		if a.content == tok {
			return a.id, true
		}
	}
	return 0, false
}

// UnkID is the id of the unknown token.
func (t *WordPiece) UnkID() int32 { return t.unkID }

// Words calls fn with each pre-token of text, in order, until fn returns
// false: the words and punctuation characters that WordPiece encodes, after
// BERT normalisation — clean_text (drop U+0000, U+FFFD, invalid UTF-8 bytes
// and control characters (Cc, Cf, Co), map whitespace to ' '), CJK
// ideographs padded with spaces, NFD with the nonspacing marks (Mn) removed
// (strip_accents, which follows lowercase) and Unicode lowercase, each as
// the tokenizer.json's normalizer options say — and BertPreTokenizer: split on
// whitespace, every punctuation character (Unicode P* and the ASCII symbols)
// a word of its own. Added tokens written in text (such as "[SEP]") are
// passed as themselves, like Hugging Face matches them in the raw text. word
// is valid only during the call.
func (t *WordPiece) Words(text string, fn func(word []byte) bool) {
	s := t.pool.Get().(*scanner)
	s.fn = fn
	s.store = math.MaxInt
	s.run(text)
	s.fn = nil
	t.putScanner(s)
}

// AppendPieces appends the WordPiece ids of word, one normalised pre-token
// (as Words yields): greedy longest-match-first, pieces after the first
// carrying the continuing-subword prefix ("##"). A word longer than
// max_input_chars_per_word runes, or one that the vocabulary cannot cover,
// becomes a single unk id. An empty word appends nothing.
func (t *WordPiece) AppendPieces(dst []int32, word []byte) []int32 {
	if len(word) == 0 {
		return dst
	}
	if utf8.RuneCount(word) > t.maxChars {
		return append(dst, t.unkID)
	}
	s := t.pool.Get().(*scanner)
	s.buf = append(s.buf[:len(t.prefix)], word...)
	mark := len(dst)
	dst, ok := t.pieces(dst, s.buf)
	if !ok {
		dst = append(dst[:mark], t.unkID)
	}
	t.putScanner(s)
	return dst
}

// Encode appends the ids of text to dst (no [CLS] or [SEP]), stopping as
// soon as len(dst) reaches max; max <= 0 means no limit. The ids are those
// of Hugging Face's encode(text, add_special_tokens=False) without
// truncation, cut to max; work stops at max, so the cost of a long text is
// bounded by max. It allocates only when dst must grow.
func (t *WordPiece) Encode(dst []int32, text string, max int) []int32 {
	return t.EncodeWords(dst, text, max, nil)
}

// WordLookup gives whole normalised words an id of their own.
type WordLookup interface {
	Word(w []byte) (id int32, ok bool)
}

// EncodeWords is Encode where a word that words knows becomes its one id
// (typically a row past the vocabulary, for a frequent word the vocabulary
// would split) instead of its pieces. words may be nil. It allocates nothing
// when dst has room.
func (t *WordPiece) EncodeWords(dst []int32, text string, max int, words WordLookup) []int32 {
	if max > 0 && len(dst) >= max {
		return dst
	}
	s := t.pool.Get().(*scanner)
	s.dst = dst
	s.max = max
	s.store = t.maxChars
	s.words = words
	s.run(text)
	dst = s.dst
	s.dst, s.words = nil, nil
	t.putScanner(s)
	return dst
}

func (t *WordPiece) putScanner(s *scanner) {
	if cap(s.buf) > 1<<16 || cap(s.dec) > 1<<12 || cap(s.pend) > 1<<12 {
		return // a huge word or run of marks: let it go
	}
	s.buf = s.buf[:len(t.prefix)]
	s.n, s.stop = 0, false
	t.pool.Put(s)
}

// pieces appends the greedy longest-match-first pieces of the word in
// buf[len(t.prefix):], and reports whether the vocabulary covered it (when
// it did not, what it appended is to be dropped). buf[:len(t.prefix)] is
// room for the prefix: a continuation piece starting at byte start is
// looked up as buf[start:len(prefix)+end] after copying the prefix over
// the bytes before it, which are already consumed, so nothing is copied
// and nothing allocated. buf is clobbered.
func (t *WordPiece) pieces(dst []int32, buf []byte) ([]int32, bool) {
	p := len(t.prefix)
	w := buf[p:]
	for start := 0; start < len(w); {
		end := len(w)
		lim := t.maxKey
		if start > 0 {
			lim -= p
			copy(buf[start:start+p], t.prefix)
		}
		if end-start > lim {
			end = start + lim
			for end > start && !utf8.RuneStart(w[end]) {
				end--
			}
		}
		for {
			if end <= start {
				return dst, false
			}
			var id int32
			var ok bool
			if start == 0 {
				id, ok = t.vocab[string(w[:end])]
			} else {
				id, ok = t.vocab[string(buf[start:p+end])]
			}
			if ok {
				dst = append(dst, id)
				break
			}
			if start == 0 && end == len(w) && !t.covered(w) {
				return dst, false
			}
			end--
			for end > start && !utf8.RuneStart(w[end]) {
				end--
			}
		}
		start = end
	}
	return dst, true
}

// covered reports whether every rune of w occurs in the vocabulary (if not,
// no split of w exists).
func (t *WordPiece) covered(w []byte) bool {
	for i := 0; i < len(w); {
		if w[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(w[i:])
		i += size
		if r < 0x10000 {
			if t.alpha[r/64]&(1<<(r%64)) == 0 {
				return false
			}
		} else if !t.alphaHi[r] {
			return false
		}
	}
	return true
}

// scanner is the per-call state of Encode and Words, pooled.
type scanner struct {
	t     *WordPiece
	buf   []byte // prefix room, then the current word
	n     int    // runes in the current word (counted past store)
	store int    // runes of a word worth keeping: max_input_chars_per_word for Encode
	stop  bool

	dst   []int32 // Encode
	max   int
	words WordLookup        // EncodeWords
	fn    func([]byte) bool // Words

	dec  []rune // decomposition of a rune
	pend []rune // kept non-starters awaiting canonical ordering
	ids  []int32
}

// run normalises and pre-tokenises text, passing each word to s.word and
// each added token to s.token.
func (s *scanner) run(text string) {
	t := s.t
	p := len(t.prefix)
	buf, n, store := s.buf[:p], 0, s.store
	for i := 0; i < len(text); {
		c := text[i]
		k := t.cls[c]
		if k == clsAdded {
			if a, ok := matchAdded(t.added, text[i:]); ok {
				s.buf, s.n = buf, n
				if s.flush(); s.stop {
					return
				}
				if s.token(a); s.stop {
					return
				}
				buf, n = s.buf, 0
				i += len(a.content)
				continue
			}
			k = t.base[c]
		}
		switch k {
		case clsWord:
			// The rest of a run of ASCII word bytes in this loop,
			// with no class dispatch per byte. A byte that may start
			// an added token has its own class in cls, so the run
			// stops there and the loop above tries to match it.
			for {
				if n < store {
					buf = append(buf, t.lower[c&0x7f])
				}
				n++
				if i++; i >= len(text) {
					break
				}
				if c = text[i]; t.cls[c] != clsWord {
					break
				}
			}
		case clsSpace:
			i++
			if n > 0 {
				s.buf, s.n = buf, n
				if s.flush(); s.stop {
					return
				}
				buf, n = s.buf, 0
			}
		case clsPunct:
			i++
			s.buf, s.n = buf, n
			if s.flush(); s.stop {
				return
			}
			if s.fn == nil {
				s.dst = append(s.dst, t.punctIDs[c])
				if s.max > 0 && len(s.dst) >= s.max {
					return
				}
			} else if s.punct(rune(c)); s.stop {
				return
			}
			buf, n = s.buf, 0
		case clsDel:
			i++
		default: // clsHigh
			j := t.segmentEnd(text, i)
			s.buf, s.n = buf, n
			if s.segment(text[i:j]); s.stop {
				return
			}
			buf, n = s.buf, s.n
			i = j
		}
	}
	s.buf, s.n = buf, n
	s.flush()
}

// segmentEnd returns the end of the non-ASCII run starting at text[i]: the
// next ASCII byte that clean_text keeps (those it removes are removed before
// NFD, so marks on either side of them are reordered together), or the
// next added token.
func (t *WordPiece) segmentEnd(text string, i int) int {
	j := i + 1
	for j < len(text) {
		c := text[j]
		if t.cls[c] == clsAdded {
			if _, ok := matchAdded(t.added, text[j:]); ok {
				break
			}
		}
		if c < utf8.RuneSelf && t.base[c] != clsDel {
			break
		}
		j++
	}
	return j
}

// segment normalises seg, raw text without added tokens in which every
// ASCII byte is one clean_text removes, and feeds the result to the
// pre-tokenizer.
func (s *scanner) segment(seg string) {
	f := s.t.norm
	info := s.t.info
	for k := 0; k < len(seg); {
		r, size := rune(seg[k]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(seg[k:])
		}
		k += size
		if info != nil && r < 0x10000 {
			// Fast path: what normalizeRune and pretok would do, from
			// the table.
			in := info[r]
			switch {
			case in&riDel != 0:
				continue
			case in&(riSimple|riSpace|riCJK) == riSimple:
				if len(s.pend) > 0 {
					s.flushMarks()
				}
				l := rune(in >> riShift)
				if in&riPunct != 0 {
					if s.flush(); !s.stop {
						s.punct(l)
					}
				} else {
					if s.n < s.store {
						s.buf = utf8.AppendRune(s.buf, l)
					}
					s.n++
				}
				if s.stop {
					return
				}
				continue
			case in&(riSimple|riCJK) == riSimple|riCJK:
				s.flushMarks()
				if s.flush(); s.stop {
					return
				}
				s.buf = utf8.AppendRune(s.buf, rune(in>>riShift))
				s.n = 1
				if s.word(); s.stop {
					return
				}
				continue
			case in&riSpace != 0:
				s.flushMarks()
				if s.flush(); s.stop {
					return
				}
				continue
			}
		}
		if f.cleanText {
			if r == 0 || r == utf8.RuneError || isBertControl(r) {
				continue
			}
			if isWhitespace(r) {
				r = ' '
			}
		}
		if f.handleCJK && isCJK(r) {
			s.decompose(' ')
			s.decompose(r)
			s.decompose(' ')
		} else {
			s.decompose(r)
		}
		if s.stop {
			return
		}
	}
	s.flushMarks()
}

// decompose runs strip_accents on r: NFD, nonspacing marks dropped, the
// other non-starters held back for canonical ordering.
func (s *scanner) decompose(r rune) {
	if !s.t.norm.stripAccents {
		s.lower(r)
		return
	}
	if r >= 0xC0 { // below, nothing decomposes or combines
		s.dec = appendNFD(s.dec[:0], r)
		for _, d := range s.dec {
			cc := ccc(d)
			switch {
			case isMn(d):
				if cc == 0 {
					s.flushMarks()
				}
			case cc == 0:
				s.flushMarks()
				s.lower(d)
			default:
				s.pend = append(s.pend, d)
			}
		}
		return
	}
	s.flushMarks()
	s.lower(r)
}

// flushMarks passes on the held non-starters, stably sorted by combining
// class (canonical ordering; runs are short).
func (s *scanner) flushMarks() {
	if len(s.pend) == 0 {
		return
	}
	p := s.pend
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && ccc(p[j]) < ccc(p[j-1]); j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
	for _, r := range p {
		s.lower(r)
	}
	s.pend = s.pend[:0]
}

// lower lowercases r and pre-tokenizes the result.
func (s *scanner) lower(r rune) {
	if !s.t.norm.lowercase {
		s.pretok(r)
		return
	}
	var one [2]rune
	for _, l := range appendLower(one[:0], r) {
		s.pretok(l)
	}
}

// pretok is BertPreTokenizer for one normalised rune.
func (s *scanner) pretok(r rune) {
	if s.stop {
		return
	}
	switch {
	case isWhitespace(r):
		s.flush()
	case isPunct(r):
		if s.flush(); !s.stop {
			s.punct(r)
		}
	default:
		if s.n < s.store {
			s.buf = utf8.AppendRune(s.buf, r)
		}
		s.n++
	}
}

// flush ends the current word, if any.
func (s *scanner) flush() {
	if s.n == 0 {
		return
	}
	s.word()
}

// punct passes r as a word of its own. The current word is empty.
func (s *scanner) punct(r rune) {
	s.buf = utf8.AppendRune(s.buf, r)
	s.n = 1
	s.word()
}

// word passes on the word in s.buf and empties it.
func (s *scanner) word() {
	t := s.t
	p := len(t.prefix)
	if s.fn != nil {
		if !s.fn(s.buf[p:]) {
			s.stop = true
		}
	} else {
		if id, ok := s.lookup(); ok {
			s.dst = append(s.dst, id)
		} else {
			s.dst = t.appendWord(s, s.dst, s.max)
		}
		if s.max > 0 && len(s.dst) >= s.max {
			s.stop = true
		}
	}
	s.buf, s.n = s.buf[:p], 0
}

// lookup asks s.words for the whole word in s.buf (kept whole only up to
// max_input_chars_per_word runes, beyond which a word is [UNK] anyway).
func (s *scanner) lookup() (int32, bool) {
	if s.words == nil || s.n > s.t.maxChars {
		return 0, false
	}
	return s.words.Word(s.buf[len(s.t.prefix):])
}

// token passes on an added token.
func (s *scanner) token(a addedToken) {
	if s.fn != nil {
		s.buf = append(s.buf[:len(s.t.prefix)], a.content...)
		s.n = utf8.RuneCountInString(a.content)
		if !s.fn(s.buf[len(s.t.prefix):]) {
			s.stop = true
		}
		s.buf, s.n = s.buf[:len(s.t.prefix)], 0
		return
	}
	s.dst = append(s.dst, a.id)
	if s.max > 0 && len(s.dst) >= s.max {
		s.stop = true
	}
}

// appendWord appends the pieces of the word in s.buf (s.n runes), at most
// up to max ids in all.
func (t *WordPiece) appendWord(s *scanner, dst []int32, max int) []int32 {
	if s.n > t.maxChars {
		return append(dst, t.unkID)
	}
	nb := len(s.buf) - len(t.prefix)
	if max <= 0 || len(dst)+nb <= max {
		// At most one id per byte: dst cannot pass max.
		mark := len(dst)
		dst, ok := t.pieces(dst, s.buf)
		if !ok {
			dst = append(dst[:mark], t.unkID)
		}
		return dst
	}
	ids, ok := t.pieces(s.ids[:0], s.buf)
	s.ids = ids
	if !ok {
		return append(dst, t.unkID)
	}
	return append(dst, ids[:min(len(ids), max-len(dst))]...)
}
