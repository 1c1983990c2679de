package anthropic

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/triagegw/triage/internal/jsonscan"
)

// ChatStream translates one Messages SSE stream into chat-completions SSE
// chunks, event by event. Like Stream it holds only what the chunks need:
// the head every chunk starts with, the open content block (and for a tool
// call its arguments so far, to check they are a JSON object when it
// closes), the usage counts, and whether the finish chunk has been sent.
// Not safe for concurrent use; one ChatStream per response.
//
// Content blocks must follow one another, as Messages sends them: a block
// that starts while another is open, or a delta for a block that is not
// open, ends the stream with an error rather than guess.
type ChatStream struct {
	model        string
	includeUsage bool
	created      int64
	head         []byte // data: {"id":...,"choices":[ — every chunk's start
	started      bool
	done         bool
	finished     bool // finish chunk sent
	block        int64
	kind         byte  // open block: 0 none, 't' text, 'u' tool_use, 'x' one chat completions has no place for
	tools        int64 // tool calls opened so far; the open one is tools-1
	args         []byte
	argsOut      bool   // an arguments delta was sent for the open call
	input        []byte // the open call's input from content_block_start
	usage        msgUsage
	failCode     string // the upstream's error type, from an error event
	sc           scanner
	f            eventFields
}

// eventFields is what one event carries that the chunks need. Reused from
// event to event; parse resets it.
type eventFields struct {
	typ        []byte // the data's own type, for events sent without a name
	index      int64
	id, model  string // message_start's message, or content_block_start's block
	blockType  []byte
	name       []byte // a tool_use block's name, as a literal
	input      []byte // raw
	deltaType  []byte
	text       []byte // text_delta's text, as a literal
	partial    []byte // input_json_delta's partial_json, decoded
	stopReason string
	usage      msgUsage
	has        byte // which usage counts the event carries: the has* bits
	errType    string
	errMsg     string
}

const (
	hasIn = 1 << iota
	hasOut
	hasCacheWrite
	hasCacheRead
)

// NewChatStream starts a translator. model, when not empty, is the name
// reported to the client, else the upstream's; includeUsage is the
// client's stream_options.include_usage, which asks for a last chunk with
// the usage. created is the time the stream starts, for every chunk.
func NewChatStream(model string, includeUsage bool) *ChatStream {
	return &ChatStream{model: model, includeUsage: includeUsage, created: time.Now().Unix(), block: -1}
}

// Done reports whether the stream has ended: message_stop was translated,
// or Fail was called. A stream that stops short of it should be ended with
// Fail.
func (s *ChatStream) Done() bool { return s.done }

// Usage is the token usage the stream has reported so far, in chat
// completions' terms (prompt tokens count the cache's); ok once
// message_start has arrived, which carries the input tokens.
func (s *ChatStream) Usage() (prompt, completion int64, ok bool) {
	u := s.usage
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, u.OutputTokens, s.started
}

