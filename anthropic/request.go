package anthropic

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/triagegw/triage/internal/jsonscan"
)

// The request as Anthropic defines it (the tags name the wire fields that
// decodeRequest reads). Fields whose shape varies (a string
// or an array of blocks) stay raw until their turn comes, except message
// content, which decodeRequest reads in its one pass.
type msgRequest struct {
	Model         string          `json:"model"`
	MaxTokens     json.RawMessage `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []msgMessage    `json:"messages"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int64          `json:"top_k"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	Tools      []msgTool      `json:"tools"`
	ToolChoice *msgToolChoice `json:"tool_choice"`
	// Thinking: the thinking field asks for extended thinking (any type
	// but "disabled").
	Thinking bool `json:"-"`
	// MCP: mcp_servers names servers for Anthropic's MCP connector.
	MCP bool `json:"-"`
}

type msgMessage struct {
	Role   string `json:"role"`
	Kind   byte   // content: one of the content constants
	Text   string // content as a string
	Blocks []msgBlock
}

// What a message's content was.
const (
	contentAbsent = iota // missing or null
	contentString
	contentBlocks
	contentBad // neither a string nor an array
)

// msgBlock is every content block type in one struct: decoding into a
// union is cheaper than decoding twice, and the Type says which fields
// matter.
type msgBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Source    *msgSource      `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type msgSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

type msgTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type msgToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// Asks is what a Messages request asks that not every chat-completions
// pool can serve as asked; Check weighs it against the pool a request is
// routed to.
type Asks uint8

const (
	// AsksThinking: extended thinking (the thinking field, any type but
	// disabled). Chat completions has no request field for it.
	AsksThinking Asks = 1 << iota
	// AsksTopK: top_k. vLLM takes it; OpenAI's API refuses it.
	AsksTopK
	// AsksPrefill: a final assistant message, which Messages continues.
	// vLLM continues it too (continue_final_message, which ToChat sends);
	// OpenAI's API answers it anew.
	AsksPrefill
	// AsksStopSequences: stop_sequences. vLLM says which one stopped it,
	// so the answer's stop_reason is stop_sequence and names it; OpenAI's
	// API does not, and the answer would say end_turn.
	AsksStopSequences
	// AsksServerTools: a server tool (a tools entry whose type is not
	// custom: web search, code execution and the like) or mcp_servers,
	// which Anthropic runs on its side; ToChat leaves them out.
	AsksServerTools
)

// Check is the refusal, a 400 naming the field, of the first thing a asks
// that a pool cannot serve as asked: vllm says whether the pool is vLLM
// (else an OpenAI-compatible server), drop whether the pool opts into
// dropping what has no equivalent there (thinking, top_k) and into a
// stop_reason of end_turn where a stop sequence matched. A prefill an
// OpenAI-compatible pool cannot continue, and a server tool, are refused
// even so: dropping them would answer another question. Nil: the pool
// serves the request.
func (a Asks) Check(vllm, drop bool) *Error {
	const opt = "; set drop_unsupported on the pool to send it without, or route the request to a kind: anthropic pool"
	switch {
	case a&AsksServerTools != 0:
		return invalid("tools: a server tool (a type other than custom) or mcp_servers runs on Anthropic's side, which a chat-completions pool lacks; route the request to a kind: anthropic pool")
	case a&AsksPrefill != 0 && !vllm:
		return invalid("messages: the last message is an assistant turn to continue (a prefill), which an OpenAI-compatible pool answers anew instead; route it to a kind: vllm or anthropic pool")
	case drop:
		return nil
	case a&AsksThinking != 0:
		return invalid("thinking: extended thinking has no chat-completions equivalent" + opt)
	case a&AsksTopK != 0 && !vllm:
		return invalid("top_k: an OpenAI-compatible pool does not accept it" + opt)
	case a&AsksStopSequences != 0 && !vllm:
		return invalid("stop_sequences: an OpenAI-compatible pool does not say which sequence stopped it, so stop_reason could not be stop_sequence; set drop_unsupported on the pool to accept end_turn instead, or route the request to a kind: vllm or anthropic pool")
	}
	return nil
}

// ToChat translates an Anthropic Messages request body into an OpenAI
// chat-completions request body. model, when not empty, replaces the
// request's model (the router names the pool's model). Errors are 400s in
// Anthropic's shape naming the offending field.
//
// Translation needs the whole body (every message is rewritten), so this
// decodes it fully, unlike the span extraction of package openai (see
// decode.go for why not with encoding/json); the output is appended by
// hand.
//
// The body is for vLLM: top_k is sent, and a final assistant message is
// sent with continue_final_message (and add_generation_prompt off) so the
// model continues it as Messages does. ToChatAsks also says what the
// request asks that other pools may not serve.
func ToChat(body []byte, model string) ([]byte, *Error) {
	out, _, e := ToChatAsks(body, model, 0)
	return out, e
}

// ToChatAsks is ToChat, also saying what the request asks (Asks.Check),
// and leaving out of the body what omit names of AsksTopK and
// AsksPrefill's continue_final_message, for a pool that drops them.
func ToChatAsks(body []byte, model string, omit Asks) ([]byte, Asks, *Error) {
	var req msgRequest
	if e := decodeRequest(body, &req); e != nil {
		return nil, 0, e
	}
	out, serverTools, e := toChat(&req, body, model, omit)
	if e != nil {
		return nil, 0, e
	}
	var asks Asks
	if serverTools || req.MCP {
		asks |= AsksServerTools
	}
	if req.Thinking {
		asks |= AsksThinking
	}
	if req.TopK != nil {
		asks |= AsksTopK
	}
	if req.Messages[len(req.Messages)-1].Role == "assistant" {
		asks |= AsksPrefill
	}
	if len(req.StopSequences) > 0 {
		asks |= AsksStopSequences
	}
	return out, asks, nil
}

// toChat writes req's chat body; serverTools says whether it left server
// tools out.
func toChat(req *msgRequest, body []byte, model string, omit Asks) (out []byte, serverTools bool, e *Error) {
	maxTokens, e := parseMaxTokens(req.MaxTokens)
	if e != nil {
		return nil, false, e
	}
	if len(req.Messages) == 0 {
		return nil, false, invalid("messages: at least one message is required")
	}
	if model == "" {
		model = req.Model
	}

	w := writer{dst: make([]byte, 0, len(body)+len(body)/8+256)}
	w.dst = append(w.dst, `{"model":`...)
	w.dst = appendString(w.dst, model)
	w.dst = append(w.dst, `,"messages":[`...)
	if e := w.system(req.System); e != nil {
		return nil, false, e
	}
	var seen map[string]struct{} // tool_use ids so far; made at the first
	for i := range req.Messages {
		if e := w.message(i, &req.Messages[i], &seen); e != nil {
			return nil, false, e
		}
	}
	w.dst = append(w.dst, ']')

	dst := w.dst
	dst = append(dst, `,"max_tokens":`...)
	dst = strconv.AppendInt(dst, maxTokens, 10)
	if req.Temperature != nil {
		dst = append(dst, `,"temperature":`...)
		dst = appendFloat(dst, *req.Temperature)
	}
	if req.TopP != nil {
		dst = append(dst, `,"top_p":`...)
		dst = appendFloat(dst, *req.TopP)
	}
	if req.TopK != nil && omit&AsksTopK == 0 {
		// Not an OpenAI field, but vLLM takes it.
		dst = append(dst, `,"top_k":`...)
		dst = strconv.AppendInt(dst, *req.TopK, 10)
	}
	if len(req.StopSequences) > 0 {
		dst = append(dst, `,"stop":[`...)
		for i, s := range req.StopSequences {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, s)
		}
		dst = append(dst, ']')
	}
	if req.Stream {
		// Usage comes in a last chunk only when asked for; the Messages
		// stream must report output tokens.
		dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	if req.Metadata != nil && req.Metadata.UserID != "" {
		dst = append(dst, `,"user":`...)
		dst = appendString(dst, req.Metadata.UserID)
	}
	if req.Messages[len(req.Messages)-1].Role == "assistant" && omit&AsksPrefill == 0 {
		// A prefill: vLLM continues the final message instead of
		// opening a new one after it, as Messages does.
		dst = append(dst, `,"continue_final_message":true,"add_generation_prompt":false`...)
	}
	w.dst = dst
	if e := w.tools(req.Tools); e != nil {
		return nil, false, e
	}
	if req.ToolChoice != nil {
		if e := w.toolChoice(req.ToolChoice); e != nil {
			return nil, false, e
		}
	}
	return append(w.dst, '}'), w.serverTools, nil
}

// parseMaxTokens requires max_tokens, as Anthropic does: there is no
// default to fall back on, and guessing one would change what the client
// pays for.
func parseMaxTokens(raw json.RawMessage) (int64, *Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, invalid("max_tokens: field required")
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 1 {
		return 0, invalid("max_tokens: must be a positive integer")
	}
	return n, nil
}

// writer accumulates the chat body. scratch is reused for compacting tool
// inputs, which become JSON strings.
type writer struct {
	dst         []byte
	scratch     []byte
	messages    int  // messages written so far, for the separating commas
	serverTools bool // tools left out: server tools, which Anthropic runs
}

func (w *writer) open(role string) {
	if w.messages > 0 {
		w.dst = append(w.dst, ',')
	}
	w.messages++
	w.dst = append(w.dst, `{"role":`...)
	w.dst = appendString(w.dst, role)
}

// system turns a string or an array of text blocks into a leading system
// message. Several blocks become content parts, so their boundaries are
// kept.
func (w *writer) system(raw json.RawMessage) *Error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		s, ok := decodeString(raw)
		if !ok {
			return invalid("system: must be a string or an array of text blocks")
		}
		if s == "" {
			return nil
		}
		w.open("system")
		w.dst = append(w.dst, `,"content":`...)
		w.dst = appendString(w.dst, s)
		w.dst = append(w.dst, '}')
		return nil
	}
	blocks, ok := decodeBlocks(raw)
	if !ok {
		return invalid("system: must be a string or an array of text blocks")
	}
	for i := range blocks {
		if blocks[i].Type != "text" {
			return invalid("system." + strconv.Itoa(i) + ".type: must be \"text\"")
		}
	}
	if len(blocks) == 0 {
		return nil
	}
	w.open("system")
	w.textContent(blocks)
	w.dst = append(w.dst, '}')
	return nil
}

