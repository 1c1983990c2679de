package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The wire-level faults, by the names X-Sim-Fault and Options.Fault take.
// Each answers a valid POST request (after the latency, except hang) in a
// way a well-behaved HTTP server never does; see the package documentation
// for the exact bytes.
const (
	FaultExtraResponse    = "extra-response"
	FaultExtraCRLF        = "extra-crlf"
	FaultNoContentBody    = "no-content-body"
	FaultShortLength      = "short-length"
	FaultLateResponse     = "late-response"
	FaultSwitchProtocols  = "switch-protocols"
	FaultInformational    = "informational"
	FaultCloseAfterRead   = "close-after-read"
	FaultResetAfterRead   = "reset-after-read"
	FaultGarbage          = "garbage"
	FaultWrongContentType = "wrong-content-type"
	FaultBadChunk         = "bad-chunk"
	FaultNULHeader        = "nul-header"
	FaultHang             = "hang"
	FaultDieMidStream     = "die-mid-stream"
)

// faults describes each fault for the flag help, in documentation order.
var faults = []struct{ name, help string }{
	{FaultExtraResponse, "the answer, then a second complete response carrying LEAKED-<name>; the connection stays open"},
	{FaultExtraCRLF, "the answer followed by a stray CRLF; the connection stays open"},
	{FaultNoContentBody, "204 No Content followed by the bytes LEAKED-<name>; the connection stays open"},
	{FaultShortLength, "a JSON body with multi-byte UTF-8 whose Content-Length counts characters, not bytes; the connection stays open"},
	{FaultLateResponse, "the answer, then 20ms later, if the connection is idle, an unsolicited response carrying LEAKED-<name>"},
	{FaultSwitchProtocols, "101 Switching Protocols (Upgrade: websocket) that nothing asked for, then the answer"},
	{FaultInformational, "102 Processing, then the answer"},
	{FaultCloseAfterRead, "the connection closed after the request is read, nothing written"},
	{FaultResetAfterRead, "the connection reset (RST) after the request is read, nothing written"},
	{FaultGarbage, "bytes that are not HTTP, then the connection closed"},
	{FaultWrongContentType, "200 with an HTML page as text/html (valid HTTP)"},
	{FaultBadChunk, "a chunked head and an invalid chunk-size line, then the connection closed"},
	{FaultNULHeader, "the answer with a header value holding a NUL byte"},
	{FaultHang, "nothing at all until the client goes away"},
	{FaultDieMidStream, "a stream cut after half its content chunks (as X-Sim-Drop-After); JSON replies are served whole"},
}

// lateResponseDelay is how long late-response waits before its unsolicited
// response.
const lateResponseDelay = 20 * time.Millisecond

// FaultNames returns the names of the faults, in documentation order.
func FaultNames() []string {
	names := make([]string, len(faults))
	for i, f := range faults {
		names[i] = f.name
	}
	return names
}

func knownFault(name string) bool {
	for _, f := range faults {
		if f.name == name {
			return true
		}
	}
	return false
}

func faultHelp() string {
	var b strings.Builder
	for i, f := range faults {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "  %s: %s", f.name, f.help)
	}
	return b.String()
}

