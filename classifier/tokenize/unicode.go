package tokenize

import (
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The character classes of Hugging Face's BertNormalizer and
// BertPreTokenizer (tokenizers/src/normalizers/bert.rs and
// pre_tokenizers/bert.rs), on Go's Unicode tables. testdata/codepoints.txt.gz,
// written by scripts/golden-tokenizer.mjs from the Rust library, pins every
// code point; TestCodePoints checks these functions against it.

// isBertControl reports whether clean_text removes r: Rust's
// unicode_categories is_other(), which is Cc, Cf and Co (not Cn: unassigned
// code points are kept), except tab, newline and carriage return, which are
// whitespace.
func isBertControl(r rune) bool {
	if r < utf8.RuneSelf {
		return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7F
	}
	if inRanges(hfNotControl, r) {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co) || inRanges(hfExtraControl, r)
}

func baseControl(r rune) bool {
	switch r {
	case '\t', '\n', '\r':
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co)
}

// isWhitespace is Rust's char::is_whitespace, the White_Space property:
// clean_text maps these to ' ' and the pre-tokenizer splits on them.
func isWhitespace(r rune) bool {
	return unicode.IsSpace(r)
}

// isCJK is BERT's _is_chinese_char with Hugging Face's ranges (note
// 0x2B920, not the 0x2B820 of Google's BERT: U+2B820..U+2B91F are not
// padded).
func isCJK(r rune) bool {
	switch {
	case r < 0x3400:
		return false
	case r <= 0x4DBF:
		return true
	case r < 0x4E00:
		return false
	case r <= 0x9FFF:
		return true
	case r >= 0xF900 && r <= 0xFAFF:
		return true
	case r < 0x20000:
		return false
	case r <= 0x2A6DF,
		r >= 0x2A700 && r <= 0x2B73F,
		r >= 0x2B740 && r <= 0x2B81F,
		r >= 0x2B920 && r <= 0x2CEAF,
		r >= 0x2F800 && r <= 0x2FA1F:
		return true
	}
	return false
}

// isPunct is BERT's is_punctuation: every ASCII symbol (the ranges
// 0x21-0x2F, 0x3A-0x40, 0x5B-0x60, 0x7B-0x7E: Rust's is_ascii_punctuation)
// and the Unicode categories P*.
func isPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0x21 && r <= 0x2F || r >= 0x3A && r <= 0x40 || r >= 0x5B && r <= 0x60 || r >= 0x7B && r <= 0x7E
	}
	if inRanges(hfNotPunct, r) {
		return false
	}
	return unicode.In(r, unicode.P) || inRanges(hfExtraPunct, r)
}

func basePunct(r rune) bool {
	if r < utf8.RuneSelf {
		return isPunct(r)
	}
	return unicode.In(r, unicode.P)
}

// isMn reports whether strip_accents removes r (after NFD).
func isMn(r rune) bool {
	if r < 0x300 {
		return false
	}
	if inRanges(hfNotMn, r) {
		return false
	}
	return unicode.Is(unicode.Mn, r) || inRanges(hfExtraMn, r)
}

func baseMn(r rune) bool {
	return unicode.Is(unicode.Mn, r)
}

// appendLower appends Rust's char::to_lowercase(r): the full lowercase
// mapping, which differs from Go's simple mapping only for U+0130 (İ →
// "i̇"). Rust lowercases char by char, so no final-sigma rule.
func appendLower(dst []rune, r rune) []rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return append(dst, r)
	}
	if r == 0x130 {
		return append(dst, 'i', 0x307)
	}
	if i, ok := slices.BinarySearch(hfLowerFrom, r); ok {
		return append(dst, hfLowerTo[i])
	}
	return append(dst, unicode.ToLower(r))
}

func baseLower(dst []rune, r rune) []rune {
	if r == 0x130 {
		return append(dst, 'i', 0x307)
	}
	return append(dst, unicode.ToLower(r))
}

// inRanges reports whether r is in one of the inclusive ranges of t, a
// sorted list of lo, hi pairs.
func inRanges(t []rune, r rune) bool {
	n := len(t) / 2
	if n == 0 || r < t[0] || r > t[len(t)-1] {
		return false
	}
	i, j := 0, n
	for i < j {
		h := int(uint(i+j) >> 1)
		if t[2*h+1] < r {
			i = h + 1
		} else {
			j = h
		}
	}
	return i < n && t[2*i] <= r
}

// Hangul syllable decomposition (Unicode §3.12); x/text's Properties do not
// carry it.
const (
	hangulBase  = 0xAC00
	hangulEnd   = 0xD7A4
	jamoLBase   = 0x1100
	jamoVBase   = 0x1161
	jamoTBase   = 0x11A7
	jamoTCount  = 28
	jamoNCount  = 21 * 28
	hangulCount = 11172
)

// appendNFD appends the canonical decomposition of r (itself when it has
// none). Canonical reordering is the caller's job.
func appendNFD(dst []rune, r rune) []rune {
	if r < 0xC0 {
		return append(dst, r)
	}
	if inRanges(hfNoDecompose, r) {
		return append(dst, r)
	}
	return baseNFD(dst, r)
}

func baseNFD(dst []rune, r rune) []rune {
	if r < 0xC0 {
		return append(dst, r)
	}
	if r >= hangulBase && r < hangulEnd {
		s := r - hangulBase
		dst = append(dst, jamoLBase+s/jamoNCount, jamoVBase+(s%jamoNCount)/jamoTCount)
		if t := s % jamoTCount; t != 0 {
			dst = append(dst, jamoTBase+t)
		}
		return dst
	}
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	d := norm.NFD.Properties(b[:n]).Decomposition()
	if d == nil {
		return append(dst, r)
	}
	for len(d) > 0 {
		c, size := utf8.DecodeRune(d)
		dst = append(dst, c)
		d = d[size:]
	}
	return dst
}

// ccc is the canonical combining class of r.
func ccc(r rune) uint8 {
	if r < 0x300 {
		return 0
	}
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	return norm.NFD.Properties(b[:n]).CCC()
}

// runeInfo packs what the default normalizer (clean_text, CJK padding,
// strip_accents and lowercase all on) and the pre-tokenizer do with one BMP
// rune, so that the common case costs one table load.
type runeInfo uint32

const (
	riDel    runeInfo = 1 << iota // clean_text removes it (U+0000, U+FFFD, controls)
	riSpace                       // whitespace
	riCJK                         // padded with spaces
	riSimple                      // NFD is itself, combining class 0, not Mn, one-rune lowercase
	riPunct                       // its lowercase is punctuation
	riShift  = 8                  // its lowercase, shifted
)

// bmpInfo is runeInfo for every rune below 0x10000, built on first use
// (about 20 ms, 256 KiB).
var bmpInfo = sync.OnceValue(func() *[0x10000]runeInfo {
	var t [0x10000]runeInfo
	var lb, db [4]rune
	for r := rune(0); r < 0x10000; r++ {
		var i runeInfo
		if r == 0 || r == utf8.RuneError || isBertControl(r) {
			i |= riDel
		}
		if isWhitespace(r) {
			i |= riSpace
		}
		if isCJK(r) {
			i |= riCJK
		}
		if r >= 0xD800 && r <= 0xDFFF {
			t[r] = i
			continue
		}
		l := appendLower(lb[:0], r)
		if d := appendNFD(db[:0], r); len(d) == 1 && d[0] == r && ccc(r) == 0 && !isMn(r) && len(l) == 1 {
			i |= riSimple | runeInfo(l[0])<<riShift
			if isPunct(l[0]) {
				i |= riPunct
			}
		}
		t[r] = i
	}
	return &t
})