// Event translates one SSE event, given its event: name and its data:
// payload (the caller splits the SSE; an empty name means the data's type
// is taken), and appends the chunks it yields to dst: none for a ping or
// an event chat completions has no counterpart for, data: [DONE] after
// message_stop. An error means the stream cannot go on (an upstream error
// event, data that is not JSON, events out of order, tool input that is not
// a JSON object): the caller should end it with Fail.
func (s *ChatStream) Event(name, data []byte, dst []byte) ([]byte, error) {
	if string(name) == "ping" {
		return dst, nil
	}
	if s.done {
		return dst, errors.New("upstream stream continued after message_stop")
	}
	f, ok := s.parse(data)
	if !ok {
		return dst, errors.New("upstream event is not valid JSON")
	}
	if len(name) == 0 {
		name = f.typ
	}
	switch string(name) {
	case "ping":
		return dst, nil
	case "error":
		s.failCode = f.errType
		msg := f.errMsg
		if msg == "" {
			msg = "the upstream stream failed"
		}
		if f.errType != "" {
			return dst, errors.New("upstream error (" + f.errType + "): " + msg)
		}
		return dst, errors.New("upstream error: " + msg)
	case "message_start":
		if s.started {
			return dst, errors.New("upstream sent a second message_start")
		}
		return s.start(dst, f), nil
	case "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop":
		if !s.started {
			return dst, errors.New("upstream stream did not begin with message_start")
		}
	default:
		// Event types added to the API later carry nothing a chat client
		// can use, and the API asks clients to pass over them.
		return dst, nil
	}
	switch string(name) {
	case "content_block_start":
		if s.kind != 0 {
			return dst, errors.New("upstream started a content block while another was open")
		}
		return s.openBlock(dst, f)
	case "content_block_delta":
		if s.kind == 0 || f.index != s.block {
			return dst, errors.New("upstream sent a delta for a content block that is not open")
		}
		return s.delta(dst, f)
	case "content_block_stop":
		if s.kind == 0 || f.index != s.block {
			return dst, errors.New("upstream closed a content block that is not open")
		}
		return s.closeBlock(dst)
	case "message_delta":
		s.addUsage(f)
		if f.stopReason == "" || s.finished {
			return dst, nil
		}
		var err error
		if dst, err = s.closeBlock(dst); err != nil {
			return dst, err
		}
		return s.finish(dst, f.stopReason), nil
	}
	return s.stop(dst)
}

// stop ends the stream on message_stop: whatever was still open is closed,
// the usage chunk sent if asked for, and [DONE].
func (s *ChatStream) stop(dst []byte) ([]byte, error) {
	var err error
	if dst, err = s.closeBlock(dst); err != nil {
		return dst, err
	}
	if !s.finished {
		dst = s.finish(dst, "") // a stream that ended without a stop reason
	}
	if s.includeUsage {
		dst = append(dst, s.head...)
		dst = append(dst, ']')
		dst = appendChatUsage(dst, &s.usage)
		dst = append(dst, "}\n\n"...)
	}
	s.done = true
	return append(dst, "data: [DONE]\n\n"...), nil
}

// Fail appends an OpenAI-shaped error chunk and [DONE], as vLLM ends a
// stream that broke, for a stream that failed upstream or could not be
// translated. After an upstream error event the error's type and code are
// the ones FromAnthropicError would give it. Nothing may follow; after a
// translated message_stop it appends nothing, the stream being whole.
func (s *ChatStream) Fail(dst []byte, msg string) []byte {
	if s.done {
		return dst
	}
	s.done = true
	typ := openaiServer
	if s.failCode != "" {
		typ = openaiType(statusForType(s.failCode))
	}
	dst = append(dst, "data: "...)
	dst = appendOpenAIError(dst, msg, typ, s.failCode)
	return append(dst, "\n\ndata: [DONE]\n\n"...)
}

