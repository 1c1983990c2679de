package openai

import (
	"encoding/binary"
	"encoding/json"
	"unicode/utf8"
)

// maxDepth matches encoding/json's nesting limit, so Extract accepts exactly
// the documents the upstream's own parser would.
const maxDepth = 10000

// Span is the half-open byte range [Start, End) of a JSON value inside a
// body. The zero Span means the field was absent.
type Span struct{ Start, End int }

// Len is the span's length in bytes; 0 when absent.
func (s Span) Len() int { return s.End - s.Start }

// Request is what the router needs from a request body. Byte slices and spans
// point into the body that was given to Extract; nothing is copied.
type Request struct {
	// Model is the model name as it appears between the quotes. When
	// ModelEscaped is set it still holds JSON escapes; use ModelName.
	Model        []byte
	ModelSpan    Span // the model token, quotes included
	ModelEscaped bool
	modelTok     []byte
	// Stream reports "stream": true.
	Stream bool
	// StreamOptions is the "stream_options" value; open is where the
	// top-level object's '{' is, for UsageEdit.
	StreamOptions Span
	open          int
	// Messages, Prompt and Input locate the prompt-bearing fields of chat,
	// completions and embeddings requests.
	Messages, Prompt, Input Span
	// Instructions and PreviousResponseID are a Responses request's
	// system prompt and the response it continues (a JSON string token,
	// quotes included, when it is a string).
	Instructions, PreviousResponseID Span
	// MaxTokens is the largest of max_tokens, max_completion_tokens and
	// max_output_tokens given as whole numbers (0: none), for admitting a
	// request against token limits before it runs.
	MaxTokens int64
}

// ModelName returns the decoded model name. It allocates; the hot path looks
// names up with string(r.Model) in a map index instead, which does not.
func (r *Request) ModelName() string {
	if !r.ModelEscaped {
		return string(r.Model)
	}
	return string(decodeToken(r.modelTok))
}

// Extract validates body as a JSON object and pulls out the routing fields in
// a single pass, without decoding any other value. It rejects what the
// upstream would reject as malformed (any invalid JSON, a body that is not an
// object) and what the gateway cannot route (a missing or non-string model,
// a stream that is neither a boolean nor null). Duplicate keys resolve to
// the last, as in encoding/json and Python's json module.
//
// The error, when not nil, is an *Error with status 400.
func Extract(body []byte) (Request, error) {
	var r Request
	s := scanner{b: body}
	s.ws()
	if s.i >= len(s.b) {
		return r, invalid("", "request body is empty; expected a JSON object")
	}
	if s.b[s.i] != '{' {
		if err := s.value(0); err != nil || s.ws() < len(s.b) {
			return r, malformed(s.err(err))
		}
		return r, invalid("", "request body must be a JSON object")
	}
	r.open = s.i
	if err := s.topObject(&r); err != nil {
		return r, err
	}
	if s.ws() != len(s.b) {
		return r, malformed(s.errAt("unexpected data after the top-level object"))
	}
	if r.ModelSpan.Len() == 0 {
		return r, &Error{Status: 400, Message: "you must provide a model parameter", Type: TypeInvalidRequest, Param: "model", Code: "missing_model"}
	}
	return r, nil
}

func (s *scanner) topObject(r *Request) error {
	s.i++ // '{'
	if s.ws() < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		if s.ws() >= len(s.b) || s.b[s.i] != '"' {
			return malformed(s.errAt("expected a string key"))
		}
		kstart := s.i
		kesc, err := s.str()
		if err != nil {
			return malformed(err)
		}
		key := s.b[kstart+1 : s.i-1]
		if kesc {
			key = decodeToken(s.b[kstart:s.i])
		}
		if s.ws() >= len(s.b) || s.b[s.i] != ':' {
			return malformed(s.errAt("expected ':' after object key"))
		}
		s.i++
		if s.ws() >= len(s.b) {
			return malformed(s.errAt("unexpected end of input"))
		}
		vstart := s.i
		c := s.b[vstart]
		esc := false
		if c == '"' {
			esc, err = s.str()
		} else {
			err = s.value(1)
		}
		if err != nil {
			return malformed(err)
		}
		span := Span{vstart, s.i}
		switch string(key) {
		case "model":
			if c != '"' {
				return fieldType("model", "a string")
			}
			r.ModelSpan, r.Model, r.ModelEscaped = span, s.b[vstart+1:s.i-1], esc
			r.modelTok = s.b[vstart:s.i]
		case "stream":
			switch c {
			case 't':
				r.Stream = true
			case 'f', 'n':
				r.Stream = false
			default:
				return fieldType("stream", "a boolean")
			}
		case "stream_options":
			r.StreamOptions = span
		case "messages":
			if c != '[' {
				return fieldType("messages", "an array")
			}
			r.Messages = span
		case "prompt":
			r.Prompt = span
		case "input":
			r.Input = span
		case "instructions":
			r.Instructions = span
		case "previous_response_id":
			r.PreviousResponseID = span
		case "max_tokens", "max_completion_tokens", "max_output_tokens":
			// Not a whole number: the upstream judges it.
			r.MaxTokens = max(r.MaxTokens, wholeNumber(s.b[vstart:s.i]))
		}
		if s.ws() >= len(s.b) {
			return malformed(s.errAt("unexpected end of input"))
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return malformed(s.errAt("expected ',' or '}' after object value"))
		}
	}
}

