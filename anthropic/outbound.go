package anthropic

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/triagegw/triage/internal/jsonscan"
)

// The outbound direction: a client speaking chat completions served by a
// pool that speaks Messages. The request is decoded with the scanner in one
// pass, like a Messages request (decode.go says why); text is carried over
// as the JSON string literal the client sent whenever that literal is
// already what the output needs, which spares decoding and encoding again
// the bulk of every body.

// chatReq is what ChatToMessages reads of a chat-completions request.
// Numbers stay as their JSON text: they are checked, then copied as sent.
type chatReq struct {
	model         string
	messages      []chatMsg
	maxTokens     []byte // max_tokens
	maxCompletion []byte // max_completion_tokens
	temperature   []byte
	topP          []byte
	topK          []byte // vLLM's extension, which Messages shares
	stop          [][]byte
	stream        bool
	user          []byte // literals: user, safety_identifier
	safetyID      []byte
	tools         []chatTool
	toolChoice    []byte // raw; read once the tools are known
	noParallel    bool   // parallel_tool_calls: false
	unsupported   string // the first field that cannot be served, as a message
	drop          bool   // drop sampling settings Messages lacks instead of refusing them
}

type chatMsg struct {
	role       string
	kind       byte   // content: one of the content constants
	text       []byte // literal, for contentString
	parts      []chatPart
	calls      []chatCall
	toolCallID string
	funcCall   bool // the deprecated function_call is set
}

type chatPart struct {
	typ  string
	text []byte // literal: text, or refusal
	url  string // image_url.url
	// Set by checkImage: a data URL's media type and base64 payload, or
	// the URL itself when it is an http(s) one.
	mediaType, data string
}

type chatCall struct {
	id    string
	typ   string
	name  []byte // literal
	input []byte // the arguments as a compact JSON object; nil if they are not one
}

type chatTool struct {
	typ       string
	hasFunc   bool
	name      []byte // literals
	desc      []byte
	params    []byte // raw
	hasParams bool
}

// ChatToMessages translates an OpenAI chat-completions request body into an
// Anthropic Messages request body. model, when not empty, replaces the
// request's model (the router names the pool's model). Messages requires
// max_tokens where chat completions does not: defaultMaxTokens is used when
// the request sets neither max_tokens nor max_completion_tokens, and when it
// is not positive such a request is refused.
//
// What Messages cannot express is refused rather than dropped when it would
// change the answer (n above 1, logprobs, penalties, logit_bias, a JSON
// response format, audio, reasoning_effort, web search, the deprecated
// functions, a temperature above 1, and vLLM's sampling and decoding
// extensions: repetition_penalty, min_p, min_tokens, ignore_eos,
// stop_token_ids, best_of, use_beam_search, guided decoding). With drop
// (a pool's drop_unsupported), the sampling settings that only tune how
// the answer is drawn — the penalties, logit_bias, min_p, min_tokens,
// ignore_eos, stop_token_ids — are dropped instead; what would change the
// answer's shape or number is refused even so. Settings that only concern OpenAI's
// side or speed (stream_options, seed, store, metadata, service_tier,
// prediction, prompt_cache_key, verbosity, an image's detail, a message's
// name) and fields it does not know are ignored. System and developer messages, wherever they stand, become the
// top-level system prompt; consecutive turns of the same side are merged,
// tool results first as Messages requires. A trailing assistant message is
// sent as it is, which Messages reads as the start of its answer.
//
// Errors are 400s naming the offending field; the caller renders them in
// the client's shape.
func ChatToMessages(body []byte, model string, defaultMaxTokens int64, drop bool) ([]byte, *Error) {
	req := chatReq{drop: drop}
	if e := decodeChatRequest(body, &req); e != nil {
		return nil, e
	}
	if req.unsupported != "" {
		return nil, invalid(req.unsupported)
	}
	if model == "" {
		model = req.model
	}
	if model == "" {
		return nil, invalid("model: field required")
	}
	maxTokens, e := chatMaxTokens(&req, defaultMaxTokens)
	if e != nil {
		return nil, e
	}
	choice, e := checkChatRequest(&req)
	if e != nil {
		return nil, e
	}

	dst := make([]byte, 0, len(body)+256)
	dst = append(dst, `{"model":`...)
	dst = appendString(dst, model)
	dst = append(dst, `,"max_tokens":`...)
	dst = strconv.AppendInt(dst, maxTokens, 10)
	dst = appendSystem(dst, req.messages)
	var ok bool
	if dst, ok = appendTurns(dst, req.messages); !ok {
		return nil, invalid("messages: no message has any content")
	}
	dst = appendSampling(dst, &req)
	if req.stream {
		dst = append(dst, `,"stream":true`...)
	}
	// safety_identifier is the newer name for what user was for; either
	// becomes the one id Messages keeps.
	if user := req.safetyID; filled(user) || filled(req.user) {
		if !filled(user) {
			user = req.user
		}
		dst = append(dst, `,"metadata":{"user_id":`...)
		dst = append(dst, user...)
		dst = append(dst, '}')
	}
	if len(req.tools) > 0 {
		dst = appendTools(dst, req.tools)
		dst = appendToolChoice(dst, choice, req.noParallel)
	}
	return append(dst, '}'), nil
}