// textContent writes ,"content": for text blocks: a plain string for one,
// text parts for several.
func (w *writer) textContent(blocks []msgBlock) {
	w.dst = append(w.dst, `,"content":`...)
	if len(blocks) == 1 {
		w.dst = appendString(w.dst, blocks[0].Text)
		return
	}
	w.dst = append(w.dst, '[')
	for i := range blocks {
		if i > 0 {
			w.dst = append(w.dst, ',')
		}
		w.dst = append(w.dst, `{"type":"text","text":`...)
		w.dst = appendString(w.dst, blocks[i].Text)
		w.dst = append(w.dst, '}')
	}
	w.dst = append(w.dst, ']')
}

// message translates one turn. A user turn's tool_result blocks become role
// tool messages written first (OpenAI wants them right after the assistant
// turn that called), then whatever else the turn holds as one user message.
// An assistant turn's tool_use blocks become its tool_calls.
func (w *writer) message(i int, m *msgMessage, seen *map[string]struct{}) *Error {
	if m.Role != "user" && m.Role != "assistant" {
		return invalid(messagePath(i) + ".role: must be \"user\" or \"assistant\"")
	}
	switch m.Kind {
	case contentAbsent:
		return invalid(messagePath(i) + ".content: field required")
	case contentBad:
		return invalid(messagePath(i) + ".content: must be a string or an array of content blocks")
	case contentString:
		w.open(m.Role)
		w.dst = append(w.dst, `,"content":`...)
		w.dst = appendString(w.dst, m.Text)
		w.dst = append(w.dst, '}')
		return nil
	}
	blocks := m.Blocks

	// Check every block first, so an error never leaves half a message.
	parts, calls, results, e := checkBlocks(i, m, seen)
	if e != nil {
		return e
	}
	for j := range blocks {
		if blocks[j].Type == "tool_result" {
			if e := w.toolResult(i, j, &blocks[j]); e != nil {
				return e
			}
		}
	}
	if results > 0 && parts == 0 {
		return nil
	}
	w.open(m.Role)
	w.dst = append(w.dst, `,"content":`...)
	w.content(blocks, parts, calls)
	if calls > 0 {
		w.toolCalls(blocks)
	}
	w.dst = append(w.dst, '}')
	return nil
}

