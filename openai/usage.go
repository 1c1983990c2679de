package openai

import (
	"bytes"
	"encoding/json"
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
		rest := skipSpace(tail[i+len(key):])
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = skipSpace(rest[1:])
		if len(rest) == 0 || rest[0] != '{' {
			continue // null, or not the usage object
		}
		obj, ok := object(rest)
		if !ok {
			continue
		}
		var u Usage
		if json.Unmarshal(obj, &u) != nil || u.PromptTokens < 0 || u.CompletionTokens < 0 {
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

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// object returns the JSON object b starts with (up to its closing brace,
// strings and nesting respected), if it closes within maxUsageObject.
func object(b []byte) ([]byte, bool) {
	depth, inStr := 0, false
	for i := 0; i < len(b) && i < maxUsageObject; i++ {
		c := b[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return b[:i+1], true
			}
		}
	}
	return nil, false
}
