package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/internal/wire"
)

// relayer copies one upstream response to the client.
type relayer struct {
	w     http.ResponseWriter
	fl    http.Flusher
	u     *upstream
	idle  time.Duration
	total time.Time // the request's deadline
	set   time.Time // the read deadline currently on the connection
	dirty bool      // bytes written to the client and not flushed
	n     int64
	tail  *tail // the body's last bytes, for its usage; nil: not kept
	strip bool  // drop a stream's usage chunk, if the response is a stream
	sse   *sseFilter
	// rewrite: the response is translated (Request.Translate), so its
	// length changes; tx holds the translation once the head is read.
	rewrite bool
	tx      *translation
	peek    func(string, []byte) bool // Request.Peek, until it is done
	replica string                    // the replica answering (pool.Backend.Name)
}

// tail keeps the last openai.TailSize bytes written through it.
type tail struct {
	ring [openai.TailSize]byte
	flat [openai.TailSize]byte
	n    int64 // bytes seen
}

var tails = sync.Pool{New: func() any { return new(tail) }}

func (t *tail) add(p []byte) {
	if len(p) > len(t.ring) {
		t.n += int64(len(p) - len(t.ring))
		p = p[len(p)-len(t.ring):]
	}
	at := int(t.n % int64(len(t.ring)))
	k := copy(t.ring[at:], p)
	copy(t.ring[:], p[k:])
	t.n += int64(len(p))
}

// bytes is the kept tail, oldest byte first.
func (t *tail) bytes() []byte {
	if t.n <= int64(len(t.ring)) {
		return t.ring[:t.n]
	}
	at := int(t.n % int64(len(t.ring)))
	k := copy(t.flat[:], t.ring[at:])
	copy(t.flat[k:], t.ring[:at])
	return t.flat[:]
}

// relay reads the response head, sends it and the body to the client, and
// returns the connection to the idle stack when it can be reused. In
// order: the head (head), what the body's relay needs (begin), the body
// (body), the translation's end (endTranslation), the usage and the
// buffers (settle), the connection, and what a failure becomes (failed).
func (t *Transport) relay(ctx context.Context, w http.ResponseWriter, u *upstream, pol *Policy, req *Request, deadline time.Time, res Result) Result {
	res.Status = u.status
	fl, _ := w.(http.Flusher)
	r := &relayer{w: w, fl: fl, u: u, idle: pol.Idle, total: deadline}
	r.strip = req.StripUsage && u.status/100 == 2 && req.Translate == nil
	r.rewrite = req.Translate != nil
	fr, err := r.head()
	if err != nil {
		u.close()
		res.Err = err
		if ctx.Err() != nil {
			res.ClientGone, res.Status = true, 499
			return res
		}
		return t.fail(w, req, res, errorFor(err))
	}
	if req.Translate != nil {
		r.tx = translations.Get().(*translation)
		r.tx.tr, r.tx.events = req.Translate, u.status/100 == 2 && fr.events
		defer r.tx.release()
	}
	r.begin(req, &fr, &res)
	err = r.body(&fr)
	inBand := false // a translated stream ended with an error event
	if r.tx != nil {
		inBand, err = r.endTranslation(ctx, req, err, &res)
	}
	err = r.settle(req, err, &res)
	if err == nil && r.dirty && fl != nil {
		fl.Flush() // the end of a stream must not wait for the handler to return
	}
	reusable := err == nil && fr.reusable && u.stop()
	switch {
	case reusable:
		t.put(u.c, pol.MaxIdle)
	default:
		u.close()
	}
	if err == nil {
		return res
	}
	return t.failed(ctx, req, r, err, inBand, res)
}

// begin sends the head to the client, unless a translation holds it for
// its body, and sets up what relaying the body needs: the peek, the tail
// kept for the usage, the filter of a stream's usage chunk.
func (r *relayer) begin(req *Request, fr *framing, res *Result) {
	status := r.u.status
	if r.tx == nil || r.tx.events {
		r.w.WriteHeader(status)
		res.TTFB = time.Since(req.Start)
		r.dirty = true
	} // else the head waits for the translated body
	if req.Peek != nil && status/100 == 2 {
		r.peek = req.Peek
		if res.Backend != nil {
			r.replica = res.Backend.Name
		}
	}
	if req.Usage && status/100 == 2 && !fr.noBody {
		r.tail = tails.Get().(*tail)
	}
	if fr.sse {
		r.sse = sseFilters.Get().(*sseFilter)
	}
}

