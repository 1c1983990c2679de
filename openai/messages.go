package openai

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Conversation selects the text a classifier sees of a chat request.
type Conversation struct {
	// UserTurns is how many user messages to take, the last one first and
	// then earlier ones, most recent first. Default 1.
	UserTurns int
	// System adds the system (and developer) messages after the user turns.
	System bool
	// MaxBytes caps the text produced; decoding stops there. Default 16 KiB.
	MaxBytes int
}

// separator joins the turns.
const separator = "\n\n"

// AppendText appends the classifier input of a request to dst: for chat,
// the selected messages' text (string content, or the "text" of text parts);
// for completions, the prompt (a string, or the first string of an array);
// for embeddings, the input likewise; for Responses, the messages among its
// input items as for chat (a string input as for embeddings). JSON escapes
// are decoded. r must come
// from Extract on the same body, which has already validated it.
func (c Conversation) AppendText(dst, body []byte, r *Request) []byte {
	if c.UserTurns <= 0 {
		c.UserTurns = 1
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 16 << 10
	}
	limit := len(dst) + c.MaxBytes
	switch {
	case r.Messages.Len() > 0:
		return c.appendMessages(dst, body, r.Messages, limit)
	case r.Prompt.Len() > 0:
		return appendFirstString(dst, body, r.Prompt, limit)
	case r.Input.Len() > 0 && itemList(body, r.Input):
		// A Responses request's input items: its messages are read as a
		// chat's are, and its instructions stand for the system prompt.
		dst = c.appendMessages(dst, body, r.Input, limit)
		if c.System && r.Instructions.Len() > 0 && body[r.Instructions.Start] == '"' && len(dst)+len(separator) < limit {
			if len(dst) > 0 {
				dst = append(dst, separator...)
			}
			dst = appendUnquoted(dst, body[r.Instructions.Start:r.Instructions.End], limit)
		}
		return dst
	case r.Input.Len() > 0:
		return appendFirstString(dst, body, r.Input, limit)
	}
	return dst
}

// itemList reports whether v is an array whose first element is an object:
// a Responses request's input items, where embeddings take strings or
// token arrays.
func itemList(body []byte, v Span) bool {
	if body[v.Start] != '[' {
		return false
	}
	obj := false
	forElements(body, v, func(el Span) bool {
		obj = body[el.Start] == '{'
		return false
	})
	return obj
}

// Fingerprint identifies the conversation a chat request belongs to: a hash
// of its system (and developer) messages and its first user message, which
// stay the same as the conversation grows turn by turn. It is 0 for a
// request without a user message (completions, embeddings), which belongs
// to no conversation. r must come from Extract on body.
func Fingerprint(body []byte, r *Request) uint64 {
	if r.Messages.Len() == 0 {
		return 0
	}
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	add := func(b []byte) {
		for _, c := range b {
			h ^= uint64(c)
			h *= prime
		}
		h ^= 0xff // a separator no JSON byte sequence produces alone
		h *= prime
	}
	user := false
	forElements(body, r.Messages, func(el Span) bool {
		if body[el.Start] != '{' {
			return true
		}
		sc := scanner{b: body[:el.End], i: el.Start}
		m := readMessage(&sc)
		switch {
		case roleIs(body, m.role, "system"), roleIs(body, m.role, "developer"):
			add(body[m.content.Start:m.content.End])
		case roleIs(body, m.role, "user"):
			add(body[m.content.Start:m.content.End])
			user = true
			return false
		}
		return true
	})
	if !user {
		return 0
	}
	return h
}

// message is where one message's role and content lie.
type message struct{ role, content Span }

func (c Conversation) appendMessages(dst, body []byte, msgs Span, limit int) []byte {
	var stack [16]message
	list := stack[:0]
	forElements(body, msgs, func(el Span) bool {
		if body[el.Start] == '{' {
			s := scanner{b: body[:el.End], i: el.Start}
			list = append(list, readMessage(&s))
		}
		return true
	})
	first := true
	add := func(m message) {
		if len(dst) >= limit || (!first && len(dst)+len(separator) >= limit) {
			return
		}
		if !first {
			dst = append(dst, separator...)
		}
		first = false
		dst = appendContent(dst, body, m.content, limit)
	}
	taken := 0
	for i := len(list) - 1; i >= 0 && taken < c.UserTurns; i-- {
		if roleIs(body, list[i].role, "user") {
			add(list[i])
			taken++
		}
	}
	if c.System {
		for _, m := range list {
			if roleIs(body, m.role, "system") || roleIs(body, m.role, "developer") {
				add(m)
			}
		}
	}
	return dst
}

// readMessage reads one message object at s.i, leaving s after it.
func readMessage(s *scanner) message {
	var m message
	s.i++ // '{'
	for {
		if s.ws() >= len(s.b) || s.b[s.i] == '}' {
			s.i++
			return m
		}
		kstart := s.i
		if _, err := s.str(); err != nil {
			return m
		}
		key := s.b[kstart+1 : s.i-1]
		s.ws()
		s.i++ // ':'
		s.ws()
		vstart := s.i
		if err := s.value(2); err != nil {
			return m
		}
		switch string(key) {
		case "role":
			m.role = Span{vstart, s.i}
		case "content":
			m.content = Span{vstart, s.i}
		}
		if s.ws() < len(s.b) && s.b[s.i] == ',' {
			s.i++
		}
	}
}

