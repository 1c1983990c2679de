package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ---- the Messages API, as api.anthropic.com serves it ----
//
// This is an implementation of the wire format of its own, with its own
// types: the gateway's translator is tested against it, so it must not
// share the translator's code.

// serveAnthropic routes a request in the anthropic API.
func (s *Server) serveAnthropic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Request-Id", "req_"+s.uid())
	switch r.URL.Path {
	case "/v1/messages":
		if s.allowMethod(w, r, http.MethodPost) {
			s.handlePost(w, r, endpointMessages)
		}
	case "/v1/models":
		if s.allowMethod(w, r, http.MethodGet, http.MethodHead) {
			writeJSON(w, http.StatusOK, anthropicModelList{
				Data:    []anthropicModel{{Type: "model", ID: s.opt.Model, DisplayName: s.opt.Model, CreatedAt: time.Unix(s.created, 0).UTC().Format(time.RFC3339)}},
				FirstID: s.opt.Model,
				LastID:  s.opt.Model,
			})
		}
	default:
		s.fail(w, http.StatusNotFound, "Not Found")
	}
}

// checkAnthropicHeaders checks the credentials (when Options.APIKey is
// set) and the presence of anthropic-version: any version is served the
// same. The key is taken from x-api-key or, failing that, from
// "Authorization: Bearer", where Anthropic's Go SDK (v2) sends it.
func (s *Server) checkAnthropicHeaders(h http.Header) *statusError {
	if s.opt.APIKey != "" {
		key := h.Get("X-Api-Key")
		if key == "" {
			key, _ = strings.CutPrefix(h.Get("Authorization"), "Bearer ")
		}
		switch {
		case key == "":
			return &statusError{status: http.StatusUnauthorized, msg: "x-api-key header is required"}
		case key != s.opt.APIKey:
			return &statusError{status: http.StatusUnauthorized, msg: "invalid x-api-key"}
		}
	}
	if h.Get("Anthropic-Version") == "" {
		return &statusError{status: http.StatusBadRequest, msg: "anthropic-version: header is required"}
	}
	return nil
}

// ---- errors ----

type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

// anthropicErrorType names the error type api.anthropic.com uses for a
// status: other 4xx are invalid_request_error, other 5xx api_error.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusConflict:
		return "conflict_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// writeAnthropicError answers status with Anthropic's error JSON; its
// request_id is the response's request-id header.
func writeAnthropicError(w http.ResponseWriter, status int, msg string) {
	e := anthropicError{Type: "error", RequestID: w.Header().Get("Request-Id")}
	e.Error.Type, e.Error.Message = anthropicErrorType(status), msg
	writeJSON(w, status, e)
}

// ---- requests ----

// messagesRequest is a validated POST /v1/messages.
type messagesRequest struct {
	stream      bool
	maxTokens   int
	stops       []string
	inputTokens int
	call        *call // the answer is this tool_use block instead of text
}

type messagesBody struct {
	Model         *string                       `json:"model"`
	MaxTokens     *int                          `json:"max_tokens"`
	Messages      *[]map[string]json.RawMessage `json:"messages"`
	System        json.RawMessage               `json:"system"`
	StopSequences []string                      `json:"stop_sequences"`
	Stream        bool                          `json:"stream"`
	Tools         json.RawMessage               `json:"tools"`
	ToolChoice    json.RawMessage               `json:"tool_choice"`
}

// contentBlockIn is the part of an input content block the simulator
// reads.
type contentBlockIn struct {
	Type    *string         `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"` // tool_result
}

