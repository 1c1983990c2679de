package proxy

import (
	"bytes"
	"errors"
	"strconv"
	"sync"
)

// Translator rewrites a response into the client's API shape on its way to
// the client: an Anthropic Messages client served by a chat-completions
// pool, say. The gateway's own errors take the client's shape through
// Request.WriteError. One belongs to one request; the proxy calls it from the
// goroutine that relays, and only for the attempt whose answer is relayed.
type Translator interface {
	// Event appends the translation of one event of a 2xx event stream:
	// its event name (empty when it has none) and its data, the data:
	// lines joined by '\n'. An error ends the stream with Fail.
	Event(dst, name, data []byte) ([]byte, error)
	// End appends what follows the last event once the replica's body
	// ended. An error means the stream ended before its end (no terminal
	// event): the caller appends Fail.
	End(dst []byte) ([]byte, error)
	// Fail appends the in-band error that ends a stream which broke or
	// could not be translated. Nothing follows it.
	Fail(dst []byte, msg string) []byte
	// Body translates a whole response that is not a 2xx event stream (an
	// answer, or an error with the replica's status) and returns the
	// status and JSON body to send, appended to dst (which it may also
	// leave unused).
	Body(dst []byte, status int, body []byte) (int, []byte)
}

// maxTranslated bounds what is held to translate: a whole non-streamed
// body, or one event of a stream. A chat completion is rarely more than a
// few hundred KiB; past this the answer is refused (a 502), not cut.
const maxTranslated = 16 << 20

// errTranslate marks a stream ended in band because an event could not be
// translated; what the client saw is complete (it ends with an error event).
var errTranslate = errors.New("upstream response could not be translated")

// jsonType is a translated body's Content-Type value; shared, never
// modified.
var jsonType = []string{"application/json"}

// translation holds a response's state between reads.
type translation struct {
	tr     Translator
	events bool   // a 2xx event stream, translated event by event
	held   []byte // an event whose end has not arrived, or (events false) the body so far
	out    []byte // translated output, sent once per read
	name   []byte // scratch: the event's name
	data   []byte // scratch: the event's data
}

var translations = sync.Pool{New: func() any {
	return &translation{held: make([]byte, 0, 4096), out: make([]byte, 0, 4096)}
}}

func (x *translation) release() {
	if cap(x.held) > 64<<10 {
		x.held = make([]byte, 0, 4096)
	}
	if cap(x.out) > 64<<10 {
		x.out = make([]byte, 0, 4096)
	}
	if cap(x.data) > 64<<10 {
		x.data = nil
	}
	x.tr, x.events = nil, false
	x.held, x.out, x.name, x.data = x.held[:0], x.out[:0], x.name[:0], x.data[:0]
	translations.Put(x)
}

// write takes the next bytes of the body. A stream's complete events are
// translated and sent together; a body is held until its end.
func (x *translation) write(r *relayer, p []byte) error {
	if !x.events {
		if len(x.held)+len(p) > maxTranslated {
			return errors.New("response too large to translate: more than " + strconv.Itoa(maxTranslated) + " bytes")
		}
		x.held = append(x.held, p...)
		return nil
	}
	buf := p
	if len(x.held) > 0 {
		x.held = append(x.held, p...)
		buf = x.held
	}
	out, at := x.out[:0], 0
	var err error
	for {
		end := eventEnd(buf, at)
		if end < 0 {
			break
		}
		if out, err = x.event(out, buf[at:end]); err != nil {
			out = x.tr.Fail(out, err.Error())
			x.out = out
			if serr := r.send(out); serr != nil {
				return serr
			}
			return errTranslate
		}
		at = end
	}
	x.out = out
	rest := buf[at:]
	if len(rest) > maxTranslated {
		x.out = x.tr.Fail(x.out, "upstream event larger than "+strconv.Itoa(maxTranslated)+" bytes")
		if serr := r.send(x.out); serr != nil {
			return serr
		}
		return errTranslate
	}
	x.held = append(x.held[:0], rest...) // may overlap: append moves, not copies forward
	return r.send(out)
}

// event parses one event (its lines and the blank line ending it) as the
// SSE format says: "event:" names it, "data:" lines join with '\n', lines
// starting with ':' are comments, a field's value loses one leading space.
// An event without data (a comment, a retry: hint) yields nothing.
func (x *translation) event(dst, ev []byte) ([]byte, error) {
	name, data := x.name[:0], x.data[:0]
	hasData := false
	for len(ev) > 0 {
		i := bytes.IndexByte(ev, '\n')
		line := ev
		if i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		field, val := line, []byte(nil)
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			field, val = line[:c], line[c+1:]
			if len(val) > 0 && val[0] == ' ' {
				val = val[1:]
			}
		}
		switch string(field) {
		case "event":
			name = append(name[:0], val...)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, val...)
			hasData = true
		}
	}
	x.name, x.data = name, data
	if !hasData {
		return dst, nil
	}
	return x.tr.Event(dst, name, data)
}

// end finishes a translated response once the body ended in full: a
// stream gets what closes it, a body is translated and sent whole with its
// head (which relay held back until now).
func (x *translation) end(r *relayer, status int) (int, error) {
	if !x.events {
		status, body := x.tr.Body(x.out[:0], status, x.held)
		x.out = body[:0]
		h := r.w.Header()
		h["Content-Type"] = jsonType
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
		r.w.WriteHeader(status)
		r.dirty = true
		return status, r.send(body)
	}
	// An event the body ended inside is dropped, as SSE clients drop one.
	out, err := x.tr.End(x.out[:0])
	if err != nil {
		out = x.tr.Fail(out, err.Error())
	}
	x.out = out
	if serr := r.send(out); serr != nil {
		return status, serr
	}
	if err != nil {
		return status, errTranslate
	}
	return status, nil
}

// broken ends a translated stream whose body broke upstream with an
// in-band error, so the client sees an error rather than a cut.
func (x *translation) broken(r *relayer) error {
	x.out = x.tr.Fail(x.out[:0], "upstream stream broke before its end")
	return r.send(x.out)
}
