package tokenize

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"go/format"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// cpEntry is how Hugging Face's Rust tokenizers treats one code point on its
// own: what the normalizer makes of it and how the pre-tokenizer classes it.
type cpEntry struct {
	out   []rune // normalized form
	class byte   // 'w' word character, 'p' punctuation, 's' whitespace
}

// loadCodePoints reads testdata/codepoints.txt.gz (see
// scripts/golden-tokenizer.mjs, mode codepoints, for the format and how to
// regenerate it).
func loadCodePoints(t *testing.T) []cpEntry {
	t.Helper()
	f, err := os.Open("testdata/codepoints.txt.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	hex := func(s string) rune {
		v, err := strconv.ParseUint(s, 16, 32)
		if err != nil {
			t.Fatalf("codepoints: %v", err)
		}
		return rune(v)
	}
	m := make([]cpEntry, 0x110000)
	n := 0
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 5 && f[0] == "R":
			lo, hi := hex(f[1]), hex(f[2])
			for r := lo; r <= hi; r++ {
				var out []rune
				switch f[3] {
				case "id":
					out = []rune{r}
				case "del":
				case "sp":
					out = []rune{' '}
				case "cjk":
					out = []rune{' ', r, ' '}
				default:
					t.Fatalf("codepoints: bad line %q", sc.Text())
				}
				m[r] = cpEntry{out, f[4][0]}
				n++
			}
		case len(f) >= 3 && f[0] == "M":
			out := []rune{}
			for _, h := range f[3:] {
				out = append(out, hex(h))
			}
			m[hex(f[1])] = cpEntry{out, f[2][0]}
			n++
		default:
			t.Fatalf("codepoints: bad line %q", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if want := 0x110000 - 0x800; n != want {
		t.Fatalf("codepoints: %d code points, want %d", n, want)
	}
	return m
}

// normalizeRune is the BERT normalizer (all options on) applied to one rune,
// through the same functions WordPiece uses.
func normalizeRune(r rune) []rune {
	if r == 0 || r == 0xFFFD || isBertControl(r) {
		return []rune{}
	}
	if isWhitespace(r) {
		return []rune{' '}
	}
	var in []rune
	if isCJK(r) {
		in = []rune{' ', r, ' '}
	} else {
		in = []rune{r}
	}
	var dec []rune
	for _, c := range in {
		dec = appendNFD(dec, c)
	}
	out := []rune{}
	for _, c := range dec {
		if !isMn(c) {
			out = appendLower(out, c)
		}
	}
	return out
}

// refNormalizeRune is Reference's normalizer applied to one rune.
func refNormalizeRune(r rune) []rune {
	return []rune(refNormalize(string(r), normFlags{true, true, true, true}))
}

func classOf(r rune) byte {
	switch {
	case isWhitespace(r):
		return 's'
	case isPunct(r):
		return 'p'
	}
	return 'w'
}

// TestCodePoints checks the character classes and the per-rune normalizer of
// this package against Hugging Face's, for every code point.
func TestCodePoints(t *testing.T) {
	want := loadCodePoints(t)
	bad := 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 40 || os.Getenv("CP_ALL") != "" {
			t.Errorf(format, args...)
		}
	}
	for r := rune(0); r <= 0x10FFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		w := want[r]
		if got := normalizeRune(r); !slices.Equal(got, w.out) {
			report("U+%04X: normalized to %s, Hugging Face %s", r, runesHex(got), runesHex(w.out))
		}
		if got := classOf(r); got != w.class {
			report("U+%04X: pre-tokenizer class %c, Hugging Face %c", r, got, w.class)
		}
		if got := refNormalizeRune(r); !slices.Equal(got, w.out) {
			report("U+%04X: Reference normalized to %s, Hugging Face %s", r, runesHex(got), runesHex(w.out))
		}
	}
	if bad > 0 {
		t.Errorf("%d differences", bad)
	}
}

func runesHex(rs []rune) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%04X", r)
	}
	b.WriteByte(']')
	return b.String()
}

var updateTables = flag.Bool("update-tables", false, "rewrite unicode_tables.go from testdata/codepoints.txt.gz")

