package anthropic

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/triagegw/triage/internal/jsonscan"
)

// chatResponse is the part of a chat completion a Messages response needs:
// the first choice's message, its finish and vLLM's stop_reason (the stop
// string that ended generation, when it was a string), and the usage.
type chatResponse struct {
	id, model  string
	keepModel  bool // the caller names the model: the completion's is skipped
	choices    int
	content    []byte // a JSON string literal (scanner.lit), copied as it is
	hasContent bool
	tools      []toolDelta
	finish     string
	seq        string
	in, out    int64
}

// decodeResponse reads a chat completion with the package's scanner: a
// response is a few hundred bytes read once, where encoding/json's
// reflection cost more than the rest of the translation together.
func decodeResponse(body []byte, r *chatResponse) bool {
	sc := &scanner{jsonscan.New(body)}
	return sc.Object(func(key []byte) bool {
		switch string(key) {
		case "id":
			r.id = sc.text()
		case "model":
			if r.keepModel {
				return sc.Skip()
			}
			r.model = sc.text()
		case "choices":
			// A repeated key counts as its last, as in encoding/json.
			r.choices, r.content, r.hasContent, r.tools, r.finish, r.seq = 0, nil, false, r.tools[:0], "", ""
			if sc.Null() {
				return true
			}
			return sc.Array(func() bool {
				r.choices++
				if r.choices > 1 {
					return sc.Skip() // Messages has one answer: the first
				}
				return responseChoice(sc, r)
			})
		case "usage":
			if sc.Null() {
				return true
			}
			return sc.chatUsage(&r.in, &r.out)
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	}) && sc.End()
}

func responseChoice(sc *scanner, r *chatResponse) bool {
	if sc.Null() {
		return true
	}
	return sc.Object(func(key []byte) bool {
		switch string(key) {
		case "message":
			if sc.Null() {
				return true
			}
			return sc.Object(func(k []byte) bool {
				switch string(k) {
				case "content":
					r.hasContent = !sc.Null()
					if r.hasContent {
						r.content = sc.lit()
					}
				case "tool_calls":
					r.tools = r.tools[:0]
					if sc.Null() {
						return true
					}
					return sc.Array(func() bool {
						var t toolDelta
						ok := sc.Null() || sc.toolCall(&t, false)
						r.tools = append(r.tools, t)
						return ok
					})
				default:
					return sc.Skip()
				}
				return !sc.Failed()
			})
		case "finish_reason":
			r.finish = sc.text()
		case "stop_reason":
			r.seq = ""
			if sc.Peek() != '"' {
				return sc.Skip() // null, or a stop token id
			}
			r.seq = sc.text()
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

// FromChat translates a non-streamed chat completion into a Messages
// response. model, when not empty, is the model reported to the client
// (the name it asked for rather than the pool's). Only the first choice is
// translated: Messages has no n. A response that cannot be translated
// (not JSON, no choice, tool arguments that are not a JSON object) is a
// 502 api_error, never a response with the bad part dropped.
func FromChat(body []byte, model string) ([]byte, *Error) {
	return AppendFromChat(make([]byte, 0, len(body)+128), body, model)
}

// AppendFromChat is FromChat, appending the Messages response to dst.
func AppendFromChat(dst, body []byte, model string) ([]byte, *Error) {
	r := chatResponse{keepModel: model != ""}
	if !decodeResponse(body, &r) {
		return nil, badUpstream("not a chat completion: invalid JSON, or a field of the wrong type")
	}
	if r.choices == 0 {
		return nil, badUpstream("no choices")
	}
	if model == "" {
		model = r.model
	}

	dst = append(dst, `{"id":`...)
	dst = appendString(dst, messageID(r.id))
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = appendString(dst, model)
	dst = append(dst, `,"content":[`...)
	n := 0
	if r.hasContent && filled(r.content) {
		dst = append(dst, `{"type":"text","text":`...)
		dst = append(dst, r.content...)
		dst = append(dst, '}')
		n++
	}
	var scratch bytes.Buffer
	for i := range r.tools {
		tc := &r.tools[i]
		input, ok := toolInput(&scratch, tc.args)
		if !ok {
			return nil, badUpstream("tool call " + strconv.Quote(tc.name) + " has arguments that are not a JSON object")
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"type":"tool_use","id":`...)
		dst = appendString(dst, toolID(tc.id, i))
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, tc.name)
		dst = append(dst, `,"input":`...)
		dst = append(dst, input...)
		dst = append(dst, '}')
	}
	reason, seq := stopReason(r.finish, r.seq)
	dst = append(dst, `],"stop_reason":`...)
	dst = appendString(dst, reason)
	dst = append(dst, `,"stop_sequence":`...)
	if reason == "stop_sequence" {
		dst = appendString(dst, seq)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"usage":{"input_tokens":`...)
	dst = strconv.AppendInt(dst, r.in, 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, r.out, 10)
	return append(dst, "}}"...), nil
}

// messageID gives a chat id the msg_ prefix Anthropic ids carry, so clients
// that check it are satisfied and the upstream id can still be found in it.
func messageID(id string) string {
	if strings.HasPrefix(id, "msg_") {
		return id
	}
	return "msg_" + id
}

// toolID fills an empty tool call id: a tool_use block must have one for
// the client's tool_result to name.
func toolID(id string, i int) string {
	if id != "" {
		return id
	}
	return "toolu_" + strconv.Itoa(i)
}

// toolInput checks that a tool call's arguments are a JSON object and
// returns them compacted. Empty arguments mean a call without any (some
// servers send "" rather than "{}").
func toolInput(scratch *bytes.Buffer, args string) ([]byte, bool) {
	a := strings.Trim(args, " \t\r\n")
	if a == "" {
		return []byte("{}"), true
	}
	if a[0] != '{' {
		return nil, false
	}
	scratch.Reset()
	if json.Compact(scratch, []byte(a)) != nil {
		return nil, false
	}
	return scratch.Bytes(), true
}

// stopReason maps a finish reason to Anthropic's stop_reason. vLLM names the
// stop string that matched (seq); plain OpenAI servers do not, and then a
// stop sequence cannot be told from the end of a turn.
func stopReason(finish, seq string) (string, string) {
	switch finish {
	case "length":
		return "max_tokens", ""
	case "tool_calls", "function_call":
		return "tool_use", ""
	case "content_filter":
		return "refusal", ""
	case "stop":
		if seq != "" {
			return "stop_sequence", seq
		}
	}
	return "end_turn", ""
}
