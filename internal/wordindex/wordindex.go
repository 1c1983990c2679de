// Package wordindex is a read-only hash index of byte strings held back to
// back in one blob: a table file's extra words (models) and a tokenizer's
// whole words (tokenize.WholeWords). For 50,000 words of about 8 bytes it
// is about 1.6 MB (the slots 1 MB of it), against several times that for a
// map[string]int32, and a lookup allocates nothing.
package wordindex

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// Index holds n words in Blob (Ends[i] is the end of word i, which starts
// at Ends[i-1]) and an open-addressing hash table over them: each slot
// holds a tag (the hash's high 32 bits) and the word's index+1, 0 is
// empty, linear probing, at most 2/3 full. Set Blob and Ends (as a file
// reader does), then call Build; or use New. An Index is safe for
// concurrent lookups once built.
type Index struct {
	Blob []byte
	Ends []uint32
	// IDs, when set (one per word), are what Word answers instead of
	// the word's index.
	IDs   []int32
	slots []uint64
	mask  uint64
	seed  uint64
}

// New builds an Index of words, in order: word i is words[i].
func New(words []string) (Index, error) {
	var x Index
	total := 0
	for _, s := range words {
		total += len(s)
	}
	if uint64(total) > 1<<32-1 {
		return x, fmt.Errorf("words: more than 4 GiB of text")
	}
	x.Blob = make([]byte, 0, total)
	x.Ends = make([]uint32, len(words))
	for i, s := range words {
		x.Blob = append(x.Blob, s...)
		x.Ends[i] = uint32(len(x.Blob))
	}
	return x, x.Build()
}

// Build makes the hash table over Blob and Ends, rejecting empty and
// repeated words (errors "word %d is empty", "word %d %q repeats word %d").
func (x *Index) Build() error {
	n := len(x.Ends)
	if n >= 1<<31 {
		return fmt.Errorf("%d words: too many", n)
	}
	size := 1 << bits.Len(uint(n+n/2)) // at most 2/3 full
	x.slots = make([]uint64, size)
	x.mask = uint64(size - 1)
	x.seed = rand.Uint64()
	for i := range n {
		s := x.At(i)
		if len(s) == 0 {
			return fmt.Errorf("word %d is empty", i)
		}
		h, _ := x.hash(s)
		j := h & x.mask
		for x.slots[j] != 0 {
			if k := int(uint32(x.slots[j]) - 1); string(x.At(k)) == string(s) {
				return fmt.Errorf("word %d %q repeats word %d", i, s, k)
			}
			j = (j + 1) & x.mask
		}
		x.slots[j] = h>>32<<32 | uint64(i+1)
	}
	return nil
}

// Len is the number of words.
func (x *Index) Len() int { return len(x.Ends) }

// At is word i. Its capacity runs to the blob's end (the hash may read
// past its length, never past the blob).
func (x *Index) At(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = x.Ends[i-1]
	}
	return x.Blob[start:x.Ends[i]]
}

// Word returns the id of the word b, IDs[i] for word i or i without IDs,
// without allocating. It is a tokenizer's WordLookup: a type that embeds
// an Index answers with this method itself (a promoted method through a
// pointer is a jump), one call a word.
func (x *Index) Word(b []byte) (int32, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	h, last := x.hash(b)
	tag := h >> 32
	for j := h & x.mask; ; j = (j + 1) & x.mask {
		e := x.slots[j]
		if e == 0 {
			return 0, false
		}
		if e>>32 != tag {
			continue
		}
		i := int(uint32(e) - 1)
		start := uint32(0)
		if i > 0 {
			start = x.Ends[i-1]
		}
		end := x.Ends[i]
		if int(end-start) != len(b) {
			continue
		}
		// A word of at most 8 bytes is compared as the one masked
		// word the hash read, when the blob has 8 bytes from its start.
		if len(b) <= 8 && int(start)+8 <= len(x.Blob) {
			if binary.LittleEndian.Uint64(x.Blob[start:start+8])&(^uint64(0)>>(64-8*uint(len(b)))) != last {
				continue
			}
		} else if string(x.Blob[start:end]) != string(b) {
			continue
		}
		if x.IDs != nil {
			return x.IDs[i], true
		}
		return int32(i), true
	}
}

// Clone is a copy that shares nothing with x.
func (x *Index) Clone() Index {
	return Index{Blob: clone(x.Blob), Ends: clone(x.Ends), IDs: clone(x.IDs), slots: clone(x.slots), mask: x.mask, seed: x.seed}
}

func clone[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T(nil), s...)
}

// MemoryBytes is the heap the index holds.
func (x *Index) MemoryBytes() int { return len(x.Blob) + 4*len(x.Ends) + 4*len(x.IDs) + 8*len(x.slots) }

// hash is a seeded multiply-xorshift hash of b, eight bytes at a time, and
// the last (up to eight) bytes as a little-endian word. A word's last bytes
// are read as one word when b's capacity allows (the bytes past its length
// are masked off), as it does for a scanner's buffer or a word of the blob,
// so a typical word is one or two multiplies. The table is built once and
// only read, so a caller's choice of words can slow its own lookups at most
// to the longest probe run, never the index.
func (x *Index) hash(b []byte) (h, last uint64) {
	const k0, k1, k2 = 0x9E3779B97F4A7C15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb
	h = x.seed ^ uint64(len(b))*k0
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
