package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/internal/wire"
	"github.com/triagegw/triage/router/pool"
)

// upstream is a response whose status line has been read; its head and
// body are still on the connection. It lives in its conn (conn.up): read
// what is needed of it before the conn goes back to the idle stack.
type upstream struct {
	c      *conn
	status int
	http11 bool
	hook   cancelHook
}

// stop unregisters the cancel hook, and reports false if it fired.
func (u *upstream) stop() bool { return u.hook.release() }

// close drops the connection: the response will not be read to its end.
func (u *upstream) close() {
	u.stop()
	u.c.nc.Close()
}

// connWatcher is a request context that moves a connection's deadline
// into the past when it is canceled, without the allocations of
// context.AfterFunc (the h1 server's contexts are).
type connWatcher interface {
	WatchConn(conn interface{ SetDeadline(time.Time) error }) bool
	UnwatchConn() bool
}

// cancelHook interrupts a connection's blocked I/O when the request's
// context ends: the context's own watch, or else context.AfterFunc.
type cancelHook struct {
	w    connWatcher
	stop func() bool
	ctx  context.Context // for canceled
}

func hookCancel(ctx context.Context, c *conn) cancelHook {
	if w, ok := ctx.(connWatcher); ok {
		w.WatchConn(c.nc) // canceled already: the deadline is moved now
		return cancelHook{w: w, ctx: ctx}
	}
	return cancelHook{stop: context.AfterFunc(ctx, c.interrupt), ctx: ctx}
}

// canceled reports whether the request's context has ended. Both hooks
// make Err say so before they move the deadline into the past, so a
// caller that sets a later deadline and then finds canceled false knows
// the cancel's deadline, if it comes, lands after its own.
func (h cancelHook) canceled() bool { return h.ctx != nil && h.ctx.Err() != nil }

// release ends the hook, and reports false when the context ended first
// (the connection's deadline was moved).
func (h cancelHook) release() bool {
	if h.w != nil {
		return h.w.UnwatchConn()
	}
	return h.stop()
}

// notSentError marks a request that provably did not reach the replica in
// full: the write failed, so the replica cannot have acted on it, and it is
// safe to send again (on a fresh connection, or to another replica). Once
// a request is written, nothing is sent again: a replica that reads a
// whole POST and then closes without answering may still be generating it.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "request not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// max1xx bounds the 100 Continue responses skipped before the real one.
const max1xx = 5

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// inlineBody is the largest body copied into the request head buffer so the
// whole request goes out in one write; larger ones go by writev.
const inlineBody = 16 << 10

// lateHeadError is a response head that did not come within the
// attempt's hurry (pool.Retry.FirstByteTimeout): the request is abandoned
// there and may be tried on another replica.
type lateHeadError struct{ after time.Duration }

func (e *lateHeadError) Error() string {
	return "no response head within " + e.after.String() + " (retry.first_byte_timeout)"
}

// Timeout makes it a timeout to errorFor: a 504 when it is the last try.
func (e *lateHeadError) Timeout() bool   { return true }
func (e *lateHeadError) Temporary() bool { return true }

// maxPieces bounds the slices pieces returns: Body cut around the model,
// the usage edit and the salt's three, and their tokens.
const maxPieces = 2*(2+len(openai.SaltEdits{})) + 1

