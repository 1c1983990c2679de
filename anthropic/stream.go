package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
)

// Stream translates one chat-completions SSE stream into Messages SSE
// events, chunk by chunk. It holds what the events need and nothing more:
// whether the message has started, the open content block, the arguments
// of the open tool call (to check they are JSON when it closes), and the
// stop reason and usage until message_delta can be sent. Not safe for
// concurrent use; one Stream per response.
type Stream struct {
	model   string
	started bool
	done    bool
	// Anthropic block index of the open block (-1: none), its kind, and for
	// a tool block the OpenAI tool call index it belongs to.
	block    int
	kind     byte // 0 none, 't' text, 'u' tool_use
	toolIdx  int64
	args     []byte
	next     int // index of the next block to open
	finished bool
	reason   string
	seq      string
	usage    bool
	in, out  int64
	deltaOut bool // message_delta sent
	sc       scanner
	f        chunkFields
}

// chunkFields is what one chunk carries that the events need, for choice
// 0 (Messages has one choice). Reused from chunk to chunk; parse resets it.
type chunkFields struct {
	id         string
	content    []byte // the content's JSON string literal, to copy as it is (scanner.lit)
	hasContent bool
	tools      []toolDelta
	finish     string
	seq        string // vLLM's stop_reason when it is a string
	usage      bool
	in, out    int64
	isError    bool
}

type toolDelta struct {
	index          int64
	id, name, args string
}

// NewStream starts a translator; model is the name reported to the client.
func NewStream(model string) *Stream {
	return &Stream{model: model, block: -1}
}

// Chunk translates the payload of one data: event (the caller splits the
// SSE; the end is the literal [DONE]) and appends the Messages events it
// yields to dst. An error means the stream cannot go on (an upstream error
// chunk, a chunk that is not JSON, tool arguments that are not a JSON
// object): the caller should end it with Fail.
func (s *Stream) Chunk(data []byte, dst []byte) ([]byte, error) {
	data = bytes.Trim(data, " \t\r\n") // JSON whitespace only: \f is not JSON
	if s.done {
		return dst, errors.New("upstream stream continued after [DONE]")
	}
	if string(data) == "[DONE]" {
		return s.end(dst)
	}

	c, ok := s.parse(data)
	if !ok {
		return dst, errors.New("upstream chunk is not valid JSON")
	}
	if c.isError {
		msg := FromOpenAIError(500, data).Message
		return dst, errors.New("upstream error: " + msg)
	}
	if !s.started {
		dst = s.start(dst, c.id)
	}
	var err error
	if c.hasContent && filled(c.content) {
		if s.kind != 't' {
			if dst, err = s.closeBlock(dst); err != nil {
				return dst, err
			}
			dst = s.openBlock(dst, 't', `{"type":"text","text":""}`)
		}
		dst = s.deltaLit(dst, `{"type":"text_delta","text":`, c.content)
	}
	for j := range c.tools {
		if dst, err = s.toolCall(dst, &c.tools[j]); err != nil {
			return dst, err
		}
	}
	if c.finish != "" {
		if dst, err = s.closeBlock(dst); err != nil {
			return dst, err
		}
		s.finished = true
		s.reason, s.seq = stopReason(c.finish, c.seq)
	}
	if c.usage {
		s.usage = true
		s.in, s.out = c.in, c.out
	}
	// Usage may come with the finish chunk or after it; once both are in,
	// nothing else can change message_delta, so send it now rather than at
	// [DONE].
	if s.finished && s.usage && !s.deltaOut {
		dst = s.messageDelta(dst)
	}
	return dst, nil
}

// end translates [DONE]: the open block closed, message_delta if it is
// still due, and message_stop.
func (s *Stream) end(dst []byte) ([]byte, error) {
	if !s.started {
		dst = s.start(dst, "")
	}
	var err error
	if dst, err = s.closeBlock(dst); err != nil {
		return dst, err
	}
	if !s.deltaOut {
		dst = s.messageDelta(dst)
	}
	s.done = true
	return event(dst, "message_stop", `{"type":"message_stop"}`), nil
}

