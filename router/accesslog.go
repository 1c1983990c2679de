package router

import (
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/triagegw/triage/router/internal/wire"
)

// The access log is one JSON line per request, in the same shape as the
// slog JSON lines it sits among ({"time","level","msg",...}), but formatted
// by hand: at 15k requests a second slog's generic path cost 5% of the
// gateway's CPU. Prompt text is never part of it.

var lineBuf = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

type logLine struct {
	b  []byte
	bp *[]byte // the pooled buffer b came from
}

func newLine(t time.Time, level, msg string) logLine {
	bp := lineBuf.Get().(*[]byte)
	b := append((*bp)[:0], `{"time":"`...)
	b = appendStamp(b, t)
	b = append(b, `","level":"`...)
	b = append(b, level...)
	b = append(b, `","msg":`...)
	b = appendJSONString(b, msg)
	return logLine{b: b, bp: bp}
}

// stamp is the RFC 3339 form of the last second a line was written in,
// split around where the fraction goes: time.Time.AppendFormat spent
// over a third of a line's instructions finding the zone's offset, which
// changes only on a second's boundary.
type stamp struct {
	sec        int64
	loc        *time.Location
	date, zone string // "2006-01-02T15:04:05", "Z" or "-07:00"
}

var lastStamp atomic.Pointer[stamp]

// appendStamp appends t as time.RFC3339Nano does.
func appendStamp(b []byte, t time.Time) []byte {
	c := lastStamp.Load()
	if c == nil || c.sec != t.Unix() || c.loc != t.Location() {
		f := t.Format(time.RFC3339)
		const dateLen = len("2006-01-02T15:04:05")
		if len(f) <= dateLen || f[dateLen] != 'Z' && f[dateLen] != '+' && f[dateLen] != '-' {
			return t.AppendFormat(b, time.RFC3339Nano) // a year past 9999
		}
		c = &stamp{sec: t.Unix(), loc: t.Location(), date: f[:dateLen], zone: f[dateLen:]}
		lastStamp.Store(c)
	}
	b = append(b, c.date...)
	if ns := t.Nanosecond(); ns != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i > 0; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	return append(b, c.zone...)
}

func (l *logLine) str(k, v string) {
	l.key(k)
	l.b = appendJSONString(l.b, v)
}

func (l *logLine) bytes(k string, v []byte) {
	l.key(k)
	l.b = appendJSONBytes(l.b, v)
}

// maxLogField bounds a field whose content a client chooses (the model
// name, an error quoting the request): a 1 MB model name must not make a
// 1 MB log line. Longer values are cut and marked with their full length.
const maxLogField = 256

// clipped writes a client-controlled value, cut to maxLogField bytes (on a
// UTF-8 boundary) and marked "…[N bytes]" when longer.
func clipped[T string | []byte](l *logLine, k string, v T) {
	l.key(k)
	if len(v) <= maxLogField {
		l.b = appendJSON(l.b, v)
		return
	}
	cut := maxLogField
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	l.b = appendJSON(l.b, v[:cut])
	l.b = l.b[:len(l.b)-1] // reopen the string
	l.b = append(l.b, "…["...)
	l.b = strconv.AppendInt(l.b, int64(len(v)), 10)
	l.b = append(l.b, ` bytes]"`...)
}

func (l *logLine) int(k string, v int64) {
	l.key(k)
	l.b = strconv.AppendInt(l.b, v, 10)
}

func (l *logLine) bool(k string, v bool) {
	l.key(k)
	l.b = strconv.AppendBool(l.b, v)
}

// ms writes a duration in milliseconds with microsecond precision, as
// strconv.AppendFloat(µs/1000, 'f', -1) would (the shortest form: no
// trailing zeros), in integer arithmetic.
func (l *logLine) ms(k string, d time.Duration) {
	l.key(k)
	l.b = appendMillis(l.b, d.Microseconds())
}

func appendMillis(b []byte, us int64) []byte {
	u := uint64(us)
	if us < 0 {
		b = append(b, '-')
		u = -u
	}
	b = strconv.AppendUint(b, u/1000, 10)
	frac := u % 1000
	if frac == 0 {
		return b
	}
	b = append(b, '.', byte('0'+frac/100))
	if frac %= 100; frac != 0 {
		b = append(b, byte('0'+frac/10))
		if frac %= 10; frac != 0 {
			b = append(b, byte('0'+frac))
		}
	}
	return b
}