// parseMessages validates a Messages request: model and max_tokens
// present, messages non-empty and alternating between user and assistant
// from user, content a string or blocks with a type, system a string or
// text blocks, tools with a name and an object input_schema, tool_choice
// auto, any, tool (naming a tool) or none.
func parseMessages(body []byte) (*messagesRequest, string, error) {
	var req messagesBody
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, "", fmt.Errorf("invalid JSON body: %v", err)
	}
	model := ""
	if req.Model != nil {
		model = *req.Model
	}
	switch {
	case req.Model == nil:
		return nil, "", fmt.Errorf("model: Field required")
	case model == "":
		return nil, "", fmt.Errorf("model: String should have at least 1 character")
	case req.MaxTokens == nil:
		return nil, model, fmt.Errorf("max_tokens: Field required")
	case *req.MaxTokens < 1:
		return nil, model, fmt.Errorf("max_tokens: Input should be greater than or equal to 1")
	case req.Messages == nil:
		return nil, model, fmt.Errorf("messages: Field required")
	case len(*req.Messages) == 0:
		return nil, model, fmt.Errorf("messages: at least one message is required")
	}
	rq := &messagesRequest{stream: req.Stream, maxTokens: *req.MaxTokens}

	words := 0
	msgs := *req.Messages
	prev := ""
	lastHasResult := false
	for i, m := range msgs {
		var role string
		_ = json.Unmarshal(m["role"], &role)
		switch {
		case role != "user" && role != "assistant":
			return nil, model, fmt.Errorf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		case i == 0 && role != "user":
			return nil, model, fmt.Errorf(`messages: first message must use the "user" role`)
		case role == prev:
			return nil, model, fmt.Errorf(`messages: roles must alternate between "user" and "assistant", but found multiple %q roles in a row`, role)
		}
		prev = role
		n, hasResult, err := blocksWords(m["content"], fmt.Sprintf("messages.%d.content", i))
		if err != nil {
			return nil, model, err
		}
		words += n
		lastHasResult = hasResult
	}
	if !isNull(req.System) {
		n, _, err := blocksWords(req.System, "system")
		if err != nil {
			return nil, model, err
		}
		words += n
	}
	for i, stop := range req.StopSequences {
		if strings.TrimSpace(stop) == "" {
			return nil, model, fmt.Errorf("stop_sequences.%d: each stop sequence must contain non-whitespace", i)
		}
	}
	rq.stops = req.StopSequences
	rq.inputTokens = max(1, words)

	tools, err := messagesTools(req.Tools)
	if err != nil {
		return nil, model, err
	}
	choice, named, err := messagesToolChoice(req.ToolChoice, tools)
	if err != nil {
		return nil, model, err
	}
	// A tool is called unless tool_choice says none, or the turn answers
	// tool results, or an assistant turn is being continued.
	if len(tools) > 0 && choice != "none" && prev == "user" && !lastHasResult {
		t := tools[0]
		for _, u := range tools {
			if u.name == named {
				t = u
				break
			}
		}
		rq.call = &call{name: t.name, args: arguments(t.schema)}
	}
	return rq, model, nil
}

// blocksWords counts the words of a content value: a non-empty string or
// an array of blocks, each with a type (text blocks and tool results
// count). It also reports whether a tool_result block is among them.
func blocksWords(raw json.RawMessage, field string) (words int, hasResult bool, err error) {
	if isNull(raw) {
		return 0, false, fmt.Errorf("%s: Field required", field)
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return len(strings.Fields(str)), false, nil
	}
	var blocks []contentBlockIn
	if json.Unmarshal(raw, &blocks) != nil {
		return 0, false, fmt.Errorf("%s: Input should be a valid string or a list of content blocks", field)
	}
	for j, b := range blocks {
		if b.Type == nil {
			return 0, false, fmt.Errorf("%s.%d.type: Field required", field, j)
		}
		switch *b.Type {
		case "text":
			words += len(strings.Fields(b.Text))
		case "tool_result":
			hasResult = true
			if !isNull(b.Content) {
				n, _, err := blocksWords(b.Content, fmt.Sprintf("%s.%d.content", field, j))
				if err != nil {
					return 0, false, err
				}
				words += n
			}
		}
	}
	return words, hasResult, nil
}

// anthropicTool is a client tool the simulator can call.
type anthropicTool struct {
	name   string
	schema json.RawMessage
}

// messagesTools validates tools and returns the client (custom) tools;
// server tools (with another type) are accepted and never called.
func messagesTools(raw json.RawMessage) ([]anthropicTool, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, fmt.Errorf("tools: Input should be a valid list")
	}
	var tools []anthropicTool
	seen := map[string]bool{}
	for i, t := range items {
		var typ, name string
		_ = json.Unmarshal(t["type"], &typ)
		if json.Unmarshal(t["name"], &name) != nil || name == "" {
			return nil, fmt.Errorf("tools.%d.name: Field required", i)
		}
		if seen[name] {
			return nil, fmt.Errorf("tools: Tool names must be unique.")
		}
		seen[name] = true
		if typ != "" && typ != "custom" {
			continue
		}
		schema := t["input_schema"]
		if isNull(schema) {
			return nil, fmt.Errorf("tools.%d.input_schema: Field required", i)
		}
		var s struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(schema, &s) != nil || s.Type != "object" {
			return nil, fmt.Errorf("tools.%d.input_schema.type: Input should be 'object'", i)
		}
		tools = append(tools, anthropicTool{name: name, schema: schema})
	}
	return tools, nil
}

