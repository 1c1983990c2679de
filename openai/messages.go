package openai

import "github.com/triagegw/triage/internal/jsonscan"

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
		m := readMessage(body, el)
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
			list = append(list, readMessage(body, el))
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

// readMessage reads the (validated) message object at obj.
func readMessage(body []byte, obj Span) message {
	var m message
	s := jsonscan.NewAt(body[:obj.End], obj.Start)
	s.Object(func(key []byte) bool {
		var dst *Span
		switch string(key) {
		case "role":
			dst = &m.role
		case "content":
			dst = &m.content
		}
		start := s.WS()
		if !s.Skip() {
			return false
		}
		if dst != nil {
			*dst = Span{start, s.Pos()}
		}
		return true
	})
	return m
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
	s := jsonscan.NewAt(body[:arr.End], arr.Start)
	s.Array(func() bool {
		start := s.WS()
		return s.Skip() && fn(Span{start, s.Pos()})
	})
}

// field finds key's value in the (validated) object at obj (shallow).
func field(body []byte, obj Span, key string) Span {
	s := jsonscan.NewAt(body[:obj.End], obj.Start)
	var found Span
	s.Object(func(k []byte) bool {
		match := string(k) == key
		start := s.WS()
		if !s.Skip() {
			return false
		}
		if match {
			found = Span{start, s.Pos()}
		}
		return true
	})
	return found
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
	return jsonscan.AppendUnquoteLimit(dst, tok, limit)
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
		if m := readMessage(body, el); roleIs(body, m.role, "user") {
			end = el.End
			return false
		}
		return true
	})
	return end
}
