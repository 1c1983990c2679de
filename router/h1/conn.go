package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/triagegw/triage/router/internal/wire"
)

const (
	stateIdle int32 = iota
	stateActive
	stateClosed
	stateNew // accepted, its first request not yet begun
)

// newConnGrace is how long Shutdown leaves a new connection to send its
// first request before closing it, as net/http does: a client (or a load
// balancer) that connected just before the listener closed has its request
// on the way, and closing the connection under it would lose the request.
const newConnGrace = 5 * time.Second

const (
	watchOff = iota
	watchArmed
	watchRunning
)

// bufSize is the connection's read and write buffer: a request head must
// fit in it to take the fast path.
const bufSize = 4 << 10

// maxDiscard is how much of a body the handler left unread is read and
// dropped to keep the connection; beyond it the connection is closed, as in
// net/http.
const maxDiscard = 256 << 10

type conn struct {
	s  *Server
	nc net.Conn
	cr connReader
	br *bufio.Reader
	bw *bufio.Writer
	sw sendWriter
	// readDeadline is the current request's: reading its head and body
	// must end by then.
	readDeadline time.Time
	ctx          context.Context
	remote       string
	state        atomic.Int32
	born         time.Time   // when it was accepted
	pend         []byte      // reused buffer for response bytes written before the head
	hdr          http.Header // the response header map, reused by each request
	rdl          time.Time   // the read deadline on the connection (zero: none); the serving goroutine's

	readErr  bool        // reading the request failed: the connection cannot be reused
	bodyDone atomic.Bool // the request body has been read to its end

	// The watch for a departing client, started by a timer.
	wmu    sync.Mutex
	wt     *time.Timer
	wstate int
	wabort bool
	wdone  chan struct{}
	gone   bool    // the watch saw the client leave
	cancel *reqCtx // the current request's context, which the watch cancels
}

// connReader reads the connection, giving back first the byte a watch read
// when the client sent its next request early.
type connReader struct {
	nc      net.Conn
	hasByte bool
	b       [1]byte
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.hasByte {
		if len(p) == 0 {
			return 0, nil
		}
		p[0] = r.b[0]
		r.hasByte = false
		return 1, nil
	}
	return r.nc.Read(p)
}

func newConn(s *Server, nc net.Conn, base context.Context) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String()}
	c.cr.nc = nc
	c.br = bufio.NewReaderSize(&c.cr, bufSize)
	c.sw = sendWriter{nc: nc, timeout: s.SendTimeout}
	c.bw = bufio.NewWriterSize(&c.sw, bufSize)
	c.ctx = context.WithValue(base, http.LocalAddrContextKey, nc.LocalAddr())
	c.state.Store(stateNew)
	c.born = time.Now()
	return c
}

func (c *conn) close() {
	c.state.Store(stateClosed)
	c.nc.Close()
	c.s.forget(c)
}

func (c *conn) serve() {
	s := c.s
	handed := false
	defer func() {
		if v := recover(); v != nil {
			s.logf("h1: panic on the connection from %s: %v\n%s", c.remote, v, debug.Stack())
		}
		if !handed {
			c.close()
		}
	}()
	begun := time.Now()
	if tc, ok := c.nc.(*tls.Conn); ok && !c.handshake(tc) {
		return
	}
	idle, read := s.idleTimeout(), s.ReadTimeout
	for first := true; ; first = false {
		var deadline time.Time // of reading this request's head and body
		switch {
		case first && read > 0:
			// The first request is read within ReadTimeout of the
			// connection's start (its TLS handshake included): a client
			// that connects and says nothing is not held for the idle
			// timeout.
			deadline = begun.Add(read)
			c.setReadDeadline(deadline)
		case c.br.Buffered() == 0 && idle > 0:
			if !c.waitNext(idle) {
				return
			}
		}
		if c.br.Buffered() == 0 {
			if _, err := c.br.Peek(1); err != nil {
				return
			}
		}
		from := stateIdle
		if first {
			from = stateNew
		}
		if !c.state.CompareAndSwap(from, stateActive) {
			return // closed by Shutdown
		}
		switch {
		case !deadline.IsZero():
		case read > 0:
			deadline = c.readDeadlineFor(read)
		case idle > 0 && !c.rdl.IsZero():
			c.setReadDeadline(time.Time{})
		}
		c.readDeadline = deadline
		h, st := c.readHead()
		switch st {
		case headBroken:
			return
		case headNotPlain:
			c.handoff()
			handed = true
			return
		}
		if !c.serveRequest(h) || s.inShutdown.Load() {
			return
		}
		if !c.state.CompareAndSwap(stateActive, stateIdle) {
			return
		}
	}
}

