package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ---- the Responses API, as vLLM serves it ----

// maxStoredResponses bounds the responses kept for GET, DELETE and
// previous_response_id; the oldest goes first. vLLM's store is unbounded,
// which a long benchmark cannot afford.
const maxStoredResponses = 1024

// responsesRequest is a validated POST /v1/responses.
type responsesRequest struct {
	stream       bool
	store        bool
	maxOutput    int // 0: not set
	inputTokens  int // the input's words, the previous response's tokens included
	instructions *string
	previousID   *string
	metadata     json.RawMessage
	temperature  float64
	topP         float64
	tools        json.RawMessage
	toolChoice   json.RawMessage
	parallel     bool
	text         json.RawMessage
	user         *string
}

type responsesBody struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	Stream             bool            `json:"stream"`
	Background         bool            `json:"background"`
	Metadata           json.RawMessage `json:"metadata"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Text               json.RawMessage `json:"text"`
	User               *string         `json:"user"`
}

// parseResponses validates a Responses request. A previous_response_id
// this replica does not hold is vLLM's 404; one it holds adds that
// conversation's tokens to the input, as vLLM prepends it.
func (s *Server) parseResponses(body []byte) (*responsesRequest, string, error) {
	var req responsesBody
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, "", fmt.Errorf("invalid JSON body: %v", err)
	}
	words, err := responseInputWords(req.Input)
	if err != nil {
		return nil, req.Model, err
	}
	if req.Instructions != nil {
		words += len(strings.Fields(*req.Instructions))
	}
	rq := &responsesRequest{
		stream:       req.Stream,
		store:        req.Store == nil || *req.Store,
		instructions: req.Instructions,
		previousID:   req.PreviousResponseID,
		metadata:     req.Metadata,
		temperature:  1,
		topP:         1,
		tools:        req.Tools,
		toolChoice:   req.ToolChoice,
		parallel:     req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		text:         req.Text,
		user:         req.User,
	}
	switch {
	case req.Background && !rq.store:
		return nil, req.Model, fmt.Errorf("background can only be used when `store` is true")
	case req.Background:
		return nil, req.Model, fmt.Errorf("background responses are not simulated")
	case req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1:
		return nil, req.Model, fmt.Errorf("max_output_tokens must be at least 1, got %d", *req.MaxOutputTokens)
	case !isNull(req.Tools) && jsonKind(req.Tools) != '[':
		return nil, req.Model, fmt.Errorf("tools: Input should be a valid list")
	}
	if req.MaxOutputTokens != nil {
		rq.maxOutput = *req.MaxOutputTokens
	}
	if req.Temperature != nil {
		rq.temperature = *req.Temperature
	}
	if req.TopP != nil {
		rq.topP = *req.TopP
	}
	if isNull(rq.tools) {
		rq.tools = json.RawMessage(`[]`)
	}
	if isNull(rq.toolChoice) {
		rq.toolChoice = json.RawMessage(`"auto"`)
	}
	if id := rq.previousID; id != nil {
		prev := s.responses.get(*id)
		if prev == nil {
			return nil, req.Model, responseNotFound(*id)
		}
		words += prev.Usage.TotalTokens
	}
	rq.inputTokens = max(1, words)
	return rq, req.Model, nil
}

// responseNotFound is vLLM's answer to an id it does not hold.
func responseNotFound(id string) *statusError {
	return &statusError{
		status: http.StatusNotFound,
		msg:    fmt.Sprintf("Response with id '%s' not found.", id),
		typ:    "invalid_request_error",
		param:  "response_id",
	}
}

// responseInputWords counts the words of a Responses input: a string, or
// an array of items (messages whose content is a string or input_text /
// output_text parts, function calls and their outputs, reasoning items and
// item references).
func responseInputWords(raw json.RawMessage) (int, error) {
	if isNull(raw) {
		return 0, fmt.Errorf("field `input` is required")
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return len(strings.Fields(str)), nil
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return 0, fmt.Errorf("field `input` must be a string or an array of input items")
	}
	words := 0
	for i, item := range items {
		var typ, role string
		_ = json.Unmarshal(item["type"], &typ)
		_ = json.Unmarshal(item["role"], &role)
		if typ == "" && role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			switch role {
			case "user", "assistant", "system", "developer":
			default:
				return 0, fmt.Errorf("input.%d.role: Input should be 'user', 'assistant', 'system' or 'developer'", i)
			}
			text, err := partsText(item["content"])
			if err != nil {
				return 0, fmt.Errorf("input.%d.content: %v", i, err)
			}
			words += len(strings.Fields(text))
		case "function_call":
			var args string
			_ = json.Unmarshal(item["arguments"], &args)
			words += len(strings.Fields(args))
		case "function_call_output":
			text, err := partsText(item["output"])
			if err != nil {
				return 0, fmt.Errorf("input.%d.output: %v", i, err)
			}
			words += len(strings.Fields(text))
		case "reasoning", "item_reference":
		default:
			return 0, fmt.Errorf("input.%d: unsupported input item type %q", i, typ)
		}
	}
	return words, nil
}

// partsText is the text of a Responses content value: a string, or an
// array of parts whose "text" fields are used.
func partsText(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", fmt.Errorf("Field required")
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", fmt.Errorf("must be a string or an array of content parts")
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "refusal", "input_image", "input_file", "input_audio":
		default:
			return "", fmt.Errorf("%d: unsupported content part type %q", j, p.Type)
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, " "), nil
}

// ---- wire types (field order follows vLLM's ResponsesResponse) ----

type responseObject struct {
	ID                 string             `json:"id"`
	CreatedAt          int64              `json:"created_at"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	Metadata           json.RawMessage    `json:"metadata"`
	Model              string             `json:"model"`
	Object             string             `json:"object"`
	Output             []outputMessage    `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	Temperature        float64            `json:"temperature"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              json.RawMessage    `json:"tools"`
	TopP               float64            `json:"top_p"`
	Background         bool               `json:"background"`
	MaxOutputTokens    int                `json:"max_output_tokens"`
	MaxToolCalls       *int               `json:"max_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Prompt             *struct{}          `json:"prompt"`
	Reasoning          *struct{}          `json:"reasoning"`
	ServiceTier        string             `json:"service_tier"`
	Status             string             `json:"status"`
	Text               json.RawMessage    `json:"text"`
	TopLogprobs        int                `json:"top_logprobs"`
	Truncation         string             `json:"truncation"`
	Usage              *responseUsage     `json:"usage"`
	User               *string            `json:"user"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type outputMessage struct {
	ID      string       `json:"id"`
	Content []outputText `json:"content"`
	Role    string       `json:"role"`
	Status  string       `json:"status"`
	Type    string       `json:"type"`
}