// serveFault answers p with fault (any but die-mid-stream, which stream
// handles).
func (s *Server) serveFault(w http.ResponseWriter, r *http.Request, fault string, p job, ov overrides) {
	ctx := r.Context()
	if fault == FaultHang {
		s.faults.Add(1)
		<-ctx.Done()
		return
	}
	if !sleepCtx(ctx, ov.latency) {
		s.cancelled.Add(1)
		return
	}
	s.faults.Add(1)
	if fault == FaultWrongContentType {
		page := "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n" +
			"<body><h1>502 Bad Gateway</h1><p>sim replica " + html.EscapeString(s.opt.Name) + "</p></body></html>\n"
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(page)))
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, page)
		return
	}

	nc, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.fail(w, http.StatusInternalServerError, fmt.Sprintf("sim: fault %s needs the connection: %v", fault, err))
		return
	}
	br := rw.Reader
	_ = nc.SetDeadline(time.Time{})

	var out []byte
	keep := true
	switch fault {
	case FaultExtraResponse:
		out = s.appendAnswer(out, p, ov)
		out = s.appendLeaked(out, p)
	case FaultExtraCRLF:
		out = s.appendAnswer(out, p, ov)
		out = append(out, "\r\n"...)
	case FaultNoContentBody:
		out = s.appendHead(out, "204 No Content", nil)
		out = append(out, "LEAKED-"+s.opt.Name...)
	case FaultShortLength:
		body := s.shortLengthBody(p)
		out = s.appendHead(out, "200 OK", []string{"Content-Type", "application/json", "Content-Length", strconv.Itoa(utf8.RuneCount(body))})
		out = append(out, body...)
	case FaultLateResponse:
		out = s.appendAnswer(out, p, ov)
	case FaultSwitchProtocols:
		out = append(out, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"...)
		out = s.appendAnswer(out, p, ov)
	case FaultInformational:
		out = append(out, "HTTP/1.1 102 Processing\r\n\r\n"...)
		out = s.appendAnswer(out, p, ov)
	case FaultCloseAfterRead:
		keep = false
	case FaultResetAfterRead:
		if tc := tcpConn(nc); tc != nil {
			_ = tc.SetLinger(0)
		}
		keep = false
	case FaultGarbage:
		out = append(out, "this is not http\r\n\r\n"...)
		keep = false
	case FaultBadChunk:
		out = s.appendHead(out, "200 OK", []string{"Content-Type", answerType(p), "Transfer-Encoding", "chunked"})
		out = append(out, "zz\r\n"...)
		keep = false
	case FaultNULHeader:
		ct, body := s.answerBytes(p, ov)
		out = s.appendHead(out, "200 OK", []string{"Content-Type", ct, "Content-Length", strconv.Itoa(len(body)), "X-Bad", "a\x00b"})
		out = append(out, body...)
	}
	if len(out) > 0 {
		if _, err := nc.Write(out); err != nil {
			keep = false
		}
	}
	if keep && fault == FaultLateResponse {
		keep = s.lateResponse(nc, br, p)
	}
	if !keep || r.Close {
		nc.Close()
		return
	}
	s.kept.serve(s, nc, br)
}

// lateResponse waits lateResponseDelay for the client's next request; if
// none arrives, it writes the unsolicited response. It reports whether the
// connection is still usable.
func (s *Server) lateResponse(nc net.Conn, br *bufio.Reader, p job) bool {
	_ = nc.SetReadDeadline(time.Now().Add(lateResponseDelay))
	_, err := br.Peek(1)
	_ = nc.SetReadDeadline(time.Time{})
	var ne net.Error
	switch {
	case err == nil: // a request arrived: the connection is not idle
		return true
	case errors.As(err, &ne) && ne.Timeout():
		_, err := nc.Write(s.appendLeaked(nil, p))
		s.late.Add(1)
		return err == nil
	default: // the client closed the connection
		return false
	}
}

// appendHead appends a response head: the status line, the headers given
// as name, value pairs, and X-Sim-Replica.
func (s *Server) appendHead(dst []byte, status string, kv []string) []byte {
	dst = append(dst, "HTTP/1.1 "...)
	dst = append(dst, status...)
	dst = append(dst, "\r\n"...)
	for i := 0; i+1 < len(kv); i += 2 {
		dst = append(dst, kv[i]...)
		dst = append(dst, ": "...)
		dst = append(dst, kv[i+1]...)
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "X-Sim-Replica: "...)
	dst = append(dst, s.opt.Name...)
	return append(dst, "\r\n\r\n"...)
}

// appendAnswer appends the valid answer to p as one response framed by
// Content-Length (a stream's events all at once).
func (s *Server) appendAnswer(dst []byte, p job, ov overrides) []byte {
	ct, body := s.answerBytes(p, ov)
	dst = s.appendHead(dst, "200 OK", []string{"Content-Type", ct, "Content-Length", strconv.Itoa(len(body))})
	return append(dst, body...)
}