// body relays the response body as fr frames it. A body delimited by the
// connection's end leaves the connection unusable.
func (r *relayer) body(fr *framing) error {
	switch {
	case fr.noBody:
		return nil
	case fr.chunked:
		return r.chunked()
	case fr.length >= 0:
		return r.copyN(fr.length)
	default:
		err := r.copyToEOF()
		fr.reusable = false
		return err
	}
}

// endTranslation ends a translated response after its body: the
// translation's last bytes when the body came whole, an error event when
// a stream broke. inBand reports that the client has a whole answer that
// carries the error in band.
func (r *relayer) endTranslation(ctx context.Context, req *Request, err error, res *Result) (inBand bool, _ error) {
	x := r.tx
	switch {
	case err == nil:
		res.Status, err = x.end(r, r.u.status)
		if !x.events {
			res.TTFB = time.Since(req.Start)
		}
		return errors.Is(err, errTranslate), err
	case errors.Is(err, errTranslate):
		return true, err
	case x.events && !errors.Is(err, errClientGone) && ctx.Err() == nil:
		if serr := x.broken(r); serr != nil {
			return false, serr
		}
		return true, err
	}
	return false, err
}

// settle ends the stream filter, reads the usage (from the filter, the
// translator or the tail, in that order), and returns the relay's buffers.
func (r *relayer) settle(req *Request, err error, res *Result) error {
	if r.sse != nil {
		if err == nil {
			err = r.sse.end(r)
		}
		if r.sse.found && err == nil {
			res.Usage, res.UsageFound = r.sse.usage, true
		}
		r.sse.reset()
		sseFilters.Put(r.sse)
		r.sse = nil
	}
	res.Bytes = r.n
	if u, ok := req.Translate.(interface{ Usage() (openai.Usage, bool) }); ok && err == nil {
		// A translated stream's usage is in events the tail may not hold
		// (Messages reports input tokens in its first): the translator's
		// count stands.
		res.Usage, res.UsageFound = u.Usage()
	}
	if r.tail != nil {
		if err == nil && !res.UsageFound {
			res.Usage, res.UsageFound = openai.ScanUsage(r.tail.bytes())
		}
		r.tail.n = 0
		tails.Put(r.tail)
		r.tail = nil
	}
	return err
}

// failed is what a relay that failed with err reports: the client left
// (499), a whole answer with the error in band, a whole error when nothing
// was sent, or else a body cut after its head (Aborted).
func (t *Transport) failed(ctx context.Context, req *Request, r *relayer, err error, inBand bool, res Result) Result {
	res.Err = err
	if errors.Is(err, errClientGone) || ctx.Err() != nil {
		res.ClientGone = true
		res.Status = 499
		return res
	}
	if inBand {
		// The client has a whole stream that ends in an error event.
		if r.fl != nil {
			r.fl.Flush()
		}
		return res
	}
	if r.tx != nil && !r.tx.events {
		return t.fail(r.w, req, res, errorFor(err)) // nothing was sent: a whole error
	}
	// The body broke: the client gets the head and every byte before the
	// break, then the cut, whether or not the break came in the same read
	// as the head.
	if r.fl != nil {
		r.fl.Flush()
	}
	res.Aborted = true
	return res
}

// framing is how the response body is delimited.
type framing struct {
	chunked  bool
	length   int64 // -1: until the connection closes
	noBody   bool
	reusable bool
	sse      bool // an event stream whose usage chunk is dropped (relayer.strip)
	events   bool // Content-Type is text/event-stream
}

// maxHeaderLines bounds a response head; far above what any replica sends.
const maxHeaderLines = 200

// head parses the response headers and, once they all parsed, adds them to
// w.Header(). Headers the gateway has already set (X-Request-Id, say) keep
// the gateway's value.
//
// It accepts only what net/http's client would accept with the same
// framing (FuzzRelay checks this against http.ReadResponse), and refuses
// more: obsolete line folding, a Transfer-Encoding other than exactly
// "chunked", and Transfer-Encoding on HTTP/1.0. A refused head is a 502.
//
// In order: the header lines (readFields), the body's framing from them
// (frame), then the header sent to the client (copyHeader).
func (r *relayer) head() (framing, error) {
	fr := framing{length: -1, reusable: r.u.http11}
	var kvArr [48]string // name, value, name, value...
	var connArr [4]string
	kv, conn, f, err := readFields(r.u.c.br, kvArr[:0], connArr[:0])
	if err != nil {
		return fr, err
	}
	if err := r.frame(&fr, &f, conn); err != nil {
		return fr, err
	}
	r.copyHeader(&fr, kv, conn)
	return fr, nil
}

