package anthropic

import (
	"encoding/json"
	"strconv"

	"github.com/triagegw/triage/internal/jsonscan"
)

// Decoding a Messages request with the scanner rather than encoding/json:
// the request is decoded whole either way, but encoding/json validates in a
// separate pass, reflects on every field, and would decode each content
// array twice (once as raw bytes, once as blocks), which made ToChat several
// times slower than the targets. Message content, the bulk of any request,
// is decoded in this one pass; the smaller fields whose shape varies
// (system, a tool input or schema, a tool result's content) are kept as raw
// slices of the body, checked well formed, and read when their turn comes.
// Keys match exactly, where encoding/json would also accept other cases.

// float reads a number, or null as nil.
func (s *scanner) float() *float64 {
	if s.Null() {
		return nil
	}
	n, ok := s.Number()
	if !ok {
		return nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		s.Fail()
		return nil
	}
	return &f
}

// boolean reads true or false, or null as false.
func (s *scanner) boolean() bool {
	switch s.Peek() {
	case 't':
		return s.Literal("true")
	case 'f':
		s.Literal("false")
	case 'n':
		s.Literal("null")
	default:
		s.Fail()
	}
	return false
}

// strings reads an array of strings, or null as nil.
func (s *scanner) strings() []string {
	if s.Null() {
		return nil
	}
	out := []string{}
	s.Array(func() bool {
		out = append(out, s.text())
		return !s.Failed()
	})
	return out
}

// decodeRequest fills req from body. On failure it says which top-level
// field was wrong when the body is JSON, and that it is not JSON otherwise.
func decodeRequest(body []byte, req *msgRequest) *Error {
	sc := scanner{jsonscan.New(body)}
	var field string
	ok := sc.Object(func(key []byte) bool {
		field = string(key)
		return sc.requestField(field, req)
	})
	if ok && sc.End() {
		return nil
	}
	return decodeError(body, field)
}

// requestField reads the value of the request's top-level field into req.
func (sc *scanner) requestField(field string, req *msgRequest) bool {
	switch field {
	case "model":
		req.Model = sc.text()
	case "max_tokens":
		req.MaxTokens = sc.Raw()
	case "system":
		req.System = sc.Raw()
	case "messages":
		if sc.Null() {
			return true
		}
		req.Messages = []msgMessage{}
		return sc.Array(func() bool {
			var m msgMessage
			ok := sc.message(&m)
			req.Messages = append(req.Messages, m)
			return ok
		})
	case "temperature":
		req.Temperature = sc.float()
	case "top_p":
		req.TopP = sc.float()
	case "top_k":
		if !sc.Null() {
			n := sc.integer()
			req.TopK = &n
		}
	case "stop_sequences":
		req.StopSequences = sc.strings()
	case "mcp_servers":
		if v := sc.Raw(); len(v) > 0 && string(v) != "null" && !emptyArray(v) {
			req.MCP = true
		}
	case "thinking":
		if sc.Null() {
			return true
		}
		typ, ok := sc.thinkingType()
		req.Thinking = typ != "disabled"
		return ok
	case "stream":
		req.Stream = sc.boolean()
	case "metadata":
		if sc.Null() {
			return true
		}
		req.Metadata = &struct {
			UserID string `json:"user_id"`
		}{}
		return sc.Object(func(k []byte) bool {
			if string(k) == "user_id" {
				req.Metadata.UserID = sc.text()
				return !sc.Failed()
			}
			return sc.Skip()
		})
	case "tools":
		if sc.Null() {
			return true
		}
		return sc.Array(func() bool {
			var t msgTool
			ok := sc.tool(&t)
			req.Tools = append(req.Tools, t)
			return ok
		})
	case "tool_choice":
		if sc.Null() {
			return true
		}
		req.ToolChoice = &msgToolChoice{}
		return sc.toolChoice(req.ToolChoice)
	default:
		return sc.Skip()
	}
	return !sc.Failed()
}

