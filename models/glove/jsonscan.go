package glove

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/triagegw/triage/internal/jsonscan"
)

// jsonScanner is a minimal streaming JSON reader for documents too large to
// decode into values (the 300 MB wink GloVe file): the caller walks the
// structure it expects and skips the rest; strings are decoded into a
// reused buffer, so scanning allocates nothing per value. Tokens are
// checked by package jsonscan on the reader's buffered window, which is
// widened while a token runs past it: a token longer than the buffer
// (1 MiB) is refused.
type jsonScanner struct {
	r     *bufio.Reader
	off   int64 // bytes consumed
	depth int   // arrays and objects open
	str   []byte
}

func newJSONScanner(r io.Reader) *jsonScanner { return newJSONScannerSize(r, 1<<20) }

func newJSONScannerSize(r io.Reader, size int) *jsonScanner {
	return &jsonScanner{r: bufio.NewReaderSize(r, size), str: make([]byte, 0, 256)}
}

func (s *jsonScanner) errorf(format string, args ...any) error {
	return fmt.Errorf("json at byte %d: %s", s.off, fmt.Sprintf(format, args...))
}

func (s *jsonScanner) consume(n int) {
	s.r.Discard(n)
	s.off += int64(n)
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

// look skips white space and returns the next byte without consuming it;
// io.EOF when there is none.
func (s *jsonScanner) look() (byte, error) {
	for {
		buf, err := s.peek()
		if len(buf) > 0 {
			i := jsonscan.WS(buf, 0)
			s.consume(i)
			if i < len(buf) {
				return buf[i], nil
			}
			continue
		}
		return 0, err
	}
}

// peekByte is look, with the end of input an error.
func (s *jsonScanner) peekByte() (byte, error) {
	c, err := s.look()
	if errors.Is(err, io.EOF) {
		return 0, s.errorf("unexpected end of input")
	}
	return c, err
}

// next returns the next byte that is not white space, consumed.
func (s *jsonScanner) next() (byte, error) {
	c, err := s.peekByte()
	if err == nil {
		s.consume(1)
	}
	return c, err
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
	_, err := s.look()
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

// token returns the string (kind '"'), number ('0') or literal ('t') token
// at the reader's position, unconsumed: a slice of the reader's buffer,
// valid until the next read.
func (s *jsonScanner) token(kind byte) ([]byte, error) {
	n := max(s.r.Buffered(), 1)
	for {
		buf, err := s.r.Peek(n)
		var end int
		var f jsonscan.Fault
		switch kind {
		case '"':
			end, _, f = jsonscan.StringEnd(buf, 0)
		case '0':
			end, f = jsonscan.NumberEnd(buf, 0)
			if f == jsonscan.None && end == len(buf) && err == nil {
				f = jsonscan.End // the number may go on past the window
			}
		default:
			end, f = jsonscan.LiteralEnd(buf, 0)
		}
		switch {
		case f == jsonscan.None:
			return buf[:end], nil
		case f != jsonscan.End:
			s.consume(end)
			return nil, s.errorf("%v", f)
		case errors.Is(err, io.EOF) && len(buf) < n:
			if kind == '0' && len(buf) > 0 {
				if end, f = jsonscan.NumberEnd(buf, 0); f == jsonscan.None {
					return buf[:end], nil
				}
			}
			return nil, s.errorf("unexpected end of input")
		case err != nil && !errors.Is(err, io.EOF):
			return nil, err
		case n >= s.r.Size():
			return nil, s.errorf("a token longer than %d bytes", s.r.Size())
		}
		n = min(max(2*n, 64), s.r.Size())
	}
}

// string reads a whole string value, returning its decoded bytes (valid
// until the next call).
func (s *jsonScanner) string() ([]byte, error) {
	c, err := s.peekByte()
	if err != nil {
		return nil, err
	}
	if c != '"' {
		return nil, s.errorf("found %q, want '\"'", c)
	}
	tok, err := s.token('"')
	if err != nil {
		return nil, err
	}
	s.str = jsonscan.AppendUnquote(s.str[:0], tok)
	s.consume(len(tok))
	return s.str, nil
}

// number reads a number's text, unconsumed (see token).
func (s *jsonScanner) number() ([]byte, error) {
	tok, err := s.token('0')
	if err != nil {
		return nil, err
	}
	if len(tok) > 64 {
		return nil, s.errorf("number too long")
	}
	return tok, nil
}

// skipFlatArray consumes an array that holds no arrays, objects or strings
// (a vector of numbers) by searching for its closing bracket, without
// parsing or checking its elements: three quarters of the file are
// vectors no vocabulary word needs, and checking them would double the
// import's time. A malformed one is still refused by whatever it makes of
// the rest of the document.
func (s *jsonScanner) skipFlatArray() error {
	if err := s.expect('['); err != nil {
		return err
	}
	for {
		buf, err := s.peek()
		if i := bytes.IndexByte(buf, ']'); i >= 0 {
			s.consume(i + 1)
			return nil
		}
		s.consume(len(buf))
		if errors.Is(err, io.EOF) {
			return s.errorf("unexpected end of input")
		}
		if err != nil {
			return err
		}
	}
}

// float reads a number as a float32 (correctly rounded).
func (s *jsonScanner) float() (float32, error) {
	b, err := s.number()
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(string(b), 32)
	if err != nil {
		return 0, s.errorf("bad number %q", b)
	}
	s.consume(len(b))
	return float32(f), nil
}

// int reads an integer value.
func (s *jsonScanner) int() (int, error) {
	if _, err := s.peekByte(); err != nil {
		return 0, err
	}
	b, err := s.number()
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return 0, s.errorf("bad integer %q", b)
	}
	s.consume(len(b))
	return n, nil
}

// floats reads an array of numbers into dst[:0] (at most max of them).
func (s *jsonScanner) floats(dst []float32, max int) ([]float32, error) {
	dst = dst[:0]
	if err := s.expect('['); err != nil {
		return nil, err
	}
	c, err := s.peekByte()
	if err != nil {
		return nil, err
	}
	if c == ']' {
		s.consume(1)
		return dst, nil
	}
	for {
		// The numbers are read straight from the buffered window while
		// each, and the byte after it, is there: a vector is a few
		// hundred bytes, the window a MiB. Anything else (the window's
		// end, a fault) is left to the element-wise reading below.
		buf, _ := s.r.Peek(s.r.Buffered())
		p := 0
		for len(dst) < max {
			i := jsonscan.WS(buf, p)
			end, f := jsonscan.NumberEnd(buf, i)
			if f != jsonscan.None || end == len(buf) || end-i > 64 {
				break
			}
			v, err := strconv.ParseFloat(string(buf[i:end]), 32)
			j := jsonscan.WS(buf, end)
			if err != nil || j >= len(buf) || buf[j] != ',' && buf[j] != ']' {
				break
			}
			dst = append(dst, float32(v))
			p = j + 1
			if buf[j] == ']' {
				s.consume(p)
				return dst, nil
			}
		}
		s.consume(p)
		if len(dst) >= max {
			return nil, s.errorf("array longer than %d", max)
		}
		f, err := s.float()
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
	if s.depth++; s.depth > jsonscan.MaxDepth {
		return s.errorf("nested deeper than %d", jsonscan.MaxDepth)
	}
	close := byte(']')
	if open == '{' {
		close = '}'
	}
	c, err := s.peekByte()
	if err != nil {
		return err
	}
	if c == close {
		s.consume(1)
		s.depth--
		return nil
	}
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
			s.depth--
			return nil
		case ',':
		default:
			return s.errorf("found %q, want ',' or %q", c, close)
		}
	}
}

// skip consumes one value of any kind, checking it.
func (s *jsonScanner) skip() error {
	c, err := s.peekByte()
	if err != nil {
		return err
	}
	var tok []byte
	switch {
	case c == '[' || c == '{':
		return s.each(c, func([]byte) error { return s.skip() })
	case c == '"':
		tok, err = s.token('"')
	case c == '-' || ('0' <= c && c <= '9'):
		tok, err = s.number()
	case c == 't' || c == 'f' || c == 'n':
		tok, err = s.token('t')
	default:
		return s.errorf("unexpected %q", c)
	}
	if err != nil {
		return err
	}
	s.consume(len(tok))
	return nil
}
