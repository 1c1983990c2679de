package sim

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ---- wire types (field order follows vLLM's responses) ----

type apiError struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

type usage struct {
	PromptTokens        int            `json:"prompt_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

// promptDetails is vLLM's, with --enable-prompt-tokens-details.
type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// genUsage is the usage of g with n completion tokens.
func genUsage(g generation, n int) *usage {
	u := &usage{PromptTokens: g.promptTokens, CompletionTokens: n, TotalTokens: g.promptTokens + n}
	if g.perf {
		u.PromptTokensDetails = &promptDetails{CachedTokens: g.cached}
	}
	return u
}

type assistantMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"` // null beside tool calls
	ToolCalls []toolCall `json:"tool_calls"`
}

// textMessage is the assistant message that answers with text.
func textMessage(text string) assistantMessage {
	return assistantMessage{Role: "assistant", Content: &text, ToolCalls: []toolCall{}}
}

type chatChoice struct {
	Index        int              `json:"index"`
	Message      assistantMessage `json:"message"`
	Logprobs     any              `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
	StopReason   any              `json:"stop_reason"`
}

type textChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
}

type completionResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices any    `json:"choices"`
	Usage   *usage `json:"usage,omitempty"`
}

type delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

type chatChunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type chatFinishChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root"`
	Parent      any    `json:"parent"`
	MaxModelLen int    `json:"max_model_len"`
}

type listResponse struct {
	Object string `json:"object"`
	Data   any    `json:"data"`
}

type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type embeddingResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   usage           `json:"usage"`
}

// ---- request types ----

type chatRequest struct {
	Model    string `json:"model"`
	Messages *[]struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Stop          json.RawMessage `json:"stop"` // a string or an array of strings
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
}

// streamOptions is vLLM's: a stream ends with a usage chunk only when
// include_usage asks for it, and only a stream may carry options.
type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// streamUsage validates stream_options as vLLM does and reports whether
// the stream ends with its usage.
func streamUsage(stream bool, so *streamOptions) (bool, error) {
	if so == nil {
		return false, nil
	}
	if !stream {
		return false, fmt.Errorf("Stream options can only be defined when `stream=True`.")
	}
	return so.IncludeUsage != nil && *so.IncludeUsage, nil
}

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
}

// ---- errors ----

// errorType names the error type vLLM (and the OpenAI clients) use for a
// status.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusUnauthorized:
		return "AuthenticationError"
	case http.StatusForbidden:
		return "PermissionDeniedError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusConflict:
		return "ConflictError"
	case http.StatusUnprocessableEntity:
		return "UnprocessableEntityError"
	case http.StatusTooManyRequests:
		return "RateLimitError"
	case http.StatusInternalServerError:
		return "InternalServerError"
	}
	text := strings.ReplaceAll(http.StatusText(status), " ", "")
	text = strings.ReplaceAll(text, "-", "")
	if text == "" {
		text = "HTTP" + strconv.Itoa(status)
	}
	return text + "Error"
}

// writeError answers status with vLLM's error JSON.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Object: "error", Message: msg, Type: errorType(status), Code: status})
}

