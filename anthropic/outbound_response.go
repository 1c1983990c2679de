package anthropic

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/triagegw/triage/internal/jsonscan"
)

// msgResponse is the part of a Messages response a chat completion needs.
type msgResponse struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Model   string `json:"model"`
	Content []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason *string   `json:"stop_reason"`
	Usage      *msgUsage `json:"usage"`
	Error      *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type msgUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// MessagesToChat translates a non-streamed Messages response into a chat
// completion. model, when not empty, is the model reported to the client
// (the name it asked for rather than the pool's). The id is the message's;
// created is the time of translation, Messages having no such field. Text
// blocks are joined into the content as they stand (a streamed response
// yields them back to back too); thinking and other block types chat
// completions has no place for are left out. A response that cannot be
// translated (not JSON, no content, a tool input that is not an object) is
// a 502 api_error, never a response with the bad part dropped.
func MessagesToChat(body []byte, model string) ([]byte, *Error) {
	var r msgResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, badUpstream("not a Messages response: " + err.Error())
	}
	if e := r.check(); e != nil {
		return nil, e
	}
	if model == "" {
		model = r.Model
	}

	dst := make([]byte, 0, len(body)+192)
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, r.ID)
	dst = append(dst, `,"object":"chat.completion","created":`...)
	dst = strconv.AppendInt(dst, time.Now().Unix(), 10)
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, model)
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	dst, e := r.appendMessage(dst)
	if e != nil {
		return nil, e
	}
	reason := ""
	if r.StopReason != nil {
		reason = *r.StopReason
	}
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	dst = appendString(dst, finishReason(reason))
	dst = append(dst, "}]"...)
	var u msgUsage
	if r.Usage != nil {
		u = *r.Usage
	}
	dst = appendChatUsage(dst, &u)
	return append(dst, '}'), nil
}

// check refuses what is not a Messages response with content: an error,
// another type, no content.
func (r *msgResponse) check() *Error {
	if r.Type == "error" || r.Error != nil {
		msg := "an error"
		if r.Error != nil && r.Error.Message != "" {
			msg = r.Error.Message
		}
		return badUpstream("the upstream answered with an error: " + msg)
	}
	if r.Type != "" && r.Type != "message" {
		return badUpstream("not a Messages response: type " + strconv.Quote(r.Type))
	}
	if r.Content == nil {
		return badUpstream("no content")
	}
	return nil
}

// appendMessage appends the message's content, its text blocks joined, and
// its tool_use blocks as tool_calls.
func (r *msgResponse) appendMessage(dst []byte) ([]byte, *Error) {
	var text strings.Builder
	calls := 0
	for i := range r.Content {
		switch b := &r.Content[i]; b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			calls++
		}
	}
	// null content for a turn that is all tool calls, as OpenAI sends it.
	if text.Len() > 0 || calls == 0 {
		dst = appendString(dst, text.String())
	} else {
		dst = append(dst, "null"...)
	}
	if calls == 0 {
		return dst, nil
	}
	dst = append(dst, `,"tool_calls":[`...)
	n := 0
	for i := range r.Content {
		b := &r.Content[i]
		if b.Type != "tool_use" {
			continue
		}
		in := bytes.TrimSpace(b.Input)
		if len(in) == 0 || string(in) == "null" {
			in = []byte("{}")
		} else if in[0] != '{' {
			return nil, badUpstream("tool_use block " + strconv.Quote(b.Name) + " has an input that is not a JSON object")
		}
		if b.Name == "" {
			return nil, badUpstream("a tool_use block has no name")
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = appendString(dst, toolID(b.ID, n))
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = appendString(dst, b.Name)
		dst = append(dst, `,"arguments":`...)
		dst = appendString(dst, string(jsonscan.AppendCompact(nil, in)))
		dst = append(dst, "}}"...)
		n++
	}
	return append(dst, ']'), nil
}

// finishReason maps a stop_reason to a finish_reason. pause_turn (a server
// tool's turn paused) has no counterpart and ends the turn as far as the
// client can tell.
func finishReason(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop"
}

// appendChatUsage appends ,"usage":{...}. Messages counts the prompt tokens
// read from and written to its cache apart from the rest; chat completions
// counts them all as prompt tokens, and names the cached ones.
func appendChatUsage(dst []byte, u *msgUsage) []byte {
	prompt := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, prompt, 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, u.OutputTokens, 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, prompt+u.OutputTokens, 10)
	if u.CacheReadInputTokens > 0 {
		dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, u.CacheReadInputTokens, 10)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// OpenAI's error types, for errors sent to a chat-completions client.
const (
	openaiInvalidRequest = "invalid_request_error"
	openaiAuthentication = "authentication_error"
	openaiPermission     = "permission_error"
	openaiRateLimit      = "rate_limit_error"
	openaiServer         = "server_error"
)

// openaiType is the OpenAI error type for an HTTP status.
func openaiType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return openaiAuthentication
	case status == http.StatusForbidden:
		return openaiPermission
	case status == http.StatusTooManyRequests:
		return openaiRateLimit
	case status >= 500:
		return openaiServer
	}
	return openaiInvalidRequest
}

// statusForType is the HTTP status Anthropic sends with an error type, for
// an error that arrives inside a stream, where there is no status.
func statusForType(typ string) int {
	switch typ {
	case TypeInvalidRequest:
		return http.StatusBadRequest
	case TypeAuthentication:
		return http.StatusUnauthorized
	case TypePermission:
		return http.StatusForbidden
	case TypeNotFound:
		return http.StatusNotFound
	case TypeTooLarge:
		return http.StatusRequestEntityTooLarge
	case TypeRateLimit:
		return http.StatusTooManyRequests
	case TypeOverloaded:
		return 529
	}
	return http.StatusInternalServerError
}

// FromAnthropicError maps an upstream Messages error response to OpenAI's
// error body, {"error":{"message","type","param","code"}}. The type follows
// the status, in OpenAI's names; the upstream's own type (overloaded_error,
// say) is kept as the code, where a client can still tell it apart, and its
// message is kept since it is usually the most useful thing to show. The
// status itself is the caller's to send: 529 is not one OpenAI clients
// know, but they retry it as any 5xx.
func FromAnthropicError(status int, body []byte) []byte {
	var u struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	var msg, code string
	if json.Unmarshal(body, &u) == nil {
		msg = u.Message
		var inner struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		var s string
		if json.Unmarshal(u.Error, &inner) == nil {
			code = inner.Type
			if inner.Message != "" {
				msg = inner.Message
			}
		} else if json.Unmarshal(u.Error, &s) == nil && s != "" {
			msg = s
		}
	}
	if msg == "" {
		msg = "upstream error: status " + strconv.Itoa(status)
		if t := http.StatusText(status); t != "" {
			msg += " " + t
		}
	}
	return appendOpenAIError(make([]byte, 0, 96+len(msg)), msg, openaiType(status), code)
}

// appendOpenAIError appends OpenAI's error body; an empty code is null, as
// OpenAI sends it, and so is param, which an upstream error never names.
func appendOpenAIError(dst []byte, msg, typ, code string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendString(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"param":null,"code":`...)
	if code == "" {
		dst = append(dst, "null"...)
	} else {
		dst = appendString(dst, code)
	}
	return append(dst, "}}"...)
}
