package wire

import (
	"net/textproto"
	"strings"
	"testing"
)

func TestParseLength(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "007": 7, "123456789012345678": 123456789012345678} {
		if n, ok := ParseLength(in); !ok || n != want {
			t.Errorf("ParseLength(%q) = %d, %v", in, n, ok)
		}
		if n, ok := ParseLength([]byte(in)); !ok || n != want {
			t.Errorf("ParseLength([]byte %q) = %d, %v", in, n, ok)
		}
	}
	for _, in := range []string{"", "-1", "+1", " 1", "1 ", "0x10", "1234567890123456789"} {
		if _, ok := ParseLength(in); ok {
			t.Errorf("ParseLength(%q) accepted", in)
		}
	}
}

func TestTrimOWS(t *testing.T) {
	for in, want := range map[string]string{"": "", " \t a b\t ": "a b", "x": "x", "\t\t": ""} {
		if got := TrimOWS(in); got != want {
			t.Errorf("TrimOWS(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCanonicalKeyAllocs: a known name in any case gives its canonical form
// without allocating; any other name gives what textproto gives.
func TestCanonicalKeyAllocs(t *testing.T) {
	for _, want := range knownNames {
		lower := strings.ToLower(want)
		for _, name := range []string{want, lower, strings.ToUpper(want), swapCase(want)} {
			if got := CanonicalKey(name); got != want {
				t.Errorf("CanonicalKey(%q) = %q, want %q", name, got, want)
			}
			b := []byte(name)
			if got := CanonicalKey(b); got != want {
				t.Errorf("CanonicalKey([]byte %q) = %q, want %q", name, got, want)
			}
			if n := testing.AllocsPerRun(100, func() { CanonicalKey(name) }); n != 0 {
				t.Errorf("CanonicalKey(%q) allocates %v times", name, n)
			}
			if n := testing.AllocsPerRun(100, func() { CanonicalKey(b) }); n != 0 {
				t.Errorf("CanonicalKey([]byte %q) allocates %v times", name, n)
			}
		}
	}
	for _, name := range []string{"x-custom-thing", "X-CUSTOM", "a", "x-stainless-runtime-versions", "content_type", "h\xffst", ""} {
		if got, want := CanonicalKey(name), textproto.CanonicalMIMEHeaderKey(name); got != want {
			t.Errorf("CanonicalKey(%q) = %q, want %q", name, got, want)
		}
	}
}

func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// FuzzCanonicalKey: CanonicalKey gives what textproto gives, for strings
// and bytes, and FieldName gives the same for a token and refuses
// anything else.
func FuzzCanonicalKey(f *testing.F) {
	for _, s := range []string{"content-type", "CONTENT-LENGTH", "x-Request-ID", "X-Custom", "te", "TE", "a b", "x-stainless-runtime-version",
		"x\rstainless-os", "X-STAINLESS-ARCH", "x-stainless-arch\x00", "Content-Typ\xc5", "hOST", "Hos\x14"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		want := textproto.CanonicalMIMEHeaderKey(name)
		if got := CanonicalKey(name); got != want {
			t.Fatalf("CanonicalKey(%q) = %q, want %q", name, got, want)
		}
		if got := CanonicalKey([]byte(name)); got != want {
			t.Fatalf("CanonicalKey([]byte %q) = %q, want %q", name, got, want)
		}
		tok := Token(name)
		for _, got := range []func() (string, bool){
			func() (string, bool) { return FieldName(name) },
			func() (string, bool) { return FieldName([]byte(name)) },
		} {
			if k, ok := got(); ok != tok || ok && k != want {
				t.Fatalf("FieldName(%q) = %q, %v; want %q, %v", name, k, ok, want, tok)
			}
		}
	})
}

// TestFieldNameKnown: every known name, in any case, is a field name; a
// byte off anywhere in it is not that name.
func TestFieldNameKnown(t *testing.T) {
	for _, want := range knownNames {
		for _, name := range []string{want, strings.ToLower(want), strings.ToUpper(want), swapCase(want)} {
			if k, ok := FieldName(name); !ok || k != want {
				t.Errorf("FieldName(%q) = %q, %v", name, k, ok)
			}
			for i := range len(name) {
				for _, c := range []byte{name[i] ^ 0x20, name[i] ^ 0x80, name[i] + 1, '\r', 0} {
					b := []byte(name)
					b[i] = c
					if k, ok := known(b); ok && !strings.EqualFold(string(b), want) {
						t.Errorf("known(%q) = %q", b, k)
					}
				}
			}
		}
	}
}

// TestFieldNameAllocs: a known name, in any case, costs no allocation.
func TestFieldNameAllocs(t *testing.T) {
	for _, want := range knownNames {
		for _, name := range []string{want, strings.ToLower(want), swapCase(want)} {
			b := []byte(name)
			if n := testing.AllocsPerRun(100, func() { FieldName(name); FieldName(b) }); n != 0 {
				t.Errorf("FieldName(%q) allocates %v times", name, n)
			}
		}
	}
}

// FuzzLower8 holds lower8 to ASCII lower-casing byte by byte.
func FuzzLower8(f *testing.F) {
	f.Add(uint64(0x4142435a5b40607a))
	f.Add(uint64(0xc1dac0db41ff7f00))
	f.Fuzz(func(t *testing.T, x uint64) {
		var want uint64
		for i := 0; i < 64; i += 8 {
			c := byte(x >> i)
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			want |= uint64(c) << i
		}
		if got := lower8(x); got != want {
			t.Fatalf("lower8(%#x) = %#x, want %#x", x, got, want)
		}
	})
}

func TestFieldLine(t *testing.T) {
	for line, want := range map[string]bool{
		"X-Trailer: 1": true, "X:": true, "A-b:  v \t w": true,
		": v": false, "no colon": false, "Bad Name: v": false, "X: a\x01b": false, "X: a\rb": false, "": false,
	} {
		if got := FieldLine([]byte(line)); got != want {
			t.Errorf("FieldLine(%q) = %v, want %v", line, got, want)
		}
	}
}

// FuzzFieldValue holds FieldValue's word-at-a-time scan to the rule byte
// by byte, in both its string and []byte forms.
func FuzzFieldValue(f *testing.F) {
	for _, s := range []string{"", "application/json", "a\tb", "Bearer sk-0123456789abcdef\x7f", "0123456789\x00", "\xff\xfe obs-text", "12345678\r\n", "\x1f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := true
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
				want = false
			}
		}
		if got := FieldValue(s); got != want {
			t.Fatalf("FieldValue(%q) = %v, want %v", s, got, want)
		}
		if got := FieldValue([]byte(s)); got != want {
			t.Fatalf("FieldValue([]byte(%q)) = %v, want %v", s, got, want)
		}
	})
}

func TestHasToken(t *testing.T) {
	for _, tc := range []struct {
		v, tok string
		want   bool
	}{
		{"close", "close", true},
		{"Keep-Alive, Close", "close", true},
		{" keep-alive ,\tUPGRADE ", "upgrade", true},
		{"keep-alive", "close", false},
		{"closed, x-close", "close", false},
		{"", "close", false},
		{",,", "close", false},
	} {
		if got := HasToken(tc.v, tc.tok); got != tc.want {
			t.Errorf("HasToken(%q, %q) = %v, want %v", tc.v, tc.tok, got, tc.want)
		}
	}
}
