package tokenize

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/normalizer"
	"github.com/sugarme/tokenizer/pretrained"
	"golang.org/x/text/unicode/norm"
)

// Reference is github.com/sugarme/tokenizer's pipeline (its tokenizer.json
// loader, added-vocabulary and pre-tokenized-string machinery, and WordPiece
// model), loaded offline, with the fixes that Hugging Face parity needs. It
// is slow (hundreds of µs per short text) and meant for tests and tools.
//
// sugarme v0.3.0 differs from Hugging Face's tokenizers in these ways, each
// fixed here:
//
//   - BertNormalizer: strip_accents null is read as false (Hugging Face:
//     follows lowercase, so true here); it strips accents without NFD first
//     ("Café" → [UNK] instead of "cafe"), and lowercases before stripping
//     (Hugging Face: NFD, strip Mn, then lowercase char by char, Rust's full
//     mapping); clean_text does not remove private-use characters (Co), maps
//     only \t \n \r (and only next to a removed character) to ' ', not
//     Unicode whitespace such as U+00A0 or U+3000; the CJK range
//     U+2B820..U+2B91F is padded (Hugging Face: from U+2B920); and its
//     lowercasing changes byte lengths without updating alignments. Replaced
//     by refNormalizer, a plain implementation of Hugging Face's.
//   - BertPreTokenizer: splits whitespace with the regexp \s+ (ASCII only)
//     and punctuation with Go's Unicode 15 tables; Hugging Face uses Unicode
//     White_Space and Unicode 8 categories. Replaced by refPreTokenizer,
//     which uses sugarme's own splitting with the right classes.
//   - Added tokens: sugarme sorts matches by pattern index rather than
//     position, so with two different special tokens in a text the later
//     one in the file can hide the earlier one in the text. Reference splits
//     the raw text on added tokens itself (leftmost-longest, as Hugging Face)
//     and lets sugarme encode the text between them.
//   - The loader reads continuing_subword_prefix with Get instead of Set,
//     so the prefix is always "##" (which is this file's prefix).
//   - Invalid UTF-8: Rust strings cannot hold it; Reference replaces each
//     invalid byte with U+FFFD first (as Go's range over a string does), which
//     clean_text then removes. WordPiece does the same.
//
// Truncation and padding from the file are disabled.
type Reference struct {
	tk    *tokenizer.Tokenizer
	added []addedToken
}

// LoadReference loads path with sugarme's pretrained.FromFile (no network:
// no CachedPath or hub helpers) and applies the fixes above.
func LoadReference(path string) (*Reference, error) {
	c, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	tk, err := pretrained.FromFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: sugarme: %s: %w", path, err)
	}
	tk.WithTruncation(nil)
	tk.WithPadding(nil)
	tk.WithNormalizer(refNormalizer{c.norm})
	tk.WithPreTokenizer(refPreTokenizer{})
	return &Reference{tk: tk, added: c.added}, nil
}

// Encode returns the ids of text, without special tokens.
func (r *Reference) Encode(text string) ([]int32, error) {
	text = toValidUTF8(text)
	var ids []int32
	for len(text) > 0 {
		// The next added token, leftmost then longest.
		at, tok := len(text), addedToken{}
		for i := 0; i < len(text); i++ {
			if a, ok := matchAdded(r.added, text[i:]); ok {
				at, tok = i, a
				break
			}
		}
		if at > 0 {
			enc, err := r.tk.EncodeSingle(text[:at], false)
			if err != nil {
				return nil, fmt.Errorf("tokenize: sugarme: %w", err)
			}
			for _, id := range enc.Ids {
				ids = append(ids, int32(id))
			}
		}
		if at == len(text) {
			break
		}
		ids = append(ids, tok.id)
		text = text[at+len(tok.content):]
	}
	return ids, nil
}

// toValidUTF8 replaces each invalid byte of s with U+FFFD.
func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

// refNormalizer is Hugging Face's BertNormalizer as a sugarme normalizer,
// written plainly over whole strings (x/text's NFD); WordPiece's
// streaming, allocation-free version is checked against it.
type refNormalizer struct{ f normFlags }

func (n refNormalizer) Normalize(s *normalizer.NormalizedString) (*normalizer.NormalizedString, error) {
	return normalizer.NewNormalizedFrom(refNormalize(s.GetNormalized(), n.f)), nil
}

func refNormalize(s string, f normFlags) string {
	var b strings.Builder
	for _, r := range s {
		if f.cleanText {
			if r == 0 || r == utf8.RuneError || isBertControl(r) {
				continue
			}
			if isWhitespace(r) {
				r = ' '
			}
		}
		if f.handleCJK && isCJK(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
		} else {
			b.WriteRune(r)
		}
	}
	s = b.String()
	if f.stripAccents {
		s = strings.Map(func(r rune) rune {
			if isMn(r) {
				return -1
			}
			return r
		}, refNFD(s))
	}
	if f.lowercase {
		b.Reset()
		var rs []rune
		for _, r := range s {
			for _, l := range appendLower(rs[:0], r) {
				b.WriteRune(l)
			}
		}
		s = b.String()
	}
	return s
}

// refNFD is x/text's NFD, except for the code points Hugging Face's older
// tables do not decompose (all starters, so they split the text).
func refNFD(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexFunc(s, func(r rune) bool { return inRanges(hfNoDecompose, r) })
		if i < 0 {
			b.WriteString(norm.NFD.String(s))
			return b.String()
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		b.WriteString(norm.NFD.String(s[:i]))
		b.WriteString(s[i : i+size])
		s = s[i+size:]
	}
}

// refPreTokenizer is sugarme's BertPreTokenizer with Hugging Face's
// character classes.
type refPreTokenizer struct{}

func (refPreTokenizer) PreTokenize(p *tokenizer.PreTokenizedString) (*tokenizer.PreTokenizedString, error) {
	return p.Split(func(_ int, sub *normalizer.NormalizedString) []tokenizer.SplitIdx {
		var out []tokenizer.SplitIdx
		for _, w := range sub.Split(normalizer.NewFnPattern(isWhitespace), normalizer.RemovedBehavior) {
			for _, piece := range w.Split(normalizer.NewFnPattern(isPunct), normalizer.IsolatedBehavior) {
				piece := piece
				out = append(out, tokenizer.SplitIdx{Normalized: &piece})
			}
		}
		return out
	}), nil
}
