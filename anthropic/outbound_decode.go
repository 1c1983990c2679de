package anthropic

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/triagegw/triage/internal/jsonscan"
)

// Reading a chat-completions request for ChatToMessages (outbound.go):
// one pass of the scanner over the body, each field checked as it is read.

// hasKey reports whether the JSON object raw has the top-level key.
func hasKey(raw []byte, key string) bool {
	sc := scanner{jsonscan.New(raw)}
	found := false
	sc.Object(func(k []byte) bool {
		if string(k) == key {
			found = true
		}
		return sc.Skip()
	})
	return found
}

// appendJSONValue appends a checked JSON value compacted. Bytes that are
// not UTF-8, or an escaped half of a surrogate pair, would make the body one
// a strict reader refuses; the rare value holding them is decoded and
// encoded again, which replaces them as encoding/json does.
func appendJSONValue(dst, raw []byte) []byte {
	raw = bytes.Trim(raw, " \t\r\n")
	if jsonscan.Clean(raw) {
		return jsonscan.AppendCompact(dst, raw)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return append(dst, "null"...) // unreachable: raw was checked
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	_ = e.Encode(v)
	return append(dst, bytes.TrimRight(buf.Bytes(), "\n")...)
}

// toolArgs turns a tool call's arguments string into the input object,
// compacted; nil when it is not a JSON object. Empty arguments are a call
// without any: some models write "" rather than "{}".
func toolArgs(s []byte) []byte {
	s = bytes.Trim(s, " \t\r\n")
	if len(s) == 0 {
		return []byte("{}")
	}
	if s[0] != '{' {
		return nil
	}
	sc := scanner{jsonscan.New(s)}
	if !sc.Skip() || !sc.End() {
		return nil
	}
	return appendJSONValue(nil, s)
}

// decodeChatRequest fills req from body, reporting errors as
// decodeRequest does.
func decodeChatRequest(body []byte, req *chatReq) *Error {
	sc := scanner{jsonscan.New(body)}
	var field string
	ok := sc.Object(func(key []byte) bool {
		field = string(key)
		if read, ok := sc.chatField(field, req); read {
			return ok
		}
		return sc.chatSetting(field, req)
	})
	if ok && sc.End() {
		return nil
	}
	req.unsupported = ""
	return decodeError(body, field)
}

// chatField reads the value of a top-level field the translation carries
// over into req. It reports read false, having read nothing, for any other
// field.
func (sc *scanner) chatField(field string, req *chatReq) (read, ok bool) {
	switch field {
	case "model":
		req.model = sc.text()
	case "messages":
		if sc.Null() {
			return true, true
		}
		req.messages = make([]chatMsg, 0, 8)
		return true, sc.Array(func() bool {
			req.messages = append(req.messages, chatMsg{})
			return sc.chatMessage(&req.messages[len(req.messages)-1])
		})
	case "max_tokens":
		req.maxTokens = sc.num()
	case "max_completion_tokens":
		req.maxCompletion = sc.num()
	case "temperature":
		req.temperature = sc.num()
	case "top_p":
		req.topP = sc.num()
	case "top_k":
		req.topK = sc.num()
	case "stop":
		switch sc.Peek() {
		case 'n':
			sc.Literal("null")
		case '"':
			req.stop = [][]byte{sc.lit()}
		default:
			return true, sc.Array(func() bool {
				req.stop = append(req.stop, sc.lit())
				return !sc.Failed()
			})
		}
	case "stream":
		req.stream = sc.boolean()
	case "user":
		if !sc.Null() {
			req.user = sc.lit()
		}
	case "safety_identifier":
		if !sc.Null() {
			req.safetyID = sc.lit()
		}
	case "tools":
		if sc.Null() {
			return true, true
		}
		return true, sc.Array(func() bool {
			req.tools = append(req.tools, chatTool{})
			return sc.chatTool(&req.tools[len(req.tools)-1])
		})
	case "tool_choice":
		req.toolChoice = sc.Raw()
	case "parallel_tool_calls":
		if !sc.Null() {
			req.noParallel = !sc.boolean()
		}
	default:
		return false, false
	}
	return true, !sc.Failed()
}

// chatSetting reads a top-level field Messages has no equivalent for, and
// refuses the request (req.refuse, req.lossy) when its value asks for
// what Messages cannot do; any other field it skips.
func (sc *scanner) chatSetting(field string, req *chatReq) bool {
	switch field {
	case "n":
		if n := sc.num(); n != nil && string(n) != "1" {
			req.refuse(field, "only 1 choice can be generated")
		}
	case "logprobs":
		if sc.boolean() {
			req.refuse(field, "log probabilities are not available")
		}
	case "top_logprobs":
		if n := sc.num(); n != nil && string(n) != "0" {
			req.refuse(field, "log probabilities are not available")
		}
	case "frequency_penalty", "presence_penalty":
		if !neutral(sc.num(), 0) {
			req.lossy(field, "Messages has no penalties")
		}
	case "repetition_penalty":
		if !neutral(sc.num(), 1) {
			req.lossy(field, "Messages has no penalties")
		}
	case "min_p":
		if !neutral(sc.num(), 0) {
			req.lossy(field, "Messages has no min_p sampling")
		}
	case "min_tokens":
		if !neutral(sc.num(), 0) {
			req.lossy(field, "Messages has no minimum length")
		}
	case "ignore_eos":
		if sc.boolean() {
			req.lossy(field, "Messages always stops at the end of the turn")
		}
	case "stop_token_ids":
		if v := sc.Raw(); len(v) > 0 && string(v) != "null" && !emptyArray(v) {
			req.lossy(field, "Messages stops on strings only (stop)")
		}
	case "logit_bias":
		if v := sc.Raw(); len(v) > 0 && string(v) != "null" && !emptyObject(v) {
			req.lossy(field, "logit_bias is not supported")
		}
	case "best_of":
		if !neutral(sc.num(), 1) {
			req.refuse(field, "Messages draws one answer")
		}
	case "use_beam_search":
		if sc.boolean() {
			req.refuse(field, "Messages has no beam search")
		}
	case "guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs":
		if v := sc.Raw(); len(v) > 0 && string(v) != "null" {
			req.refuse(field, "Messages has no guided decoding")
		}
	case "response_format":
		if v := sc.Raw(); len(v) > 0 && string(v) != "null" && formatType(v) != "text" {
			req.refuse(field, "only the text format is supported")
		}
	case "modalities":
		if v := sc.Raw(); len(v) > 0 && string(v) != "null" && !onlyText(v) {
			req.refuse(field, "only text output is supported")
		}
	case "audio", "reasoning_effort", "web_search_options", "functions", "function_call":
		if v := sc.Raw(); len(v) > 0 && string(v) != "null" {
			req.refuse(field, "not supported")
		}
	default:
		return sc.Skip()
	}
	return !sc.Failed()
}

// refuse records that field cannot be served, as msg says, unless an
// earlier field could not be either: the first is the one reported.
func (req *chatReq) refuse(field, msg string) {
	if req.unsupported == "" {
		req.unsupported = field + ": " + msg
	}
}

// lossy refuses a sampling setting Messages has no equivalent for, unless
// the pool drops them.
func (req *chatReq) lossy(field, msg string) {
	if !req.drop {
		req.refuse(field, msg+"; set drop_unsupported on the pool to send the request without it")
	}
}

// neutral reports whether the number n is absent, null or the value that
// changes nothing.
func neutral(n []byte, value float64) bool {
	if n == nil {
		return true
	}
	f, err := strconv.ParseFloat(string(n), 64)
	return err == nil && f == value
}

func (sc *scanner) chatMessage(m *chatMsg) bool {
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "role":
			m.role = sc.text()
		case "content":
			switch sc.Peek() {
			case '"':
				m.kind, m.text = contentString, sc.lit()
			case '[':
				m.kind = contentBlocks
				m.parts = []chatPart{}
				return sc.Array(func() bool {
					m.parts = append(m.parts, chatPart{})
					return sc.chatPart(&m.parts[len(m.parts)-1])
				})
			case 'n':
				sc.Literal("null")
			default:
				m.kind = contentBad
				return sc.Skip()
			}
		case "tool_calls":
			if sc.Null() {
				return true
			}
			return sc.Array(func() bool {
				m.calls = append(m.calls, chatCall{})
				return sc.chatCall(&m.calls[len(m.calls)-1])
			})
		case "tool_call_id":
			m.toolCallID = sc.text()
		case "function_call":
			m.funcCall = !sc.Null()
			if m.funcCall {
				return sc.Skip()
			}
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

func (sc *scanner) chatPart(p *chatPart) bool {
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "type":
			p.typ = sc.text()
		case "text", "refusal":
			if !sc.Null() {
				p.text = sc.lit()
			}
		case "image_url":
			// An object with url (and detail, which Messages has no use
			// for); some clients send the URL as a bare string.
			if sc.Peek() == '"' {
				p.url = sc.text()
				return !sc.Failed()
			}
			if sc.Null() {
				return true
			}
			return sc.Object(func(k []byte) bool {
				if string(k) == "url" {
					p.url = sc.text()
					return !sc.Failed()
				}
				return sc.Skip()
			})
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

func (sc *scanner) chatCall(c *chatCall) bool {
	c.input = []byte("{}") // arguments absent: a call without any
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "id":
			c.id = sc.text()
		case "type":
			c.typ = sc.text()
		case "function":
			if sc.Null() {
				return true
			}
			return sc.Object(func(k []byte) bool {
				switch string(k) {
				case "name":
					c.name = sc.lit()
				case "arguments":
					if sc.Null() {
						return true
					}
					s, ok := sc.String()
					if !ok {
						return false
					}
					c.input = toolArgs(s)
				default:
					return sc.Skip()
				}
				return !sc.Failed()
			})
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

func (sc *scanner) chatTool(t *chatTool) bool {
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "type":
			t.typ = sc.text()
		case "function":
			if sc.Null() {
				return true
			}
			t.hasFunc = true
			return sc.Object(func(k []byte) bool {
				switch string(k) {
				case "name":
					t.name = sc.lit()
				case "description":
					if !sc.Null() {
						t.desc = sc.lit()
					}
				case "parameters":
					if sc.Null() {
						return true
					}
					t.params, t.hasParams = sc.Raw(), true
				default:
					return sc.Skip() // strict: Messages checks inputs its own way
				}
				return !sc.Failed()
			})
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

// num reads a number as its JSON text, or null as nil.
func (s *scanner) num() []byte {
	if s.Null() {
		return nil
	}
	n, _ := s.Number()
	return n
}

// lit reads a string and returns it as a JSON string literal to append as
// it is. The input's own bytes are returned when any JSON reader decodes
// them to the same text (jsonscan.Clean): only a string holding half a
// surrogate pair or bytes that are not UTF-8, which strict readers refuse,
// is decoded and encoded again (appendString repairs both).
func (s *scanner) lit() []byte {
	tok, esc, ok := s.Token()
	if !ok {
		return nil
	}
	// Clean's own walk of the escapes is needed only when one is half a
	// surrogate pair (the text of a long prompt is full of \n), and its
	// UTF-8 check only when a byte is past ASCII.
	if esc&jsonscan.Surrogate == 0 && (esc&jsonscan.NonASCII == 0 || utf8.Valid(tok)) || jsonscan.Clean(tok) {
		return tok
	}
	text := jsonscan.AppendUnquote(nil, tok)
	return appendString(make([]byte, 0, len(text)+8), string(text))
}

// filled reports whether a string literal holds any text: longer than "".
func filled(lit []byte) bool { return len(lit) > 2 }

// emptyArray reports whether raw is an array with no elements.
func emptyArray(raw []byte) bool {
	sc := scanner{jsonscan.New(raw)}
	n := 0
	sc.Array(func() bool { n++; return sc.Skip() })
	return n == 0 && !sc.Failed()
}

func emptyObject(raw []byte) bool {
	sc := scanner{jsonscan.New(raw)}
	n := 0
	sc.Object(func([]byte) bool { n++; return sc.Skip() })
	return n == 0 && !sc.Failed()
}

// formatType is response_format's type.
func formatType(raw []byte) string {
	sc := scanner{jsonscan.New(raw)}
	typ := ""
	sc.Object(func(k []byte) bool {
		if string(k) == "type" && sc.Peek() == '"' {
			typ = sc.text()
			return !sc.Failed()
		}
		return sc.Skip()
	})
	return typ
}

// onlyText reports whether modalities asks for text alone.
func onlyText(raw []byte) bool {
	sc := scanner{jsonscan.New(raw)}
	ok := true
	sc.Array(func() bool {
		if sc.Peek() == '"' && sc.text() == "text" {
			return !sc.Failed()
		}
		ok = false
		return sc.Skip()
	})
	return ok && !sc.Failed()
}
