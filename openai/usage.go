package openai

import (
	"bytes"
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
	key := []byte(`"usage"`)
	end := len(tail)
	for {
		i := bytes.LastIndex(tail[:end], key)
		if i < 0 {
			return Usage{}, false
		}
		end = i
		if escaped(tail, i) {
			continue
		}
		j := skipWS(tail, i+len(key))
		if j >= len(tail) || tail[j] != ':' {
			continue
		}
		j = skipWS(tail, j+1)
		if j >= len(tail) || tail[j] != '{' {
			continue // null, or not the usage object
		}
		rest := tail[j:]
		obj, ok := object(rest)
		if !ok {
			continue
		}
		u, ok := usageFields(obj)
		if !ok {
			continue
		}
		if u.TotalTokens == 0 {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		return u, true
	}
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

// object returns the JSON object b starts with (up to its closing brace,
// strings and nesting respected), if it closes within maxUsageObject.
func object(b []byte) ([]byte, bool) {
	end := valueEnd(b[:min(len(b), maxUsageObject)], 0)
	if len(b) == 0 || b[0] != '{' || end < 0 {
		return nil, false
	}
	return b[:end], true
}

// usageFields reads prompt_tokens, completion_tokens and total_tokens from
// a usage object (obj, braces included, closed and string-balanced by
// object). They must be whole non-negative numbers when present; other
// members are skipped. It allocates nothing.
func usageFields(obj []byte) (Usage, bool) {
	var u Usage
	i := 1
	for {
		i = skipWS(obj, i)
		if i >= len(obj) {
			return Usage{}, false
		}
		switch obj[i] {
		case '}':
			return u, true
		case ',':
			i++
			continue
		case '"':
		default:
			return Usage{}, false
		}
		k := stringEnd(obj, i)
		if k < 0 {
			return Usage{}, false
		}
		key := obj[i+1 : k-1]
		i = skipWS(obj, k)
		if i >= len(obj) || obj[i] != ':' {
			return Usage{}, false
		}
		i = skipWS(obj, i+1)
		var dst *int64
		switch string(key) {
		case "prompt_tokens", "input_tokens": // chat and completions; Responses
			dst = &u.PromptTokens
		case "completion_tokens", "output_tokens":
			dst = &u.CompletionTokens
		case "total_tokens":
			dst = &u.TotalTokens
		}
		end := valueEnd(obj, i)
		if end < 0 {
			return Usage{}, false
		}
		if dst != nil {
			n, ok := digits(obj[i:end])
			if !ok {
				return Usage{}, false
			}
			*dst = n
		}
		i = end
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index after the string starting at b[i] ('"'), or -1.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// valueEnd is the index after the JSON value starting at b[i] (a string,
// an object or array with its nesting, or a scalar up to the next comma
// or closing brace), or -1.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := stringEnd(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
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
