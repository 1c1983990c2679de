package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// decode reads one document into the values encoding/json gives with
// UseNumber, through the Scanner alone; ok is false if it refuses it.
func decode(b []byte) (v any, ok bool) {
	s := New(b)
	v = value(&s)
	return v, s.End()
}

func value(s *Scanner) any {
	switch s.Peek() {
	case '{':
		m := map[string]any{}
		s.Object(func(key []byte) bool {
			k := string(key) // before the value overwrites the buffer
			m[k] = value(s)  // the last of duplicates wins, as in encoding/json
			return true
		})
		return m
	case '[':
		a := []any{}
		s.Array(func() bool {
			a = append(a, value(s))
			return true
		})
		return a
	case '"':
		str, _ := s.String()
		return string(str)
	case 't':
		s.Literal("true")
		return true
	case 'f':
		s.Literal("false")
		return false
	case 'n':
		s.Literal("null")
		return nil
	}
	n, _ := s.Number()
	return json.Number(n)
}

// valid replaces bytes that are not UTF-8 with U+FFFD, one for each, as
// encoding/json does when it decodes a string.
func valid(v any) any {
	switch v := v.(type) {
	case string:
		return string([]rune(v))
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[string([]rune(k))] = valid(x) // keys that collide once replaced: see below
		}
		return m
	case []any:
		for i := range v {
			v[i] = valid(v[i])
		}
	}
	return v
}