// checkChatRequest checks what ChatToMessages translates, past the model
// and the output budget: the sampling settings' ranges, the messages, the
// tools, and the tool choice, which it returns.
func checkChatRequest(req *chatReq) (toolChoice, *Error) {
	if e := checkRange("temperature", req.temperature); e != nil {
		return toolChoice{}, e
	}
	if e := checkRange("top_p", req.topP); e != nil {
		return toolChoice{}, e
	}
	if len(req.topK) > 0 {
		if n, err := strconv.ParseInt(string(req.topK), 10, 64); err != nil || n < 0 {
			return toolChoice{}, invalid("top_k: must be a non-negative integer")
		}
	}
	if len(req.messages) == 0 {
		return toolChoice{}, invalid("messages: at least one message is required")
	}
	if e := checkMessages(req.messages); e != nil {
		return toolChoice{}, e
	}
	if e := checkTools(req.tools); e != nil {
		return toolChoice{}, e
	}
	return chatToolChoice(req.toolChoice, len(req.tools) > 0)
}

// appendSampling appends the sampling settings Messages shares:
// temperature, top_p, top_k and the stop sequences.
func appendSampling(dst []byte, req *chatReq) []byte {
	if len(req.temperature) > 0 {
		dst = append(dst, `,"temperature":`...)
		dst = append(dst, req.temperature...)
	}
	if len(req.topP) > 0 {
		dst = append(dst, `,"top_p":`...)
		dst = append(dst, req.topP...)
	}
	if len(req.topK) > 0 {
		dst = append(dst, `,"top_k":`...)
		dst = append(dst, req.topK...)
	}
	if len(req.stop) > 0 {
		dst = append(dst, `,"stop_sequences":[`...)
		for i, s := range req.stop {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, s...)
		}
		dst = append(dst, ']')
	}
	return dst
}

