package glove

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner is a minimal streaming JSON reader for documents too large to
// decode into values (the 300 MB wink GloVe file): the caller walks the
// structure it expects and skips the rest; strings and numbers are returned
// in reused buffers, so scanning allocates nothing per value.
type jsonScanner struct {
	r   *bufio.Reader
	off int64 // bytes consumed
	str []byte
	num []byte
}

func newJSONScanner(r io.Reader) *jsonScanner {
	return &jsonScanner{r: bufio.NewReaderSize(r, 1<<20), str: make([]byte, 0, 256), num: make([]byte, 0, 64)}
}

func (s *jsonScanner) errorf(format string, args ...any) error {
	return fmt.Errorf("json at byte %d: %s", s.off, fmt.Sprintf(format, args...))
}

func (s *jsonScanner) readByte() (byte, error) {
	c, err := s.r.ReadByte()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, s.errorf("unexpected end of input")
		}
		return 0, err
	}
	s.off++
	return c, nil
}

func (s *jsonScanner) unread() {
	s.r.UnreadByte()
	s.off--
}

// next returns the next byte that is not white space.
func (s *jsonScanner) next() (byte, error) {
	for {
		c, err := s.readByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c, nil
	}
}

func (s *jsonScanner) expect(want byte) error {
	c, err := s.next()
	if err != nil {
		return err
	}
	if c != want {
		return s.errorf("found %q, want %q", c, want)
	}
	return nil
}

// atEOF reports whether only white space is left.
func (s *jsonScanner) atEOF() (bool, error) {
	for {
		c, err := s.r.ReadByte()
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return false, nil
	}
}

// stringBody reads a string whose opening quote was consumed, returning its
// decoded bytes (valid until the next call).
func (s *jsonScanner) stringBody() ([]byte, error) {
	s.str = s.str[:0]
	for {
		c, err := s.readByte()
		if err != nil {
			return nil, err
		}
		switch {
		case c == '"':
			return s.str, nil
		case c < 0x20:
			return nil, s.errorf("control character %#x in string", c)
		case c != '\\':
			s.str = append(s.str, c)
			continue
		}
		c, err = s.readByte()
		if err != nil {
			return nil, err
		}
		switch c {
		case '"', '\\', '/':
			s.str = append(s.str, c)
		case 'b':
			s.str = append(s.str, '\b')
		case 'f':
			s.str = append(s.str, '\f')
		case 'n':
			s.str = append(s.str, '\n')
		case 'r':
			s.str = append(s.str, '\r')
		case 't':
			s.str = append(s.str, '\t')
		case 'u':
			r, err := s.hex4()
			if err != nil {
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if c, err := s.readByte(); err == nil && c == '\\' {
					if c, err := s.readByte(); err == nil && c == 'u' {
						if r2, err = s.hex4(); err != nil {
							return nil, err
						}
					} else {
						return nil, s.errorf("bad surrogate pair")
					}
				} else {
					return nil, s.errorf("bad surrogate pair")
				}
				r = utf16.DecodeRune(r, r2)
			}
			s.str = utf8.AppendRune(s.str, r)
		default:
			return nil, s.errorf("bad escape \\%c", c)
		}
	}
}

func (s *jsonScanner) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, err := s.readByte()
		if err != nil {
			return 0, err
		}
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, s.errorf("bad \\u escape")
		}
		r = r<<4 | rune(c)
	}
	return r, nil
}

// string reads a whole string value.
func (s *jsonScanner) string() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	return s.stringBody()
}