// messagePath and blockPath are the paths of message i and of its block j,
// for errors. They are built only on the error paths: they cost an
// allocation each, and most requests have none.
func messagePath(i int) string { return "messages." + strconv.Itoa(i) }

func blockPath(i, j int) string { return messagePath(i) + ".content." + strconv.Itoa(j) }

// checkBlocks checks the blocks of m, message i, against its role and
// counts them: parts (text and images), tool calls and tool results. It
// adds the ids of m's tool calls to seen, which the tool results of later
// messages must name.
func checkBlocks(i int, m *msgMessage, seen *map[string]struct{}) (parts, calls, results int, _ *Error) {
	for j := range m.Blocks {
		b := &m.Blocks[j]
		switch b.Type {
		case "text":
			parts++
		case "image":
			if m.Role != "user" {
				return 0, 0, 0, invalid(blockPath(i, j) + ": image blocks are only allowed in user messages")
			}
			if e := checkSource(i, j, b.Source); e != nil {
				return 0, 0, 0, e
			}
			parts++
		case "tool_use":
			if m.Role != "assistant" {
				return 0, 0, 0, invalid(blockPath(i, j) + ": tool_use blocks are only allowed in assistant messages")
			}
			if b.ID == "" || b.Name == "" {
				return 0, 0, 0, invalid(blockPath(i, j) + ": tool_use blocks need id and name")
			}
			if in := bytes.TrimSpace(b.Input); len(in) > 0 && in[0] != '{' && string(in) != "null" {
				return 0, 0, 0, invalid(blockPath(i, j) + ".input: must be an object")
			}
			if *seen == nil {
				*seen = make(map[string]struct{})
			}
			(*seen)[b.ID] = struct{}{}
			calls++
		case "tool_result":
			if m.Role != "user" {
				return 0, 0, 0, invalid(blockPath(i, j) + ": tool_result blocks are only allowed in user messages")
			}
			if _, ok := (*seen)[b.ToolUseID]; !ok {
				return 0, 0, 0, invalid(blockPath(i, j) + ".tool_use_id: no earlier tool_use block has id " + strconv.Quote(b.ToolUseID))
			}
			results++
		case "thinking", "redacted_thinking":
			// Earlier turns' reasoning: Anthropic itself drops it from the
			// context, and chat completions has nowhere to put it.
			if m.Role != "assistant" {
				return 0, 0, 0, invalid(blockPath(i, j) + ": thinking blocks are only allowed in assistant messages")
			}
		default:
			return 0, 0, 0, invalid(blockPath(i, j) + ".type: unknown content block type " + strconv.Quote(b.Type))
		}
	}
	return parts, calls, results, nil
}

