package jsonscan

// Scanner is a pull parser over one JSON document in memory. The caller
// reads the values it expects and Skips the rest; the first fault stops it
// (every later call returns at once, reporting failure) and Err says what
// and where. Its zero value scans nothing; Reset points it at a document.
type Scanner struct {
	b     []byte
	i     int
	depth int
	fault Fault
	at    int
	buf   []byte // decoded strings with escapes; reused
}

// New returns a Scanner over b.
func New(b []byte) Scanner { return Scanner{b: b} }

// NewAt returns a Scanner over b that starts reading at offset i.
func NewAt(b []byte, i int) Scanner { return Scanner{b: b, i: i} }

// Reset points s at b from offset i, clearing any fault; the decoding
// buffer is kept.
func (s *Scanner) Reset(b []byte, i int) {
	s.b, s.i, s.depth, s.fault, s.at = b, i, 0, None, 0
}

// Bytes is the document.
func (s *Scanner) Bytes() []byte { return s.b }

// Pos is the offset of the next byte to read; after a fault, the end of
// the document.
func (s *Scanner) Pos() int { return s.i }

// Failed reports whether s has met a fault.
func (s *Scanner) Failed() bool { return s.fault != None }

// Fault is the first fault met, None if none.
func (s *Scanner) Fault() Fault { return s.fault }

// Err is the first fault met as a *SyntaxError, or nil.
func (s *Scanner) Err() error {
	if s.fault == None {
		return nil
	}
	e := &SyntaxError{Fault: s.fault, Offset: s.at}
	if s.at < len(s.b) {
		e.Byte = s.b[s.at]
	}
	return e
}

// Fail stops s with Refused at the current offset (unless it has failed
// already), for a caller that finds a well-formed value it cannot take.
// It returns false.
func (s *Scanner) Fail() bool { return s.fail(Refused, s.i) }

// fail records the first fault and moves s to the end of the document, so
// that every later read stops at once, fast paths included.
func (s *Scanner) fail(f Fault, at int) bool {
	if s.fault == None {
		s.fault, s.at = f, at
	}
	s.i = len(s.b)
	return false
}

// WS skips whitespace and returns the offset after it.
func (s *Scanner) WS() int {
	s.i = WS(s.b, s.i)
	return s.i
}

// Peek skips whitespace and returns the next byte, 0 at the end or after a
// fault.
func (s *Scanner) Peek() byte {
	if s.WS() >= len(s.b) || s.fault != None {
		return 0
	}
	return s.b[s.i]
}

// expect fails s unless the next significant byte is c. Its fast path,
// c next with no whitespace before it, is inlined: the scanner's calls are
// most of its cost on compact JSON.
func (s *Scanner) expect(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		return true // a failed scanner is at the end: never here
	}
	return s.expectSlow(c)
}

func (s *Scanner) expectSlow(c byte) bool {
	if s.fault != None {
		return false
	}
	if s.WS() >= len(s.b) {
		return s.fail(End, s.i)
	}
	if s.b[s.i] != c {
		return s.fail(Char, s.i)
	}
	return true
}

// Object reads an object, calling fn with each member's decoded key; fn
// must consume the value. The key may live in the decoding buffer, which
// reading the value can overwrite: fn must match on it first. Object
// returns false, with s failed, if the object is malformed or fn returns
// false.
func (s *Scanner) Object(fn func(key []byte) bool) bool {
	if !s.expect('{') {
		return false
	}
	if s.depth++; s.depth > MaxDepth {
		return s.fail(Depth, s.i)
	}
	s.i++
	if s.Peek() == '}' {
		s.i++
		s.depth--
		return true
	}
	for {
		key, ok := s.String()
		if !ok || !s.expect(':') {
			return false
		}
		s.i++
		if !fn(key) {
			return s.fail(Refused, s.i)
		}
		if s.i < len(s.b) && s.b[s.i] == ',' {
			s.i++
			continue
		}
		switch s.next('}') {
		case '}':
			s.depth--
			return true
		case 0:
			return false
		}
	}
}

// next reads the ',' or the closing byte after a member or element and
// returns it; 0 on a fault, met here or before. Each loop tests for the
// comma itself first, inlined: most separators are commas.
func (s *Scanner) next(close byte) byte {
	if s.fault != None {
		return 0
	}
	if s.WS() >= len(s.b) {
		s.fail(End, s.i)
		return 0
	}
	switch c := s.b[s.i]; c {
	case ',', close:
		s.i++
		return c
	}
	s.fail(Char, s.i)
	return 0
}

