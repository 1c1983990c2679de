package openai

import (
	"encoding/binary"

	"github.com/triagegw/triage/internal/jsonscan"
)

// Usage is a response's token counts, as its "usage" object gives them.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// TailSize is how much of a response's end ScanUsage needs: a JSON body's
// usage object is its last field or close to it, a stream's is in its last
// data event before [DONE]. 8 KiB holds either with room for a long
// final choice.
const TailSize = 8 << 10

// maxUsageObject bounds the usage object itself (real ones are under 300
// bytes, with the token details).
const maxUsageObject = 2 << 10

// ScanUsage finds the last "usage" object in the tail of a response body
// (a chat or completion JSON body, or an SSE stream of chunks), scanning
// backwards so the body is never parsed whole. "usage": null (the chunks
// of a stream before its last) is skipped; a key inside a string (escaped
// quotes) is not a key. The bytes are the upstream's: anything malformed
// is not found, never a panic.
func ScanUsage(tail []byte) (Usage, bool) {
	const key = `"usage"`
	end := len(tail)
	for {
		i := lastUsageKey(tail[:end])
		if i < 0 {
			return Usage{}, false
		}
		end = i
		if escaped(tail, i) {
			continue
		}
		j := jsonscan.WS(tail, i+len(key))
		if j >= len(tail) || tail[j] != ':' {
			continue
		}
		j = jsonscan.WS(tail, j+1)
		if j >= len(tail) || tail[j] != '{' {
			continue // null, or not the usage object
		}
		// usageFields stops at the object's closing brace, so bounding
		// what it reads bounds the object.
		u, ok := usageFields(tail[j:min(len(tail), j+maxUsageObject)])
		if !ok {
			continue
		}
		if u.TotalTokens == 0 {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		return u, true
	}
}

// lastUsageKey is bytes.LastIndex(b, []byte(`"usage"`)), found by the
// key's 'g' eight bytes at a time from the end: Rabin-Karp's rolling hash
// was a multiply a byte.
func lastUsageKey(b []byte) int {
	const key = `"usage"`
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	// p is where the key's 'g' (key[4]) would be: the key is b[p-4 : p+3].
	p := len(b) - 3
	for p >= 4 {
		if p >= 11 { // b[p-7 : p+1] holds only places the 'g' may be
			x := binary.LittleEndian.Uint64(b[p-7:]) ^ (lo * 'g')
			if (x-lo)&^x&hi == 0 { // no 'g' among the eight
				p -= 8
				continue
			}
		}
		for stop := max(p-8, 3); p > stop; p-- {
			if b[p] == 'g' && string(b[p-4:p+3]) == key {
				return p - 4
			}
		}
	}
	return -1
}

// escaped reports whether the quote at i is preceded by an odd number of
// backslashes (it is inside a string, not a key's start).
func escaped(b []byte, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// usageFields reads prompt_tokens, completion_tokens and total_tokens from
// the usage object obj starts with, up to its closing brace (every value
// in it checked, a nested one skipped whole); an object that does not
// close within obj is refused. They must be whole non-negative numbers
// when present; other members are skipped. It allocates nothing.
func usageFields(obj []byte) (Usage, bool) {
	var u Usage
	s := jsonscan.New(obj)
	ok := s.Object(func(key []byte) bool {
		var dst *int64
		switch string(key) {
		case "prompt_tokens", "input_tokens": // chat and completions; Responses
			dst = &u.PromptTokens
		case "completion_tokens", "output_tokens":
			dst = &u.CompletionTokens
		case "total_tokens":
			dst = &u.TotalTokens
		default:
			return s.Skip()
		}
		n, ok := s.Number()
		if !ok {
			return false
		}
		*dst, ok = digits(n)
		return ok
	})
	if !ok {
		return Usage{}, false
	}
	return u, true
}

// digits parses a whole non-negative number of at most 18 digits.
func digits(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