// respFields is what head reads from the response's header lines.
// (the lines relayed and Connection's tokens aside: they stay apart from
// these values, which point into the connection's buffer, so that their
// arrays stay on head's stack).
type respFields struct {
	te, cl   []byte // Transfer-Encoding's and Content-Length's values
	tes, cls int    // how many lines each came in (equal Content-Lengths: one relayed)
	trailer  bool   // a Trailer names a field a trailer may not carry
	ctype    []byte // Content-Type's value
}

// readFields reads the header lines from br, up to the empty line: the
// lines relayed, as name, value, name, value..., appended to kv;
// Connection's tokens appended to conn; and the fields framing depends on.
func readFields(br *bufio.Reader, kv, conn []string) (_, _ []string, f respFields, err error) {
	for lines := 0; ; lines++ {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return kv, conn, f, fmt.Errorf("read response headers: %w", err)
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) == 0 {
			return kv, conn, f, nil
		}
		if lines >= maxHeaderLines {
			return kv, conn, f, fmt.Errorf("response has more than %d header lines", maxHeaderLines)
		}
		i := bytes.IndexByte(line, ':')
		var key string
		ok := i > 0
		if ok {
			key, ok = wire.FieldName(line[:i])
		}
		if !ok {
			return kv, conn, f, fmt.Errorf("malformed response header line %q", truncate(line))
		}
		name, val := line[:i], wire.TrimOWS(line[i+1:])
		if !wire.FieldValue(val) {
			return kv, conn, f, fmt.Errorf("response header %s has a control character in its value", truncate(name))
		}
		switch key {
		case "Transfer-Encoding":
			f.te, f.tes = val, f.tes+1
		case "Content-Length":
			if f.cls > 0 && !bytes.Equal(val, f.cl) {
				return kv, conn, f, fmt.Errorf("conflicting Content-Length values %q and %q", truncate(f.cl), truncate(val))
			}
			if f.cls++; f.cls > 1 {
				continue // a repeated, equal value: send it once
			}
			f.cl = val
		case "Connection":
			conn = appendConnTokens(conn, val)
		case "Trailer":
			f.trailer = f.trailer || badTrailer(val)
		case "Content-Type":
			f.ctype = val
		}
		if dropResponseHeader(key) {
			continue
		}
		kv = append(kv, key, internValue(val))
	}
}

// frame sets fr, the body's framing, from the header fields f and
// Connection's tokens conn: its length, chunked or not, whether the
// connection may serve another request, and whether the body is an event
// stream.
func (r *relayer) frame(fr *framing, f *respFields, conn []string) error {
	if f.cls > 0 {
		n, ok := wire.ParseLength(f.cl)
		if !ok {
			return fmt.Errorf("invalid Content-Length %q", truncate(f.cl))
		}
		fr.length = n
	}
	switch {
	case listed(conn, "Close"):
		fr.reusable = false
	case !r.u.http11:
		fr.reusable = listed(conn, "Keep-Alive")
	}
	if f.tes > 0 {
		// Only a single "chunked", as net/http (and nginx) accept; it
		// overrides Content-Length (RFC 9112 6.3), and a message with
		// both is suspect, so its connection is not reused.
		if f.tes > 1 || !asciiEqualFold(f.te, "chunked") || !r.u.http11 {
			return fmt.Errorf("unsupported Transfer-Encoding %q", truncate(f.te))
		}
		if f.trailer {
			return errors.New("response announces a forbidden trailer")
		}
		fr.chunked = true
		if fr.length >= 0 {
			fr.reusable = false
		}
		fr.length = -1
	}
	if s := r.u.status; s == http.StatusNoContent || s == http.StatusNotModified {
		fr.noBody, fr.chunked = true, false
	}
	if fr.length < 0 && !fr.chunked && !fr.noBody {
		fr.reusable = false // delimited by the connection's end
	}
	// A stream that may lose its usage chunk on the way loses its
	// Content-Length with it (the server frames what is sent instead).
	fr.events = !fr.noBody && eventStream(f.ctype)
	fr.sse = r.strip && fr.events
	return nil
}

// copyHeader adds the relayed lines kv to the client's header, but for
// the Content-Length a changed body must not keep, the fields Connection
// names (conn), and those the gateway set itself.
func (r *relayer) copyHeader(fr *framing, kv, conn []string) {
	h := r.w.Header()
	own := len(h)
	var vals []string // the values' slices, cut from one array
	for i := 0; i < len(kv); i += 2 {
		k := kv[i]
		if (k == "Content-Length" && (fr.length < 0 || fr.noBody || fr.sse || r.rewrite)) || listed(conn, k) {
			continue
		}
		if own > 0 {
			if _, set := h[k]; set && !r.relayed(k, kv[:i]) {
				continue
			}
		}
		if old := h[k]; len(old) > 0 {
			h[k] = append(old, kv[i+1]) // a repeated header: its own array
			continue
		}
		if len(vals) == 0 {
			vals = make([]string, (len(kv)-i)/2)
		}
		vals[0] = kv[i+1]
		h[k], vals = vals[:1:1], vals[1:]
	}
}