// checkSource checks the source of an image, block j of message i.
func checkSource(i, j int, src *msgSource) *Error {
	if src == nil {
		return invalid(blockPath(i, j) + ".source: field required")
	}
	switch src.Type {
	case "base64":
		if src.MediaType == "" || src.Data == "" {
			return invalid(blockPath(i, j) + ".source: base64 images need media_type and data")
		}
	case "url":
		if src.URL == "" {
			return invalid(blockPath(i, j) + ".source.url: field required")
		}
	default:
		return invalid(blockPath(i, j) + ".source.type: must be \"base64\" or \"url\"")
	}
	return nil
}

// content writes a message's content: null for tool calls alone, "" for
// nothing, a string for a single text, or else an array of its text and
// image parts.
func (w *writer) content(blocks []msgBlock, parts, calls int) {
	switch {
	case parts == 0 && calls > 0:
		w.dst = append(w.dst, "null"...)
	case parts == 0:
		w.dst = append(w.dst, `""`...)
	case parts == 1 && blocks[firstPart(blocks)].Type == "text":
		w.dst = appendString(w.dst, blocks[firstPart(blocks)].Text)
	default:
		w.dst = append(w.dst, '[')
		n := 0
		for j := range blocks {
			b := &blocks[j]
			if b.Type != "text" && b.Type != "image" {
				continue
			}
			if n > 0 {
				w.dst = append(w.dst, ',')
			}
			n++
			if b.Type == "text" {
				w.dst = append(w.dst, `{"type":"text","text":`...)
				w.dst = appendString(w.dst, b.Text)
				w.dst = append(w.dst, '}')
				continue
			}
			w.dst = append(w.dst, `{"type":"image_url","image_url":{"url":`...)
			if b.Source.Type == "url" {
				w.dst = appendString(w.dst, b.Source.URL)
			} else {
				w.dst = appendString(w.dst, "data:"+b.Source.MediaType+";base64,"+b.Source.Data)
			}
			w.dst = append(w.dst, "}}"...)
		}
		w.dst = append(w.dst, ']')
	}
}

// toolCalls writes a message's tool_use blocks as its tool_calls.
func (w *writer) toolCalls(blocks []msgBlock) {
	w.dst = append(w.dst, `,"tool_calls":[`...)
	n := 0
	for j := range blocks {
		b := &blocks[j]
		if b.Type != "tool_use" {
			continue
		}
		if n > 0 {
			w.dst = append(w.dst, ',')
		}
		n++
		w.dst = append(w.dst, `{"id":`...)
		w.dst = appendString(w.dst, b.ID)
		w.dst = append(w.dst, `,"type":"function","function":{"name":`...)
		w.dst = appendString(w.dst, b.Name)
		w.dst = append(w.dst, `,"arguments":`...)
		w.dst = appendString(w.dst, w.compact(b.Input))
		w.dst = append(w.dst, "}}"...)
	}
	w.dst = append(w.dst, ']')
}