// Array reads an array, calling fn for each element, which fn must
// consume. It returns false, with s failed, if the array is malformed or
// fn returns false.
func (s *Scanner) Array(fn func() bool) bool {
	if !s.expect('[') {
		return false
	}
	if s.depth++; s.depth > MaxDepth {
		return s.fail(Depth, s.i)
	}
	s.i++
	if s.Peek() == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		if !fn() {
			return s.fail(Refused, s.i)
		}
		if s.i < len(s.b) && s.b[s.i] == ',' {
			s.i++
			continue
		}
		switch s.next(']') {
		case ']':
			s.depth--
			return true
		case 0:
			return false
		}
	}
}

// String reads a string and returns its text: a slice of the input when
// it has no escapes, else of the decoding buffer (valid until the next
// String).
func (s *Scanner) String() ([]byte, bool) {
	if !s.expect('"') {
		return nil, false
	}
	b := s.b
	start := s.i + 1
	i := plainRun(b, start)
	if i < len(b) && b[i] == '"' {
		s.i = i + 1
		return b[start:i], true
	}
	buf, end, f := unquote(append(s.buf[:0], b[start:i]...), b, i, -1)
	s.buf = buf
	if f != None {
		return nil, s.fail(f, end)
	}
	s.i = end
	return buf, true
}

// Token reads a string and returns its token, quotes and escapes as they
// are in the input, and what it holds.
func (s *Scanner) Token() (tok []byte, esc Holds, ok bool) {
	if !s.expect('"') {
		return nil, 0, false
	}
	start := s.i
	end, esc, f := StringEnd(s.b, start)
	if f != None {
		return nil, esc, s.fail(f, end)
	}
	s.i = end
	return s.b[start:end], esc, true
}

// Number reads a number and returns its text.
func (s *Scanner) Number() ([]byte, bool) {
	if s.fault != None {
		return nil, false
	}
	start := s.WS()
	if start >= len(s.b) {
		return nil, s.fail(End, start)
	}
	if c := s.b[start]; c != '-' && (c < '0' || c > '9') {
		return nil, s.fail(Char, start)
	}
	end, f := NumberEnd(s.b, start)
	if f != None {
		return nil, s.fail(f, end)
	}
	s.i = end
	return s.b[start:end], true
}

// Literal reads lit: true, false or null.
func (s *Scanner) Literal(lit string) bool {
	if s.fault != None {
		return false
	}
	s.WS()
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.fail(Literal, s.i)
	}
	s.i += len(lit)
	return true
}

// Null reads a null if one is next, and reports whether it did.
func (s *Scanner) Null() bool {
	if s.Peek() == 'n' {
		return s.Literal("null")
	}
	return false
}

// Skip reads one value of any kind, checking it.
func (s *Scanner) Skip() bool {
	if s.fault != None {
		return false
	}
	if s.WS() >= len(s.b) {
		return s.fail(End, s.i)
	}
	var end int
	var f Fault
	switch c := s.b[s.i]; {
	case c == '"':
		end, f = skipStringEnd(s.b, s.i)
	case c == '{':
		return s.skipObject()
	case c == '[':
		return s.skipArray()
	case c == 't' || c == 'f' || c == 'n':
		end, f = LiteralEnd(s.b, s.i)
	case c == '-' || (c >= '0' && c <= '9'):
		end, f = NumberEnd(s.b, s.i)
	default:
		return s.fail(Char, s.i)
	}
	if f != None {
		return s.fail(f, end)
	}
	s.i = end
	return true
}

// Raw reads one value and returns its bytes.
func (s *Scanner) Raw() []byte {
	start := s.WS()
	if !s.Skip() {
		return nil
	}
	return s.b[start:s.i]
}

func (s *Scanner) skipObject() bool {
	if s.depth++; s.depth > MaxDepth {
		return s.fail(Depth, s.i)
	}
	s.i++
	if s.Peek() == '}' {
		s.i++
		s.depth--
		return true
	}
	for {
		if !s.expect('"') {
			return false
		}
		end, f := skipStringEnd(s.b, s.i)
		if f != None {
			return s.fail(f, end)
		}
		s.i = end
		if !s.expect(':') {
			return false
		}
		s.i++
		if !s.Skip() {
			return false
		}
		if s.i < len(s.b) && s.b[s.i] == ',' {
			s.i++
			continue
		}
		switch s.next('}') {
		case '}':
			s.depth--
			return true
		case 0:
			return false
		}
	}
}

func (s *Scanner) skipArray() bool {
	if s.depth++; s.depth > MaxDepth {
		return s.fail(Depth, s.i)
	}
	s.i++
	if s.Peek() == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		if !s.Skip() {
			return false
		}
		if s.i < len(s.b) && s.b[s.i] == ',' {
			s.i++
			continue
		}
		switch s.next(']') {
		case ']':
			s.depth--
			return true
		case 0:
			return false
		}
	}
}

// End checks that nothing but whitespace is left.
func (s *Scanner) End() bool {
	if s.fault != None {
		return false
	}
	if s.WS() < len(s.b) {
		return s.fail(Trailing, s.i)
	}
	return true
}