// setReadDeadline puts t on the connection and remembers it.
func (c *conn) setReadDeadline(t time.Time) {
	_ = c.nc.SetReadDeadline(t)
	c.rdl = t
}

// waitNext waits up to idle for the first byte of the next request. Under
// steady traffic it waits under the read deadline in place, the last
// request's, which comes first: the idle deadline is set only if that one
// fires, and a request that comes before keeps it (readDeadlineFor), so
// back-to-back requests move no deadline at all.
func (c *conn) waitNext(idle time.Duration) bool {
	now := time.Now()
	end := now.Add(idle)
	if c.rdl.IsZero() || !c.rdl.After(now) || c.rdl.After(end) {
		c.setReadDeadline(end)
	}
	for {
		_, err := c.br.Peek(1)
		if err == nil {
			return true
		}
		if !isTimeout(err) || !c.rdl.Before(end) {
			return false
		}
		c.setReadDeadline(end) // the last request's deadline passed: wait the rest of idle
	}
}

// readDeadlineFor puts the read deadline of a request that begins now on
// the connection, read from now, and returns it. A deadline in place that
// is earlier by less than read/16 stays (the last request's, under steady
// traffic): the request gets at least 15/16 of read, and no update.
func (c *conn) readDeadlineFor(read time.Duration) time.Time {
	want := time.Now().Add(read)
	if c.rdl.IsZero() || c.rdl.After(want) || want.Sub(c.rdl) > read/16 {
		c.setReadDeadline(want)
	}
	return c.rdl
}

// handoff gives the connection, from the request at its read position, to
// the fallback net/http server.
func (c *conn) handoff() {
	c.s.forget(c)
	h := &handedConn{Conn: c.nc, br: c.br, send: c.s.SendTimeout}
	if !c.readDeadline.IsZero() {
		h.cap.Store(c.readDeadline.UnixNano())
	}
	c.s.handed.deliver(h)
}

// handedConn replays what the fast path buffered before reading on. Until
// net/http has read the request it was handed, its read deadline cannot
// move past the one the fast path set (net/http would restart it: a slow
// head would get twice ReadTimeout). Writes get SendTimeout each.
type handedConn struct {
	net.Conn
	br   *bufio.Reader
	cap  atomic.Int64 // unix nanos; 0 once the handed request is read
	send time.Duration
	sent time.Time // the write deadline in place
}

func (h *handedConn) SetReadDeadline(t time.Time) error {
	if c := h.cap.Load(); c != 0 {
		switch {
		case t.IsZero():
			// net/http clears the deadline once it has read the whole
			// request, to watch for the client leaving: the cap is done.
			h.cap.Store(0)
		case t.UnixNano() > c:
			t = time.Unix(0, c)
		}
	}
	return h.Conn.SetReadDeadline(t)
}

func (h *handedConn) SetDeadline(t time.Time) error {
	if err := h.SetReadDeadline(t); err != nil {
		return err
	}
	return h.Conn.SetWriteDeadline(t)
}

func (h *handedConn) Write(p []byte) (int, error) {
	if h.send > 0 {
		h.sent = moveDeadline(h.Conn, h.sent, h.send)
	}
	return h.Conn.Write(p)
}

// requestRead lifts the cap once net/http is done with the handed request.
func (h *handedConn) requestRead() { h.cap.Store(0) }

func (h *handedConn) Read(p []byte) (int, error) {
	if h.br != nil {
		if h.br.Buffered() > 0 {
			return h.br.Read(p)
		}
		h.br = nil
	}
	return h.Conn.Read(p)
}

