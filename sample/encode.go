package sample

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/triagegw/triage/classifier"
)

// appendRecord appends r as one JSON object, as encoding/json writes it
// (TestAppendRecordIsJSON holds the two to the same value): by hand,
// because json.Marshal was two thirds of a record's cost.
func appendRecord(b []byte, r *Record) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","text":`...)
	b = appendString(b, r.Text)
	if r.Truncated {
		b = append(b, `,"truncated":true`...)
	}
	d := &r.Decision
	b = append(b, `,"decision":{"pool":`...)
	b = appendString(b, d.Pool)
	b = optString(b, "fallback", d.Fallback)
	b = optString(b, "route", d.Route)
	b = optString(b, "class", d.Class)
	b = optFloat(b, "score", d.Score)
	b = append(b, `,"tier":`...)
	b = strconv.AppendInt(b, int64(d.Tier), 10)
	b = append(b, `,"reason":`...)
	b = appendString(b, d.Reason)
	b = optFloat(b, "mass", d.Mass)
	b = optFloat(b, "floor", d.Floor)
	b = optString(b, "session_class", d.SessionClass)
	if d.Pinned {
		b = append(b, `,"pinned":true`...)
	}
	if d.Block {
		b = append(b, `,"block":true`...)
	}
	b = append(b, '}')
	if len(r.RouteClasses) > 0 {
		b = append(b, `,"route_classes":[`...)
		for i, c := range r.RouteClasses {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, c)
		}
		b = append(b, ']')
	}
	if len(r.Tiers) > 0 {
		b = append(b, `,"tiers":{`...)
		first := true
		for _, k := range [...]string{"1", "2"} { // encoding/json sorts map keys
			top, ok := r.Tiers[k]
			if !ok {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '"')
			b = append(b, k...)
			b = append(b, `":`...)
			b = appendTop(b, top)
		}
		b = append(b, '}')
	}
	b = append(b, `,"rules_version":`...)
	b = appendString(b, r.RulesVersion)
	b = optString(b, "principal", r.Principal)
	return append(b, '}')
}

func appendTop(b []byte, top []classifier.Scored) []byte {
	if top == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range top {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"class":`...)
		b = appendString(b, s.Class)
		b = append(b, `,"score":`...)
		b = appendFloat(b, s.Score)
		b = append(b, '}')
	}
	return append(b, ']')
}

func optString(b []byte, k, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

func optFloat(b []byte, k string, v float32) []byte {
	if v == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, '"', ':')
	return appendFloat(b, v)
}

// appendFloat writes f as encoding/json does a float32: the shortest
// form, in exponent form below 1e-6 and from 1e21.
func appendFloat(b []byte, f float32) []byte {
	x := float64(f)
	a := x
	if a < 0 {
		a = -a
	}
	if a != 0 && (a < 1e-6 || a >= 1e21) {
		n := len(b)
		b = strconv.AppendFloat(b, x, 'e', -1, 32)
		// e-06 → e-6, as encoding/json clears the exponent's zero.
		if m := len(b); m-n >= 4 && b[m-4] == 'e' && b[m-3] == '-' && b[m-2] == '0' {
			b[m-2] = b[m-1]
			b = b[:m-1]
		}
		return b
	}
	return strconv.AppendFloat(b, x, 'f', -1, 32)
}

const hex = "0123456789abcdef"

// appendString writes s as a JSON string the way encoding/json does:
// quotes, backslashes and control characters escaped, <, > and & as
// \u003c and the like, U+2028 and U+2029 escaped, invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case utf8.RuneError:
				b = append(b, `\ufffd`...)
			default:
				b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			}
			i += n
			start = i
			continue
		}
		i += n
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