// start records the message and sends the role chunk. The id is the
// message's, so a client can find the upstream response by it.
func (s *ChatStream) start(dst []byte, f *eventFields) []byte {
	s.started = true
	s.addUsage(f)
	model := s.model
	if model == "" {
		model = f.model
	}
	h := append(s.head[:0], `data: {"id":`...)
	h = appendString(h, f.id)
	h = append(h, `,"object":"chat.completion.chunk","created":`...)
	h = strconv.AppendInt(h, s.created, 10)
	h = append(h, `,"model":`...)
	h = appendString(h, model)
	s.head = append(h, `,"choices":[`...)
	dst = append(dst, s.head...)
	return append(dst, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// The delta object of a chunk sits between these.
const (
	deltaOpen  = `{"index":0,"delta":{`
	deltaClose = `},"logprobs":null,"finish_reason":null}]}` + "\n\n"
)

func (s *ChatStream) openBlock(dst []byte, f *eventFields) ([]byte, error) {
	s.block = f.index
	switch string(f.blockType) {
	case "text":
		s.kind = 't'
		// A text block may start with text of its own.
		if filled(f.text) {
			dst = s.content(dst, f.text)
		}
		return dst, nil
	case "tool_use":
	default:
		// thinking, redacted_thinking and whatever comes later: chat
		// completions has nowhere to put them.
		s.kind = 'x'
		return dst, nil
	}
	s.kind = 'u'
	s.tools++
	if !filled(f.name) {
		return dst, errors.New("upstream tool_use block has no name")
	}
	s.args, s.argsOut = s.args[:0], false
	s.input = append(s.input[:0], f.input...)
	dst = append(dst, s.head...)
	dst = append(dst, deltaOpen+`"tool_calls":[{"index":`...)
	dst = strconv.AppendInt(dst, s.tools-1, 10)
	dst = append(dst, `,"id":`...)
	dst = appendString(dst, toolID(f.id, int(s.tools-1)))
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = append(dst, f.name...)
	dst = append(dst, `,"arguments":""}}]`...)
	return append(dst, deltaClose...), nil
}

func (s *ChatStream) content(dst, lit []byte) []byte {
	dst = append(dst, s.head...)
	dst = append(dst, deltaOpen+`"content":`...)
	dst = append(dst, lit...)
	return append(dst, deltaClose...)
}

func (s *ChatStream) arguments(dst []byte, args string) []byte {
	s.argsOut = true
	dst = append(dst, s.head...)
	dst = append(dst, deltaOpen+`"tool_calls":[{"index":`...)
	dst = strconv.AppendInt(dst, s.tools-1, 10)
	dst = append(dst, `,"function":{"arguments":`...)
	dst = appendString(dst, args)
	dst = append(dst, "}}]"...)
	return append(dst, deltaClose...)
}

func (s *ChatStream) delta(dst []byte, f *eventFields) ([]byte, error) {
	switch string(f.deltaType) {
	case "text_delta":
		if s.kind != 't' {
			return dst, errors.New("upstream sent text for a block that is not text")
		}
		if filled(f.text) {
			dst = s.content(dst, f.text)
		}
	case "input_json_delta":
		if s.kind != 'u' {
			return dst, errors.New("upstream sent tool input for a block that is not a tool call")
		}
		if len(f.partial) == 0 {
			return dst, nil
		}
		if len(s.args)+len(f.partial) > maxToolArgs {
			return dst, errors.New("tool call arguments exceed " + strconv.Itoa(maxToolArgs) + " bytes")
		}
		s.args = append(s.args, f.partial...)
		dst = s.arguments(dst, string(f.partial))
	}
	// thinking_delta, signature_delta, citations_delta and later kinds
	// carry nothing a chat client can use.
	return dst, nil
}

// closeBlock ends the open block, if any. A tool call's arguments must be
// a JSON object by now: the client will parse them. A call that streamed
// none sends the input its block started with, {} at least, so the client
// never sees empty arguments.
func (s *ChatStream) closeBlock(dst []byte) ([]byte, error) {
	kind := s.kind
	s.kind, s.block = 0, -1
	if kind != 'u' {
		return dst, nil
	}
	if !s.argsOut {
		in := s.input
		if len(in) == 0 || string(in) == "null" {
			in = []byte("{}")
		} else if in[0] != '{' {
			return dst, errors.New("tool call input is not a JSON object")
		}
		return s.arguments(dst, string(jsonscan.AppendCompact(s.args[:0], in))), nil
	}
	a := s.args[jsonscan.WS(s.args, 0):]
	if len(a) == 0 || a[0] != '{' || !json.Valid(a) {
		return dst, errors.New("tool call arguments are not a JSON object")
	}
	return dst, nil
}

func (s *ChatStream) finish(dst []byte, stop string) []byte {
	s.finished = true
	dst = append(dst, s.head...)
	dst = append(dst, `{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
	dst = appendString(dst, finishReason(stop))
	return append(dst, "}]}\n\n"...)
}

// addUsage takes the counts an event carries. message_delta's are
// cumulative, so each count it names replaces the one before.
func (s *ChatStream) addUsage(f *eventFields) {
	if f.has&hasIn != 0 {
		s.usage.InputTokens = f.usage.InputTokens
	}
	if f.has&hasOut != 0 {
		s.usage.OutputTokens = f.usage.OutputTokens
	}
	if f.has&hasCacheWrite != 0 {
		s.usage.CacheCreationInputTokens = f.usage.CacheCreationInputTokens
	}
	if f.has&hasCacheRead != 0 {
		s.usage.CacheReadInputTokens = f.usage.CacheReadInputTokens
	}
}

// parse reads the fields of one event's data into s.f. Every event type is
// read by the one routine: the keys do not collide, and the name says
// which fields count.
func (s *ChatStream) parse(data []byte) (*eventFields, bool) {
	f := &s.f
	*f = eventFields{partial: f.partial[:0]}
	sc := &s.sc
	sc.Reset(data, 0)
	ok := sc.Object(func(key []byte) bool {
		switch string(key) {
		case "type":
			f.typ = sc.ident()
		case "index":
			f.index = sc.integer()
		case "message":
			return s.parseMessage(f)
		case "content_block":
			return s.parseBlock(f)
		case "delta":
			return s.parseDelta(f)
		case "usage":
			return s.parseUsage(f)
		case "error":
			return s.parseError(f)
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
	return f, ok && sc.End()
}

// parseMessage reads a message_start's message, or null, into f.
func (s *ChatStream) parseMessage(f *eventFields) bool {
	sc := &s.sc
	if sc.Null() {
		return true
	}
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "id":
			f.id = sc.text()
		case "model":
			f.model = sc.text()
		case "usage":
			return s.parseUsage(f)
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

// parseBlock reads a content_block_start's block, or null, into f.
func (s *ChatStream) parseBlock(f *eventFields) bool {
	sc := &s.sc
	if sc.Null() {
		return true
	}
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "type":
			f.blockType = sc.ident()
		case "id":
			f.id = sc.text()
		case "name":
			f.name = sc.lit()
		case "text":
			f.text = sc.lit()
		case "input":
			f.input = sc.Raw()
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

// parseDelta reads a delta, or null, into f.
func (s *ChatStream) parseDelta(f *eventFields) bool {
	sc := &s.sc
	if sc.Null() {
		return true
	}
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "type":
			f.deltaType = sc.ident()
		case "text":
			f.text = sc.lit()
		case "partial_json":
			p, ok := sc.String()
			if !ok {
				return false
			}
			// Copied: str's buffer is reused by the next string.
			f.partial = append(f.partial, p...)
		case "stop_reason":
			f.stopReason = sc.text()
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

// parseError reads an error event's error, or null, into f.
func (s *ChatStream) parseError(f *eventFields) bool {
	sc := &s.sc
	if sc.Null() {
		return true
	}
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "type":
			f.errType = sc.text()
		case "message":
			f.errMsg = sc.text()
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

func (s *ChatStream) parseUsage(f *eventFields) bool {
	sc := &s.sc
	if sc.Null() {
		return true
	}
	return sc.Object(func(k []byte) bool {
		var bit byte
		var dst *int64
		switch string(k) {
		case "input_tokens":
			bit, dst = hasIn, &f.usage.InputTokens
		case "output_tokens":
			bit, dst = hasOut, &f.usage.OutputTokens
		case "cache_creation_input_tokens":
			bit, dst = hasCacheWrite, &f.usage.CacheCreationInputTokens
		case "cache_read_input_tokens":
			bit, dst = hasCacheRead, &f.usage.CacheReadInputTokens
		default:
			return sc.Skip()
		}
		if sc.Null() {
			return true
		}
		*dst = sc.integer()
		f.has |= bit
		return !sc.Failed()
	})
}

// ident reads a string that names a type. The types are plain ASCII, so
// the common case is a slice of the input; an escaped one is decoded into
// a copy (String's buffer is reused by the next string).
func (s *scanner) ident() []byte {
	tok, esc, ok := s.Token()
	if !ok {
		return nil
	}
	if esc&jsonscan.Escaped != 0 {
		return jsonscan.AppendUnquote(nil, tok)
	}
	return tok[1 : len(tok)-1]
}
