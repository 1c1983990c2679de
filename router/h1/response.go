package h1

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/triagegw/triage/router/internal/wire"
)

// pendingMax is how much of a response without Content-Length is held
// before its head is sent: a reply that fits goes out with a
// Content-Length, a longer one (or one flushed early) chunked.
const pendingMax = 4 << 10

// response is the http.ResponseWriter of a fast-path request. Bytes go to
// the connection's write buffer and reach the client on Flush, when the
// buffer fills, or when the handler returns.
type response struct {
	c      *conn
	req    *http.Request
	body   *body
	header http.Header

	status      int
	wroteHeader bool // the status is fixed
	committed   bool // the head is in the write buffer
	chunked     bool
	closeAfter  bool
	clen        int64 // the body's length, or -1 while unknown
	written     int64
	werr        error
}

func (w *response) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 4)
	}
	return w.header
}

// WriteHeader fixes the status. As in net/http, a 1xx status is sent at
// once with the headers set so far, and a second call is ignored.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.wroteHeader {
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.wroteHeader, w.status = true, code
	if v := w.header["Content-Length"]; len(v) > 0 {
		if n, ok := wire.ParseLength(v[0]); ok && len(v) == 1 {
			w.clen = n
		} else {
			delete(w.header, "Content-Length")
		}
	}
}

func (w *response) writeInformational(code int) {
	bw := w.c.bw
	writeStatusLine(bw, code)
	w.writeHeaderLines()
	_, _ = bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		w.werr = err
	}
}

func (w *response) bodyAllowed() bool {
	s := w.status
	return !(s >= 100 && s < 200 || s == http.StatusNoContent || s == http.StatusNotModified)
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, w.werr
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.werr != nil {
		return 0, w.werr
	}
	if w.clen >= 0 && w.written+int64(len(p)) > w.clen {
		return 0, http.ErrContentLength
	}
	if !w.committed {
		if w.clen < 0 && len(w.c.pend)+len(p) <= pendingMax {
			w.c.pend = append(w.c.pend, p...)
			w.written += int64(len(p))
			return len(p), nil
		}
		w.commit(p)
	}
	w.written += int64(len(p))
	w.frame(p)
	if w.werr != nil {
		return 0, w.werr
	}
	return len(p), nil
}

// frame writes body bytes, in a chunk when the body is chunked.
func (w *response) frame(p []byte) {
	if len(p) == 0 || w.werr != nil {
		return
	}
	bw := w.c.bw
	var err error
	if w.chunked {
		if bw.Available() < 18 {
			err = bw.Flush() // room for the size line in the buffer itself
		}
		hex := bw.AvailableBuffer()
		hex = strconv.AppendInt(hex, int64(len(p)), 16)
		hex = append(hex, '\r', '\n')
		if err == nil {
			_, err = bw.Write(hex)
		}
	}
	if err == nil {
		_, err = bw.Write(p)
	}
	if err == nil && w.chunked {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		w.werr = err
	}
}

func (w *response) Flush() { _ = w.FlushError() }

// FlushError sends the head and what is buffered, for http.ResponseController.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(nil)
	}
	if w.werr == nil {
		if err := w.c.bw.Flush(); err != nil {
			w.werr = err
		}
	}
	return w.werr
}

// EnableFullDuplex is for http.ResponseController: the fast path reads
// the request body and writes the response independently already.
func (w *response) EnableFullDuplex() error { return nil }

