package anthropic

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// chatResponse is the part of a chat completion a Messages response needs.
type chatResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content   *string        `json:"content"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
		// vLLM's extension: the stop string that ended generation (a
		// number when it was a stop token id, null at EOS).
		StopReason json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

type chatToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// FromChat translates a non-streamed chat completion into a Messages
// response. model, when not empty, is the model reported to the client
// (the name it asked for rather than the pool's). Only the first choice is
// translated: Messages has no n. A response that cannot be translated
// (not JSON, no choice, tool arguments that are not a JSON object) is a
// 502 api_error, never a response with the bad part dropped.
func FromChat(body []byte, model string) ([]byte, *Error) {
	var r chatResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, badUpstream("not a chat completion: " + err.Error())
	}
	if len(r.Choices) == 0 {
		return nil, badUpstream("no choices")
	}
	c := &r.Choices[0]
	if model == "" {
		model = r.Model
	}

	dst := make([]byte, 0, len(body)+128)
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, messageID(r.ID))
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = appendString(dst, model)
	dst = append(dst, `,"content":[`...)
	n := 0
	if c.Message.Content != nil && *c.Message.Content != "" {
		dst = append(dst, `{"type":"text","text":`...)
		dst = appendString(dst, *c.Message.Content)
		dst = append(dst, '}')
		n++
	}
	var scratch bytes.Buffer
	for i := range c.Message.ToolCalls {
		tc := &c.Message.ToolCalls[i]
		input, ok := toolInput(&scratch, tc.Function.Arguments)
		if !ok {
			return nil, badUpstream("tool call " + strconv.Quote(tc.Function.Name) + " has arguments that are not a JSON object")
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"type":"tool_use","id":`...)
		dst = appendString(dst, toolID(tc.ID, i))
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, tc.Function.Name)
		dst = append(dst, `,"input":`...)
		dst = append(dst, input...)
		dst = append(dst, '}')
	}
	reason, seq := stopReason(c.FinishReason, stopString(c.StopReason))
	dst = append(dst, `],"stop_reason":`...)
	dst = appendString(dst, reason)
	dst = append(dst, `,"stop_sequence":`...)
	if reason == "stop_sequence" {
		dst = appendString(dst, seq)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"usage":{"input_tokens":`...)
	var in, out int64
	if r.Usage != nil {
		in, out = r.Usage.PromptTokens, r.Usage.CompletionTokens
	}
	dst = strconv.AppendInt(dst, in, 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, out, 10)
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

// stopString is vLLM's stop_reason when it is a string (the stop sequence
// that matched), else "" (null at EOS, a number for a stop token id).
func stopString(raw json.RawMessage) string {
	var seq string
	if v := bytes.TrimSpace(raw); len(v) > 0 && v[0] == '"' {
		_ = json.Unmarshal(v, &seq)
	}
	return seq
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