// writeStatusError answers se with vLLM's error JSON, its type and param
// included.
func writeStatusError(w http.ResponseWriter, se *statusError) {
	e := apiError{Object: "error", Message: se.msg, Type: se.typ, Code: se.status}
	if e.Type == "" {
		e.Type = errorType(se.status)
	}
	if se.param != "" {
		e.Param = &se.param
	}
	writeJSON(w, se.status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen with the package's own types
		status = http.StatusInternalServerError
		b = []byte(`{"object":"error","message":"sim: encoding response failed","type":"InternalServerError","param":null,"code":500}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, err = w.Write(b)
	return err
}

func (s *Server) checkModel(w http.ResponseWriter, model string) bool {
	if model == "" || model == s.opt.Model {
		return true
	}
	if s.opt.API == APIAnthropic {
		s.fail(w, http.StatusNotFound, "model: "+model)
		return false
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", model))
	return false
}

// ---- /v1/models ----

func (s *Server) handleModels(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, listResponse{
		Object: "list",
		Data: []modelCard{{
			ID:          s.opt.Model,
			Object:      "model",
			Created:     s.created,
			OwnedBy:     "vllm",
			Root:        s.opt.Model,
			MaxModelLen: maxModelLen,
		}},
	})
}

// ---- text generation ----

var loremWords = strings.Fields("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua")

// word returns the i-th generated word: "[<Name>]" first, then lorem ipsum.
func (s *Server) word(i int) string {
	if i == 0 {
		return "[" + s.opt.Name + "]"
	}
	return loremWords[(i-1)%len(loremWords)]
}

// piece returns the text of content chunk i of n: the word followed by a
// space, except for the last one, so that the pieces concatenate to the
// non-streamed content.
func (s *Server) piece(i, n int) string {
	if i == n-1 {
		return s.word(i)
	}
	return s.word(i) + " "
}

func (s *Server) content(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(s.piece(i, n))
	}
	return b.String()
}

// countWords is the simulator's rough token count: whitespace-separated
// words, at least 1.
func countWords(text string) int {
	return max(1, len(strings.Fields(text)))
}

// messageText extracts the text of a chat message content: a string, or an
// array of parts whose "text" fields are used.
func messageText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err == nil {
		return str, nil
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("message content must be a string or an array of content parts")
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, " "), nil
}

// inputs decodes an OpenAI prompt/input value: a string, an array of
// strings, an array of token ids or an array of arrays of token ids. It
// returns one element per input, each either a string or a []int.
func inputs(raw json.RawMessage, field string) ([]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, fmt.Errorf("field `%s` is required", field)
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return []any{str}, nil
	}
	var out []any
	var strs []string
	var ids []int
	var idLists [][]int
	switch {
	case json.Unmarshal(raw, &strs) == nil:
		for _, s := range strs {
			out = append(out, s)
		}
	case json.Unmarshal(raw, &ids) == nil:
		if len(ids) > 0 {
			out = append(out, ids)
		}
	case json.Unmarshal(raw, &idLists) == nil:
		for _, l := range idLists {
			if len(l) == 0 {
				return nil, fmt.Errorf("field `%s` contains an empty token list", field)
			}
			out = append(out, l)
		}
	default:
		return nil, fmt.Errorf("field `%s` must be a string, an array of strings, an array of token ids or an array of arrays of token ids", field)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("field `%s` must not be empty", field)
	}
	return out, nil
}

func inputTokens(in any) int {
	switch v := in.(type) {
	case string:
		return countWords(v)
	case []int:
		return len(v)
	}
	return 1
}

// generation is a validated text-generation request.
type generation struct {
	chat         bool
	stream       bool
	usage        bool // the stream ends with a usage chunk (stream_options.include_usage)
	promptTokens int
	call         *call    // chat only: the answer is this tool call instead of text
	stop         []string // chat only: stop strings, honoured in answers not streamed
	// prompt is the text the performance model keys its cache by: each
	// message's role and text in order, or the prompt; perf and cached
	// are set once the model has admitted it.
	prompt []byte
	perf   bool
	cached int
	salt   string // cache_salt: prompts share cached blocks only under the same one
}

func parseGeneration(ep endpoint, body []byte) (generation, string, error) {
	g := generation{chat: ep == endpointChat}
	if g.chat {
		var req chatRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return g, "", fmt.Errorf("invalid JSON body: %v", err)
		}
		if req.Messages == nil || len(*req.Messages) == 0 {
			return g, req.Model, fmt.Errorf("field `messages` is required and must be a non-empty array")
		}
		words := 0
		for _, m := range *req.Messages {
			text, err := messageText(m.Content)
			if err != nil {
				return g, req.Model, err
			}
			words += len(strings.Fields(text))
			g.prompt = append(append(append(append(g.prompt, m.Role...), ": "...), text...), '\n')
		}
		g.stream, g.promptTokens = req.Stream, max(1, words)
		var err error
		g.usage, err = streamUsage(req.Stream, req.StreamOptions)
		if err != nil {
			return g, req.Model, err
		}
		if len(req.Stop) > 0 && string(req.Stop) != "null" {
			var one string
			if json.Unmarshal(req.Stop, &one) == nil {
				g.stop = []string{one}
			} else if json.Unmarshal(req.Stop, &g.stop) != nil {
				return g, req.Model, fmt.Errorf("stop: must be a string or an array of strings")
			}
		}
		msgs := *req.Messages
		g.call, err = chatToolCall(req.Tools, req.ToolChoice, msgs[len(msgs)-1].Role == "tool")
		return g, req.Model, err
	}
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return g, "", fmt.Errorf("invalid JSON body: %v", err)
	}
	ins, err := inputs(req.Prompt, "prompt")
	if err != nil {
		return g, req.Model, err
	}
	for _, in := range ins {
		g.promptTokens += inputTokens(in)
		if str, ok := in.(string); ok {
			g.prompt = append(g.prompt, str...)
		}
	}
	g.stream = req.Stream
	g.usage, err = streamUsage(req.Stream, req.StreamOptions)
	return g, req.Model, err
}

// completion is the non-streamed answer to g with n words.
func (s *Server) completion(g generation, id int64, n int) completionResponse {
	resp := completionResponse{
		Created: time.Now().Unix(),
		Model:   s.opt.Model,
		Usage:   genUsage(g, n),
	}
	switch {
	case g.call != nil:
		resp.ID, resp.Object = "chatcmpl-"+strconv.FormatInt(id, 10), "chat.completion"
		resp.Choices = []chatChoice{{
			Message: assistantMessage{Role: "assistant", ToolCalls: []toolCall{{
				ID:       "chatcmpl-tool-" + s.uid(),
				Type:     "function",
				Function: functionCall{Name: g.call.name, Arguments: g.call.args},
			}}},
			FinishReason: "tool_calls",
		}}
		k := len(g.call.fragments(n))
		resp.Usage = genUsage(g, k)
	case g.chat:
		resp.ID, resp.Object = "chatcmpl-"+strconv.FormatInt(id, 10), "chat.completion"
		text, matched := cutStop(s.content(n), g.stop)
		ch := chatChoice{Message: textMessage(text), FinishReason: "stop"}
		if matched != "" {
			// As vLLM does: the stop string is left out of the text and
			// named in stop_reason.
			ch.StopReason = matched
			k := len(strings.Fields(text))
			resp.Usage = &usage{PromptTokens: g.promptTokens, CompletionTokens: k, TotalTokens: g.promptTokens + k}
		}
		resp.Choices = []chatChoice{ch}
	default:
		stop := "stop"
		resp.ID, resp.Object = "cmpl-"+strconv.FormatInt(id, 10), "text_completion"
		resp.Choices = []textChoice{{Text: s.content(n), FinishReason: &stop}}
	}
	return resp
}

// cutStop cuts text before the earliest of stops it holds, returning the
// stop string that matched ("" for none).
func cutStop(text string, stops []string) (string, string) {
	at, matched := -1, ""
	for _, st := range stops {
		if i := strings.Index(text, st); st != "" && i >= 0 && (at < 0 || i < at) {
			at, matched = i, st
		}
	}
	if at < 0 {
		return text, ""
	}
	return text[:at], matched
}

// answerValue is the JSON answer to a request that is not streamed.
func (s *Server) answerValue(p job, ov overrides) any {
	switch p.ep {
	case endpointEmbeddings:
		return s.embeddings(p.inputs, p.base64)
	case endpointResponses:
		return s.response(p.resp, ov)
	case endpointMessages:
		return s.message(p.msg, ov)
	}
	return s.completion(p.gen, s.seq.Add(1), ov.chunks)
}

// answerBytes is the whole answer to p as one body, for faults that send a
// valid answer: the JSON object, or every event of the stream.
func (s *Server) answerBytes(p job, ov overrides) (contentType string, body []byte) {
	if p.stream() {
		ev := s.newEvents(p, ov)
		var b []byte
		for i := range ev.len() {
			b = ev.appendEvent(b, i)
		}
		b = ev.appendEnd(b)
		ev.done()
		return eventStream, b
	}
	b, err := json.Marshal(s.answerValue(p, ov))
	if err != nil { // cannot happen with the package's own types
		b = []byte(`{}`)
	}
	return "application/json", b
}

// answerType is the Content-Type of the answer to p.
func answerType(p job) string {
	if p.stream() {
		return eventStream
	}
	return "application/json"
}

const eventStream = "text/event-stream; charset=utf-8"

// events is the server-sent event stream answering one request.
type events interface {
	// len is the number of events.
	len() int
	// content reports whether event i carries generated content: each
	// such event waits the chunk delay, and drops count them.
	content(i int) bool
	// appendEvent appends event i, framed.
	appendEvent(dst []byte, i int) []byte
	// appendEnd appends what follows the last event ("data: [DONE]" in
	// the OpenAI completion APIs).
	appendEnd(dst []byte) []byte
	// done is called once the whole stream has been written.
	done()
}

// newEvents is the event stream answering p.
func (s *Server) newEvents(p job, ov overrides) events {
	switch p.ep {
	case endpointResponses:
		return s.newResponseEvents(p.resp, ov)
	case endpointMessages:
		return s.newMessageEvents(p.msg, ov)
	}
	return s.newSSE(p.gen, s.seq.Add(1), ov.chunks)
}

// cutAt is the index of the event before which a stream dropped after
// dropAfter content events is cut: the next content event, or the event
// after the last one.
func cutAt(ev events, dropAfter int) int {
	seen, after := 0, 0
	for i := range ev.len() {
		if !ev.content(i) {
			continue
		}
		if seen == dropAfter {
			return i
		}
		seen, after = seen+1, i+1
	}
	return after
}

// sse is the event stream answering one generation: the role chunk (chat
// only), n content chunks, the finish chunk and, when asked for, the usage
// chunk, then "data: [DONE]". A tool call has, after the role chunk, one
// chunk naming the function, and its content chunks are fragments of the
// arguments.
type sse struct {
	s     *Server
	g     generation
	base  completionResponse
	n     int
	call  toolCallDelta // the first tool_calls delta
	frags []string      // the fragments of the arguments
}

func (s *Server) newSSE(g generation, id int64, n int) *sse {
	base := completionResponse{Created: time.Now().Unix(), Model: s.opt.Model}
	if g.chat {
		base.ID, base.Object = "chatcmpl-"+strconv.FormatInt(id, 10), "chat.completion.chunk"
	} else {
		base.ID, base.Object = "cmpl-"+strconv.FormatInt(id, 10), "text_completion"
	}
	e := &sse{s: s, g: g, base: base, n: n}
	if g.call != nil {
		e.frags = g.call.fragments(n)
		e.n = len(e.frags)
		e.call = toolCallDelta{ID: "chatcmpl-tool-" + s.uid(), Type: "function", Function: functionDelta{Name: g.call.name}}
	}
	return e
}

// first is the index of the first content chunk.
func (e *sse) first() int {
	switch {
	case e.g.call != nil:
		return 2
	case e.g.chat:
		return 1
	}
	return 0
}

func (e *sse) len() int {
	if e.g.usage {
		return e.first() + e.n + 2
	}
	return e.first() + e.n + 1
}

func (e *sse) content(i int) bool { return i >= e.first() && i < e.first()+e.n }

func (e *sse) appendEvent(dst []byte, i int) []byte { return appendEvent(dst, e.event(i)) }

func (e *sse) appendEnd(dst []byte) []byte { return append(dst, "data: [DONE]\n\n"...) }

func (e *sse) done() {}

// event returns event i.
func (e *sse) event(i int) completionResponse {
	c := e.base
	stop := "stop"
	if e.g.call != nil {
		stop = "tool_calls"
	}
	switch k := i - e.first(); {
	case i == 0 && e.g.chat: // the role chunk
		empty := ""
		c.Choices = []any{chatChunkChoice{Delta: delta{Role: "assistant", Content: &empty}}}
	case k < 0: // the tool call's name
		c.Choices = []any{chatChunkChoice{Delta: delta{ToolCalls: []toolCallDelta{e.call}}}}
	case k < e.n && e.g.call != nil:
		c.Choices = []any{chatChunkChoice{Delta: delta{ToolCalls: []toolCallDelta{{Function: functionDelta{Arguments: e.frags[k]}}}}}}
	case k < e.n:
		text := e.s.piece(k, e.n)
		if e.g.chat {
			c.Choices = []any{chatChunkChoice{Delta: delta{Content: &text}}}
		} else {
			c.Choices = []any{textChoice{Text: text}}
		}
	case k == e.n:
		if e.g.chat {
			c.Choices = []any{chatFinishChoice{FinishReason: &stop}}
		} else {
			c.Choices = []any{textChoice{FinishReason: &stop}}
		}
	default:
		c.Choices = []any{}
		c.Usage = genUsage(e.g, e.n)
	}
	return c
}

// appendEvent appends event v in SSE framing.
func appendEvent(dst []byte, v any) []byte {
	dst = append(dst, "data: "...)
	if b, err := json.Marshal(v); err == nil {
		dst = append(dst, b...)
	}
	return append(dst, "\n\n"...)
}

// appendNamedEvent appends event v with its "event:" line, the framing of
// the Responses and Messages streams.
func appendNamedEvent(dst []byte, name string, v any) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, '\n')
	return appendEvent(dst, v)
}

// stream writes a server-sent event stream, flushing each event.
// dropAfter >= 0 aborts the connection after that many content events;
// fault counts the abort as a fault (die-mid-stream) rather than a drop.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, ev events, ov overrides, dropAfter int, fault bool) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", eventStream)
	h.Del("Content-Length")
	w.WriteHeader(http.StatusOK)

	cut := -1
	if dropAfter >= 0 {
		cut = cutAt(ev, dropAfter)
	}
	var buf []byte
	paced := 0
	send := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		_ = rc.Flush() // http.ErrNotSupported only for exotic writers
		return ctx.Err() == nil
	}
	for i := range ev.len() {
		if i == cut {
			break
		}
		if ev.content(i) && !s.pace(ctx, ov, &paced) {
			s.cancelled.Add(1)
			return
		}
		buf = ev.appendEvent(buf[:0], i)
		if !send(buf) {
			s.cancelled.Add(1)
			return
		}
	}
	if cut >= 0 {
		if fault {
			s.faults.Add(1)
		} else {
			s.dropped.Add(1)
		}
		// Abort the connection: the client sees the chunks flushed so far
		// and then a truncated chunked body (no terminating chunk).
		panic(http.ErrAbortHandler)
	}
	if end := ev.appendEnd(buf[:0]); len(end) > 0 && !send(end) {
		s.cancelled.Add(1)
		return
	}
	if ctx.Err() != nil {
		s.cancelled.Add(1)
		return
	}
	ev.done()
	s.completed.Add(1)
}

// pace waits before a content chunk: the chunk delay, or, with the
// performance model, the chunk's token (the first came before the head).
// It reports whether the client is still there.
func (s *Server) pace(ctx context.Context, ov overrides, n *int) bool {
	*n++
	if ov.seq == nil {
		return sleepCtx(ctx, ov.chunkDelay)
	}
	if *n == 1 {
		return ctx.Err() == nil
	}
	return ov.seq.next(ctx)
}

// ---- /v1/embeddings ----

// parseEmbeddings validates an embeddings request: its inputs, whether
// they are wanted in base64, and the model it names.
func parseEmbeddings(body []byte) (ins []any, b64 bool, model string, err error) {
	var req embeddingRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, false, "", fmt.Errorf("invalid JSON body: %v", err)
	}
	ins, err = inputs(req.Input, "input")
	if err != nil {
		return nil, false, req.Model, err
	}
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		b64 = true
	default:
		return nil, false, req.Model, fmt.Errorf("unsupported encoding_format %q: want \"float\" or \"base64\"", req.EncodingFormat)
	}
	return ins, b64, req.Model, nil
}

// embeddings is the answer to an embeddings request.
func (s *Server) embeddings(ins []any, b64 bool) embeddingResponse {
	resp := embeddingResponse{
		ID:      "embd-" + strconv.FormatInt(s.seq.Add(1), 10),
		Object:  "list",
		Created: time.Now().Unix(),
		Model:   s.opt.Model,
		Data:    make([]embeddingData, len(ins)),
	}
	for i, in := range ins {
		vec := embed(in, s.opt.EmbeddingDims)
		var e any = vec
		if b64 {
			raw := make([]byte, 4*len(vec))
			for j, f := range vec {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(f))
			}
			e = base64.StdEncoding.EncodeToString(raw)
		}
		resp.Data[i] = embeddingData{Object: "embedding", Index: i, Embedding: e}
		resp.Usage.PromptTokens += inputTokens(in)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	return resp
}

// embed returns a deterministic, L2-normalised vector derived from a hash
// of the input.
func embed(in any, dims int) []float32 {
	h := fnv.New64a()
	switch v := in.(type) {
	case string:
		h.Write([]byte{'s'})
		h.Write([]byte(v))
	case []int:
		h.Write([]byte{'t'})
		var b [8]byte
		for _, t := range v {
			binary.LittleEndian.PutUint64(b[:], uint64(t))
			h.Write(b[:])
		}
	}
	sum := h.Sum64()
	rng := rand.New(rand.NewPCG(sum, sum^0x6a09e667f3bcc909))
	raw := make([]float64, dims)
	var norm float64
	for i := range raw {
		raw[i] = rng.Float64()*2 - 1
		norm += raw[i] * raw[i]
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i, f := range raw {
		if norm == 0 {
			out[i] = float32(1 / math.Sqrt(float64(dims)))
			continue
		}
		out[i] = float32(f / norm)
	}
	return out
}