type outputText struct {
	Annotations []struct{}  `json:"annotations"`
	Text        string      `json:"text"`
	Type        string      `json:"type"`
	Logprobs    *[]struct{} `json:"logprobs"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type deletedResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// Streamed events. Every one starts with its type and its number in the
// stream.

type eventHead struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
}

type responseLifecycleEvent struct {
	eventHead
	Response *responseObject `json:"response"`
}

type outputItemEvent struct {
	eventHead
	OutputIndex int           `json:"output_index"`
	Item        outputMessage `json:"item"`
}

type contentPartEvent struct {
	eventHead
	ItemID       string     `json:"item_id"`
	OutputIndex  int        `json:"output_index"`
	ContentIndex int        `json:"content_index"`
	Part         outputText `json:"part"`
}

type textDeltaEvent struct {
	eventHead
	ItemID       string     `json:"item_id"`
	OutputIndex  int        `json:"output_index"`
	ContentIndex int        `json:"content_index"`
	Delta        string     `json:"delta"`
	Logprobs     []struct{} `json:"logprobs"`
}

type textDoneEvent struct {
	eventHead
	ItemID       string     `json:"item_id"`
	OutputIndex  int        `json:"output_index"`
	ContentIndex int        `json:"content_index"`
	Text         string     `json:"text"`
	Logprobs     []struct{} `json:"logprobs"`
}

// ---- answers ----

// newResponse is the completed response to rq saying text in n tokens
// (words), with the ids given.
func (s *Server) newResponse(rq *responsesRequest, id, msgID, text string, n int, incomplete bool) *responseObject {
	maxOut := rq.maxOutput
	if maxOut == 0 {
		maxOut = max(1, maxModelLen-rq.inputTokens)
	}
	r := &responseObject{
		ID:                 "resp_" + id,
		CreatedAt:          time.Now().Unix(),
		Instructions:       rq.instructions,
		Metadata:           rq.metadata,
		Model:              s.opt.Model,
		Object:             "response",
		Output:             []outputMessage{{ID: "msg_" + msgID, Content: []outputText{newOutputText(text)}, Role: "assistant", Status: "completed", Type: "message"}},
		ParallelToolCalls:  rq.parallel,
		Temperature:        rq.temperature,
		ToolChoice:         rq.toolChoice,
		Tools:              rq.tools,
		TopP:               rq.topP,
		MaxOutputTokens:    maxOut,
		PreviousResponseID: rq.previousID,
		ServiceTier:        "auto",
		Status:             "completed",
		Text:               rq.text,
		Truncation:         "disabled",
		Usage:              &responseUsage{InputTokens: rq.inputTokens, OutputTokens: n, TotalTokens: rq.inputTokens + n},
		User:               rq.user,
	}
	if incomplete {
		r.Status = "incomplete"
		r.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	}
	return r
}

func newOutputText(text string) outputText {
	return outputText{Annotations: []struct{}{}, Text: text, Type: "output_text"}
}

// words is how many words answer rq given the chunk count: all of them,
// or max_output_tokens when that is fewer (the response is then
// incomplete).
func (rq *responsesRequest) words(chunks int) (n int, incomplete bool) {
	if rq.maxOutput > 0 && rq.maxOutput < chunks {
		return rq.maxOutput, true
	}
	return chunks, false
}

// response is the answer to rq that is not streamed; it is stored unless
// rq says store false.
func (s *Server) response(rq *responsesRequest, ov overrides) *responseObject {
	n, incomplete := rq.words(ov.chunks)
	r := s.newResponse(rq, s.uid(), s.uid(), s.content(n), n, incomplete)
	if rq.store {
		s.responses.put(r)
	}
	return r
}

// responseWithText is a response to rq saying text, never stored.
func (s *Server) responseWithText(rq *responsesRequest, text, id string, n int) *responseObject {
	return s.newResponse(rq, id, id, text, n, false)
}

// responseEvents is the event stream answering one Responses request:
// response.created, response.in_progress, response.output_item.added,
// response.content_part.added, one response.output_text.delta per word,
// response.output_text.done, response.content_part.done,
// response.output_item.done and response.completed, numbered from 0.
type responseEvents struct {
	s     *Server
	rq    *responsesRequest
	final *responseObject // the response as response.completed carries it
	n     int
}

// The events before the first delta.
const responsePreamble = 4

func (s *Server) newResponseEvents(rq *responsesRequest, ov overrides) *responseEvents {
	n, incomplete := rq.words(ov.chunks)
	final := s.newResponse(rq, s.uid(), s.uid(), s.content(n), n, incomplete)
	return &responseEvents{s: s, rq: rq, final: final, n: n}
}

func (e *responseEvents) len() int { return responsePreamble + e.n + 4 }

func (e *responseEvents) content(i int) bool {
	return i >= responsePreamble && i < responsePreamble+e.n
}

func (e *responseEvents) appendEvent(dst []byte, i int) []byte {
	msg := e.final.Output[0]
	h := eventHead{SequenceNumber: i}
	var v any
	switch k := i - responsePreamble; {
	case i == 0 || i == 1:
		// The response as it starts: in progress, no output, no usage.
		start := *e.final
		start.Status, start.IncompleteDetails, start.Output, start.Usage = "in_progress", nil, []outputMessage{}, nil
		h.Type = "response.created"
		if i == 1 {
			h.Type = "response.in_progress"
		}
		v = responseLifecycleEvent{h, &start}
	case i == 2:
		item := msg
		item.Content, item.Status = []outputText{}, "in_progress"
		h.Type = "response.output_item.added"
		v = outputItemEvent{eventHead: h, Item: item}
	case i == 3:
		h.Type = "response.content_part.added"
		v = contentPartEvent{eventHead: h, ItemID: msg.ID, Part: newOutputText("")}
	case k < e.n:
		h.Type = "response.output_text.delta"
		v = textDeltaEvent{eventHead: h, ItemID: msg.ID, Delta: e.s.piece(k, e.n), Logprobs: []struct{}{}}
	case k == e.n:
		h.Type = "response.output_text.done"
		v = textDoneEvent{eventHead: h, ItemID: msg.ID, Text: msg.Content[0].Text, Logprobs: []struct{}{}}
	case k == e.n+1:
		h.Type = "response.content_part.done"
		v = contentPartEvent{eventHead: h, ItemID: msg.ID, Part: msg.Content[0]}
	case k == e.n+2:
		h.Type = "response.output_item.done"
		v = outputItemEvent{eventHead: h, Item: msg}
	default:
		h.Type = "response.completed"
		v = responseLifecycleEvent{h, e.final}
	}
	return appendNamedEvent(dst, h.Type, v)
}

func (e *responseEvents) appendEnd(dst []byte) []byte { return dst }

// done stores the response once the client has had all of it, as vLLM
// stores a streamed response when it completes.
func (e *responseEvents) done() {
	if e.rq.store {
		e.s.responses.put(e.final)
	}
}

// ---- GET and DELETE /v1/responses/{id} ----

// handleStoredResponse answers GET (the stored response) and DELETE (its
// removal) of a response id. These are not POSTs: they are not counted,
// recorded, delayed or failed by the X-Sim-* headers.
func (s *Server) handleStoredResponse(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method == http.MethodDelete {
		if !s.responses.delete(id) {
			writeStatusError(w, responseNotFound(id))
			return
		}
		writeJSON(w, http.StatusOK, deletedResponse{ID: id, Object: "response.deleted", Deleted: true})
		return
	}
	resp := s.responses.get(id)
	if resp == nil {
		writeStatusError(w, responseNotFound(id))
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// ---- the store ----

// responseStore keeps the stored responses, at most maxStoredResponses.
type responseStore struct {
	mu    sync.Mutex
	byID  map[string]*responseObject
	order []string // ids oldest first; deleted ones linger until evicted or compacted
}

func (st *responseStore) put(r *responseObject) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.byID == nil {
		st.byID = make(map[string]*responseObject)
	}
	st.byID[r.ID] = r
	st.order = append(st.order, r.ID)
	for len(st.byID) > maxStoredResponses {
		delete(st.byID, st.order[0])
		st.order = st.order[1:]
	}
	if len(st.order) > 2*maxStoredResponses {
		live := make([]string, 0, len(st.byID))
		for _, id := range st.order {
			if _, ok := st.byID[id]; ok {
				live = append(live, id)
			}
		}
		st.order = live
	}
}

// get returns the stored response id, nil when there is none. Stored
// responses are never modified.
func (st *responseStore) get(id string) *responseObject {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.byID[id]
}

func (st *responseStore) delete(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, ok := st.byID[id]
	delete(st.byID, id)
	return ok
}
