package sim

import (
	"bytes"
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
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type assistantMessage struct {
	Role      string     `json:"role"`
	Content   string     `json:"content"`
	ToolCalls []struct{} `json:"tool_calls"`
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
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
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
	Stream bool `json:"stream"`
}

type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	Stream bool            `json:"stream"`
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
	promptTokens int
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
		}
		g.stream, g.promptTokens = req.Stream, max(1, words)
		return g, req.Model, nil
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
	}
	g.stream = req.Stream
	return g, req.Model, nil
}

func (s *Server) serveGeneration(w http.ResponseWriter, r *http.Request, ep endpoint, body []byte, ov overrides) {
	g, model, err := parseGeneration(ep, body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.checkModel(w, model) {
		return
	}
	dropAfter := ov.dropAfter
	if g.stream && dropAfter < 0 && s.chance(s.opt.DropRate) {
		dropAfter = ov.chunks / 2
	}
	if !sleepCtx(r.Context(), ov.latency) {
		s.cancelled.Add(1)
		return
	}
	id := s.seq.Add(1)
	if g.stream {
		s.stream(w, r, g, id, ov, dropAfter)
		return
	}

	n := ov.chunks
	resp := completionResponse{
		Created: time.Now().Unix(),
		Model:   s.opt.Model,
		Usage:   &usage{PromptTokens: g.promptTokens, CompletionTokens: n, TotalTokens: g.promptTokens + n},
	}
	if g.chat {
		resp.ID, resp.Object = "chatcmpl-"+strconv.FormatInt(id, 10), "chat.completion"
		resp.Choices = []chatChoice{{
			Message:      assistantMessage{Role: "assistant", Content: s.content(n), ToolCalls: []struct{}{}},
			FinishReason: "stop",
		}}
	} else {
		stop := "stop"
		resp.ID, resp.Object = "cmpl-"+strconv.FormatInt(id, 10), "text_completion"
		resp.Choices = []textChoice{{Text: s.content(n), FinishReason: &stop}}
	}
	if err := writeJSON(w, http.StatusOK, resp); err != nil || r.Context().Err() != nil {
		s.cancelled.Add(1)
		return
	}
	s.completed.Add(1)
}

// stream writes a server-sent event stream like vLLM's. dropAfter >= 0
// aborts the connection after that many content chunks.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, g generation, id int64, ov overrides, dropAfter int) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Del("Content-Length")
	w.WriteHeader(http.StatusOK)

	base := completionResponse{Created: time.Now().Unix(), Model: s.opt.Model}
	if g.chat {
		base.ID, base.Object = "chatcmpl-"+strconv.FormatInt(id, 10), "chat.completion.chunk"
	} else {
		base.ID, base.Object = "cmpl-"+strconv.FormatInt(id, 10), "text_completion"
	}
	var buf bytes.Buffer
	send := func(v any) bool {
		buf.Reset()
		buf.WriteString("data: ")
		if b, err := json.Marshal(v); err == nil {
			buf.Write(b)
		}
		buf.WriteString("\n\n")
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		_ = rc.Flush() // http.ErrNotSupported only for exotic writers
		return ctx.Err() == nil
	}
	chunk := func(choice any) completionResponse {
		c := base
		c.Choices = []any{choice}
		return c
	}
	cancelled := func() { s.cancelled.Add(1) }

	if g.chat {
		empty := ""
		if !send(chunk(chatChunkChoice{Delta: delta{Role: "assistant", Content: &empty}})) {
			cancelled()
			return
		}
	}
	n := ov.chunks
	for i := range n {
		if dropAfter >= 0 && i >= dropAfter {
			break
		}
		if !sleepCtx(ctx, ov.chunkDelay) {
			cancelled()
			return
		}
		text := s.piece(i, n)
		var c completionResponse
		if g.chat {
			c = chunk(chatChunkChoice{Delta: delta{Content: &text}})
		} else {
			c = chunk(textChoice{Text: text})
		}
		if !send(c) {
			cancelled()
			return
		}
	}
	if dropAfter >= 0 {
		s.dropped.Add(1)
		// Abort the connection: the client sees the chunks flushed so far
		// and then a truncated chunked body (no terminating chunk).
		panic(http.ErrAbortHandler)
	}

	stop := "stop"
	var fin completionResponse
	if g.chat {
		fin = chunk(chatFinishChoice{FinishReason: &stop})
	} else {
		fin = chunk(textChoice{FinishReason: &stop})
	}
	u := base
	u.Choices = []any{}
	u.Usage = &usage{PromptTokens: g.promptTokens, CompletionTokens: n, TotalTokens: g.promptTokens + n}
	if !send(fin) || !send(u) {
		cancelled()
		return
	}
	if _, err := w.Write([]byte("data: [DONE]\n\n")); err != nil {
		cancelled()
		return
	}
	_ = rc.Flush()
	if ctx.Err() != nil {
		cancelled()
		return
	}
	s.completed.Add(1)
}

// ---- /v1/embeddings ----

func (s *Server) serveEmbeddings(w http.ResponseWriter, r *http.Request, body []byte, ov overrides) {
	var req embeddingRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid JSON body: %v", err))
		return
	}
	ins, err := inputs(req.Input, "input")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	b64 := false
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		b64 = true
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unsupported encoding_format %q: want \"float\" or \"base64\"", req.EncodingFormat))
		return
	}
	if !s.checkModel(w, req.Model) {
		return
	}
	if !sleepCtx(r.Context(), ov.latency) {
		s.cancelled.Add(1)
		return
	}
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
	if err := writeJSON(w, http.StatusOK, resp); err != nil || r.Context().Err() != nil {
		s.cancelled.Add(1)
		return
	}
	s.completed.Add(1)
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