func roleIs(body []byte, role Span, want string) bool {
	return role.Len() == len(want)+2 && string(body[role.Start+1:role.End-1]) == want
}

// appendContent appends a message content: a string, or the text of the
// {"type":"text","text":...} parts of an array, joined by newlines.
func appendContent(dst, body []byte, v Span, limit int) []byte {
	if v.Len() == 0 {
		return dst
	}
	switch body[v.Start] {
	case '"':
		return appendUnquoted(dst, body[v.Start:v.End], limit)
	case '[':
		first := true
		forElements(body, v, func(el Span) bool {
			if body[el.Start] != '{' {
				return true
			}
			t := field(body, el, "text")
			if t.Len() == 0 || body[t.Start] != '"' {
				return true
			}
			if !first {
				if len(dst)+1 >= limit {
					return false
				}
				dst = append(dst, '\n')
			}
			first = false
			dst = appendUnquoted(dst, body[t.Start:t.End], limit)
			return true
		})
	}
	return dst
}

// forElements calls fn with each element of the (validated) array at arr,
// until fn returns false.
func forElements(body []byte, arr Span, fn func(el Span) bool) {
	s := scanner{b: body[:arr.End], i: arr.Start + 1}
	for {
		if s.ws() >= len(s.b) || s.b[s.i] == ']' {
			return
		}
		start := s.i
		if err := s.value(2); err != nil || !fn(Span{start, s.i}) {
			return
		}
		if s.ws() < len(s.b) && s.b[s.i] == ',' {
			s.i++
		}
	}
}

// field finds key's value in the object at obj (shallow).
func field(body []byte, obj Span, key string) Span {
	s := scanner{b: body[:obj.End], i: obj.Start + 1}
	var found Span
	for {
		if s.ws() >= len(s.b) || s.b[s.i] == '}' {
			return found
		}
		kstart := s.i
		if _, err := s.str(); err != nil {
			return found
		}
		k := body[kstart+1 : s.i-1]
		s.ws()
		s.i++
		s.ws()
		vstart := s.i
		if err := s.value(3); err != nil {
			return found
		}
		if string(k) == key {
			found = Span{vstart, s.i}
		}
		if s.ws() < len(s.b) && s.b[s.i] == ',' {
			s.i++
		}
	}
}

// appendFirstString appends v if it is a string, or its first string
// element if it is an array.
func appendFirstString(dst, body []byte, v Span, limit int) []byte {
	switch body[v.Start] {
	case '"':
		return appendUnquoted(dst, body[v.Start:v.End], limit)
	case '[':
		forElements(body, v, func(el Span) bool {
			if body[el.Start] == '"' {
				dst = appendUnquoted(dst, body[el.Start:el.End], limit)
				return false
			}
			return true
		})
	}
	return dst
}

// appendUnquoted decodes the JSON string token tok (quotes included, already
// validated) onto dst, stopping at limit bytes of dst (never inside a rune).
func appendUnquoted(dst, tok []byte, limit int) []byte {
	b := tok[1 : len(tok)-1]
	for i := 0; i < len(b); {
		if len(dst) >= limit {
			return dst
		}
		c := b[i]
		if c != '\\' {
			// Copy the run up to the next escape, trimmed at the limit on a
			// rune boundary.
			j := i + 1
			for j < len(b) && b[j] != '\\' {
				j++
			}
			run := b[i:j]
			if room := limit - len(dst); len(run) > room {
				run = run[:room]
				for len(run) > 0 && !utf8.RuneStart(run[len(run)-1]) {
					run = run[:len(run)-1]
				}
				if len(run) > 0 && !utf8.FullRune(run[lastRuneStart(run):]) {
					run = run[:lastRuneStart(run)]
				}
				return append(dst, run...)
			}
			dst = append(dst, run...)
			i = j
			continue
		}
		switch e := b[i+1]; e {
		case 'n':
			dst = append(dst, '\n')
		case 't':
			dst = append(dst, '\t')
		case 'r':
			dst = append(dst, '\r')
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'u':
			r := rune(hex4(b[i+2 : i+6]))
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if r2 := utf16.DecodeRune(r, rune(hex4(b[i+2:i+6]))); r2 != utf8.RuneError {
						r = r2
						i += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
		i += 2
	}
	return dst
}

func lastRuneStart(b []byte) int {
	i := len(b) - 1
	for i > 0 && !utf8.RuneStart(b[i]) {
		i--
	}
	return i
}

func hex4(b []byte) uint16 {
	var v uint16
	for _, c := range b {
		v <<= 4
		switch {
		case c >= '0' && c <= '9':
			v |= uint16(c - '0')
		case c >= 'a' && c <= 'f':
			v |= uint16(c - 'a' + 10)
		default:
			v |= uint16(c - 'A' + 10)
		}
	}
	return v
}

// FirstUserEnd is the offset in body just past the first user message of
// a chat request's messages (the system prompt, tools' messages and the
// first question: what identifies a conversation as it grows), or 0 when
// it has none. r must come from Extract on body.
func FirstUserEnd(body []byte, r *Request) int {
	if r.Messages.Len() == 0 {
		return 0
	}
	end := 0
	forElements(body, r.Messages, func(el Span) bool {
		if body[el.Start] != '{' {
			return true
		}
		sc := scanner{b: body[:el.End], i: el.Start}
		if m := readMessage(&sc); roleIs(body, m.role, "user") {
			end = el.End
			return false
		}
		return true
	})
	return end
}
