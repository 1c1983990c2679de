package jsonscan

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is encoding/json's nesting limit: objects and arrays nested
// deeper are refused, by it and by Scanner alike.
const MaxDepth = 10000

// Fault says what is wrong with the input; the zero Fault is none.
type Fault uint8

const (
	None     Fault = iota
	End            // the input ends inside a value
	Char           // a byte that cannot start a value, or cannot come next
	Control        // a control character in a string
	Escape         // an invalid escape in a string
	Number         // a malformed number
	Literal        // a malformed true, false or null
	Depth          // nesting deeper than MaxDepth
	Trailing       // data after the top-level value
	Refused        // the caller refused a value (Scanner.Fail)
)

var faultText = [...]string{
	None:     "no error",
	End:      "unexpected end of JSON input",
	Char:     "invalid character",
	Control:  "invalid control character in string",
	Escape:   "invalid escape in string",
	Number:   "invalid number",
	Literal:  "invalid literal",
	Depth:    "exceeded max nesting depth",
	Trailing: "invalid character after top-level value",
	Refused:  "unexpected value",
}

func (f Fault) String() string {
	if int(f) < len(faultText) {
		return faultText[f]
	}
	return "fault " + strconv.Itoa(int(f))
}

// SyntaxError is a Fault and the byte offset where it was found.
type SyntaxError struct {
	Fault  Fault
	Offset int
	Byte   byte // the offending byte, for Char and Trailing
}

func (e *SyntaxError) Error() string {
	if e.Fault == Char || e.Fault == Trailing {
		return e.Fault.String() + " " + quoteChar(e.Byte)
	}
	return e.Fault.String()
}

func quoteChar(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c >= 0x20 && c < 0x7f:
		return "'" + string(rune(c)) + "'"
	}
	const hex = "0123456789abcdef"
	return "byte 0x" + string(hex[c>>4]) + string(hex[c&15])
}

// WS returns the offset of the first byte at or after i that is not JSON
// whitespace (len(b) if none).
func WS(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' {
		return i // the usual case: compact JSON
	}
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// plain marks the bytes that may appear in a string without ending it or
// starting an escape: everything but '"', '\\' and control characters.
// Bytes past ASCII are parts of UTF-8 sequences, taken as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// specials flags the top bit of each byte of x (little-endian) that plain
// does not mark: '"', '\\' or a control character. Each test is the
// "some byte is zero" (or "less than n") word trick; a byte's top bit is
// the same in x, x^'"' and x^'\\', so they share the ^x mask. A borrow
// can flag a plain byte above a special one, never below: the lowest flag
// is exact, so TrailingZeros64/8 is the first special byte's index.
func specials(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q, bs := x^(lo*'"'), x^(lo*'\\')
	return ((x - lo*0x20) | (q - lo) | (bs - lo)) &^ x & hi
}