// readHead reads and parses a request head, waiting for more bytes while it
// is incomplete.
func (c *conn) readHead() (head, headStatus) {
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		h, n, st := parseHead(buf)
		switch st {
		case headPlain:
			_, _ = c.br.Discard(n)
			return h, st
		case headNotPlain:
			return h, st
		}
		if len(buf) >= c.br.Size() {
			return h, headNotPlain // a long head: net/http's limits apply
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			if c.br.Buffered() > len(buf) {
				continue
			}
			if len(buf) > 0 && !isTimeout(err) {
				// A partial head and then EOF: let net/http answer it.
				return h, headNotPlain
			}
			return h, headBroken
		}
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// serveRequest runs the handler for one request and reports whether the
// connection may serve another.
func (c *conn) serveRequest(h head) bool {
	x := &exchange{}
	x.ctx.Context = c.ctx
	x.ctx.fieldBytes, x.ctx.fields = h.fieldBytes, h.fields
	x.ctx.keys, x.ctx.vals = h.keys, h.vals
	defer x.ctx.cancel()
	x.url = url.URL{Path: h.path, RawQuery: h.query}
	r0 := http.Request{
		Method:     h.method,
		URL:        &x.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h.header,
		Host:       h.host,
		RequestURI: h.target,
		RemoteAddr: c.remote,
		Close:      h.close,
	}
	var b *body
	switch {
	case h.chunked:
		b = &x.body
		*b = body{c: c, remain: -1, expect: h.expect}
		r0.Body, r0.ContentLength, r0.TransferEncoding = b, -1, chunkedTE
		c.bodyDone.Store(false)
	case h.length > 0:
		b = &x.body
		*b = body{c: c, remain: h.length, expect: h.expect}
		r0.Body, r0.ContentLength = b, h.length
		c.bodyDone.Store(false)
	default:
		r0.Body = http.NoBody
		c.bodyDone.Store(true)
	}
	req := r0.WithContext(&x.ctx)
	c.pend = c.pend[:0]
	w := &x.resp
	// The connection's header map, emptied: its room outlives the request
	// (a handler may not use the writer after it returns).
	if c.hdr == nil {
		c.hdr = make(http.Header, 16)
	} else {
		clear(c.hdr)
	}
	*w = response{c: c, req: req, body: b, clen: -1, header: c.hdr}
	if b != nil {
		b.w = w
	}

	c.armWatch(&x.ctx)
	aborted := c.runHandler(w, req)
	if aborted {
		c.stopWatch()
		if w.committed {
			_ = c.bw.Flush() // what was sent stays sent; the missing end shows the break
		}
		return false
	}
	keep := w.finish() // the client has its answer before the watch is stopped
	c.stopWatch()
	if keep && b != nil && !c.bodyDone.Load() && !b.skip() {
		return false
	}
	return keep && !c.readErr && !c.gone
}

// runHandler calls the handler and reports whether it panicked; a panic
// other than http.ErrAbortHandler is logged, as net/http does.
func (c *conn) runHandler(w *response, req *http.Request) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			aborted = true
			if v != http.ErrAbortHandler {
				c.s.logf("h1: panic serving %s: %v\n%s", c.remote, v, debug.Stack())
			}
		}
	}()
	c.s.Handler.ServeHTTP(w, req)
	return false
}

// armWatch starts the timer after which a still-running request watches
// its connection.
func (c *conn) armWatch(ctx *reqCtx) {
	d := c.s.watchAfter()
	c.wmu.Lock()
	c.cancel = ctx
	c.wstate = watchArmed
	c.gone = false
	if c.wt == nil {
		c.wt = time.AfterFunc(d, c.watch)
	} else {
		c.wt.Reset(d)
	}
	c.wmu.Unlock()
}

// watch reads the connection while the handler runs: an error or EOF
// means the client left, and cancels the request; a byte is the client's
// next request, kept for later.
func (c *conn) watch() {
	c.wmu.Lock()
	if c.wstate != watchArmed {
		c.wmu.Unlock()
		return
	}
	if !c.bodyDone.Load() {
		// The handler is still reading the body: look again later.
		c.wt.Reset(c.s.watchAfter())
		c.wmu.Unlock()
		return
	}
	if c.br.Buffered() > 0 || c.cr.hasByte {
		c.wstate = watchOff // the next request is already here
		c.wmu.Unlock()
		return
	}
	c.wstate = watchRunning
	c.wabort = false
	c.wdone = make(chan struct{})
	ctx, done := c.cancel, c.wdone
	// Under the lock, so that stopWatch's deadline in the past comes after
	// (and the serving goroutine, past stopWatch, sees rdl cleared).
	c.setReadDeadline(time.Time{})
	c.wmu.Unlock()

	n, err := c.nc.Read(c.cr.b[:])

	c.wmu.Lock()
	if n == 1 {
		c.cr.hasByte = true
	} else if err != nil && !c.wabort {
		c.gone = true
		ctx.cancel()
	}
	c.wstate = watchOff
	c.wmu.Unlock()
	close(done)
}

// stopWatch stops the timer, or ends a running watch and waits for it.
func (c *conn) stopWatch() {
	c.wmu.Lock()
	switch c.wstate {
	case watchArmed:
		c.wt.Stop()
		c.wstate = watchOff
	case watchRunning:
		c.wabort = true
		_ = c.nc.SetReadDeadline(wire.ALongTimeAgo)
		done := c.wdone
		c.wmu.Unlock()
		<-done
		// The watch cleared the read deadline to wait: clear the one that
		// stopped it too, or (without timeouts, when the next request's
		// read sets none) it would fail the next read at once, losing a
		// pipelined request whose first byte the watch got.
		c.setReadDeadline(time.Time{})
		return
	}
	c.wmu.Unlock()
}