func asciiEqualFold[T string | []byte](b T, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// badTrailer reports a Trailer header naming a field a trailer may not
// carry (net/http refuses those).
func badTrailer(val []byte) bool {
	var arr [4]string
	for _, t := range appendConnTokens(arr[:0], val) {
		switch t {
		case "Transfer-Encoding", "Trailer", "Content-Length":
			return true
		}
	}
	return false
}

// relayed reports whether key already came from the upstream, in the pairs
// before the current one, as opposed to being set by the gateway.
func (r *relayer) relayed(key string, before []string) bool {
	for i := 0; i < len(before); i += 2 {
		if before[i] == key {
			return true
		}
	}
	return false
}

// fill makes more bytes of the response available than the have already
// buffered, flushing what the client has not yet seen before it blocks.
func (r *relayer) fill(have int) error {
	if r.dirty {
		if r.fl != nil {
			r.fl.Flush()
		}
		r.dirty = false
	}
	d := time.Now().Add(r.idle)
	if d.After(r.total) {
		d = r.total
	}
	// Move the deadline only when it has aged by 1/16 of the idle timeout:
	// a stream of tokens does not pay for a deadline reset on every read.
	if d.Sub(r.set) > r.idle/16 || d.Before(r.set) {
		_ = r.u.c.nc.SetReadDeadline(d)
		r.set = d
		if r.u.hook.canceled() {
			// The client left while the deadline moved: the cancel's
			// deadline in the past may have landed before this one and
			// been overwritten, leaving the read to wait for the idle
			// timeout with the replica still generating. Put it back.
			_ = r.u.c.nc.SetReadDeadline(wire.ALongTimeAgo)
		}
	}
	_, err := r.u.c.br.Peek(have + 1)
	if err != nil && r.u.c.br.Buffered() > have {
		err = nil
	}
	return err
}

func (r *relayer) write(p []byte) error {
	if r.peek != nil && r.peek(r.replica, p) {
		r.peek = nil
	}
	if r.tail != nil {
		r.tail.add(p)
	}
	if r.sse != nil {
		return r.sse.write(r, p)
	}
	if r.tx != nil {
		return r.tx.write(r, p)
	}
	return r.send(p)
}

// send writes p to the client.
func (r *relayer) send(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	n, err := r.w.Write(p)
	r.n += int64(n)
	r.dirty = true
	if err != nil {
		return errClientGone
	}
	return nil
}

// copyN relays exactly n bytes from the connection's buffer.
func (r *relayer) copyN(n int64) error {
	br := r.u.c.br
	for n > 0 {
		if br.Buffered() == 0 {
			if err := r.fill(0); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return fmt.Errorf("read response body: %w", err)
			}
		}
		k := int64(br.Buffered())
		if k > n {
			k = n
		}
		p, _ := br.Peek(int(k))
		if err := r.write(p); err != nil {
			return err
		}
		_, _ = br.Discard(int(k))
		n -= k
	}
	return nil
}

func (r *relayer) copyToEOF() error {
	br := r.u.c.br
	for {
		if br.Buffered() == 0 {
			if err := r.fill(0); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("read response body: %w", err)
			}
		}
		p, _ := br.Peek(br.Buffered())
		if err := r.write(p); err != nil {
			return err
		}
		_, _ = br.Discard(len(p))
	}
}