// messagesToolChoice validates tool_choice and returns its type ("auto"
// when absent) and, for type tool, the tool it names.
func messagesToolChoice(raw json.RawMessage, tools []anthropicTool) (typ, name string, err error) {
	if isNull(raw) {
		return "auto", "", nil
	}
	var c struct {
		Type string  `json:"type"`
		Name *string `json:"name"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return "", "", fmt.Errorf("tool_choice: Input should be a valid dictionary")
	}
	switch c.Type {
	case "auto", "none":
		return c.Type, "", nil
	case "any":
		if len(tools) == 0 {
			return "", "", fmt.Errorf("tool_choice: tool_choice of type 'any' requires tools")
		}
		return c.Type, "", nil
	case "tool":
		if c.Name == nil {
			return "", "", fmt.Errorf("tool_choice.tool.name: Field required")
		}
		for _, t := range tools {
			if t.name == *c.Name {
				return c.Type, t.name, nil
			}
		}
		return "", "", fmt.Errorf("tool_choice: tool %q not found in tools", *c.Name)
	}
	return "", "", fmt.Errorf("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
}

// ---- wire types (field order follows api.anthropic.com's) ----

type anthropicMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []contentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

// contentBlock is a text or a tool_use block.
type contentBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

type anthropicModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

type anthropicModelList struct {
	Data    []anthropicModel `json:"data"`
	HasMore bool             `json:"has_more"`
	FirstID string           `json:"first_id"`
	LastID  string           `json:"last_id"`
}

// Streamed events.

type messageStartEvent struct {
	Type    string           `json:"type"`
	Message anthropicMessage `json:"message"`
}

type blockStartEvent struct {
	Type         string       `json:"type"`
	Index        int          `json:"index"`
	ContentBlock contentBlock `json:"content_block"`
}

type blockDelta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

type blockDeltaEvent struct {
	Type  string     `json:"type"`
	Index int        `json:"index"`
	Delta blockDelta `json:"delta"`
}

type blockStopEvent struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

type messageDeltaEvent struct {
	Type  string `json:"type"`
	Delta struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage struct {
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

type typeOnlyEvent struct {
	Type string `json:"type"`
}

// ---- answers ----

// answer is what answers a Messages request: its content pieces (words of
// text, or fragments of a tool call's input) and why it stopped.
type answer struct {
	pieces       []string
	call         *call
	callID       string
	stopReason   string
	stopSequence *string
}

// outputTokens counts the pieces, at least 1 as Anthropic counts.
func (a *answer) outputTokens() int { return max(1, len(a.pieces)) }

// block is the whole content block of the answer.
func (a *answer) block() contentBlock {
	if a.call != nil {
		return contentBlock{Type: "tool_use", ID: a.callID, Name: a.call.name, Input: json.RawMessage(a.call.args)}
	}
	text := strings.Join(a.pieces, "")
	return contentBlock{Type: "text", Text: &text}
}

// newAnswer decides the answer to rq with the chunk count: the tool call,
// or the text, cut at max_tokens words and before the first stop
// sequence it holds.
func (s *Server) newAnswer(rq *messagesRequest, chunks int) *answer {
	if rq.call != nil {
		return &answer{pieces: rq.call.fragments(chunks), call: rq.call, callID: "toolu_" + s.uid(), stopReason: "tool_use"}
	}
	a := &answer{stopReason: "end_turn"}
	n := chunks
	if rq.maxTokens < n {
		n, a.stopReason = rq.maxTokens, "max_tokens"
	}
	for k := range n {
		a.pieces = append(a.pieces, s.piece(k, n))
	}
	cut := -1
	for _, stop := range rq.stops {
		if i := strings.Index(strings.Join(a.pieces, ""), stop); i >= 0 && (cut < 0 || i < cut) {
			cut, a.stopSequence = i, &stop
		}
	}
	if cut >= 0 {
		a.stopReason = "stop_sequence"
		var kept []string
		for _, p := range a.pieces {
			if cut <= 0 {
				break
			}
			if len(p) > cut {
				p = p[:cut]
			}
			kept, cut = append(kept, p), cut-len(p)
		}
		a.pieces = kept
	}
	return a
}

func (s *Server) newMessage(rq *messagesRequest, id string) anthropicMessage {
	return anthropicMessage{
		ID:      "msg_" + id,
		Type:    "message",
		Role:    "assistant",
		Model:   s.opt.Model,
		Content: []contentBlock{},
		Usage:   anthropicUsage{InputTokens: rq.inputTokens},
	}
}

// message is the answer to rq that is not streamed.
func (s *Server) message(rq *messagesRequest, ov overrides) anthropicMessage {
	a := s.newAnswer(rq, ov.chunks)
	m := s.newMessage(rq, s.uid())
	m.Content = []contentBlock{a.block()}
	m.StopReason, m.StopSequence = &a.stopReason, a.stopSequence
	m.Usage.OutputTokens = a.outputTokens()
	return m
}

// messageWithText is a message answering rq with text.
func (s *Server) messageWithText(rq *messagesRequest, text, id string, n int) anthropicMessage {
	m := s.newMessage(rq, id)
	end := "end_turn"
	m.Content = []contentBlock{{Type: "text", Text: &text}}
	m.StopReason = &end
	m.Usage.OutputTokens = n
	return m
}

// messageEvents is the event stream answering one Messages request:
// message_start, content_block_start, ping, a content_block_delta per
// piece, content_block_stop, message_delta and message_stop.
type messageEvents struct {
	start anthropicMessage
	a     *answer
}

// The events before the first delta.
const messagePreamble = 3

func (s *Server) newMessageEvents(rq *messagesRequest, ov overrides) *messageEvents {
	start := s.newMessage(rq, s.uid())
	start.Usage.OutputTokens = 1
	return &messageEvents{start: start, a: s.newAnswer(rq, ov.chunks)}
}

func (e *messageEvents) len() int { return messagePreamble + len(e.a.pieces) + 3 }

func (e *messageEvents) content(i int) bool {
	return i >= messagePreamble && i < messagePreamble+len(e.a.pieces)
}

func (e *messageEvents) appendEvent(dst []byte, i int) []byte {
	n := len(e.a.pieces)
	switch k := i - messagePreamble; {
	case i == 0:
		return appendNamedEvent(dst, "message_start", messageStartEvent{Type: "message_start", Message: e.start})
	case i == 1:
		// The block as it starts: no text, or the tool's empty input.
		b := e.a.block()
		if e.a.call != nil {
			b.Input = json.RawMessage(`{}`)
		} else {
			empty := ""
			b.Text = &empty
		}
		return appendNamedEvent(dst, "content_block_start", blockStartEvent{Type: "content_block_start", ContentBlock: b})
	case i == 2:
		return appendNamedEvent(dst, "ping", typeOnlyEvent{Type: "ping"})
	case k < n:
		d := blockDelta{Type: "text_delta", Text: &e.a.pieces[k]}
		if e.a.call != nil {
			d = blockDelta{Type: "input_json_delta", PartialJSON: &e.a.pieces[k]}
		}
		return appendNamedEvent(dst, "content_block_delta", blockDeltaEvent{Type: "content_block_delta", Delta: d})
	case k == n:
		return appendNamedEvent(dst, "content_block_stop", blockStopEvent{Type: "content_block_stop"})
	case k == n+1:
		ev := messageDeltaEvent{Type: "message_delta"}
		ev.Delta.StopReason, ev.Delta.StopSequence = &e.a.stopReason, e.a.stopSequence
		ev.Usage.OutputTokens = e.a.outputTokens()
		return appendNamedEvent(dst, "message_delta", ev)
	}
	return appendNamedEvent(dst, "message_stop", typeOnlyEvent{Type: "message_stop"})
}

func (e *messageEvents) appendEnd(dst []byte) []byte { return dst }

func (e *messageEvents) done() {}