// plainRun returns the first offset at or after i holding a byte plain
// does not mark (len(b) if none): eight bytes at a time (text is mostly
// such runs, and a short key ends in its first word), then byte by byte
// for the last few.
func plainRun(b []byte, i int) int {
	for i+8 <= len(b) {
		if m := specials(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for i < len(b) && plain[b[i]] {
		i++
	}
	return i
}

// hexVal is a hex digit's value, -1 for other bytes.
var hexVal = func() (t [256]int8) {
	for c := range 256 {
		switch {
		case c >= '0' && c <= '9':
			t[c] = int8(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = int8(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			t[c] = int8(c - 'A' + 10)
		default:
			t[c] = -1
		}
	}
	return t
}()

// hex4 is the value of the four hex digits at b[i:], or -1.
func hex4(b []byte, i int) rune {
	if len(b)-i < 4 {
		return -1
	}
	a, c, d, e := hexVal[b[i]], hexVal[b[i+1]], hexVal[b[i+2]], hexVal[b[i+3]]
	if a|c|d|e < 0 {
		return -1
	}
	return rune(a)<<12 | rune(c)<<8 | rune(d)<<4 | rune(e)
}

// escapeEnd checks the escape at b[i] ('\\') and returns the offset after
// it.
func escapeEnd(b []byte, i int) (int, Fault) {
	if i+1 >= len(b) {
		return len(b), End
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2, None
	case 'u':
		if hex4(b, i+2) < 0 {
			if len(b)-(i+2) < 4 && allHex(b[i+2:]) {
				return len(b), End
			}
			return i, Escape
		}
		return i + 6, None
	}
	return i, Escape
}

func allHex(b []byte) bool {
	for _, c := range b {
		if hexVal[c] < 0 {
			return false
		}
	}
	return true
}

// Holds says what a string token holds besides printable ASCII.
type Holds uint8

const (
	Escaped   Holds = 1 << iota // any escape
	Surrogate                   // a \u escape of half a surrogate pair, paired or not
	NonASCII                    // a byte past ASCII (UTF-8 or not)
)

// simpleEscape marks the bytes that follow a backslash in a two-byte
// escape.
var simpleEscape = [256]bool{'"': true, '\\': true, '/': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true}

// StringEnd checks the string token at b[i] (a '"') and returns the offset
// after its closing quote, and what it holds. On a fault, end is where it
// was found; End means b stops inside the string.
func StringEnd(b []byte, i int) (end int, esc Holds, f Fault) {
	i++
	var high uint64 // the bytes of the plain runs ORed: past ASCII if the top bit is set
	for {
		// plainRun, noting bytes past ASCII as it goes.
		for {
			if i+8 > len(b) {
				for i < len(b) && plain[b[i]] {
					high |= uint64(b[i])
					i++
				}
				break
			}
			x := binary.LittleEndian.Uint64(b[i:])
			if m := specials(x); m != 0 {
				n := bits.TrailingZeros64(m) >> 3
				high |= x & (1<<(8*n) - 1) // the bytes before the special one
				i += n
				break
			}
			high |= x
			i += 8
		}
		if high&0x8080808080808080 != 0 {
			esc |= NonASCII
		}
		if i >= len(b) {
			return len(b), esc, End
		}
		switch b[i] {
		case '"':
			return i + 1, esc, None
		case '\\':
			esc |= Escaped
			if i+1 < len(b) && simpleEscape[b[i+1]] {
				i += 2
				continue
			}
			if i+1 < len(b) && b[i+1] == 'u' {
				if r := hex4(b, i+2); r >= 0 {
					if r >= 0xD800 && r < 0xE000 {
						esc |= Surrogate
					}
					i += 6
					continue
				}
			}
			if i, f = escapeEnd(b, i); f != None {
				return i, esc, f
			}
		default:
			return i, esc, Control
		}
	}
}

// skipStringEnd is StringEnd without saying what the string holds, for
// Skip: noting the bytes past ASCII costs an instruction a word, 2.5% of
// reading a request whose 2 KB prompt is only skipped.
func skipStringEnd(b []byte, i int) (int, Fault) {
	i++
	for {
		i = plainRun(b, i)
		if i >= len(b) {
			return len(b), End
		}
		switch b[i] {
		case '"':
			return i + 1, None
		case '\\':
			var f Fault
			if i, f = escapeEnd(b, i); f != None {
				return i, f
			}
		default:
			return i, Control
		}
	}
}

// NumberEnd checks the number token at b[i] and returns the offset after
// it. A number that runs to the end of b is complete as far as b goes: a
// reader holding a window of its input must see the next byte to know.
func NumberEnd(b []byte, i int) (int, Fault) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, End
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, Number
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) {
			return i, End
		}
		j := digits(b, i)
		if j == i {
			return i, Number
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) {
			return i, End
		}
		j := digits(b, i)
		if j == i {
			return i, Number
		}
		i = j
	}
	return i, None
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// LiteralEnd checks the true, false or null at b[i] (chosen by its first
// byte) and returns the offset after it.
func LiteralEnd(b []byte, i int) (int, Fault) {
	var lit string
	switch b[i] {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	case 'n':
		lit = "null"
	default:
		return i, Char
	}
	n := min(len(lit), len(b)-i)
	if string(b[i:i+n]) != lit[:n] {
		return i, Literal
	}
	if n < len(lit) {
		return len(b), End
	}
	return i + n, None
}

// AppendUnquote appends the text of the string token tok (quotes
// included), which StringEnd has checked, to dst.
func AppendUnquote(dst, tok []byte) []byte {
	dst, _, _ = unquote(dst, tok, 1, -1)
	return dst
}

// AppendUnquoteLimit is AppendUnquote stopping before dst would grow past
// limit bytes, never inside a character.
func AppendUnquoteLimit(dst, tok []byte, limit int) []byte {
	dst, _, _ = unquote(dst, tok, 1, limit)
	return dst
}

// unquote decodes the string whose text starts at b[i] (after the opening
// quote, or inside the text where no escape is open) onto dst, checking
// it, and returns the offset after its closing quote. limit >= 0 stops it
// once dst would pass limit bytes; the offset is then -1.
func unquote(dst, b []byte, i, limit int) ([]byte, int, Fault) {
	for {
		j := plainRun(b, i)
		if limit >= 0 && len(dst)+j-i > limit {
			room := max(limit-len(dst), 0)
			return append(dst, runeTrim(b[i:i+room])...), -1, None
		}
		dst = append(dst, b[i:j]...)
		i = j
		if i >= len(b) {
			return dst, len(b), End
		}
		c := b[i]
		if c == '"' {
			return dst, i + 1, None
		}
		if c != '\\' {
			return dst, i, Control
		}
		if i+1 >= len(b) {
			return dst, len(b), End
		}
		var r rune
		switch e := b[i+1]; e {
		case '"', '\\', '/':
			r = rune(e)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			if r = hex4(b, i+2); r < 0 {
				_, f := escapeEnd(b, i)
				return dst, i, f
			}
			i += 4
			if utf16.IsSurrogate(r) {
				// The pair's second half, if the next escape is one;
				// else U+FFFD, and the next escape is read on its own.
				r2 := rune(-1)
				if i+2+6 <= len(b) && b[i+2] == '\\' && b[i+3] == 'u' {
					r2 = hex4(b, i+4)
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
		default:
			return dst, i, Escape
		}
		i += 2
		if limit >= 0 && len(dst)+utf8.RuneLen(r) > limit {
			return dst, -1, None
		}
		dst = utf8.AppendRune(dst, r)
	}
}

// runeTrim drops the end of b from where a character it cuts starts.
func runeTrim(b []byte) []byte {
	for k := len(b) - 1; k >= 0 && k >= len(b)-utf8.UTFMax; k-- {
		if utf8.RuneStart(b[k]) {
			if !utf8.FullRune(b[k:]) {
				return b[:k]
			}
			break
		}
	}
	return b
}

// Clean reports whether JSON text (a string token or a whole document)
// reads the same to every JSON reader, so it can be passed on as it is:
// it is UTF-8, and holds no escaped half of a surrogate pair without the
// other half. Strict readers refuse both; encoding/json replaces them.
func Clean(text []byte) bool {
	if !utf8.Valid(text) {
		return false
	}
	for {
		i := bytes.IndexByte(text, '\\')
		if i < 0 {
			return true
		}
		text = text[i:]
		if len(text) < 6 || text[1] != 'u' {
			text = text[min(2, len(text)):] // an escape that is not \u, or a cut one
			continue
		}
		r := hex4(text, 2)
		if r < 0xD800 || r >= 0xE000 {
			text = text[6:]
			continue
		}
		if r >= 0xDC00 || len(text) < 12 || text[6] != '\\' || text[7] != 'u' {
			return false
		}
		if r2 := hex4(text, 8); r2 < 0xDC00 || r2 >= 0xE000 {
			return false
		}
		text = text[12:]
	}
}

// AppendCompact appends the JSON text raw without the whitespace between
// its tokens. raw must be valid JSON: this only tracks whether it is inside
// a string, which is all compaction needs and several times cheaper than
// encoding/json.Compact, which validates again.
func AppendCompact(dst, raw []byte) []byte {
	inString := false
	start := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ' ', '\t', '\n', '\r':
			dst = append(dst, raw[start:i]...)
			start = i + 1
		}
	}
	return append(dst, raw[start:]...)
}