// numberBody reads the rest of a number whose first byte was c, scanning
// the reader's buffer a chunk at a time.
func (s *jsonScanner) numberBody(c byte) ([]byte, error) {
	s.num = append(s.num[:0], c)
	for {
		buf, err := s.peek()
		n := 0
		for n < len(buf) && isNumberByte(buf[n]) {
			n++
		}
		s.num = append(s.num, buf[:n]...)
		s.r.Discard(n)
		s.off += int64(n)
		if len(s.num) > 64 {
			return nil, s.errorf("number too long")
		}
		if n < len(buf) || errors.Is(err, io.EOF) {
			return s.num, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// peek returns what the reader has buffered, filling it if empty.
func (s *jsonScanner) peek() ([]byte, error) {
	n := s.r.Buffered()
	if n == 0 {
		n = 1
	}
	buf, err := s.r.Peek(n)
	if len(buf) == 0 && err == nil {
		err = io.EOF
	}
	return buf, err
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// skipFlatArray consumes an array that holds no arrays, objects or strings
// (a vector of numbers) by searching for its closing bracket, without
// parsing or checking its elements.
func (s *jsonScanner) skipFlatArray() error {
	if err := s.expect('['); err != nil {
		return err
	}
	for {
		buf, err := s.peek()
		if i := bytes.IndexByte(buf, ']'); i >= 0 {
			s.r.Discard(i + 1)
			s.off += int64(i + 1)
			return nil
		}
		s.r.Discard(len(buf))
		s.off += int64(len(buf))
		if errors.Is(err, io.EOF) {
			return s.errorf("unexpected end of input")
		}
		if err != nil {
			return err
		}
	}
}

// float reads a number as a float32 (correctly rounded).
func (s *jsonScanner) float(c byte) (float32, error) {
	b, err := s.numberBody(c)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(string(b), 32)
	if err != nil {
		return 0, s.errorf("bad number %q", b)
	}
	return float32(f), nil
}

// int reads an integer value.
func (s *jsonScanner) int() (int, error) {
	c, err := s.next()
	if err != nil {
		return 0, err
	}
	b, err := s.numberBody(c)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return 0, s.errorf("bad integer %q", b)
	}
	return n, nil
}

// floats reads an array of numbers into dst[:0] (at most max of them).
func (s *jsonScanner) floats(dst []float32, max int) ([]float32, error) {
	dst = dst[:0]
	if err := s.expect('['); err != nil {
		return nil, err
	}
	c, err := s.next()
	if err != nil {
		return nil, err
	}
	if c == ']' {
		return dst, nil
	}
	for {
		if len(dst) >= max {
			return nil, s.errorf("array longer than %d", max)
		}
		f, err := s.float(c)
		if err != nil {
			return nil, err
		}
		dst = append(dst, f)
		if c, err = s.next(); err != nil {
			return nil, err
		}
		switch c {
		case ']':
			return dst, nil
		case ',':
			if c, err = s.next(); err != nil {
				return nil, err
			}
		default:
			return nil, s.errorf("found %q in an array of numbers", c)
		}
	}
}

// each walks an array (open == '[') or an object (open == '{'); for objects
// it reads each key and the colon before calling fn, which must consume the
// value.
func (s *jsonScanner) each(open byte, fn func(key []byte) error) error {
	if err := s.expect(open); err != nil {
		return err
	}
	close := byte(']')
	if open == '{' {
		close = '}'
	}
	c, err := s.next()
	if err != nil {
		return err
	}
	if c == close {
		return nil
	}
	s.unread()
	for {
		var key []byte
		if open == '{' {
			if key, err = s.string(); err != nil {
				return err
			}
			if err := s.expect(':'); err != nil {
				return err
			}
		}
		if err := fn(key); err != nil {
			return err
		}
		c, err := s.next()
		if err != nil {
			return err
		}
		switch c {
		case close:
			return nil
		case ',':
		default:
			return s.errorf("found %q, want ',' or %q", c, close)
		}
	}
}

// skip consumes one value of any kind.
func (s *jsonScanner) skip() error {
	c, err := s.next()
	if err != nil {
		return err
	}
	switch {
	case c == '"':
		_, err = s.stringBody()
		return err
	case c == '[' || c == '{':
		s.unread()
		return s.each(c, func([]byte) error { return s.skip() })
	case c == '-' || ('0' <= c && c <= '9'):
		_, err = s.numberBody(c)
		return err
	case c == 't' || c == 'f' || c == 'n':
		for {
			c, err := s.r.ReadByte()
			if err != nil || c < 'a' || c > 'z' {
				if err == nil {
					s.r.UnreadByte()
				}
				return nil
			}
			s.off++
		}
	}
	return s.errorf("unexpected %q", c)
}