// appendLeaked appends a complete response nobody asked for: a completion
// whose text is LEAKED-<name>.
func (s *Server) appendLeaked(dst []byte, p job) []byte {
	body := s.textCompletion(p, "LEAKED-"+s.opt.Name, "leaked")
	dst = s.appendHead(dst, "200 OK", []string{"Content-Type", "application/json", "Content-Length", strconv.Itoa(len(body))})
	return append(dst, body...)
}

// shortLengthBody is the JSON body of short-length: a completion whose text
// has multi-byte characters.
func (s *Server) shortLengthBody(p job) []byte {
	return s.textCompletion(p, "héllo wörld ✓", strconv.FormatInt(s.seq.Add(1), 10))
}

// textCompletion is a non-streamed answer with the given text in the shape
// of p's endpoint: a text_completion for /v1/completions, a response for
// /v1/responses (never stored), a Message for /v1/messages, and a
// chat.completion otherwise.
func (s *Server) textCompletion(p job, text, id string) []byte {
	n := countWords(text)
	var v any
	switch p.ep {
	case endpointResponses:
		v = s.responseWithText(p.resp, text, id, n)
	case endpointMessages:
		v = s.messageWithText(p.msg, text, id, n)
	default:
		resp := completionResponse{
			Created: time.Now().Unix(),
			Model:   s.opt.Model,
			Usage:   &usage{PromptTokens: p.gen.promptTokens, CompletionTokens: n, TotalTokens: p.gen.promptTokens + n},
		}
		stop := "stop"
		if p.ep == endpointCompletions {
			resp.ID, resp.Object = "cmpl-"+id, "text_completion"
			resp.Choices = []textChoice{{Text: text, FinishReason: &stop}}
		} else {
			resp.ID, resp.Object = "chatcmpl-"+id, "chat.completion"
			resp.Choices = []chatChoice{{Message: textMessage(text), FinishReason: stop}}
		}
		v = resp
	}
	b, err := json.Marshal(v)
	if err != nil { // cannot happen with the package's own types
		return []byte(`{}`)
	}
	return b
}

// tcpConn finds the TCP connection under c, nil if there is none.
func tcpConn(c net.Conn) *net.TCPConn {
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

// ---- connections kept after a fault ----

// takeover serves the connections of faults that keep their connection
// once the fault's bytes are written: net/http let go of them when they
// were hijacked, so an http.Server of the Server's own, started on first
// use, reads their next requests. Close stops it.
type takeover struct {
	mu     sync.Mutex
	srv    *http.Server
	ln     *connListener
	closed bool
}

// serve hands c, with what br has buffered of it, to the takeover server.
func (k *takeover) serve(s *Server, c net.Conn, br *bufio.Reader) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		c.Close()
		return
	}
	if k.srv == nil {
		k.ln = &connListener{conns: make(chan net.Conn), done: make(chan struct{})}
		k.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
		go func(srv *http.Server, ln net.Listener) { _ = srv.Serve(ln) }(k.srv, k.ln)
	}
	ln := k.ln
	k.mu.Unlock()
	if bc, ok := c.(*bufConn); ok && bc.r.Buffered() == 0 {
		c = bc.Conn // nothing left in the inner buffer: no need to nest
	}
	if br != nil && br.Buffered() > 0 {
		c = &bufConn{Conn: c, r: br}
	}
	if !ln.push(c) {
		c.Close()
	}
}

func (k *takeover) close() error {
	k.mu.Lock()
	k.closed = true
	srv := k.srv
	k.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Close()
}

// Close closes the connections the Server kept open after faults (and
// stops serving them). Connections net/http serves for the caller are the
// caller's to close. Faults answered after Close close their connection.
// It also stops the performance model: requests it has not answered wait
// for their clients to leave.
func (s *Server) Close() error {
	if s.engine != nil {
		s.engine.close()
	}
	return s.kept.close()
}

// connListener is a net.Listener whose connections are handed to it.
type connListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return keptAddr{} }

type keptAddr struct{}

func (keptAddr) Network() string { return "sim" }
func (keptAddr) String() string  { return "kept-connections" }

// bufConn is a connection whose first bytes were already read into r.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// NetConn returns the underlying connection.
func (c *bufConn) NetConn() net.Conn { return c.Conn }