// commit writes the head to the write buffer, then the body bytes held so
// far. first is the write that made it necessary, if any (for sniffing).
func (w *response) commit(first []byte) {
	w.committed = true
	allowed := w.bodyAllowed()
	if w.clen < 0 && allowed {
		w.chunked = true
	}
	h := w.Header()
	if _, ok := h["Content-Type"]; !ok && allowed {
		sniff := w.c.pend
		if len(sniff) == 0 {
			sniff = first
		}
		if len(sniff) > 0 {
			h["Content-Type"] = []string{http.DetectContentType(sniff)}
		}
	}
	if w.req.Close || w.c.s.inShutdown.Load() || hasToken(h["Connection"], "close") ||
		(w.body != nil && w.body.unread()) {
		w.closeAfter = true
	}
	bw := w.c.bw
	writeStatusLine(bw, w.status)
	w.writeHeaderLines()
	if _, ok := h["Date"]; !ok {
		_, _ = bw.Write(dateLine())
	}
	switch {
	case !allowed:
	case w.chunked:
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	default:
		_, _ = bw.WriteString("Content-Length: ")
		l := bw.AvailableBuffer()
		l = strconv.AppendInt(l, w.clen, 10)
		l = append(l, '\r', '\n')
		_, _ = bw.Write(l)
	}
	if w.closeAfter {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	pend := w.c.pend
	w.c.pend = pend[:0]
	w.frame(pend)
}

// writeHeaderLines writes the handler's headers, except the framing ones
// the server sets itself; newlines in values become spaces, as in net/http.
func (w *response) writeHeaderLines() {
	bw := w.c.bw
	for k, vs := range w.header {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Connection":
			continue
		}
		if !wire.Token(k) {
			continue
		}
		for _, v := range vs {
			if strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0 {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			// Appended to the buffer's free space and handed to Write
			// once when the line fits there; four writes otherwise.
			if n := len(k) + len(v) + 4; n <= bw.Available() {
				l := bw.AvailableBuffer()
				l = append(l, k...)
				l = append(l, ':', ' ')
				l = append(l, v...)
				l = append(l, '\r', '\n')
				_, _ = bw.Write(l)
				continue
			}
			_, _ = bw.WriteString(k)
			_, _ = bw.WriteString(": ")
			_, _ = bw.WriteString(v)
			_, _ = bw.WriteString("\r\n")
		}
	}
}

// finish ends the response after the handler returned and reports whether
// the connection may be reused.
func (w *response) finish() bool {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		if w.clen < 0 && w.bodyAllowed() {
			w.clen = int64(len(w.c.pend))
		}
		w.commit(nil)
	}
	switch {
	case w.chunked:
		_, _ = w.c.bw.WriteString("0\r\n\r\n")
	case w.clen >= 0 && w.written != w.clen && w.bodyAllowed():
		w.closeAfter = true // the body is short: the client must see it end
	}
	if err := w.c.bw.Flush(); err != nil {
		return false
	}
	return !w.closeAfter && w.werr == nil
}

func hasToken(vs []string, tok string) bool {
	for _, v := range vs {
		if wire.HasToken(v, tok) {
			return true
		}
	}
	return false
}

// writeStatusLine writes the status line; common codes' lines are made
// once, others are appended in the writer's own buffer (nothing escapes).
func writeStatusLine(bw *bufio.Writer, code int) {
	if code >= 100 && code < len(statusLines) && statusLines[code] != "" {
		_, _ = bw.WriteString(statusLines[code])
		return
	}
	l := bw.AvailableBuffer()
	l = append(l, "HTTP/1.1 "...)
	l = strconv.AppendInt(l, int64(code), 10)
	l = append(l, " status code "...)
	l = strconv.AppendInt(l, int64(code), 10)
	l = append(l, '\r', '\n')
	_, _ = bw.Write(l)
}

// statusLines are the status lines of the codes net/http knows.
var statusLines = func() (t [600]string) {
	for code := 100; code < len(t); code++ {
		if text := http.StatusText(code); text != "" {
			t[code] = "HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\n"
		}
	}
	return t
}()

// dateLine is the Date header line, formatted once a second.
func dateLine() []byte {
	now := time.Now()
	sec := now.Unix()
	if d := date.Load(); d != nil && d.sec == sec {
		return d.line
	}
	l := append([]byte("Date: "), now.UTC().Format(http.TimeFormat)...)
	l = append(l, '\r', '\n')
	date.Store(&dateVal{sec: sec, line: l})
	return l
}

type dateVal struct {
	sec  int64
	line []byte
}

var date atomic.Pointer[dateVal]