// pieces returns the body as it goes upstream, with its edits applied: at
// most maxPieces slices of Body and the edits' tokens, in order, never
// copied.
func (req *Request) pieces(dst *[maxPieces][]byte) [][]byte {
	out := dst[:0]
	var es [2 + len(openai.SaltEdits{})]openai.Edit
	n := 0
	if req.ModelTok != nil {
		es[n] = openai.Edit{Span: req.ModelSpan, Tok: req.ModelTok}
		n++
	}
	if req.Edit.Tok != nil {
		es[n] = req.Edit
		n++
	}
	for _, e := range req.Salt {
		if e.Tok != nil {
			es[n] = e
			n++
		}
	}
	// By start, keeping the order above among edits at the same place
	// (insertions after the object's '{').
	for i := 1; i < n; i++ {
		for j := i; j > 0 && es[j].Span.Start < es[j-1].Span.Start; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
	at := 0
	for _, e := range es[:n] {
		out = append(out, req.Body[at:e.Span.Start], e.Tok)
		at = e.Span.End
	}
	return append(out, req.Body[at:])
}

// roundTrip writes req on c, with the trace context tc (header lines; nil:
// none), and reads the status line, skipping 100 Continue. With hurry > 0,
// a head that takes longer is a lateHeadError.
func (t *Transport) roundTrip(ctx context.Context, c *conn, b *pool.Backend, req *Request, pol *Policy, deadline time.Time, hurry time.Duration, tc []byte) (*upstream, error) {
	nc := c.nc
	fb := pol.FirstByte
	late := hurry > 0 && hurry < fb
	if late {
		fb = hurry
	}
	d := time.Now().Add(fb)
	if deadline.Before(d) {
		d, late = deadline, false
	}
	_ = nc.SetDeadline(d)
	hook := hookCancel(ctx, c)
	fail := func(err error) (*upstream, error) {
		hook.release()
		nc.Close()
		return nil, err
	}

	bp := bufPool.Get().(*[]byte)
	head := appendRequestHead((*bp)[:0], b, req, tc)
	var pieces [maxPieces][]byte
	body := req.pieces(&pieces)
	bodyLen := 0
	for _, p := range body {
		bodyLen += len(p)
	}
	head = appendContentLength(head, bodyLen)
	var err error
	if bodyLen <= inlineBody {
		for _, p := range body {
			head = append(head, p...)
		}
		_, err = nc.Write(head)
	} else {
		bufs := append(net.Buffers{head}, body...)
		_, err = bufs.WriteTo(nc)
	}
	*bp = head
	bufPool.Put(bp)
	if err != nil {
		return fail(&notSentError{fmt.Errorf("write request: %w", err)})
	}

	for n1xx := 0; ; n1xx++ {
		line, err := readLine(c.br)
		if err != nil {
			if late && isTimeout(err) && ctx.Err() == nil {
				return fail(&lateHeadError{hurry})
			}
			if c.reused && len(line) == 0 && c.br.Buffered() == 0 && isClosed(err) {
				err = fmt.Errorf("%w (the replica closed a kept-alive connection after the request was sent; not retried, it may have been received)", err)
			}
			return fail(fmt.Errorf("read response: %w", err))
		}
		status, http11, ok := parseStatusLine(line)
		if !ok {
			return fail(fmt.Errorf("malformed status line %q", truncate(line)))
		}
		if status >= 100 && status < 200 {
			// The gateway sends no Expect and asks for no upgrade: a 100
			// is tolerated, any other 1xx (101 Switching Protocols above
			// all) is an answer to a question it did not ask.
			if status != http.StatusContinue {
				return fail(fmt.Errorf("unsolicited %d response", status))
			}
			if n1xx == max1xx {
				return fail(errors.New("too many 100 Continue responses"))
			}
			if err := skipHeaders(c.br); err != nil {
				return fail(fmt.Errorf("read 100 response: %w", err))
			}
			continue
		}
		c.up = upstream{c: c, status: status, http11: http11, hook: hook}
		return &c.up, nil
	}
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// readLine reads one line, blocking as needed; it fails on a line longer
// than the read buffer.
func readLine(br interface {
	ReadSlice(byte) ([]byte, error)
}) ([]byte, error) {
	return br.ReadSlice('\n')
}

// skipHeaders reads the header section of a 100 response, which must be
// well formed too.
func skipHeaders(br interface {
	ReadSlice(byte) ([]byte, error)
}) error {
	for lines := 0; ; lines++ {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) == 0 {
			return nil
		}
		if lines >= maxHeaderLines || !wire.FieldLine(line) {
			return fmt.Errorf("malformed header line %q", truncate(line))
		}
	}
}

// parseStatusLine parses "HTTP/1.x SSS reason".
func parseStatusLine(line []byte) (status int, http11, ok bool) {
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' {
		return 0, false, false
	}
	http11 = line[7] == '1'
	if !http11 && line[7] != '0' {
		return 0, false, false
	}
	d := line[9:12]
	if d[0] < '1' || d[0] > '5' || d[1] < '0' || d[1] > '9' || d[2] < '0' || d[2] > '9' {
		return 0, false, false
	}
	// After the code: a space and the reason, or the line's end (CRLF or LF).
	if rest := line[12:]; len(rest) > 0 && rest[0] != ' ' && string(rest) != "\r\n" && string(rest) != "\n" {
		return 0, false, false
	}
	return int(d[0]-'0')*100 + int(d[1]-'0')*10 + int(d[2]-'0'), http11, true
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// appendRequestHead writes the request line and headers, without
// Content-Length and the final blank line. With req.Trace, tc (header
// lines) carries the trace context in place of the client's.
func appendRequestHead(dst []byte, b *pool.Backend, req *Request, tc []byte) []byte {
	dst = append(dst, req.Method...)
	dst = append(dst, ' ')
	dst = append(dst, b.BasePath...)
	dst = append(dst, req.Path...)
	if req.RawQuery != "" {
		dst = append(dst, '?')
		dst = append(dst, req.RawQuery...)
	}
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, b.Host...)
	dst = append(dst, "\r\n"...)
	var connArr [4]string
	connTokens := connArr[:0]
	for _, v := range req.Header["Connection"] {
		connTokens = appendConnTokens(connTokens, v)
	}
	forward := func(k string) bool {
		return !dropRequestHeader(k) && !listed(connTokens, k) && (req.Trace == nil || k != "Traceparent" && k != "Tracestate")
	}
	if req.HeaderNames != nil {
		for i, k := range req.HeaderNames {
			if k != "" && forward(k) {
				dst = appendField(dst, k, req.HeaderValues[i])
			}
		}
	} else {
		for k, vs := range req.Header {
			if forward(k) {
				for _, v := range vs {
					dst = appendField(dst, k, v)
				}
			}
		}
	}
	switch {
	case b.Anthropic:
		if b.APIKey != "" {
			dst = append(dst, "X-Api-Key: "...)
			dst = append(dst, b.APIKey...)
			dst = append(dst, "\r\n"...)
		}
		if len(req.Header["Anthropic-Version"]) == 0 {
			dst = append(dst, "Anthropic-Version: 2023-06-01\r\n"...)
		}
	case b.APIKey != "":
		dst = append(dst, "Authorization: Bearer "...)
		dst = append(dst, b.APIKey...)
		dst = append(dst, "\r\n"...)
	}
	if req.RequestID != "" {
		dst = append(dst, "X-Request-Id: "...)
		dst = append(dst, req.RequestID...)
		dst = append(dst, "\r\n"...)
	}
	return append(dst, tc...)
}