// line returns the next line from the buffer, waiting (and flushing) only
// when it is not all there yet. Lines end in CRLF; a bare LF or a CR
// elsewhere in the line is an error, as in net/http's chunked reader.
func (r *relayer) line() ([]byte, error) {
	br := r.u.c.br
	for {
		buf, _ := br.Peek(br.Buffered())
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			line, _ := br.ReadSlice('\n')
			if j := bytes.IndexByte(line, '\r'); j < 0 || j != len(line)-2 {
				return nil, fmt.Errorf("chunked line %q does not end in CRLF", truncate(line))
			}
			if len(line)-2 >= maxChunkLine {
				return nil, errors.New("chunk line too long")
			}
			return line[:len(line)-2], nil
		}
		if len(buf) >= maxChunkLine {
			return nil, errors.New("chunk line too long")
		}
		if err := r.fill(len(buf)); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// maxChunkLine bounds a chunk-size or trailer line, as net/http does, and
// maxTrailer the trailer section (net/http reads it within its 4 KiB
// buffer); maxChunkOverhead is how far framing may outgrow data, as in
// net/http, against senders that trickle one byte per chunk.
const (
	maxChunkLine     = 4096
	maxTrailer       = 4000
	maxChunkOverhead = 16 << 10
)

// chunked relays a chunked body's payload, which the gateway's server
// chunks again for the client as it sees fit.
func (r *relayer) chunked() error {
	var excess int64
	for {
		if whole, err := r.wholeChunk(&excess); err != nil {
			return err
		} else if whole {
			continue
		}
		line, err := r.line()
		if err != nil {
			return fmt.Errorf("read chunk size: %w", err)
		}
		size, ok := parseChunkSize(line)
		if !ok {
			return fmt.Errorf("malformed chunk size line %q", truncate(line))
		}
		if excess, err = chunkFraming(excess, len(line), size); err != nil {
			return err
		}
		if size == 0 {
			return r.trailers()
		}
		if err := r.copyN(size); err != nil {
			return err
		}
		if err := r.crlf(); err != nil {
			return err
		}
	}
}

// wholeChunk relays the chunk at the start of the buffer when all of it
// (size line, data, CRLF) has arrived, well formed and not the last, with
// one Peek and one Discard: a stream's chunks mostly arrive whole. It
// reports false and consumes nothing otherwise (a chunk still arriving,
// the last chunk, a malformed line): chunked's general path reads it from
// the same place and reports what is wrong.
func (r *relayer) wholeChunk(excess *int64) (bool, error) {
	br := r.u.c.br
	buf, _ := br.Peek(br.Buffered())
	i := bytes.IndexByte(buf, '\n')
	if i <= 0 || i > maxChunkLine || buf[i-1] != '\r' {
		return false, nil
	}
	line := buf[:i-1]
	size, ok := parseChunkSize(line)
	if !ok || size <= 0 || size > int64(len(buf)) || bytes.IndexByte(line, '\r') >= 0 {
		return false, nil
	}
	end := i + 1 + int(size)
	if end+2 > len(buf) || buf[end] != '\r' || buf[end+1] != '\n' {
		return false, nil
	}
	var err error
	if *excess, err = chunkFraming(*excess, len(line), size); err != nil {
		return false, err
	}
	if err := r.write(buf[i+1 : end]); err != nil {
		return false, err
	}
	_, _ = br.Discard(end + 2)
	return true, nil
}

// chunkFraming adds a chunk's size line (CRLF included) to excess, the
// framing bytes its data has not paid for, and refuses a sender whose
// framing outgrows its data by maxChunkOverhead, as net/http does.
func chunkFraming(excess int64, lineLen int, size int64) (int64, error) {
	excess = max(excess+int64(lineLen)+2-16-2*size, 0)
	if excess > maxChunkOverhead {
		return excess, errors.New("chunked encoding has too much framing for its data")
	}
	return excess, nil
}

// crlf reads the CRLF that ends a chunk's data.
func (r *relayer) crlf() error {
	br := r.u.c.br
	for br.Buffered() < 2 {
		if err := r.fill(br.Buffered()); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read chunk end: %w", err)
		}
	}
	p, _ := br.Peek(2)
	if p[0] != '\r' || p[1] != '\n' {
		return fmt.Errorf("malformed chunk end %q", p)
	}
	_, _ = br.Discard(2)
	return nil
}

// trailers reads and drops the trailer section.
func (r *relayer) trailers() error {
	n := 0
	for {
		line, err := r.line()
		if err != nil {
			return fmt.Errorf("read trailers: %w", err)
		}
		if len(line) == 0 {
			return nil
		}
		if n += len(line) + 2; n > maxTrailer {
			return errors.New("response trailers too long")
		}
		if !wire.FieldLine(line) {
			return fmt.Errorf("malformed trailer line %q", truncate(line))
		}
	}
}

// parseChunkSize parses a chunk-size line (CRLF already cut): hex digits,
// then optional whitespace and extensions.
func parseChunkSize(line []byte) (int64, bool) {
	for len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

// Common header values, so relaying them allocates nothing (names:
// wire.CanonicalKey).
var knownValues = func() map[string]string {
	m := map[string]string{}
	for _, v := range []string{"application/json", "text/event-stream", "text/event-stream; charset=utf-8",
		"text/plain; charset=utf-8", "uvicorn", "no-cache", "chunked", "keep-alive", "close", "no"} {
		m[v] = v
	}
	return m
}()

func internValue(b []byte) string {
	if v, ok := knownValues[string(b)]; ok {
		return v
	}
	return string(b)
}
