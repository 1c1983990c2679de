package router

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/triagegw/triage/anthropic"
	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/router/proxy"
)

// shape is an API shape the edge speaks to clients. Every shape becomes the
// OpenAI request the pools speak before it is decided and forwarded, so
// routing, limits, retries and accounting are the same for all of them;
// what differs is how the body is read and how answers and errors look.
type shape uint8

const (
	shapeOpenAI    shape = iota // chat completions, completions, embeddings: passed through
	shapeMessages               // Anthropic Messages, translated to and from chat completions
	shapeResponses              // OpenAI Responses, passed through to pools that serve it
)

// writeError answers e in the shape's error format.
func (sh shape) writeError(w http.ResponseWriter, e *openai.Error) {
	if sh == shapeMessages {
		writeAnthropic(w, &anthropic.Error{Status: e.Status, Type: anthropicType(e), Message: e.Message})
		return
	}
	openai.WriteError(w, e)
}

// anthropicType is the Anthropic error type for one the gateway raised in
// OpenAI's terms. A pool with no healthy replica is "overloaded", which
// Anthropic's clients retry.
func anthropicType(e *openai.Error) string {
	if e.Status == http.StatusServiceUnavailable {
		return anthropic.TypeOverloaded
	}
	return anthropic.TypeForStatus(e.Status)
}

func writeAnthropic(w http.ResponseWriter, e *anthropic.Error) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	delete(h, "Content-Length")
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.Body())
}

// checkAnthropic checks the Messages endpoint's own headers. The
// anthropic-version header may be left out (clients pointed at the gateway
// by base URL alone should not fail on it) and may name any version: each
// is a date, the SDKs send their newest, and the wire format the gateway
// translates has kept its shape across them. A value that is not a date is
// a client bug and is refused.
func checkAnthropic(h http.Header) *anthropic.Error {
	if v := h["Anthropic-Version"]; len(v) > 0 && !isDate(v[0]) {
		return &anthropic.Error{Status: http.StatusBadRequest, Type: anthropic.TypeInvalidRequest,
			Message: "anthropic-version: " + strconv.Quote(v[0]) + " is not a version (a date such as 2023-06-01)"}
	}
	return nil
}

// isDate reports whether s has the form YYYY-MM-DD.
func isDate(s string) bool {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return false
	}
	for i := range len(s) {
		if i != 4 && i != 7 && (s[i] < '0' || s[i] > '9') {
			return false
		}
	}
	return true
}

// messagesOut translates a chat-completions answer back into a Messages
// answer (proxy.Translator).
type messagesOut struct {
	model string
	s     *anthropic.Stream // made on the first event
}

func (m *messagesOut) Event(dst, _, data []byte) ([]byte, error) {
	if m.s == nil {
		m.s = anthropic.NewStream(m.model)
	}
	return m.s.Chunk(data, dst)
}

func (m *messagesOut) End(dst []byte) ([]byte, error) {
	if m.s == nil || !m.s.Done() {
		return dst, errors.New("upstream stream ended before its end ([DONE])")
	}
	return dst, nil
}

func (m *messagesOut) Fail(dst []byte, msg string) []byte {
	if m.s == nil {
		m.s = anthropic.NewStream(m.model)
	}
	return m.s.Fail(dst, msg)
}

func (m *messagesOut) Body(dst []byte, status int, body []byte) (int, []byte) {
	if status/100 != 2 {
		e := anthropic.FromOpenAIError(status, body)
		if status == http.StatusServiceUnavailable {
			e.Type = anthropic.TypeOverloaded
		}
		return status, e.Body()
	}
	out, e := anthropic.AppendFromChat(dst, body, m.model)
	if e != nil {
		return e.Status, e.Body()
	}
	return status, out
}

// chatOut translates an Anthropic pool's Messages answer back into the
// chat completion its client asked for (proxy.Translator).
type chatOut struct {
	model        string
	includeUsage bool
	s            *anthropic.ChatStream // made on the first event
}

func (c *chatOut) stream() *anthropic.ChatStream {
	if c.s == nil {
		c.s = anthropic.NewChatStream(c.model, c.includeUsage)
	}
	return c.s
}

func (c *chatOut) Event(dst, name, data []byte) ([]byte, error) {
	return c.stream().Event(name, data, dst)
}