// wholeNumber is the value of a JSON number token made of digits only, up
// to 10^15; anything else is 0.
func wholeNumber(tok []byte) int64 {
	if len(tok) > 15 {
		return 0
	}
	n, _ := digits(tok)
	return n
}

// decodeToken decodes a JSON string token (quotes included) with escapes.
func decodeToken(tok []byte) []byte {
	var v string
	if json.Unmarshal(tok, &v) != nil {
		return nil
	}
	return []byte(v)
}

// scanner is a validating, non-decoding JSON reader over a byte slice.
type scanner struct {
	b []byte
	i int
}

// ws skips JSON whitespace and returns the new offset.
func (s *scanner) ws() int {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return s.i
		}
	}
	return s.i
}

type syntaxError struct {
	msg string
	off int
}

func (e *syntaxError) Error() string { return e.msg }

func (s *scanner) errAt(msg string) error { return &syntaxError{msg: msg, off: s.i} }

func (s *scanner) err(err error) error {
	if err == nil {
		return s.errAt("unexpected data after the top-level value")
	}
	return err
}

// value validates the value at s.i (whitespace already skipped).
func (s *scanner) value(depth int) error {
	if s.i >= len(s.b) {
		return s.errAt("unexpected end of input")
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, err := s.str()
		return err
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		return s.errAt("invalid character " + quoteChar(c) + " looking for beginning of value")
	}
}

func (s *scanner) lit(want string) error {
	if len(s.b)-s.i < len(want) || string(s.b[s.i:s.i+len(want)]) != want {
		return s.errAt("invalid literal, expected " + want)
	}
	s.i += len(want)
	return nil
}

func (s *scanner) object(depth int) error {
	if depth > maxDepth {
		return s.errAt("exceeded max nesting depth")
	}
	s.i++ // '{'
	if s.ws() < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		if s.ws() >= len(s.b) || s.b[s.i] != '"' {
			return s.errAt("expected a string key")
		}
		if _, err := s.str(); err != nil {
			return err
		}
		if s.ws() >= len(s.b) || s.b[s.i] != ':' {
			return s.errAt("expected ':' after object key")
		}
		s.i++
		s.ws()
		if err := s.value(depth); err != nil {
			return err
		}
		if s.ws() >= len(s.b) {
			return s.errAt("unexpected end of input")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.errAt("expected ',' or '}' after object value")
		}
	}
}

func (s *scanner) array(depth int) error {
	if depth > maxDepth {
		return s.errAt("exceeded max nesting depth")
	}
	s.i++ // '['
	if s.ws() < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if err := s.value(depth); err != nil {
			return err
		}
		if s.ws() >= len(s.b) {
			return s.errAt("unexpected end of input")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.errAt("expected ',' or ']' after array element")
		}
	}
}

// strPlain marks the bytes that may appear in a string without ending it or
// starting an escape: everything but '"', '\\' and control characters.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// strSpecial8 reports whether any of the eight bytes of x is one strPlain
// does not mark: '"', '\\' or a control character. Each test is the
// exact "some byte is zero" (or "less than n") word trick; a byte's top bit
// is the same in x, x^'"' and x^'\\', so they share the ^x mask.
func strSpecial8(x uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q, bs := x^(lo*'"'), x^(lo*'\\')
	return ((x-lo*0x20)|(q-lo)|(bs-lo))&^x&hi != 0
}

// str validates the string at s.i and leaves s.i after its closing quote. It
// reports whether the string holds escapes.
func (s *scanner) str() (escaped bool, err error) {
	b := s.b
	i := s.i + 1
	for {
		// Eight bytes at a time while none ends the string or starts an
		// escape (a prompt is mostly such runs), then byte by byte to
		// the one that does.
		for i+8 <= len(b) && !strSpecial8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			s.i = i
			return escaped, s.errAt("unexpected end of input in string")
		}
		switch b[i] {
		case '"':
			s.i = i + 1
			return escaped, nil
		case '\\':
			escaped = true
			if i+1 >= len(b) {
				s.i = i
				return escaped, s.errAt("unexpected end of input in string escape")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					s.i = i
					return escaped, s.errAt("invalid \\u escape in string")
				}
				i += 6
			default:
				s.i = i
				return escaped, s.errAt("invalid escape in string")
			}
		default: // control character
			s.i = i
			return escaped, s.errAt("invalid control character in string")
		}
	}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (s *scanner) number() error {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		s.i = i
		return s.errAt("invalid number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			s.i = i
			return s.errAt("invalid number: expected digit after decimal point")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			s.i = i
			return s.errAt("invalid number: expected digit in exponent")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return nil
}

func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	if c < utf8.RuneSelf && c >= 0x20 && c != 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	return "byte 0x" + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15])
}