// float writes a score with 3 decimals.
func (l *logLine) float(k string, v float32) {
	l.key(k)
	l.b = appendFloat3(l.b, v)
}

// appendFloat3 is strconv.AppendFloat(b, float64(f), 'f', 3, 32), byte
// for byte, in integer arithmetic for the values scores, masses and floors
// take: f is m·2^e exactly, so f·1000 is m·1000 shifted, and the bits
// shifted out say how to round it (to even on an exact tie, as strconv
// does). NaN, infinities and values from 2^20 up go to strconv.
func appendFloat3(b []byte, f float32) []byte {
	bits := math.Float32bits(f)
	exp := int(bits>>23) & 0xff
	if exp == 0xff || exp >= 127+20 {
		return strconv.AppendFloat(b, float64(f), 'f', 3, 32)
	}
	m := uint64(bits & (1<<23 - 1))
	if exp == 0 {
		exp = 1 // subnormal: no implicit bit
	} else {
		m |= 1 << 23
	}
	// f = m·2^(exp-150) and exp < 147, so f·1000 is m·1000 (below 2^34)
	// shifted right by at least 4 bits.
	var q uint64
	if sh := 150 - exp; sh < 64 { // from 64 bits, f is below 2^-40: q stays 0
		x := m * 1000
		q = x >> sh
		r, half := x&(1<<sh-1), uint64(1)<<(sh-1)
		if r > half || r == half && q&1 == 1 {
			q++
		}
	}
	if bits>>31 != 0 {
		b = append(b, '-')
	}
	b = strconv.AppendUint(b, q/1000, 10)
	frac := q % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// us writes a duration in microseconds with 0.1 µs precision.
func (l *logLine) us(k string, d time.Duration) {
	l.key(k)
	l.b = strconv.AppendFloat(l.b, float64(d.Nanoseconds())/1000, 'f', 1, 64)
}

func (l *logLine) key(k string) {
	l.b = append(l.b, ',', '"')
	l.b = append(l.b, k...)
	l.b = append(l.b, '"', ':')
}

// end writes the line to w in one Write and recycles the buffer.
func (l *logLine) end(w io.Writer) {
	l.b = append(l.b, '}', '\n')
	_, _ = w.Write(l.b)
	if cap(l.b) <= 4096 {
		*l.bp = l.b[:0]
		lineBuf.Put(l.bp)
	}
}

const hexDigits = "0123456789abcdef"

func appendJSONString(dst []byte, s string) []byte { return appendJSON(dst, s) }

func appendJSONBytes(dst, s []byte) []byte { return appendJSON(dst, s) }

// appendJSON appends s as a JSON string: escapes for quotes, backslashes and
// control characters, U+FFFD for invalid UTF-8. Runs of plain ASCII, which
// is nearly all a log line holds, are copied whole.
func appendJSON[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		j := i
		for j+8 <= len(s) && !jsonSpecial8(wire.Word(s, j)) {
			j += 8
		}
		for j < len(s) && jsonPlain[s[j]] {
			j++
		}
		dst = append(dst, s[i:j]...)
		if j == len(s) {
			break
		}
		if c := s[j]; c < utf8.RuneSelf {
			dst = appendEscape(dst, c)
			i = j + 1
			continue
		}
		r, n := utf8.DecodeRuneInString(string(s[j:min(j+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[j:j+n]...)
		}
		i = j + n
	}
	return append(dst, '"')
}

// jsonSpecial8 reports whether any of the eight bytes of x is one
// jsonPlain does not mark: '"', '\\', a control character or a byte from
// 0x80 up. The first three are the exact "some byte is less than n" word
// test (x^'"' and x^'\\' have a zero byte where x has the quote or the
// backslash), the last the top bits themselves.
func jsonSpecial8(x uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q, bs := x^(lo*'"'), x^(lo*'\\')
	return (((x-lo*0x20)|(q-lo)|(bs-lo))&^x|x)&hi != 0
}

// jsonPlain is the bytes a JSON string holds as they are: printable ASCII
// but the quote and the backslash.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func appendEscape(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}