func firstPart(blocks []msgBlock) int {
	for j := range blocks {
		if blocks[j].Type == "text" || blocks[j].Type == "image" {
			return j
		}
	}
	return 0
}

// compact renders a tool input as the arguments string OpenAI expects:
// JSON text without insignificant whitespace; {} when absent.
func (w *writer) compact(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	w.scratch = jsonscan.AppendCompact(w.scratch[:0], raw)
	return string(w.scratch)
}

// toolResult writes a role tool message. The content is the result's text;
// several text blocks are joined by newlines, because chat templates expect
// a tool message's content to be a string. is_error has no counterpart and
// is dropped: the text says what went wrong.
func (w *writer) toolResult(i, j int, b *msgBlock) *Error {
	var text string
	raw := bytes.TrimSpace(b.Content)
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		var ok bool
		if text, ok = decodeString(raw); !ok {
			return invalid(blockPath(i, j) + ".content: must be a string or an array of text blocks")
		}
	default:
		blocks, ok := decodeBlocks(raw)
		if !ok {
			return invalid(blockPath(i, j) + ".content: must be a string or an array of text blocks")
		}
		var sb strings.Builder
		for k := range blocks {
			if blocks[k].Type != "text" {
				return invalid(blockPath(i, j) + ".content." + strconv.Itoa(k) + ".type: only text is supported in tool results, not " + strconv.Quote(blocks[k].Type))
			}
			if k > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(blocks[k].Text)
		}
		text = sb.String()
	}
	w.open("tool")
	w.dst = append(w.dst, `,"tool_call_id":`...)
	w.dst = appendString(w.dst, b.ToolUseID)
	w.dst = append(w.dst, `,"content":`...)
	w.dst = appendString(w.dst, text)
	w.dst = append(w.dst, '}')
	return nil
}

// tools writes client tools as function tools. Anthropic's server tools
// (web search, code execution and the like, which carry a dated type) run
// on Anthropic's side and cannot be served by a pool.
func (w *writer) tools(tools []msgTool) *Error {
	if len(tools) == 0 {
		return nil
	}
	w.dst = append(w.dst, `,"tools":[`...)
	n := 0
	for i := range tools {
		t := &tools[i]
		at := "tools." + strconv.Itoa(i)
		if t.Type != "" && t.Type != "custom" {
			// A server tool (web search, code execution, …): Anthropic
			// runs it, so only an anthropic pool, which gets the
			// request as sent, can serve it (Asks.Check).
			w.serverTools = true
			continue
		}
		if t.Name == "" {
			return invalid(at + ".name: field required")
		}
		schema := bytes.TrimSpace(t.InputSchema)
		if len(schema) == 0 || string(schema) == "null" {
			schema = []byte(`{"type":"object","properties":{}}`)
		} else if schema[0] != '{' {
			return invalid(at + ".input_schema: must be an object")
		}
		if n > 0 {
			w.dst = append(w.dst, ',')
		}
		n++
		w.dst = append(w.dst, `{"type":"function","function":{"name":`...)
		w.dst = appendString(w.dst, t.Name)
		if t.Description != "" {
			w.dst = append(w.dst, `,"description":`...)
			w.dst = appendString(w.dst, t.Description)
		}
		w.dst = append(w.dst, `,"parameters":`...)
		w.dst = jsonscan.AppendCompact(w.dst, schema) // validated by the decoder
		w.dst = append(w.dst, "}}"...)
	}
	w.dst = append(w.dst, ']')
	return nil
}

func (w *writer) toolChoice(c *msgToolChoice) *Error {
	w.dst = append(w.dst, `,"tool_choice":`...)
	switch c.Type {
	case "auto":
		w.dst = append(w.dst, `"auto"`...)
	case "any":
		w.dst = append(w.dst, `"required"`...)
	case "none":
		w.dst = append(w.dst, `"none"`...)
	case "tool":
		if c.Name == "" {
			return invalid("tool_choice.name: field required when type is \"tool\"")
		}
		w.dst = append(w.dst, `{"type":"function","function":{"name":`...)
		w.dst = appendString(w.dst, c.Name)
		w.dst = append(w.dst, "}}"...)
	default:
		return invalid("tool_choice.type: must be one of \"auto\", \"any\", \"tool\", \"none\"")
	}
	if c.DisableParallelToolUse {
		w.dst = append(w.dst, `,"parallel_tool_calls":false`...)
	}
	return nil
}
