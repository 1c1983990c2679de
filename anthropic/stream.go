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
	toolIdx  int
	args     []byte
	next     int // index of the next block to open
	finished bool
	reason   string
	seq      string
	usage    bool
	in, out  int64
	deltaOut bool // message_delta sent
}

type streamChunk struct {
	ID      string `json:"id"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   *string        `json:"content"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
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
	data = bytes.TrimSpace(data)
	if s.done {
		return dst, errors.New("upstream stream continued after [DONE]")
	}
	if string(data) == "[DONE]" {
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

	// A fresh chunk each time: encoding/json does not clear fields a
	// reused struct or slice element already holds.
	c := new(streamChunk)
	if err := json.Unmarshal(data, c); err != nil {
		return dst, errors.New("upstream chunk is not JSON: " + err.Error())
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		msg := FromOpenAIError(500, data).Message
		return dst, errors.New("upstream error: " + msg)
	}
	if !s.started {
		dst = s.start(dst, c.ID)
	}
	var err error
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue // Messages has one choice
		}
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			if s.kind != 't' {
				if dst, err = s.closeBlock(dst); err != nil {
					return dst, err
				}
				dst = s.openBlock(dst, 't', `{"type":"text","text":""}`)
			}
			dst = s.delta(dst, `{"type":"text_delta","text":`, *ch.Delta.Content)
		}
		for j := range ch.Delta.ToolCalls {
			tc := &ch.Delta.ToolCalls[j]
			if s.kind != 'u' || tc.Index != s.toolIdx {
				if dst, err = s.closeBlock(dst); err != nil {
					return dst, err
				}
				s.toolIdx = tc.Index
				b := append(make([]byte, 0, 64), `{"type":"tool_use","id":`...)
				b = appendString(b, toolID(tc.ID, tc.Index))
				b = append(b, `,"name":`...)
				b = appendString(b, tc.Function.Name)
				b = append(b, `,"input":{}}`...)
				dst = s.openBlock(dst, 'u', string(b))
			}
			if a := tc.Function.Arguments; a != "" {
				if len(s.args)+len(a) > maxToolArgs {
					return dst, errors.New("tool call arguments exceed " + strconv.Itoa(maxToolArgs) + " bytes")
				}
				s.args = append(s.args, a...)
				dst = s.delta(dst, `{"type":"input_json_delta","partial_json":`, a)
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			if dst, err = s.closeBlock(dst); err != nil {
				return dst, err
			}
			s.finished = true
			s.reason, s.seq = stopReason(*ch.FinishReason, ch.StopReason)
		}
	}
	if c.Usage != nil {
		s.usage = true
		s.in, s.out = c.Usage.PromptTokens, c.Usage.CompletionTokens
	}
	// Usage may come with the finish chunk or after it; once both are in,
	// nothing else can change message_delta, so send it now rather than at
	// [DONE].
	if s.finished && s.usage && !s.deltaOut {
		dst = s.messageDelta(dst)
	}
	return dst, nil
}

// maxToolArgs bounds the arguments held for one tool call, so a hostile
// upstream cannot grow a Stream without limit.
const maxToolArgs = 4 << 20

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
