package onnx

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPrepare(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"clean", "How do I sort a list in Python?", "How do I sort a list in Python?"},
		{"tab", "sort\ta list", "sort a list"},
		{"line break", "sort a list\nin Python", "sort a list in Python"},
		{"crlf", "line one\r\nline two", "line one line two"},
		{"blank line", "Hi there!\n\nHow do I sort a list?", "Hi there! How do I sort a list?"},
		{"double space", "sort  a list", "sort a list"},
		{"mixed run", "sort \t\n  a list", "sort a list"},
		{"leading and trailing", "  \tsort a list \n", "sort a list"},
		{"only whitespace", " \t\n ", ""},
		{"all caps", "HOW DO I SORT A LIST IN PYTHON?", "how do i sort a list in python?"},
		{"all caps and a tab", "SORT\tA  LIST", "sort a list"},
		{"70% capitals", "ABCDEFG hij", "abcdefg hij"},
		{"under 70% capitals", "ABCDEF ghij", "ABCDEF ghij"},
		{"mixed case left alone", "Is NASA's SLS cheaper than SpaceX?", "Is NASA's SLS cheaper than SpaceX?"},
		{"acronyms left alone", "What is the GDP of the USA?", "What is the GDP of the USA?"},
		{"digits are not letters", "WHAT IS 2+2 = 4?", "what is 2+2 = 4?"},
		{"no letters", "1 + 2 = 3", "1 + 2 = 3"},
		{"non-ASCII capitals", "ÉTÉ À PARİS, ΚΑΛΗΜΈΡΑ", "été à paris, καλημέρα"},
		{"non-ASCII mixed case left alone", "Été à Paris", "Été à Paris"},
		{"uncased letters count", "日本語のテキスト OK", "日本語のテキスト OK"},
		{"unicode spaces", "sort\u00a0a\u3000list\u2028now", "sort a list now"},
		{"invalid UTF-8 kept", "ABC\xffDEF  x", "abc\xffdef x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte("kept:")
			out, changed := prepare(buf, tc.in)
			got := tc.in
			if changed {
				if string(out[:len(buf)]) != "kept:" {
					t.Fatalf("prepare(%q) overwrote buf: %q", tc.in, out)
				}
				got = string(out[len(buf):])
			}
			if got != tc.want {
				t.Errorf("prepare(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if changed != (tc.in != tc.want) {
				t.Errorf("prepare(%q) changed = %v, want %v", tc.in, changed, tc.in != tc.want)
			}
		})
	}
}

// TestPrepareIdempotent: a prepared text is left as it is.
func TestPrepareIdempotent(t *testing.T) {
	for _, s := range []string{"  A\tB\n\nC  ", "HELLO  WORLD\n", "x\u00a0\u00a0y", "ÀÉÎ õü", "a\xff  b"} {
		once, _ := prepare(nil, s)
		if again, changed := prepare(nil, string(once)); changed {
			t.Errorf("prepare(%q) = %q, then %q", s, once, again)
		}
	}
}

func TestPrepareAllocs(t *testing.T) {
	long := strings.Repeat("How do I sort a list of tuples by the second item? ", 20)
	buf := make([]byte, 0, 2*len(long))
	for _, s := range []string{"How do I sort a list in Python?", "sort\ta list\n\nnow", "SORT  A LIST", long} {
		if n := testing.AllocsPerRun(100, func() { prepare(buf[:0], s) }); n != 0 {
			t.Errorf("prepare(%.20q): %v allocations, want 0", s, n)
		}
	}
}

func FuzzPrepare(f *testing.F) {
	for _, s := range []string{"", "a  b", "A\tB\nC", " ÉTÉ ", "x\u3000y", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, changed := prepare(nil, s)
		got := s
		if changed {
			got = string(out)
		}
		// No whitespace but single spaces between words, none at the ends.
		if strings.Contains(got, "  ") || strings.TrimSpace(got) != got {
			t.Fatalf("prepare(%q) = %q: whitespace left", s, got)
		}
		if strings.Join(strings.Fields(got), " ") != got {
			t.Fatalf("prepare(%q) = %q: whitespace other than single spaces", s, got)
		}
		// The words are the text's, at most lower-cased.
		if w, g := strings.Fields(s), strings.Fields(got); len(w) != len(g) {
			t.Fatalf("prepare(%q) = %q: %d words, want %d", s, got, len(g), len(w))
		}
		if utf8.ValidString(s) && !strings.EqualFold(strings.Join(strings.Fields(s), " "), got) {
			t.Fatalf("prepare(%q) = %q: not the text's words", s, got)
		}
		if again, ch := prepare(nil, got); ch {
			t.Fatalf("prepare(%q) = %q, then %q", s, got, again)
		}
	})
}

// BenchmarkPrepare: a clean text (one pass, returned as it is) and one
// with line breaks and double spaces (written again), about 500 tokens.
func BenchmarkPrepare(b *testing.B) {
	clean := strings.Repeat("How do I sort a list of tuples by the second item in Python? ", 40)
	messy := strings.Repeat("How do I sort  a list of tuples\nby the second item in Python?\n\n", 40)
	buf := make([]byte, 0, 2*len(messy))
	for _, tc := range []struct{ name, text string }{{"clean", clean}, {"messy", messy}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.text)))
			b.ReportAllocs()
			for b.Loop() {
				prepare(buf[:0], tc.text)
			}
		})
	}
}
