package anthropic

import (
	"encoding/json"
	"strconv"
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

// raw consumes a value and returns its bytes (a slice of the input).
func (s *scanner) raw() []byte {
	s.ws()
	start := s.i
	if !s.skip(0) {
		return nil
	}
	return s.b[start:s.i]
}

// float reads a number, or null as nil.
func (s *scanner) float() *float64 {
	if s.isNull() {
		return nil
	}
	n, ok := s.number()
	if !ok {
		return nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		s.fail()
		return nil
	}
	return &f
}

// boolean reads true or false, or null as false.
func (s *scanner) boolean() bool {
	switch s.peek() {
	case 't':
		return s.literal("true")
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	default:
		s.fail()
	}
	return false
}

// strings reads an array of strings, or null as nil.
func (s *scanner) strings() []string {
	if s.isNull() {
		return nil
	}
	out := []string{}
	s.array(func() bool {
		out = append(out, s.text())
		return !s.bad
	})
	return out
}

// decodeRequest fills req from body. On failure it says which top-level
// field was wrong when the body is JSON, and that it is not JSON otherwise.
func decodeRequest(body []byte, req *msgRequest) *Error {
	sc := scanner{b: body}
	var field string
	ok := sc.object(func(key []byte) bool {
		field = string(key)
		switch field {
		case "model":
			req.Model = sc.text()
		case "max_tokens":
			req.MaxTokens = sc.raw()
		case "system":
			req.System = sc.raw()
		case "messages":
			if sc.isNull() {
				return true
			}
			req.Messages = []msgMessage{}
			return sc.array(func() bool {
				var m msgMessage
				ok := sc.object(func(k []byte) bool {
					switch string(k) {
					case "role":
						m.Role = sc.text()
					case "content":
						// Decoded here rather than kept raw: a second pass
						// over the bulk of the body is what a 128 KB
						// request cannot afford.
						switch sc.peek() {
						case '"':
							m.Kind, m.Text = contentString, sc.text()
						case '[':
							m.Kind = contentBlocks
							m.Blocks, _ = sc.blocks()
						case 'n':
							sc.literal("null")
						default:
							m.Kind = contentBad
							return sc.skip(0)
						}
					default:
						return sc.skip(0)
					}
					return !sc.bad
				})
				req.Messages = append(req.Messages, m)
				return ok
			})
		case "temperature":
			req.Temperature = sc.float()
		case "top_p":
			req.TopP = sc.float()
		case "top_k":
			if !sc.isNull() {
				n := sc.integer()
				req.TopK = &n
			}
		case "stop_sequences":
			req.StopSequences = sc.strings()
		case "mcp_servers":
			if v := sc.raw(); len(v) > 0 && string(v) != "null" && !emptyArray(v) {
				req.MCP = true
			}
		case "thinking":
			if sc.isNull() {
				return true
			}
			var typ string
			ok := sc.object(func(k []byte) bool {
				if string(k) == "type" {
					typ = sc.text()
					return !sc.bad
				}
				return sc.skip(0)
			})
			req.Thinking = typ != "disabled"
			return ok
		case "stream":
			req.Stream = sc.boolean()
		case "metadata":
			if sc.isNull() {
				return true
			}
			req.Metadata = &struct {
				UserID string `json:"user_id"`
			}{}
			return sc.object(func(k []byte) bool {
				if string(k) == "user_id" {
					req.Metadata.UserID = sc.text()
					return !sc.bad
				}
				return sc.skip(0)
			})
		case "tools":
			if sc.isNull() {
				return true
			}
			return sc.array(func() bool {
				var t msgTool
				ok := sc.object(func(k []byte) bool {
					switch string(k) {
					case "type":
						t.Type = sc.text()
					case "name":
						t.Name = sc.text()
					case "description":
						t.Description = sc.text()
					case "input_schema":
						t.InputSchema = sc.raw()
					default:
						return sc.skip(0)
					}
					return !sc.bad
				})
				req.Tools = append(req.Tools, t)
				return ok
			})
		case "tool_choice":
			if sc.isNull() {
				return true
			}
			req.ToolChoice = &msgToolChoice{}
			return sc.object(func(k []byte) bool {
				switch string(k) {
				case "type":
					req.ToolChoice.Type = sc.text()
				case "name":
					req.ToolChoice.Name = sc.text()
				case "disable_parallel_tool_use":
					req.ToolChoice.DisableParallelToolUse = sc.boolean()
				default:
					return sc.skip(0)
				}
				return !sc.bad
			})
		default:
			return sc.skip(0)
		}
		return !sc.bad
	})
	if ok && sc.end() {
		return nil
	}
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v) // for its description of the fault
		if err == nil {
			return invalid("request body is not valid JSON")
		}
		return invalid("request body is not valid JSON: " + err.Error())
	}
	if len(body) == 0 || sc.i == 0 || field == "" && body[firstByte(body)] != '{' {
		return invalid("request body must be a JSON object")
	}
	return invalid(field + ": has the wrong type")
}

func firstByte(b []byte) int {
	sc := scanner{b: b}
	sc.ws()
	if sc.i >= len(b) {
		return 0
	}
	return sc.i
}

// decodeString reads raw as a JSON string.
func decodeString(raw []byte) (string, bool) {
	sc := scanner{b: raw}
	if sc.peek() != '"' {
		return "", false
	}
	s := sc.text()
	return s, sc.end()
}

// decodeBlocks reads raw as an array of content blocks.
func decodeBlocks(raw []byte) ([]msgBlock, bool) {
	sc := scanner{b: raw}
	blocks, ok := sc.blocks()
	return blocks, ok && sc.end()
}

// blocks reads an array of content blocks.
func (sc *scanner) blocks() ([]msgBlock, bool) {
	var blocks []msgBlock
	ok := sc.array(func() bool {
		var b msgBlock
		ok := sc.object(func(k []byte) bool {
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
				b.Input = sc.raw()
			case "content":
				b.Content = sc.raw()
			case "is_error":
				b.IsError = sc.boolean()
			case "source":
				if sc.isNull() {
					return true
				}
				b.Source = &msgSource{}
				return sc.object(func(k []byte) bool {
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
						return sc.skip(0)
					}
					return !sc.bad
				})
			default:
				return sc.skip(0)
			}
			return !sc.bad
		})
		blocks = append(blocks, b)
		return ok
	})
	return blocks, ok
}