var chunkedTE = []string{"chunked"}

// maxTrailer bounds a chunked body's trailer section, which is read and
// dropped (net/http bounds it by its header limit).
const maxTrailer = 4 << 10

// body is a request body framed by Content-Length or chunked.
type body struct {
	c      *conn
	remain int64 // Content-Length framing: bytes left; -1: chunked
	closed bool
	// expect: the client asked for 100 Continue before it sends the
	// body, and it has not been sent; it is, at the first Read.
	expect bool
	w      *response // 100 Continue is not sent once its head is
	chunks io.Reader // chunked framing: the chunk decoder, made at the first Read
	err    error     // chunked framing: the decoder's end (io.EOF: the body ended well)
}

// unread reports whether the rest of the body may be too large to read
// and drop after the response, or never come (a 100 Continue not sent):
// the response then closes the connection.
func (b *body) unread() bool {
	if b.c.bodyDone.Load() {
		return false
	}
	return b.expect || b.remain < 0 || b.remain > maxDiscard
}

// skip reads and drops what the handler left of the body, when that is
// cheap, and reports whether the connection can serve another request.
func (b *body) skip() bool {
	if b.expect || b.c.readErr {
		return false // the client may or may not send it: the connection's state is unknown
	}
	if b.remain >= 0 {
		if b.remain > maxDiscard {
			return false
		}
		n, err := b.c.br.Discard(int(b.remain))
		b.remain -= int64(n)
		return err == nil
	}
	n, err := io.CopyN(io.Discard, b, maxDiscard+1)
	return err == io.EOF && n <= maxDiscard
}

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.expect {
		b.expect = false
		if b.w != nil && !b.w.committed {
			_, _ = b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			_ = b.c.bw.Flush()
		}
	}
	if b.remain < 0 {
		return b.readChunked(p)
	}
	if b.remain == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.c.br.Read(p)
	b.remain -= int64(n)
	switch {
	case b.remain == 0:
		b.c.bodyDone.Store(true)
		err = io.EOF
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	if err != nil && err != io.EOF {
		b.c.readErr = true
	}
	return n, err
}

// readChunked decodes the chunked body with net/http's own decoder
// (httputil.NewChunkedReader: its limits on lines and on framing against
// data), then reads and drops the trailer section.
func (b *body) readChunked(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.chunks == nil {
		b.chunks = httputil.NewChunkedReader(b.c.br)
	}
	n, err := b.chunks.Read(p)
	if err == io.EOF {
		err = b.trailer()
	}
	if err != nil {
		if err == io.EOF {
			b.c.bodyDone.Store(true)
		} else {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			b.c.readErr = true
		}
		b.err = err
	}
	return n, err
}

// errTrailer is a trailer section the fast path refuses: too long, or a
// line that is not a plain field (it is stricter than net/http, which
// reads trailers as a MIME header).
var errTrailer = errors.New("h1: malformed or too long trailer after the chunked body")

// trailer reads the trailer section after the last chunk, up to its blank
// line, and drops it; io.EOF when it ends well.
func (b *body) trailer() error {
	size := 0
	for {
		line, err := b.c.br.ReadSlice('\n')
		size += len(line)
		switch {
		case err == bufio.ErrBufferFull || size > maxTrailer:
			return errTrailer
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		}
		n := len(line)
		if n < 2 || line[n-2] != '\r' {
			return errTrailer
		}
		line = line[:n-2]
		if len(line) == 0 {
			return io.EOF
		}
		if !wire.FieldLine(line) {
			return errTrailer
		}
	}
}

func (b *body) Close() error {
	b.closed = true
	return nil
}

// sendWriter bounds each write to the client by the send timeout: a client
// that stops reading (its receive window full) is cut then, and the
// handler's write fails, which ends the upstream request too.
type sendWriter struct {
	nc      net.Conn
	timeout time.Duration
	set     time.Time // the write deadline in place
}

func (w *sendWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		w.set = moveDeadline(w.nc, w.set, w.timeout)
	}
	return w.nc.Write(p)
}

// moveDeadline sets nc's write deadline to now+d when the one in place
// (set) has aged by more than d/16: a stream of small writes does not pay
// for a deadline update on each, and a write still gets at least 15/16 of
// d. It returns the deadline in place.
func moveDeadline(nc net.Conn, set time.Time, d time.Duration) time.Time {
	next := time.Now().Add(d)
	if next.Sub(set) > d/16 {
		_ = nc.SetWriteDeadline(next)
		return next
	}
	return set
}
