package openai

import "encoding/json"

// Quote returns name as a JSON string token, ready to splice. Build it once
// per pool when the config snapshot is built, not per request.
func Quote(name string) []byte {
	b, _ := json.Marshal(name)
	return b
}

// Splice returns the three pieces of body with the value at span replaced by
// tok, in order: write them back to back (net.Buffers, writev) and the body is
// never copied. body itself is not modified.
func Splice(body []byte, span Span, tok []byte) (head, mid, tail []byte) {
	return body[:span.Start:span.Start], tok, body[span.End:]
}

// AppendSplice appends body with the value at span replaced by tok to dst.
func AppendSplice(dst, body []byte, span Span, tok []byte) []byte {
	h, m, t := Splice(body, span, tok)
	dst = append(dst, h...)
	dst = append(dst, m...)
	return append(dst, t...)
}