// FuzzScanner holds the scanner to encoding/json: the same documents
// accepted (depth limit included), the same values read, every string the
// same once invalid UTF-8 is replaced as encoding/json replaces it; a
// string or number cut short is reported as cut short (End), never as
// malformed; a limited decode is a prefix of the whole that never splits
// a character; and Clean text decodes to its own bytes' meaning.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-2.5e3,true,false,null,{"b":"c"}]}`, `"a\u00e9\ud83d\ude00\ud800x\n"`,
		`[1,]`, `01`, `"\x"`, "\"\x01\"", `{"a" 1}`, `-`, `1e`, `"\ud800\u0041"`, "\"\xff\"",
		`{"a":1,"a":2}`, `{"\u0061":1,"a":"\"\\\/\b\f\n\r\t"}`, `"\udc00\ud800\udc00"`, `"\ud800\u12"`,
		` [ 0.5 , 1E+2 , -0 , 1e-7 ] `, `{"a":1}x`, `tru`, `nul`, `[[[[]]]]`, `{"":{}}`, `"` + strings.Repeat("x", 40) + `\n"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New(data)
		got := s.Skip() && s.End()
		if want := json.Valid(data); got != want {
			t.Fatalf("Skip accepts %q: %v (%v), encoding/json: %v", data, got, s.Err(), want)
		}
		v, ok := decode(data)
		if ok != got {
			t.Fatalf("decode accepts %q: %v, Skip: %v", data, ok, got)
		}
		if ok {
			d := json.NewDecoder(bytes.NewReader(data))
			d.UseNumber()
			var want any
			if err := d.Decode(&want); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			if g := valid(v); !reflect.DeepEqual(g, want) && !keysCollide(v) {
				t.Fatalf("decode(%q) = %#v, encoding/json: %#v", data, g, want)
			}
			var buf bytes.Buffer
			_ = json.Compact(&buf, data)
			if c := AppendCompact(nil, bytes.Trim(data, " \t\r\n")); !bytes.Equal(c, buf.Bytes()) {
				t.Fatalf("AppendCompact(%q) = %q, encoding/json: %q", data, c, buf.Bytes())
			}
			if Clean(data) {
				if !utf8.Valid(data) {
					t.Fatalf("Clean(%q) but not UTF-8", data)
				}
				if !reflect.DeepEqual(v, want) && !keysCollide(v) {
					t.Fatalf("Clean(%q), but it reads as %#v, encoding/json: %#v", data, v, want)
				}
			}
		}
		i := WS(data, 0)
		if i >= len(data) {
			return
		}
		switch c := data[i]; {
		case c == '"':
			end, esc, f := StringEnd(data, i)
			if e, f2 := skipStringEnd(data, i); f2 != f || e != end {
				t.Fatalf("skipStringEnd(%q) = %d, %v; StringEnd: %d, %v", data, e, f2, end, f)
			}
			if f != None {
				if _, _, f2 := unquote(nil, data, i+1, -1); f2 != f {
					t.Fatalf("StringEnd(%q) = %v, unquote %v", data, f, f2)
				}
				return
			}
			tok := data[i:end]
			if e, f := skipStringEnd(data, i); e != end || f != None {
				t.Fatalf("skipStringEnd(%q) = %d, %v; StringEnd: %d", data, e, f, end)
			}
			nonASCII := bytes.ContainsFunc(tok, func(r rune) bool { return r >= utf8.RuneSelf })
			if (esc&Escaped != 0) != bytes.Contains(tok, []byte{'\\'}) || (esc&NonASCII != 0) != nonASCII || esc&Surrogate == 0 && utf8.Valid(tok) && !Clean(tok) {
				t.Fatalf("StringEnd(%q) escapes %b, Clean %v", tok, esc, Clean(tok))
			}
			whole := AppendUnquote(nil, tok)
			var want string
			if json.Unmarshal(tok, &want) != nil || string([]rune(string(whole))) != want {
				t.Fatalf("AppendUnquote(%q) = %q, encoding/json: %q", tok, whole, want)
			}
			if end-i > 512 {
				return // the checks below are quadratic
			}
			for k := i + 1; k < end; k++ {
				if e, _, f := StringEnd(data[:k], i); f != End {
					t.Fatalf("StringEnd(%q) = %d, %v: want End", data[:k], e, f)
				}
			}
			for limit := range len(whole) + 2 {
				part := AppendUnquoteLimit(nil, tok, limit)
				if len(part) > limit || !bytes.HasPrefix(whole, part) || len(part) < limit-utf8.UTFMax && len(part) < len(whole) {
					t.Fatalf("AppendUnquoteLimit(%q, %d) = %q, whole %q", tok, limit, part, whole)
				}
				if utf8.Valid(whole) && !utf8.Valid(part) {
					t.Fatalf("AppendUnquoteLimit(%q, %d) = %q splits a character", tok, limit, part)
				}
			}
		case c == '-' || c >= '0' && c <= '9':
			end, f := NumberEnd(data, i)
			if f != None {
				return
			}
			for k := i + 1; k < end; k++ {
				if e, f := NumberEnd(data[:k], i); f != End && (f != None || e != k) {
					t.Fatalf("NumberEnd(%q) = %d, %v: want End, or complete", data[:k], e, f)
				}
			}
		case c == 't' || c == 'f' || c == 'n':
			end, f := LiteralEnd(data, i)
			if f != None {
				return
			}
			for k := i + 1; k < end; k++ {
				if _, f := LiteralEnd(data[:k], i); f != End {
					t.Fatalf("LiteralEnd(%q) = %v: want End", data[:k], f)
				}
			}
		}
	})
}

// keysCollide reports whether two keys of an object in v differ only in
// bytes that are not UTF-8, which replacing them makes equal: the map
// then keeps whichever came last, in each reader its own way.
func keysCollide(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		seen := map[string]bool{}
		for k, x := range v {
			r := string([]rune(k))
			if seen[r] || keysCollide(x) {
				return true
			}
			seen[r] = true
		}
	case []any:
		for _, x := range v {
			if keysCollide(x) {
				return true
			}
		}
	}
	return false
}

func TestScannerFaults(t *testing.T) {
	for _, tc := range []struct {
		in    string
		fault Fault
		at    int
	}{
		{``, End, 0},
		{`{"a":1,}`, Char, 7},
		{`{"a" 1}`, Char, 5},
		{`[1 2]`, Char, 3},
		{`"a` + "\x01" + `"`, Control, 2},
		{`"\x"`, Escape, 1},
		{`"\u12x4"`, Escape, 1},
		{`"abc`, End, 4},
		{`01`, Trailing, 1},
		{`1.`, End, 2},
		{`1.x`, Number, 2},
		{`-x`, Number, 1},
		{`tru`, End, 3},
		{`trux`, Literal, 0},
		{`{} {}`, Trailing, 3},
		{`@`, Char, 0},
		{strings.Repeat("[", MaxDepth+1), Depth, MaxDepth},
	} {
		s := New([]byte(tc.in))
		if s.Skip() && s.End() {
			t.Errorf("Skip(%q) accepted it", tc.in)
			continue
		}
		var e *SyntaxError
		if !errors.As(s.Err(), &e) || e.Fault != tc.fault || e.Offset != tc.at {
			t.Errorf("Skip(%q): %#v, want %v at %d", tc.in, s.Err(), tc.fault, tc.at)
		}
	}
}