func appendField(dst []byte, k, v string) []byte {
	dst = append(dst, k...)
	dst = append(dst, ": "...)
	dst = append(dst, v...)
	return append(dst, "\r\n"...)
}

func appendContentLength(dst []byte, n int) []byte {
	dst = append(dst, "Content-Length: "...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, "\r\n\r\n"...)
}

// dropRequestHeader lists the client headers never forwarded: hop-by-hop
// headers (RFC 9110 7.6.1), the client's credentials, what the gateway sets
// itself, and Accept-Encoding, so replicas answer uncompressed and the
// gateway can read usage from the tail of a stream.
func dropRequestHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Host", "Content-Length", "Authorization", "X-Api-Key", "Expect", "Accept-Encoding", "X-Request-Id":
		return true
	}
	return false
}

// dropResponseHeader lists upstream headers not relayed: hop-by-hop ones,
// and Date, which the gateway's server sets.
func dropResponseHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Date":
		return true
	}
	return false
}

// appendConnTokens appends the canonical names a Connection (or Trailer)
// header value lists. "close", "keep-alive" and the header names
// wire.CanonicalKey knows cost no allocation: a replica that says
// "Connection: keep-alive" on every answer is the common case.
func appendConnTokens[T string | []byte](dst []string, v T) []string {
	for start := 0; start < len(v); {
		end := start
		for end < len(v) && v[end] != ',' {
			end++
		}
		if tok := wire.TrimOWS(v[start:end]); len(tok) > 0 {
			if asciiEqualFold(tok, "close") {
				dst = append(dst, "Close")
			} else {
				dst = append(dst, wire.CanonicalKey(tok))
			}
		}
		start = end + 1
	}
	return dst
}

func listed(toks []string, k string) bool {
	for _, t := range toks {
		if t == k {
			return true
		}
	}
	return false
}
