package anthropic

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a minimal pull parser over one JSON document, for the stream
// chunk: encoding/json costs several microseconds per chunk (it reflects,
// and validates the chunk in a separate pass) where the fields a chunk
// carries take a few hundred nanoseconds to read directly. It accepts
// exactly RFC 8259 JSON; anything else sets bad and every later call
// returns at once. It never panics on any input (FuzzStream).
type scanner struct {
	b   []byte
	i   int
	bad bool
	buf []byte // scratch for decoding escaped strings
}

// maxScanDepth matches encoding/json's nesting limit.
const maxScanDepth = 10000

func (s *scanner) fail() bool { s.bad = true; return false }

func (s *scanner) ws() {
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return // the usual case: compact JSON
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next significant byte, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// literal consumes lit (null, true, false).
func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.fail()
	}
	s.i += len(lit)
	return true
}

// isNull consumes a null if one is next.
func (s *scanner) isNull() bool {
	if s.peek() == 'n' {
		return s.literal("null")
	}
	return false
}

// object calls field for each member; field must consume the value. It
// returns false if the next value is not a well-formed object.
func (s *scanner) object(field func(key []byte) bool) bool {
	if s.bad || s.peek() != '{' {
		return s.fail()
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		if s.peek() != '"' {
			return s.fail()
		}
		key, ok := s.str()
		if !ok || s.peek() != ':' {
			return s.fail()
		}
		s.i++
		// The key may live in buf, which the value can overwrite: field
		// must match on it before reading the value (every caller does).
		if !field(key) || s.bad {
			return s.fail()
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return s.fail()
		}
	}
}

// array calls elem for each element; elem must consume it.
func (s *scanner) array(elem func() bool) bool {
	if s.bad || s.peek() != '[' {
		return s.fail()
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() || s.bad {
			return s.fail()
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return s.fail()
		}
	}
}

// str reads a string and returns its decoded bytes: a slice of the input
// when it has no escapes, else of buf (valid until the next str). Invalid
// escapes and raw control characters are errors; lone surrogates become
// U+FFFD, as encoding/json makes them.
func (s *scanner) str() ([]byte, bool) {
	if s.bad || s.peek() != '"' {
		return nil, s.fail()
	}
	s.i++
	start := s.i
	b, i := s.b, s.i // locals keep the hot loop in registers
	for i < len(b) {
		for i < len(b) && plain[b[i]] {
			i++ // one table lookup a byte for the usual run of text
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		if c == '"' {
			s.i = i + 1
			return b[start:i], true
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return nil, s.fail()
		}
		i++ // a byte past ASCII: part of a UTF-8 sequence, copied as it is
	}
	s.i = i
	s.buf = append(s.buf[:0], s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.buf, true
		case c < 0x20:
			return nil, s.fail()
		case c != '\\':
			// Copy the run up to the next quote, escape or control
			// character at once.
			j := s.i + 1
			for j < len(s.b) && s.b[j] != '"' && s.b[j] != '\\' && s.b[j] >= 0x20 {
				j++
			}
			s.buf = append(s.buf, s.b[s.i:j]...)
			s.i = j
			continue
		}
		if s.i+1 >= len(s.b) {
			return nil, s.fail()
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			s.buf = append(s.buf, e)
		case 'b':
			s.buf = append(s.buf, '\b')
		case 'f':
			s.buf = append(s.buf, '\f')
		case 'n':
			s.buf = append(s.buf, '\n')
		case 'r':
			s.buf = append(s.buf, '\r')
		case 't':
			s.buf = append(s.buf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return nil, s.fail()
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					save := s.i
					s.i += 2
					if r2, ok = s.hex4(); !ok {
						return nil, s.fail()
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
					} else {
						s.i = save // leave the second escape for the loop
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			s.buf = utf8.AppendRune(s.buf, r)
		default:
			return nil, s.fail()
		}
	}
	return nil, s.fail()
}

// skipStr consumes a string, checking it as str does without decoding it.
func (s *scanner) skipStr() bool {
	b, i := s.b, s.i+1
	for i < len(b) {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return true
		case c < 0x20:
			return s.fail()
		case c == '\\':
			if i+1 >= len(b) {
				return s.fail()
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				s.i = i + 2
				if _, ok := s.hex4(); !ok {
					return s.fail()
				}
				i = s.i
			default:
				return s.fail()
			}
		default:
			i++
		}
	}
	return s.fail()
}

func (s *scanner) hex4() (rune, bool) {
	if len(s.b)-s.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	s.i += 4
	return r, true
}

// text reads a string as a Go string, or "" for null.
func (s *scanner) text() string {
	if s.isNull() {
		return ""
	}
	b, _ := s.str()
	return string(b)
}

// number reads a JSON number and returns its text.
func (s *scanner) number() ([]byte, bool) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if !s.digits() {
		return nil, s.fail()
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return nil, s.fail()
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return nil, s.fail()
		}
	}
	return s.b[start:s.i], true
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// integer reads a whole number (or null, as 0), as an int64 field of
// encoding/json would.
func (s *scanner) integer() int64 {
	if s.isNull() {
		return 0
	}
	n, ok := s.number()
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		s.fail()
	}
	return v
}

// skip consumes any value, checking it is well formed.
func (s *scanner) skip(depth int) bool {
	if depth > maxScanDepth {
		return s.fail()
	}
	switch s.peek() {
	case '{':
		return s.object(func([]byte) bool { return s.skip(depth + 1) })
	case '[':
		return s.array(func() bool { return s.skip(depth + 1) })
	case '"':
		return s.skipStr()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		_, ok := s.number()
		return ok
	}
}

// end checks that nothing but whitespace follows the document.
func (s *scanner) end() bool {
	if s.bad || s.peek() != 0 || s.i != len(s.b) {
		return s.fail()
	}
	return true
}
