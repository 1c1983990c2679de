package tokenize

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
)

// WholeWords is a WordLookup for EncodeWords that knows every word the
// vocabulary holds whole (its tokens that do not carry the continuing-subword
// prefix) as well as extra words with ids of their own past the vocabulary.
// With it, a word is one hash lookup: a vocabulary word no longer misses the
// extra words first and then finds itself in the vocabulary's map, which is
// where most of a text's tokenizing went. It gives the ids EncodeWords gives
// with the extra words alone, since a word that is a vocabulary token is
// that token's one id either way. Safe for concurrent use.
type WholeWords struct {
	seed  uint64
	blob  []byte   // the words, back to back
	ends  []uint32 // end of word i in blob
	ids   []int32  // id of word i
	slots []uint64 // tag (hash's high 32 bits) << 32 | word index + 1; 0 is empty
	mask  uint64
}

// WholeWords builds the index of t's whole-word tokens and of extra, whose
// word i has id first+i. An extra word that is also a vocabulary token
// keeps the extra id, as EncodeWords gives it: the lookup comes before the
// vocabulary.
func (t *WordPiece) WholeWords(extra []string, first int32) (*WholeWords, error) {
	w := &WholeWords{seed: rand.Uint64()}
	n := 0
	words := make([]string, 0, len(t.vocab)+len(extra))
	ids := make([]int32, 0, cap(words))
	seen := make(map[string]bool, len(extra))
	for i, x := range extra {
		if x == "" {
			return nil, fmt.Errorf("tokenize: extra word %d is empty", i)
		}
		seen[x] = true
		words, ids = append(words, x), append(ids, first+int32(i))
		n += len(x)
	}
	for tok, id := range t.vocab {
		if tok == "" || seen[tok] || t.prefix != "" && strings.HasPrefix(tok, t.prefix) {
			continue
		}
		words, ids = append(words, tok), append(ids, id)
		n += len(tok)
	}
	if uint64(n) >= 1<<32 || len(words) >= 1<<31 {
		return nil, fmt.Errorf("tokenize: %d whole words of %d bytes in all: too many", len(words), n)
	}
	w.blob = make([]byte, 0, n)
	w.ends = make([]uint32, len(words))
	w.ids = ids
	size := 1 << bits.Len(uint(len(words)+len(words)/2)) // at most 2/3 full
	w.slots = make([]uint64, size)
	w.mask = uint64(size - 1)
	for i, s := range words {
		start := len(w.blob)
		w.blob = append(w.blob, s...)
		w.ends[i] = uint32(len(w.blob))
		h, _ := w.hash(w.blob[start:])
		j := h & w.mask
		for w.slots[j] != 0 {
			if string(w.word(int(uint32(w.slots[j])-1))) == s {
				return nil, fmt.Errorf("tokenize: whole word %q twice", s)
			}
			j = (j + 1) & w.mask
		}
		w.slots[j] = h>>32<<32 | uint64(i+1)
	}
	return w, nil
}

func (w *WholeWords) word(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = w.ends[i-1]
	}
	return w.blob[start:w.ends[i]]
}

// Word returns the id of the whole word b, without allocating.
func (w *WholeWords) Word(b []byte) (int32, bool) {
	h, last := w.hash(b)
	tag := h >> 32
	for j := h & w.mask; ; j = (j + 1) & w.mask {
		e := w.slots[j]
		if e == 0 {
			return 0, false
		}
		if e>>32 != tag {
			continue
		}
		i := int(uint32(e) - 1)
		start := uint32(0)
		if i > 0 {
			start = w.ends[i-1]
		}
		end := w.ends[i]
		if int(end-start) != len(b) {
			continue
		}
		// A word of at most 8 bytes is compared as the one masked
		// word the hash read, when the blob has 8 bytes from its start.
		if len(b) <= 8 && int(start)+8 <= len(w.blob) {
			if binary.LittleEndian.Uint64(w.blob[start:start+8])&(^uint64(0)>>(64-8*uint(len(b)))) == last {
				return w.ids[i], true
			}
			continue
		}
		if string(w.blob[start:end]) == string(b) {
			return w.ids[i], true
		}
	}
}

// Len is the number of words in the index.
func (w *WholeWords) Len() int { return len(w.ends) }

// MemoryBytes is the heap the index holds.
func (w *WholeWords) MemoryBytes() int {
	return len(w.blob) + 4*len(w.ends) + 4*len(w.ids) + 8*len(w.slots)
}

// hash is a seeded multiply-xorshift hash of b, eight bytes at a time, and
// the last (up to eight) bytes as a little-endian word. A word's last bytes are read as one little-endian word when b's capacity
// allows (the bytes past its length are masked off), as it does for the
// scanner's buffer, so a typical word is one or two multiplies. The table
// is built once and only read, so a caller's choice of words can slow its
// own lookups at most to the longest probe run, never the index.
func (w *WholeWords) hash(b []byte) (h, last uint64) {
	const k0, k1, k2 = 0x9E3779B97F4A7C15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb
	h = w.seed ^ uint64(len(b))*k0
	for len(b) > 8 {
		h = (h ^ binary.LittleEndian.Uint64(b)) * k1
		h ^= h >> 29
		b = b[8:]
	}
	if cap(b) >= 8 {
		last = binary.LittleEndian.Uint64(b[:8]) & (^uint64(0) >> (64 - 8*uint(len(b))))
	} else {
		for i := len(b) - 1; i >= 0; i-- {
			last = last<<8 | uint64(b[i])
		}
	}
	h = (h ^ last) * k1
	h ^= h >> 32
	h *= k2
	h ^= h >> 29
	return h, last
}