// toolCall translates one tool call's part of a chunk: a tool_use block
// opened for a call not seen before, and its arguments' next bytes.
func (s *Stream) toolCall(dst []byte, tc *toolDelta) ([]byte, error) {
	if s.kind != 'u' || tc.index != s.toolIdx {
		var err error
		if dst, err = s.closeBlock(dst); err != nil {
			return dst, err
		}
		s.toolIdx = tc.index
		b := append(make([]byte, 0, 64), `{"type":"tool_use","id":`...)
		b = appendString(b, toolID(tc.id, int(tc.index)))
		b = append(b, `,"name":`...)
		b = appendString(b, tc.name)
		b = append(b, `,"input":{}}`...)
		dst = s.openBlock(dst, 'u', string(b))
	}
	if a := tc.args; a != "" {
		if len(s.args)+len(a) > maxToolArgs {
			return dst, errors.New("tool call arguments exceed " + strconv.Itoa(maxToolArgs) + " bytes")
		}
		s.args = append(s.args, a...)
		dst = s.delta(dst, `{"type":"input_json_delta","partial_json":`, a)
	}
	return dst, nil
}

// maxToolArgs bounds the arguments held for one tool call, so a hostile
// upstream cannot grow a Stream without limit.
const maxToolArgs = 4 << 20

// Done reports whether the stream has ended: its [DONE] arrived, or Fail
// was called. A body that ends before Done is a cut stream.
func (s *Stream) Done() bool { return s.done }

// Fail appends an Anthropic error event, for a stream that broke upstream or
// could not be translated. Nothing may follow it.
func (s *Stream) Fail(dst []byte, msg string) []byte {
	s.done = true
	e := Error{Type: TypeAPI, Message: msg}
	dst = append(dst, "event: error\ndata: "...)
	dst = e.appendJSON(dst)
	return append(dst, "\n\n"...)
}