// chatMaxTokens picks the output budget. max_completion_tokens is the newer
// field and wins when both are set.
func chatMaxTokens(req *chatReq, def int64) (int64, *Error) {
	raw, field := req.maxCompletion, "max_completion_tokens"
	if len(raw) == 0 {
		raw, field = req.maxTokens, "max_tokens"
	}
	if len(raw) == 0 {
		if def <= 0 {
			return 0, invalid("max_tokens: field required")
		}
		return def, nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 1 {
		return 0, invalid(field + ": must be a positive integer")
	}
	return n, nil
}

// checkRange holds a sampling setting to what Messages accepts. A
// temperature between 1 and 2 is valid for OpenAI but has no equivalent
// here, and clamping it would quietly serve a different distribution.
func checkRange(field string, raw []byte) *Error {
	if len(raw) == 0 {
		return nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f < 0 || f > 1 {
		return invalid(field + ": must be between 0 and 1 (the upstream is an Anthropic Messages API)")
	}
	return nil
}

func msgAt(i int) string { return "messages[" + strconv.Itoa(i) + "]" }

func partAt(i, j int) string { return msgAt(i) + ".content[" + strconv.Itoa(j) + "]" }

// checkMessages validates every message before anything is written, so the
// writing pass cannot fail halfway. Field paths are built only on the error
// paths.
func checkMessages(msgs []chatMsg) *Error {
	seen := make(map[string]struct{}) // tool call ids so far
	for i := range msgs {
		m := &msgs[i]
		switch m.role {
		case "system", "developer", "user", "assistant", "tool":
		case "function":
			return invalid(msgAt(i) + ".role: function messages are not supported; use tool messages")
		default:
			return invalid(msgAt(i) + ".role: must be one of \"system\", \"developer\", \"user\", \"assistant\", \"tool\"")
		}
		switch m.kind {
		case contentBad:
			return invalid(msgAt(i) + ".content: must be a string or an array of content parts")
		case contentAbsent:
			// An assistant turn may be all tool calls, and a tool may
			// return nothing; anyone else must say something.
			if m.role != "assistant" && m.role != "tool" {
				return invalid(msgAt(i) + ".content: field required")
			}
		}
		if m.funcCall {
			return invalid(msgAt(i) + ".function_call: the deprecated function_call is not supported; use tool_calls")
		}
		if len(m.calls) > 0 && m.role != "assistant" {
			return invalid(msgAt(i) + ".tool_calls: only assistant messages can have tool calls")
		}
		for j := range m.parts {
			p := &m.parts[j]
			switch p.typ {
			case "text":
			case "refusal":
				if m.role != "assistant" {
					return invalid(partAt(i, j) + ".type: refusal parts are only allowed in assistant messages")
				}
			case "image_url":
				if m.role != "user" {
					return invalid(partAt(i, j) + ".type: image parts are only allowed in user messages")
				}
				if msg := checkImage(p); msg != "" {
					return invalid(partAt(i, j) + ".image_url.url: " + msg)
				}
			default:
				return invalid(partAt(i, j) + ".type: content part type " + strconv.Quote(p.typ) + " is not supported")
			}
		}
		for j := range m.calls {
			c := &m.calls[j]
			at := func() string { return msgAt(i) + ".tool_calls[" + strconv.Itoa(j) + "]" }
			if c.typ != "" && c.typ != "function" {
				return invalid(at() + ".type: tool call type " + strconv.Quote(c.typ) + " is not supported")
			}
			if c.id == "" {
				return invalid(at() + ".id: field required")
			}
			if !filled(c.name) {
				return invalid(at() + ".function.name: field required")
			}
			if c.input == nil {
				return invalid(at() + ".function.arguments: must be a JSON object")
			}
			seen[c.id] = struct{}{}
		}
		if m.role == "tool" {
			if _, ok := seen[m.toolCallID]; !ok {
				return invalid(msgAt(i) + ".tool_call_id: no earlier tool call has id " + strconv.Quote(m.toolCallID))
			}
			for j := range m.parts {
				if m.parts[j].typ != "text" {
					return invalid(partAt(i, j) + ".type: only text is supported in tool messages")
				}
			}
		}
	}
	return nil
}

// checkImage sorts an image URL into a base64 source (a data URL) or a url
// source (http or https), or says why it is neither: Messages takes
// nothing else.
func checkImage(p *chatPart) string {
	u := p.url
	if len(u) >= 5 && strings.EqualFold(u[:5], "data:") {
		meta, data, ok := strings.Cut(u[5:], ",")
		mt, isBase64 := strings.CutSuffix(meta, ";base64")
		if mt, _, _ = strings.Cut(mt, ";"); !ok || !isBase64 || mt == "" || data == "" {
			return "data URLs must be of the form data:<media type>;base64,<data>"
		}
		p.mediaType, p.data = mt, data
		return ""
	}
	if len(u) >= 8 && strings.EqualFold(u[:8], "https://") || len(u) >= 7 && strings.EqualFold(u[:7], "http://") {
		p.data = u
		return ""
	}
	return "must be an http(s) URL or a base64 data URL"
}

func checkTools(tools []chatTool) *Error {
	for i := range tools {
		t := &tools[i]
		at := "tools[" + strconv.Itoa(i) + "]"
		if t.typ != "" && t.typ != "function" {
			return invalid(at + ".type: tool type " + strconv.Quote(t.typ) + " is not supported")
		}
		if !t.hasFunc {
			return invalid(at + ".function: field required")
		}
		if !filled(t.name) {
			return invalid(at + ".function.name: field required")
		}
		if t.hasParams {
			if p := bytes.TrimLeft(t.params, " \t\r\n"); len(p) == 0 || p[0] != '{' {
				return invalid(at + ".function.parameters: must be a JSON object")
			}
		}
	}
	return nil
}

// A tool choice, read from the raw field once the tools are known.
type toolChoice struct {
	kind string // "", "auto", "none", "any", "tool"
	name string
}

func chatToolChoice(raw []byte, haveTools bool) (toolChoice, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return toolChoice{}, nil
	}
	var c toolChoice
	if s, ok := decodeString(raw); ok {
		switch s {
		case "auto":
			c.kind = "auto"
		case "none":
			c.kind = "none"
		case "required":
			c.kind = "any"
		default:
			return c, invalid("tool_choice: must be \"auto\", \"none\", \"required\" or a function")
		}
	} else {
		var typ string
		sc := scanner{jsonscan.New(raw)}
		ok := sc.Object(func(k []byte) bool {
			switch string(k) {
			case "type":
				typ = sc.text()
			case "function":
				if sc.Null() {
					return true
				}
				return sc.Object(func(k []byte) bool {
					if string(k) == "name" {
						c.name = sc.text()
						return !sc.Failed()
					}
					return sc.Skip()
				})
			default:
				return sc.Skip()
			}
			return !sc.Failed()
		})
		switch {
		case !ok:
			return c, invalid("tool_choice: must be \"auto\", \"none\", \"required\" or a function")
		case typ != "function":
			return c, invalid("tool_choice.type: " + strconv.Quote(typ) + " is not supported")
		case c.name == "":
			return c, invalid("tool_choice.function.name: field required")
		}
		c.kind = "tool"
	}
	// Without tools, auto and none mean what no tool_choice means, and
	// Messages refuses a tool_choice without tools.
	if !haveTools {
		if c.kind == "any" || c.kind == "tool" {
			return c, invalid("tool_choice: requires tools")
		}
		return toolChoice{}, nil
	}
	return c, nil
}

// appendSystem gathers system and developer messages into the top-level
// system prompt: a string when there is one string, else text blocks, so
// the boundaries between them are kept. Empty text is left out: Messages
// refuses empty text blocks.
func appendSystem(dst []byte, msgs []chatMsg) []byte {
	n, single := 0, -1 // texts, and the one string if that is all
	for i := range msgs {
		m := &msgs[i]
		if m.role != "system" && m.role != "developer" {
			continue
		}
		if m.kind == contentString {
			if filled(m.text) {
				n++
				single = i
			}
			continue
		}
		for j := range m.parts {
			if filled(m.parts[j].text) {
				n++
				single = -1
			}
		}
	}
	if n == 0 {
		return dst
	}
	dst = append(dst, `,"system":`...)
	if n == 1 && single >= 0 {
		return append(dst, msgs[single].text...)
	}
	dst = append(dst, '[')
	first := true
	text := func(lit []byte) {
		if !filled(lit) {
			return
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, `{"type":"text","text":`...)
		dst = append(dst, lit...)
		dst = append(dst, '}')
	}
	for i := range msgs {
		m := &msgs[i]
		if m.role != "system" && m.role != "developer" {
			continue
		}
		if m.kind == contentString {
			text(m.text)
			continue
		}
		for j := range m.parts {
			text(m.parts[j].text)
		}
	}
	return append(dst, ']')
}

// side is the Messages role a chat message belongs to: tool results are
// user content. System messages have none (they went to system), nor do
// messages with nothing to send, which Messages would refuse.
func side(m *chatMsg) byte {
	switch m.role {
	case "tool":
		return 'u'
	case "user":
		if hasText(m) {
			return 'u'
		}
	case "assistant":
		if hasText(m) || len(m.calls) > 0 {
			return 'a'
		}
	}
	return 0
}

func hasText(m *chatMsg) bool {
	if m.kind == contentString {
		return filled(m.text)
	}
	for j := range m.parts {
		if p := &m.parts[j]; p.typ == "image_url" || filled(p.text) {
			return true
		}
	}
	return false
}

// appendTurns writes the messages as Messages turns, which must alternate:
// runs of messages on the same side are merged into one turn. It reports
// false when no message has anything to send.
func appendTurns(dst []byte, msgs []chatMsg) ([]byte, bool) {
	dst = append(dst, `,"messages":[`...)
	turns := 0
	for i := 0; i < len(msgs); {
		s := side(&msgs[i])
		if s == 0 {
			i++
			continue
		}
		j := i + 1
		for j < len(msgs) && (side(&msgs[j]) == s || side(&msgs[j]) == 0) {
			j++
		}
		if turns > 0 {
			dst = append(dst, ',')
		}
		turns++
		dst = appendTurn(dst, s, msgs[i:j])
		i = j
	}
	return append(dst, ']'), turns > 0
}

// appendTurn writes one turn from a run of messages of one side (and
// skippable ones). A lone string message stays a string; anything else
// becomes blocks, a user turn's tool results first, as Messages requires
// them to lead the turn that answers the calls.
func appendTurn(dst []byte, s byte, run []chatMsg) []byte {
	role := "user"
	if s == 'a' {
		role = "assistant"
	}
	dst = append(dst, `{"role":"`...)
	dst = append(dst, role...)
	dst = append(dst, `","content":`...)
	if only := lone(run); only != nil && only.kind == contentString && len(only.calls) == 0 && only.role != "tool" {
		dst = append(dst, only.text...)
		return append(dst, '}')
	}
	dst = append(dst, '[')
	start := len(dst)
	if s == 'u' {
		for k := range run {
			if m := &run[k]; m.role == "tool" {
				dst = comma(dst, start)
				dst = appendToolResult(dst, m)
			}
		}
	}
	for k := range run {
		if m := &run[k]; side(m) != 0 && m.role != "tool" {
			dst = appendBlocks(dst, start, m)
		}
	}
	return append(dst, "]}"...)
}

// lone is the one message of run that is not skippable, or nil when there
// are more (or none).
func lone(run []chatMsg) *chatMsg {
	var only *chatMsg
	for k := range run {
		if side(&run[k]) == 0 {
			continue
		}
		if only != nil {
			return nil
		}
		only = &run[k]
	}
	return only
}

// comma appends the comma that separates a block from the one before it,
// when the turn's blocks, from start, have one.
func comma(dst []byte, start int) []byte {
	if len(dst) > start {
		return append(dst, ',')
	}
	return dst
}

// appendBlocks appends the blocks of m, a message of a turn whose blocks
// begin at start: its text, its parts, then its tool calls.
func appendBlocks(dst []byte, start int, m *chatMsg) []byte {
	if m.kind == contentString {
		if filled(m.text) {
			dst = comma(dst, start)
			dst = append(dst, `{"type":"text","text":`...)
			dst = append(dst, m.text...)
			dst = append(dst, '}')
		}
	} else {
		for j := range m.parts {
			p := &m.parts[j]
			if p.typ == "image_url" {
				dst = comma(dst, start)
				dst = appendImage(dst, p)
				continue
			}
			if filled(p.text) {
				dst = comma(dst, start)
				dst = append(dst, `{"type":"text","text":`...)
				dst = append(dst, p.text...)
				dst = append(dst, '}')
			}
		}
	}
	for j := range m.calls {
		c := &m.calls[j]
		dst = comma(dst, start)
		dst = append(dst, `{"type":"tool_use","id":`...)
		dst = appendString(dst, c.id)
		dst = append(dst, `,"name":`...)
		dst = append(dst, c.name...)
		dst = append(dst, `,"input":`...)
		dst = append(dst, c.input...)
		dst = append(dst, '}')
	}
	return dst
}

func appendImage(dst []byte, p *chatPart) []byte {
	if p.mediaType == "" {
		dst = append(dst, `{"type":"image","source":{"type":"url","url":`...)
		dst = appendString(dst, p.data)
		return append(dst, "}}"...)
	}
	dst = append(dst, `{"type":"image","source":{"type":"base64","media_type":`...)
	dst = appendString(dst, p.mediaType)
	dst = append(dst, `,"data":`...)
	dst = appendString(dst, p.data)
	return append(dst, "}}"...)
}

// appendToolResult writes a tool message as a tool_result block. Empty
// content is left out rather than sent as an empty text, which Messages
// refuses.
func appendToolResult(dst []byte, m *chatMsg) []byte {
	dst = append(dst, `{"type":"tool_result","tool_use_id":`...)
	dst = appendString(dst, m.toolCallID)
	switch m.kind {
	case contentString:
		if filled(m.text) {
			dst = append(dst, `,"content":`...)
			dst = append(dst, m.text...)
		}
	case contentBlocks:
		n := 0
		for j := range m.parts {
			if !filled(m.parts[j].text) {
				continue
			}
			if n == 0 {
				dst = append(dst, `,"content":[`...)
			} else {
				dst = append(dst, ',')
			}
			n++
			dst = append(dst, `{"type":"text","text":`...)
			dst = append(dst, m.parts[j].text...)
			dst = append(dst, '}')
		}
		if n > 0 {
			dst = append(dst, ']')
		}
	}
	return append(dst, '}')
}

// appendTools writes function tools as Messages tools. Messages wants an
// object schema with its type named; a tool without parameters takes none.
func appendTools(dst []byte, tools []chatTool) []byte {
	dst = append(dst, `,"tools":[`...)
	for i := range tools {
		t := &tools[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = append(dst, t.name...)
		if filled(t.desc) {
			dst = append(dst, `,"description":`...)
			dst = append(dst, t.desc...)
		}
		dst = append(dst, `,"input_schema":`...)
		switch {
		case !t.hasParams:
			dst = append(dst, `{"type":"object"}`...)
		case !hasKey(t.params, "type"):
			dst = append(dst, `{"type":"object"`...)
			if body := appendJSONValue(nil, t.params); len(body) > len("{}") {
				dst = append(dst, ',')
				dst = append(dst, body[1:]...)
			} else {
				dst = append(dst, '}')
			}
		default:
			dst = appendJSONValue(dst, t.params)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

func appendToolChoice(dst []byte, c toolChoice, noParallel bool) []byte {
	if c.kind == "" {
		if !noParallel {
			return dst
		}
		c.kind = "auto" // the default, stated to carry the flag
	}
	dst = append(dst, `,"tool_choice":{"type":"`...)
	dst = append(dst, c.kind...)
	dst = append(dst, '"')
	if c.kind == "tool" {
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, c.name)
	}
	// none takes no flag: no call, nothing to run in parallel.
	if noParallel && c.kind != "none" {
		dst = append(dst, `,"disable_parallel_tool_use":true`...)
	}
	return append(dst, '}')
}
