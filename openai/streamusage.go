package openai

import (
	"bytes"

	"github.com/triagegw/triage/internal/jsonscan"
)

// Edit replaces the bytes at Span in a body with Tok; an empty Span (Start
// == End) inserts Tok there.
type Edit struct {
	Span Span
	Tok  []byte
}

var (
	askTop   = []byte(`"stream_options":{"include_usage":true},`)
	askInner = []byte(`"include_usage":true,`)
	askWhole = []byte(`{"include_usage":true}`)
	tokTrue  = []byte(`true`)
)

// UsageEdit returns the edit that makes a streamed request ask the upstream
// for its usage ("stream_options": {"include_usage": true}), every other
// byte left as the client sent it, so a stream that would end without its
// token counts ends with them. ok is false when there is nothing to do: r
// does not stream, already asks for usage, or carries a stream_options or
// include_usage the upstream would refuse (it is left to say so).
//
// r must come from Extract(body). The edit never overlaps r.ModelSpan.
func UsageEdit(body []byte, r *Request) (e Edit, ok bool) {
	if !r.Stream {
		return Edit{}, false
	}
	so := r.StreamOptions
	switch {
	case so.Len() == 0:
		// A valid request has at least its model after the '{'.
		return Edit{Span{r.open + 1, r.open + 1}, askTop}, true
	case body[so.Start] == 'n': // null
		return Edit{so, askWhole}, true
	case body[so.Start] != '{':
		return Edit{}, false
	}
	var found Span
	n := 0
	if !members(body[:so.End], so.Start, func(key []byte, v Span) {
		n++
		if string(key) == "include_usage" {
			found = v // the last of duplicates wins, as upstream parsers read them
		}
	}) {
		return Edit{}, false
	}
	switch {
	case found.Len() == 0 && n == 0:
		return Edit{so, askWhole}, true
	case found.Len() == 0:
		return Edit{Span{so.Start + 1, so.Start + 1}, askInner}, true
	}
	switch string(body[found.Start:found.End]) {
	case "false", "null":
		return Edit{found, tokTrue}, true
	}
	return Edit{}, false // true, or a value the upstream refuses
}

// members walks the JSON object at b[at] (validated as it goes) and calls
// fn with each member's decoded key and value span. It reports false when
// the object is malformed or does not end where b does.
func members(b []byte, at int, fn func(key []byte, v Span)) bool {
	if at >= len(b) || b[at] != '{' {
		return false
	}
	s := jsonscan.NewAt(b, at)
	ok := s.Object(func(key []byte) bool {
		start := s.WS()
		if !s.Skip() {
			return false
		}
		fn(key, Span{start, s.Pos()}) // a key in the buffer is still whole: Skip decodes nothing
		return true
	})
	return ok && s.Pos() == len(b)
}

// UsageEvent reports whether ev, one server-sent event of a chat or
// completions stream (its blank line included or not), is the usage
// chunk a stream ends with when asked for it: a single data line holding a
// chunk object whose "choices" is empty and whose "usage" is an object. It
// returns that usage, so a gateway that asked for the chunk on the client's
// behalf can drop it and still account for it. Anything else, a chunk that
// carries choices as well above all, is not one: it must reach the client.
// ev is the upstream's bytes: anything malformed is not a usage event,
// never a panic.
func UsageEvent(ev []byte) (Usage, bool) {
	for len(ev) > 0 && (ev[len(ev)-1] == '\n' || ev[len(ev)-1] == '\r') {
		ev = ev[:len(ev)-1]
	}
	data, ok := bytes.CutPrefix(ev, []byte("data:"))
	if !ok || bytes.IndexByte(data, '\n') >= 0 || bytes.IndexByte(data, '\r') >= 0 {
		return Usage{}, false
	}
	if !MayHoldUsageEvent(data) {
		return Usage{}, false // the common case: a token chunk
	}
	at := jsonscan.WS(data, 0)
	end := len(data)
	for end > at && (data[end-1] == ' ' || data[end-1] == '\t') {
		end--
	}
	var u Usage
	choices, usage := false, false
	valid := members(data[:end], at, func(key []byte, v Span) {
		val := data[v.Start:v.End]
		switch string(key) {
		case "choices":
			choices = emptyArray(val)
		case "usage":
			usage = false
			if val[0] == '{' {
				u, usage = usageFields(val)
			}
		}
	})
	if !valid || !choices || !usage {
		return Usage{}, false
	}
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return u, true
}

// MayHoldUsageEvent reports false only when no event in p can be a usage
// event (UsageEvent): none has an empty array, as a usage chunk's
// "choices" is. A token chunk's only '[' opens its one choice, so this is
// one vectorised scan and a byte or two per event: the test to run on
// every read of a stream before looking any closer.
func MayHoldUsageEvent(p []byte) bool {
	for {
		i := bytes.IndexByte(p, '[')
		if i < 0 {
			return false
		}
		j := jsonscan.WS(p, i+1)
		if j < len(p) && p[j] == ']' {
			return true
		}
		p = p[i+1:]
	}
}

// emptyArray reports whether the JSON value v is [] (whitespace allowed).
func emptyArray(v []byte) bool {
	if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
		return false
	}
	return jsonscan.WS(v, 1) == len(v)-1
}