// TestDepth: nesting as deep as encoding/json takes, and one level more,
// which it refuses (outside the fuzzer, whose minimizer crawls on them).
func TestDepth(t *testing.T) {
	for _, depth := range []int{MaxDepth, MaxDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			close := map[string]string{"[": "]", `{"a":`: "}"}[open]
			doc := []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth))
			s := New(doc)
			got := s.Skip() && s.End()
			_, ok := decode(doc)
			if want := json.Valid(doc); got != want || ok != want {
				t.Errorf("depth %d of %s: Skip %v, decode %v, encoding/json %v", depth, open, got, ok, want)
			}
		}
	}
}

func TestScannerStopsAtFirstFault(t *testing.T) {
	s := New([]byte(`{"a":x,"b":"c"}`))
	calls := 0
	ok := s.Object(func(key []byte) bool {
		calls++
		return s.Skip()
	})
	if ok || calls != 1 || s.Fault() != Char {
		t.Fatalf("Object = %v after %d calls, fault %v; want false after 1, Char", ok, calls, s.Fault())
	}
	if _, ok := s.String(); ok || s.Skip() || s.Peek() != 0 {
		t.Fatal("a failed scanner read on")
	}
}

func TestRefused(t *testing.T) {
	s := New([]byte(`{"a":1}`))
	if s.Object(func([]byte) bool { return false }) || s.Fault() != Refused {
		t.Fatalf("fault %v, want Refused", s.Fault())
	}
}

func TestStringDecodesIntoBuffer(t *testing.T) {
	s := New([]byte(`["plain","es\u00e9caped"]`))
	var got []string
	var aliased []bool
	s.Array(func() bool {
		str, ok := s.String()
		got = append(got, string(str))
		aliased = append(aliased, len(str) > 0 && &str[0] == &s.Bytes()[s.Pos()-len(str)-1])
		return ok
	})
	if !s.End() || got[0] != "plain" || got[1] != "esécaped" || !aliased[0] || aliased[1] {
		t.Fatalf("got %q, aliased %v", got, aliased)
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]bool{
		`"a"`:                   true,
		`"\ud83d\ude00"`:        true,
		`"\ud800"`:              false,
		`"\udc00"`:              false,
		`"\ud800\u0041"`:        false,
		`"\\ud800"`:             true,
		"\"\xff\"":              false,
		`{"a":"\ud83d\ude00x"}`: true,
		`"\u00e9\ud800x"`:       false,
		`"\u00e9\u2028"`:        true,
		`"\ud800x"`:             false,
		`"\ud83d\ude00\ud800"`:  false,
		`"\udc00\ud800"`:        false,
	} {
		if got := Clean([]byte(in)); got != want {
			t.Errorf("Clean(%s) = %v, want %v", in, got, want)
		}
	}
}

func TestScannerAllocs(t *testing.T) {
	doc := []byte(`{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \"quoted\""}],"n":-1.5e3,"ok":true,"x":null}`)
	s := New(nil)
	s.buf = make([]byte, 0, 64)
	n := testing.AllocsPerRun(100, func() {
		s.Reset(doc, 0)
		s.Object(func(key []byte) bool {
			if string(key) == "messages" {
				return s.Array(func() bool {
					return s.Object(func([]byte) bool { _, ok := s.String(); return ok })
				})
			}
			return s.Skip()
		})
		if !s.End() {
			t.Fatal(s.Err())
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per document, want 0", n)
	}
}
