package tokenize

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzWordPiece compares WordPiece with Reference on arbitrary strings,
// valid UTF-8 or not, and checks that Encode with a max is a prefix of
// Encode without and that Encode is AppendPieces over Words.
//
// Invalid UTF-8: Hugging Face's tokenizers work on Rust strings, which are
// valid UTF-8 by construction; bytes reach them decoded with replacement
// (Python's errors="replace", Node's Buffer.toString), so invalid bytes
// become U+FFFD, which clean_text removes. Both WordPiece and Reference
// treat each invalid byte as U+FFFD: the bytes vanish without splitting the
// word around them ("a\xffb" is "ab"). How many U+FFFD a run of bad bytes
// becomes does not matter, since all are removed; testdata/golden.jsonl has
// rows of invalid UTF-8 encoded by the Rust library after Node's decoding.
//
//	go test ./classifier/tokenize -run '^$' -fuzz FuzzWordPiece -fuzztime 2m
func FuzzWordPiece(f *testing.F) {
	wp := loadWordPiece(f)
	ref := loadReference(f)
	for _, row := range readGolden(f) {
		f.Add(row.text(f))
	}
	for _, s := range []string{
		"", "[MASK]", "a\xffb", "\xed\xa0\x80", "e\u0301\u0316\u0300",
		"x\U0001D16D\U0001D165\u0301y", "\u0130\u03a3\u1e9e", "\u3000\u00a0\u2028",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := wp.Encode(nil, s, 0)
		want, err := ref.Encode(s)
		if err != nil {
			t.Fatalf("Reference.Encode(%q): %v", s, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Encode(%q) (valid UTF-8: %v):\n  WordPiece %v %s\n  Reference %v %s", s, utf8.ValidString(s), got, tokens(wp, got), want, tokens(wp, want))
		}
		if m := len(s)%7 + 1; m < len(got) {
			if cut := wp.Encode(nil, s, m); !slices.Equal(cut, got[:m]) {
				t.Fatalf("Encode(%q, max %d) = %v, want %v", s, m, cut, got[:m])
			}
		}
		var pieces []int32
		wp.Words(s, func(w []byte) bool {
			if !utf8.Valid(w) || len(w) == 0 {
				t.Fatalf("Words(%q) yielded %q", s, w)
			}
			pieces = wp.AppendPieces(pieces, w)
			return true
		})
		if !slices.Equal(pieces, got) {
			t.Fatalf("AppendPieces over Words(%q) = %v, want %v", s, pieces, got)
		}
	})
}

// TestRandomFragments compares WordPiece with Reference on strings made of
// fragments that exercise the normalizer (marks, non-starters that survive
// strip_accents, case specials, CJK ranges, controls, whitespace, invalid
// bytes, added tokens, version gaps between Go's and Hugging Face's Unicode
// tables), which byte-level fuzzing seldom builds. Deterministic.
func TestRandomFragments(t *testing.T) {
	wp := loadWordPiece(t)
	ref := loadReference(t)
	n := 20000
	if raceEnabled {
		n = 3000
	}
	for i, s := range fragmentStrings(1, n) {
		got := wp.Encode(nil, s, 0)
		want, err := ref.Encode(s)
		if err != nil {
			t.Fatalf("Reference.Encode(%q): %v", s, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("string %d, Encode(%q):\n  WordPiece %v %s\n  Reference %v %s", i, s, got, tokens(wp, got), want, tokens(wp, want))
		}
		var pieces []int32
		wp.Words(s, func(w []byte) bool {
			pieces = wp.AppendPieces(pieces, w)
			return true
		})
		if !slices.Equal(pieces, got) {
			t.Fatalf("AppendPieces over Words(%q) = %v, want %v", s, pieces, got)
		}
	}
}

var fragmentsOut = flag.String("fragments-out", "", "TestWriteFragments: write random fragment strings here (JSONL, for scripts/golden-tokenizer.mjs)")

// TestWriteFragments writes the inputs of testdata/golden-fragments.jsonl
// (see golden_test.go).
func TestWriteFragments(t *testing.T) {
	if *fragmentsOut == "" {
		t.Skip("-fragments-out not set")
	}
	writeFragments(t, *fragmentsOut)
}

func writeFragments(t *testing.T, path string) {
	var b bytes.Buffer
	for _, s := range fragmentStrings(7, 400) {
		var row any = map[string]string{"text": s}
		if !utf8.ValidString(s) {
			row = map[string]string{"text_b64": base64.StdEncoding.EncodeToString([]byte(s))}
		}
		line, err := json.Marshal(row)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fragmentStrings returns n strings of 1 to 40 fragments, from seed.
func fragmentStrings(seed uint64, n int) []string {
	frags := []string{
		"a", "B", "z", "un", "able", "token", "ization", "the", "##", "#", "0", "42", " ", "  ", "\t", "\n", "\r\n",
		".", ",", "!", "?", "[", "]", "-", "'", "[MASK]", "[SEP]", "[CLS", "MASK]",
		"é", "É", "e\u0301", "\u0301", "\u0316", "\u0300", "\u0345", "\U0001D165", "\U0001D16D", "\U0001D16E", "\u093f", "\u094d",
		"ß", "ẞ", "İ", "ı", "Σ", "ς", "ǅ", "Ⅻ", "ﬁ", "½", "Å", "K", "Ω",
		"中", "文", "\uf900", "\U00020000", "\U0002B820", "\U0002B920", "\U0002F800", "한", "ᄀ", "ア", "ｱ",
		"。", "¿", "«", "»", "…", "—", "\u00a0", "\u3000", "\u2028", "\u0085",
		"\u200b", "\u200d", "\x00", "\x07", "\x7f", "\ufffd", "\ufeff", "\ue000", "\U000F0001", "\u0378",
		"\xff", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80",
		"🙂", "👍🏽", "\u0890", "\u07fd", "\u2e43", "\u061d", "\ua7cb", "\U00010D50", "\u1734", "\U00011938", "\U000111C9",
		strings.Repeat("x", 50), strings.Repeat("é", 30),
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	out := make([]string, n)
	var b strings.Builder
	for i := range out {
		b.Reset()
		for range 1 + rng.IntN(40) {
			b.WriteString(frags[rng.IntN(len(frags))])
		}
		out[i] = b.String()
	}
	return out
}
