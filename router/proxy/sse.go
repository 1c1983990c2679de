package proxy

import (
	"bytes"
	"sync"

	"github.com/triagegw/triage/openai"
)

// maxHeldEvent bounds the beginning of an event held back until its end
// arrives. A usage chunk is a few hundred bytes and a token chunk not much
// more: an event larger than this is neither, and from there on the stream
// passes through as is.
const maxHeldEvent = 16 << 10

// sseFilter drops the usage chunk (openai.UsageEvent) from an event stream
// on its way to the client, for a client that did not ask for it. Events
// are looked at whole: bytes pass on as soon as the event they belong to is
// complete, which for a replica that writes one event per chunk is as soon
// as they arrive. Nothing is parsed but an event that holds an empty
// array, as a usage chunk's "choices" is (openai.MayHoldUsageEvent).
type sseFilter struct {
	held  []byte // the start of an event whose end has not arrived
	usage openai.Usage
	found bool
	off   bool // an event outgrew maxHeldEvent: the rest passes as is
}

var sseFilters = sync.Pool{New: func() any { return &sseFilter{held: make([]byte, 0, 1024)} }}

func (f *sseFilter) reset() {
	f.held = f.held[:0]
	if cap(f.held) > 2*maxHeldEvent {
		f.held = make([]byte, 0, 1024)
	}
	f.usage, f.found, f.off = openai.Usage{}, false, false
}

// write sends the complete events of held+p to the client, but the first
// usage chunk, and keeps an unfinished last event back.
func (f *sseFilter) write(r *relayer, p []byte) error {
	if f.off {
		return r.send(p)
	}
	// The common case, a read of whole token events: one scan, no split.
	if len(f.held) == 0 && endsEvent(p) && !openai.MayHoldUsageEvent(p) {
		return r.send(p)
	}
	buf := p
	if len(f.held) > 0 {
		f.held = append(f.held, p...)
		buf = f.held
	}
	sent, at := 0, 0
	for {
		end := eventEnd(buf, at)
		if end < 0 {
			break
		}
		if !f.found {
			if u, ok := openai.UsageEvent(buf[at:end]); ok {
				if err := r.send(buf[sent:at]); err != nil {
					return err
				}
				sent = end
				f.usage, f.found = u, true
			}
		}
		at = end
	}
	if err := r.send(buf[sent:at]); err != nil {
		return err
	}
	rest := buf[at:]
	if len(rest) > maxHeldEvent {
		f.off = true
		f.held = f.held[:0]
		return r.send(rest)
	}
	f.held = append(f.held[:0], rest...) // may overlap: append moves, not copies forward
	return nil
}

// end sends an event left unfinished when the body ended: the client gets
// every byte the replica sent but the usage chunk.
func (f *sseFilter) end(r *relayer) error {
	err := r.send(f.held)
	f.held = f.held[:0]
	return err
}

// endsEvent reports whether p ends with the blank line that ends an event.
func endsEvent(p []byte) bool {
	n := len(p)
	return n >= 2 && p[n-1] == '\n' && (p[n-2] == '\n' || n >= 3 && p[n-2] == '\r' && p[n-3] == '\n')
}

// eventEnd is the index after the blank line that ends the event starting
// at buf[at] (LF LF or CRLF CRLF), or -1 when it has not arrived.
func eventEnd(buf []byte, at int) int {
	for {
		i := bytes.IndexByte(buf[at:], '\n')
		if i < 0 {
			return -1
		}
		i += at
		switch {
		case i+1 >= len(buf):
			return -1
		case buf[i+1] == '\n':
			return i + 2
		case buf[i+1] == '\r':
			if i+2 >= len(buf) {
				return -1
			}
			if buf[i+2] == '\n' {
				return i + 3
			}
		}
		at = i + 1
	}
}

// eventStream reports whether a Content-Type value is text/event-stream,
// with or without parameters.
func eventStream(ctype []byte) bool {
	const mt = "text/event-stream"
	if len(ctype) < len(mt) || !asciiEqualFold(ctype[:len(mt)], mt) {
		return false
	}
	rest := ctype[len(mt):]
	return len(rest) == 0 || rest[0] == ';' || rest[0] == ' ' || rest[0] == '\t'
}