func (c *chatOut) End(dst []byte) ([]byte, error) {
	if c.s == nil || !c.s.Done() {
		return dst, errors.New("upstream stream ended before message_stop")
	}
	return dst, nil
}

func (c *chatOut) Fail(dst []byte, msg string) []byte { return c.stream().Fail(dst, msg) }

// Usage is a stream's usage for accounting: Messages reports input tokens
// in its first event, which the relay's tail does not keep.
func (c *chatOut) Usage() (openai.Usage, bool) {
	if c.s == nil {
		return openai.Usage{}, false
	}
	in, out, ok := c.s.Usage()
	return openai.Usage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out}, ok
}

func (c *chatOut) Body(_ []byte, status int, body []byte) (int, []byte) {
	if status/100 != 2 {
		return status, anthropic.FromAnthropicError(status, body)
	}
	out, e := anthropic.MessagesToChat(body, c.model)
	if e != nil {
		oe := openai.Error{Status: e.Status, Message: e.Message, Type: "api_error"}
		return e.Status, oe.AppendJSON(nil)
	}
	return status, out
}

// includeUsage reads a chat request's stream_options.include_usage.
func includeUsage(body []byte, req *openai.Request) bool {
	if req.StreamOptions.Len() == 0 {
		return false
	}
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	return json.Unmarshal(body[req.StreamOptions.Start:req.StreamOptions.End], &so) == nil && so.IncludeUsage
}

// toChatPool readies a Messages client's request, translated to a chat
// completion at the edge, for the vllm or openai pool it was routed to:
// what the request asks that the pool cannot serve as asked is refused,
// naming the field, unless the pool drops it (drop_unsupported); an openai
// pool that drops top_k gets the request translated again without it.
func toChatPool(fr *proxy.Request, e *poolEntry, asks anthropic.Asks, orig []byte) *openai.Error {
	vllm := e.kind != pool.KindOpenAI
	if ae := asks.Check(vllm, e.drop); ae != nil {
		return &openai.Error{Status: ae.Status, Message: ae.Message, Type: openai.TypeInvalidRequest}
	}
	if !vllm && asks&anthropic.AsksTopK != 0 {
		chat, _, ae := anthropic.ToChatAsks(orig, e.model, anthropic.AsksTopK)
		if ae != nil {
			return &openai.Error{Status: ae.Status, Message: ae.Message, Type: openai.TypeInvalidRequest}
		}
		fr.Body = chat
		fr.ModelSpan, fr.ModelTok = openai.Span{}, nil // named the pool's model
	}
	fr.Translate, fr.WriteError = &messagesOut{model: e.model}, shapeMessages.writeError
	return nil
}

// toAnthropicPool readies a request for a pool that speaks Anthropic's
// Messages API: a Messages client's body goes as it came (with the pool's
// model), a chat completion is translated and its answer translated back.
// Other endpoints have no counterpart there.
func toAnthropicPool(fr *proxy.Request, e *poolEntry, sh shape, orig []byte, req *openai.Request) *openai.Error {
	switch {
	case sh == shapeMessages:
		m, err := openai.Extract(orig)
		if err != nil {
			return err.(*openai.Error)
		}
		fr.Body, fr.Path, fr.RawQuery = orig, "/v1/messages", ""
		fr.ModelSpan, fr.ModelTok = openai.Span{}, nil
		if m.ModelEscaped || string(m.Model) != e.model {
			fr.ModelSpan, fr.ModelTok = m.ModelSpan, e.tok
		}
		fr.WriteError = shapeMessages.writeError
	case fr.Path == "/v1/chat/completions":
		mb, ae := anthropic.ChatToMessages(fr.Body, e.model, e.maxTokens, e.drop)
		if ae != nil {
			return &openai.Error{Status: ae.Status, Message: ae.Message, Type: openai.TypeInvalidRequest}
		}
		stream := req.Stream
		fr.Translate = &chatOut{includeUsage: stream && includeUsage(fr.Body, req)}
		fr.Body, fr.Path, fr.RawQuery = mb, "/v1/messages", ""
		fr.ModelSpan, fr.ModelTok = openai.Span{}, nil // ChatToMessages named the pool's model
	default:
		return openai.BadRequest(fr.Path + " cannot be served by pool " + strconv.Quote(e.pool.Name()) + " (kind anthropic), which serves chat completions and messages only")
	}
	return nil
}