func (s *Stream) start(dst []byte, id string) []byte {
	s.started = true
	dst = append(dst, "event: message_start\ndata: "...)
	dst = append(dst, `{"type":"message_start","message":{"id":`...)
	dst = appendString(dst, messageID(id))
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = appendString(dst, s.model)
	dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}`...)
	return append(dst, "\n\n"...)
}

func (s *Stream) openBlock(dst []byte, kind byte, block string) []byte {
	s.block, s.kind = s.next, kind
	s.next++
	s.args = s.args[:0]
	dst = append(dst, "event: content_block_start\ndata: "...)
	dst = append(dst, `{"type":"content_block_start","index":`...)
	dst = strconv.AppendInt(dst, int64(s.block), 10)
	dst = append(dst, `,"content_block":`...)
	dst = append(dst, block...)
	return append(dst, "}\n\n"...)
}

// deltaLit is delta with the text given as a JSON string literal.
func (s *Stream) deltaLit(dst []byte, head string, lit []byte) []byte {
	dst = append(dst, "event: content_block_delta\ndata: "...)
	dst = append(dst, `{"type":"content_block_delta","index":`...)
	dst = strconv.AppendInt(dst, int64(s.block), 10)
	dst = append(dst, `,"delta":`...)
	dst = append(dst, head...)
	dst = append(dst, lit...)
	return append(dst, "}}\n\n"...)
}

// delta appends a content_block_delta; head opens the delta object up to
// its one string field.
func (s *Stream) delta(dst []byte, head, text string) []byte {
	dst = append(dst, "event: content_block_delta\ndata: "...)
	dst = append(dst, `{"type":"content_block_delta","index":`...)
	dst = strconv.AppendInt(dst, int64(s.block), 10)
	dst = append(dst, `,"delta":`...)
	dst = append(dst, head...)
	dst = appendString(dst, text)
	return append(dst, "}}\n\n"...)
}

// closeBlock ends the open block, if any. A tool call's arguments must be
// a JSON object by now: the client will parse them as the tool's input.
func (s *Stream) closeBlock(dst []byte) ([]byte, error) {
	if s.kind == 0 {
		return dst, nil
	}
	if s.kind == 'u' {
		if a := bytes.TrimSpace(s.args); len(a) > 0 && (a[0] != '{' || !json.Valid(a)) {
			return dst, errors.New("tool call arguments are not a JSON object")
		}
	}
	dst = append(dst, "event: content_block_stop\ndata: "...)
	dst = append(dst, `{"type":"content_block_stop","index":`...)
	dst = strconv.AppendInt(dst, int64(s.block), 10)
	s.kind, s.block = 0, -1
	return append(dst, "}\n\n"...), nil
}

func (s *Stream) messageDelta(dst []byte) []byte {
	s.deltaOut = true
	reason := s.reason
	if reason == "" {
		reason = "end_turn" // a stream that ended without a finish reason
	}
	dst = append(dst, "event: message_delta\ndata: "...)
	dst = append(dst, `{"type":"message_delta","delta":{"stop_reason":`...)
	dst = appendString(dst, reason)
	dst = append(dst, `,"stop_sequence":`...)
	if reason == "stop_sequence" {
		dst = appendString(dst, s.seq)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `},"usage":{"input_tokens":`...)
	dst = strconv.AppendInt(dst, s.in, 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, s.out, 10)
	return append(dst, "}}\n\n"...)
}

func event(dst []byte, name, data string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// parse reads the fields of one chunk into s.f. Key order is free, so a
// choice's fields are gathered before its index says whether they count.
func (s *Stream) parse(data []byte) (*chunkFields, bool) {
	f := &s.f
	*f = chunkFields{tools: f.tools[:0]}
	sc := &s.sc
	sc.Reset(data, 0)
	ok := sc.Object(func(key []byte) bool {
		switch string(key) {
		case "id":
			if s.started {
				return sc.Skip() // only message_start needs it
			}
			f.id = sc.text()
		case "choices":
			if sc.Null() {
				return true
			}
			return sc.Array(func() bool { return s.parseChoice(f) })
		case "usage":
			if sc.Null() {
				return true
			}
			f.usage = true
			return sc.chatUsage(&f.in, &f.out)
		case "error":
			if sc.Null() {
				return true
			}
			f.isError = true
			return sc.Skip()
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
	return f, ok && sc.End()
}

func (s *Stream) parseChoice(f *chunkFields) bool {
	sc := &s.sc
	var idx int64
	var content []byte
	var finish, seq string
	hasContent := false
	first := len(f.tools)
	ok := sc.Object(func(key []byte) bool {
		switch string(key) {
		case "index":
			idx = sc.integer()
		case "delta":
			if sc.Null() {
				return true
			}
			return sc.Object(func(k []byte) bool {
				switch string(k) {
				case "content":
					if !sc.Null() {
						hasContent = true
						content = sc.lit()
					}
				case "tool_calls":
					if sc.Null() {
						return true
					}
					return sc.Array(func() bool { return s.parseTool(f) })
				default:
					return sc.Skip()
				}
				return !sc.Failed()
			})
		case "finish_reason":
			finish = sc.text()
		case "stop_reason":
			if sc.Peek() != '"' {
				return sc.Skip() // null, or a stop token id
			}
			seq = sc.text()
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
	if idx != 0 {
		f.tools = f.tools[:first]
		return ok
	}
	if hasContent {
		f.hasContent, f.content = true, content
	}
	if finish != "" {
		f.finish, f.seq = finish, seq
	}
	return ok
}

func (s *Stream) parseTool(f *chunkFields) bool {
	var t toolDelta
	ok := s.sc.toolCall(&t, true)
	f.tools = append(f.tools, t)
	return ok
}

// toolCall reads a chat tool call, whole (a completion's) or a stream's
// delta of one, into t; its index only when withIndex (a completion's
// calls are in order, and their index is not read).
func (sc *scanner) toolCall(t *toolDelta, withIndex bool) bool {
	return sc.Object(func(key []byte) bool {
		switch string(key) {
		case "index":
			if !withIndex {
				return sc.Skip()
			}
			t.index = sc.integer()
		case "id":
			t.id = sc.text()
		case "function":
			if sc.Null() {
				return true
			}
			return sc.Object(func(k []byte) bool {
				switch string(k) {
				case "name":
					t.name = sc.text()
				case "arguments":
					t.args = sc.text()
				default:
					return sc.Skip()
				}
				return !sc.Failed()
			})
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}

// chatUsage reads a chat usage object's prompt and completion tokens.
func (sc *scanner) chatUsage(in, out *int64) bool {
	return sc.Object(func(k []byte) bool {
		switch string(k) {
		case "prompt_tokens":
			*in = sc.integer()
		case "completion_tokens":
			*out = sc.integer()
		default:
			return sc.Skip()
		}
		return !sc.Failed()
	})
}