// message reads one of the request's messages into m.
func (sc *scanner) message(m *msgMessage) bool {
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "role":
			m.Role = sc.text()
		case "content":
			// Decoded here rather than kept raw: a second pass over the
			// bulk of the body is what a 128 KB request cannot afford.
			switch sc.Peek() {
			case '"':
				m.Kind, m.Text = contentString, sc.text()
			case '[':
				m.Kind = contentBlocks
				m.Blocks, _ = sc.blocks()
			case 'n':
				sc.Literal("null")
			default:
				m.Kind = contentBad
				return sc.Skip()
			}
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

// thinkingType reads the thinking object's type.
func (sc *scanner) thinkingType() (string, bool) {
	var typ string
	ok := sc.Object(func(k []byte) bool {
		if string(k) == "type" {
			typ = sc.text()
			return !sc.Failed()
		}
		return sc.Skip()
	})
	return typ, ok
}

// tool reads one of the request's tools into t.
func (sc *scanner) tool(t *msgTool) bool {
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "type":
			t.Type = sc.text()
		case "name":
			t.Name = sc.text()
		case "description":
			t.Description = sc.text()
		case "input_schema":
			t.InputSchema = sc.Raw()
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

// toolChoice reads the request's tool_choice into c.
func (sc *scanner) toolChoice(c *msgToolChoice) bool {
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "type":
			c.Type = sc.text()
		case "name":
			c.Name = sc.text()
		case "disable_parallel_tool_use":
			c.DisableParallelToolUse = sc.boolean()
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

// decodeError is decodeRequest's error for body, which it could not read:
// not JSON, not an object, or field (the last it began) of the wrong type.
func decodeError(body []byte, field string) *Error {
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v) // for its description of the fault
		if err == nil {
			return invalid("request body is not valid JSON")
		}
		return invalid("request body is not valid JSON: " + err.Error())
	}
	if len(body) == 0 || body[firstByte(body)] != '{' {
		return invalid("request body must be a JSON object")
	}
	return invalid(field + ": has the wrong type")
}

func firstByte(b []byte) int {
	if i := jsonscan.WS(b, 0); i < len(b) {
		return i
	}
	return 0
}

// decodeString reads raw as a JSON string.
func decodeString(raw []byte) (string, bool) {
	sc := scanner{jsonscan.New(raw)}
	if sc.Peek() != '"' {
		return "", false
	}
	s := sc.text()
	return s, sc.End()
}

// decodeBlocks reads raw as an array of content blocks.
func decodeBlocks(raw []byte) ([]msgBlock, bool) {
	sc := scanner{jsonscan.New(raw)}
	blocks, ok := sc.blocks()
	return blocks, ok && sc.End()
}

// blocks reads an array of content blocks.
func (sc *scanner) blocks() ([]msgBlock, bool) {
	var blocks []msgBlock
	ok := sc.Array(func() bool {
		var b msgBlock
		ok := sc.Object(func(k []byte) bool {
			switch string(k) {
			case "type":
				b.Type = sc.text()
			case "text":
				b.Text = sc.text()
			case "id":
				b.ID = sc.text()
			case "name":
				b.Name = sc.text()
			case "tool_use_id":
				b.ToolUseID = sc.text()
			case "input":
				b.Input = sc.Raw()
			case "content":
				b.Content = sc.Raw()
			case "is_error":
				b.IsError = sc.boolean()
			case "source":
				if sc.Null() {
					return true
				}
				b.Source = &msgSource{}
				return sc.Object(func(k []byte) bool {
					switch string(k) {
					case "type":
						b.Source.Type = sc.text()
					case "media_type":
						b.Source.MediaType = sc.text()
					case "data":
						b.Source.Data = sc.text()
					case "url":
						b.Source.URL = sc.text()
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
		blocks = append(blocks, b)
		return ok
	})
	return blocks, ok
}