// TestGenerateTables derives unicode_tables.go, the code points where Hugging
// Face's Rust tokenizers (whose category tables are Unicode 8, whose NFD
// tables predate Unicode 13 and whose lowercase mapping is Rust's, Unicode
// 17) and Go's Unicode 15 tables disagree, from the code point data. It only
// writes with -update-tables; otherwise it checks the file is current.
func TestGenerateTables(t *testing.T) {
	want := loadCodePoints(t)
	var notControl, extraControl, notPunct, extraPunct, notMn, extraMn, noDecompose, lowerFrom []rune
	lowerTo := map[rune]rune{}
	eq := func(a []rune, b ...rune) bool { return slices.Equal(a, b) }
	all := func() []rune {
		var rs []rune
		for r := rune(0); r <= 0x10FFFF; r++ {
			if r < 0xD800 || r > 0xDFFF {
				rs = append(rs, r)
			}
		}
		return rs
	}()
	// Pass 1: classes, and code points without a decomposition.
	for _, r := range all {
		w := want[r]
		if p := basePunct(r); p != (w.class == 'p') {
			if p {
				notPunct = append(notPunct, r)
			} else {
				extraPunct = append(extraPunct, r)
			}
		}
		if isWhitespace(r) != (w.class == 's') {
			t.Fatalf("U+%04X: whitespace differs", r)
		}
		if r == 0 || r == 0xFFFD || isWhitespace(r) || isCJK(r) {
			continue
		}
		if baseControl(r) {
			if len(w.out) != 0 {
				notControl = append(notControl, r)
			} else {
				continue
			}
		}
		if d := baseNFD(nil, r); !eq(d, r) {
			continue
		}
		switch {
		case len(w.out) == 0:
			if !baseMn(r) {
				if unicode.In(r, unicode.M) {
					extraMn = append(extraMn, r)
				} else {
					extraControl = append(extraControl, r)
				}
			}
		case len(w.out) == 1 && baseMn(r):
			if w.out[0] != r {
				t.Fatalf("U+%04X: Mn in Go, Hugging Face maps it to %s", r, runesHex(w.out))
			}
			notMn = append(notMn, r)
		case !slices.Equal(baseLower(nil, r), w.out):
			if len(w.out) != 1 {
				t.Fatalf("U+%04X: lowercase %s", r, runesHex(w.out))
			}
			lowerFrom = append(lowerFrom, r)
			lowerTo[r] = w.out[0]
		}
	}
	hfNotControl, hfExtraControl = toRanges(notControl), toRanges(extraControl)
	hfNotMn, hfExtraMn = toRanges(notMn), toRanges(extraMn)
	// Pass 2: code points with a decomposition, checked with pass 1's
	// exceptions in force.
	oldLowerFrom, oldLowerTo := hfLowerFrom, hfLowerTo
	hfLowerFrom = lowerFrom
	hfLowerTo = nil
	for _, r := range lowerFrom {
		hfLowerTo = append(hfLowerTo, lowerTo[r])
	}
	oldNoDecompose := hfNoDecompose
	hfNoDecompose = nil
	for _, r := range all {
		if r < 0xC0 || isCJK(r) || isBertControl(r) || isWhitespace(r) || eq(baseNFD(nil, r), r) {
			continue
		}
		w := want[r]
		if got := normalizeRune(r); !slices.Equal(got, w.out) {
			if !slices.Equal(baseLower(nil, r), w.out) {
				t.Fatalf("U+%04X: decomposes to %s in Go, Hugging Face normalizes it to %s", r, runesHex(baseNFD(nil, r)), runesHex(w.out))
			}
			noDecompose = append(noDecompose, r)
		}
	}
	hfLowerFrom, hfLowerTo, hfNoDecompose = oldLowerFrom, oldLowerTo, oldNoDecompose

	var b bytes.Buffer
	b.WriteString("// Code generated by go test -run TestGenerateTables -update-tables; DO NOT EDIT.\n\n")
	b.WriteString("package tokenize\n\n")
	b.WriteString("// Where Hugging Face's tokenizers and Go's Unicode tables disagree, as\n")
	b.WriteString("// inclusive lo, hi ranges (see TestGenerateTables).\n")
	b.WriteString("var (\n")
	writeRunes := func(name, comment string, rs []rune) {
		fmt.Fprintf(&b, "\t// %s\n\t%s = []rune{", comment, name)
		for i, r := range rs {
			if i%8 == 0 {
				b.WriteString("\n\t\t")
			} else {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "0x%04X,", r)
		}
		b.WriteString("\n\t}\n")
	}
	writeRunes("hfNotControl", "Cc/Cf/Co in Go that clean_text keeps (unassigned in Unicode 8).", toRanges(notControl))
	writeRunes("hfExtraControl", "Not Cc/Cf/Co in Go that clean_text removes.", toRanges(extraControl))
	writeRunes("hfNotPunct", "Punctuation in Go, not for Hugging Face (unassigned in Unicode 8).", toRanges(notPunct))
	writeRunes("hfExtraPunct", "Punctuation for Hugging Face (category P in Unicode 8), not in Go.", toRanges(extraPunct))
	writeRunes("hfNotMn", "Mn in Go that strip_accents keeps (unassigned in Unicode 8).", toRanges(notMn))
	writeRunes("hfExtraMn", "Mn for Hugging Face (Unicode 8), not in Go.", toRanges(extraMn))
	writeRunes("hfNoDecompose", "Decomposed by Go's NFD, not by Hugging Face's.", toRanges(noDecompose))
	writeRunes("hfLowerFrom", "Rust's to_lowercase (Unicode 17) where Go's differs: from ...", lowerFrom)
	var to []rune
	for _, r := range lowerFrom {
		to = append(to, lowerTo[r])
	}
	writeRunes("hfLowerTo", "... to.", to)
	b.WriteString(")\n")
	src, err := format.Source(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := os.ReadFile("unicode_tables.go")
	if bytes.Equal(cur, src) {
		return
	}
	if !*updateTables {
		t.Fatalf("unicode_tables.go is stale: run go test -run TestGenerateTables -update-tables")
	}
	if err := os.WriteFile("unicode_tables.go", src, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote unicode_tables.go")
}

// toRanges turns sorted runes into lo, hi pairs.
func toRanges(rs []rune) []rune {
	var out []rune
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		out = append(out, rs[i], rs[j])
		i = j + 1
	}
	return out
}

// TestCodePointWords runs every code point, alone and between two letters,
// through WordPiece.Words (its table-driven fast path and its general path)
// and checks the words against Hugging Face's normalizer and pre-tokenizer
// classes. Canonical ordering cannot matter for ids here, see
// TestReorderingIrrelevant.
func TestCodePointWords(t *testing.T) {
	wp := loadWordPiece(t)
	want := loadCodePoints(t)
	split := func(rs []rune) []string {
		var words []string
		var cur []rune
		end := func() {
			if len(cur) > 0 {
				words = append(words, string(cur))
				cur = nil
			}
		}
		for _, r := range rs {
			switch want[r].class {
			case 's':
				end()
			case 'p':
				end()
				words = append(words, string(r))
			default:
				cur = append(cur, r)
			}
		}
		end()
		return words
	}
	bad := 0
	var got []string
	collect := func(w []byte) bool { got = append(got, string(w)); return true }
	for r := rune(0); r <= 0x10FFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		out := want[r].out
		for _, pad := range []string{"", "q"} {
			got = got[:0]
			text := pad + string(r) + pad
			wp.Words(text, collect)
			in := out
			if pad != "" {
				in = append(append([]rune{'q'}, out...), 'q')
			}
			if w := split(in); !slices.Equal(got, w) {
				bad++
				if bad <= 20 {
					t.Errorf("Words(%q) = %q, want %q", text, got, w)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d code points differ", bad)
	}
}

// TestReorderingIrrelevant: canonical ordering moves only non-starters, and
// the ones strip_accents keeps (non-Mn, combining class > 0; Rust's tables
// and Go's may not agree on their classes, and x/text's NFD, which Reference
// uses, stops reordering after 30 of them) occur in no vocabulary entry. A
// word holding one is [UNK] whatever their order, so ordering differences
// cannot change ids with this vocabulary.
func TestReorderingIrrelevant(t *testing.T) {
	wp := loadWordPiece(t)
	var kept []rune
	for r := rune(0x300); r <= 0x10FFFF; r++ {
		if ccc(r) != 0 && !isMn(r) {
			kept = append(kept, r)
		}
	}
	if len(kept) < 100 {
		t.Fatalf("only %d kept non-starters: the check is broken", len(kept))
	}
	for tok := range wp.vocab {
		for _, r := range tok {
			if _, ok := slices.BinarySearch(kept, r); ok {
				t.Errorf("vocabulary entry %q holds U+%04X, a non-starter that strip_accents keeps", tok, r)
			}
		}
	}
}
