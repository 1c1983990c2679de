// Package wire holds the small HTTP/1.1 parsing pieces the gateway's server
// (router/h1) and its upstream client (router/proxy) both need.
package wire

import (
	"bytes"
	"strings"
	"time"
)

// ALongTimeAgo is a deadline in the past: setting it fails pending I/O at
// once.
var ALongTimeAgo = time.Unix(1, 0)

// ParseLength parses a Content-Length value: 1 to 18 decimal digits,
// nothing else.
func ParseLength[T string | []byte](b T) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// TrimOWS trims the optional whitespace (spaces and tabs) around a header
// value or list element.
func TrimOWS[T string | []byte](s T) T {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// HasToken reports whether the comma-separated list v (a Connection
// value) holds tok, compared without regard to case.
func HasToken(v, tok string) bool {
	for v != "" {
		var t string
		t, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(TrimOWS(t), tok) {
			return true
		}
	}
	return false
}

// Token reports whether s is an RFC 9110 token, as a header name must be.
func Token[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if !tchar[s[i]] {
			return false
		}
	}
	return len(s) > 0
}

var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range []byte("!#$%&'*+-.^_`|~") {
		t[c] = true
	}
	return t
}()

// FieldLine reports whether line (its line end cut) is a header or
// trailer field line, "name: value": a token before the first colon and a
// value without control characters after it.
func FieldLine(line []byte) bool {
	i := bytes.IndexByte(line, ':')
	return i > 0 && Token(line[:i]) && FieldValue(line[i+1:])
}

// Word is the eight bytes of s at off, little-endian, for the tests that
// look at eight bytes at a time (one load where the compiler can).
func Word[T string | []byte](s T, off int) uint64 {
	s = s[off : off+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// FieldValue reports whether s may be a header field value: no control
// characters other than tab (RFC 9110 5.5; NUL, CR and LF included).
// Eight bytes at a time while none is below ' ' or is DEL (the exact
// word tests), then byte by byte through a word that has one, since a tab
// is allowed.
func FieldValue[T string | []byte](s T) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := Word(s, i)
		del := x ^ (lo * 0x7f)
		if ((x-lo*' ')|(del-lo))&^x&hi != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
