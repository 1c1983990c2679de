package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/triagegw/triage/router/internal/wire"
	"github.com/triagegw/triage/router/pool"
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
}

// relay reads the response head, sends it and the body to the client, and
// returns the connection to the idle stack when it can be reused.
func (t *Transport) relay(ctx context.Context, w http.ResponseWriter, u *upstream, cfg *pool.Config, req *Request, deadline time.Time, res Result) Result {
	res.Status = u.status
	fl, _ := w.(http.Flusher)
	r := &relayer{w: w, fl: fl, u: u, idle: cfg.Timeouts.Idle, total: deadline}
	fr, err := r.head()
	if err != nil {
		u.close()
		res.Err = err
		if ctx.Err() != nil {
			res.ClientGone, res.Status = true, 499
			return res
		}
		return t.fail(w, res, errorFor(err))
	}
	w.WriteHeader(u.status)
	res.TTFB = time.Since(req.Start)
	r.dirty = true

	switch {
	case fr.noBody:
	case fr.chunked:
		err = r.chunked()
	case fr.length >= 0:
		err = r.copyN(fr.length)
	default:
		err = r.copyToEOF()
		fr.reusable = false
	}
	res.Bytes = r.n
	if err == nil && r.dirty && fl != nil {
		fl.Flush() // the end of a stream must not wait for the handler to return
	}
	reusable := err == nil && fr.reusable && u.stop()
	switch {
	case reusable:
		t.put(u.c, cfg.MaxIdleConns)
	default:
		u.close()
	}
	if err == nil {
		return res
	}
	res.Err = err
	if errors.Is(err, errClientGone) || ctx.Err() != nil {
		res.ClientGone = true
		res.Status = 499
		return res
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
}

// head parses the response headers and, once they all parsed, adds them to
// w.Header(). Headers the gateway has already set (X-Request-Id, say) keep
// the gateway's value.
func (r *relayer) head() (framing, error) {
	fr := framing{length: -1, reusable: r.u.http11}
	br := r.u.c.br
	var kvArr [48]string // name, value, name, value...
	kv := kvArr[:0]
	var teSeen bool
	var connTokens []string
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return fr, fmt.Errorf("read response headers: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if len(kv) >= 400 {
			return fr, errors.New("response has more than 200 header lines")
		}
		i := bytes.IndexByte(line, ':')
		if i <= 0 || line[0] == ' ' || line[0] == '\t' || bytes.IndexByte(line[:i], ' ') >= 0 {
			return fr, fmt.Errorf("malformed response header line %q", truncate(line))
		}
		name, val := line[:i], bytes.TrimSpace(line[i+1:])
		key := canonicalKey(name)
		switch key {
		case "Transfer-Encoding":
			teSeen = true
			fr.chunked = bytes.HasSuffix(bytes.ToLower(val), []byte("chunked"))
		case "Content-Length":
			n, ok := wire.ParseLength(val)
			if !ok || (fr.length >= 0 && n != fr.length) {
				return fr, fmt.Errorf("invalid Content-Length %q", truncate(val))
			}
			if fr.length >= 0 {
				continue // a repeated, equal value: send it once
			}
			fr.length = n
		case "Connection":
			lv := bytes.ToLower(val)
			if bytes.Contains(lv, []byte("close")) {
				fr.reusable = false
			}
			if !r.u.http11 && bytes.Contains(lv, []byte("keep-alive")) {
				fr.reusable = true
			}
			connTokens = append(connTokens, connectionTokens([]string{string(val)})...)
		}
		if dropResponseHeader(key) {
			continue
		}
		kv = append(kv, key, internValue(val))
	}
	if teSeen {
		// Transfer-Encoding overrides Content-Length (RFC 9112 6.3); a
		// message with both is suspect, so its connection is not reused.
		if fr.length >= 0 {
			fr.reusable = false
		}
		if !fr.chunked {
			fr.reusable = false
		}
		fr.length = -1
	}
	if s := r.u.status; s == http.StatusNoContent || s == http.StatusNotModified {
		fr.noBody = true
	}
	h := r.w.Header()
	own := len(h)
	for i := 0; i < len(kv); i += 2 {
		k := kv[i]
		if (k == "Content-Length" && (fr.length < 0 || fr.noBody)) || listed(connTokens, k) {
			continue
		}
		if own > 0 {
			if _, set := h[k]; set && !r.relayed(k, kv[:i]) {
				continue
			}
		}
		h[k] = append(h[k], kv[i+1])
	}
	return fr, nil
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
	}
	_, err := r.u.c.br.Peek(have + 1)
	if err != nil && r.u.c.br.Buffered() > have {
		err = nil
	}
	return err
}

func (r *relayer) write(p []byte) error {
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
// when it is not all there yet.
func (r *relayer) line() ([]byte, error) {
	br := r.u.c.br
	for {
		buf, _ := br.Peek(br.Buffered())
		if bytes.IndexByte(buf, '\n') >= 0 {
			return br.ReadSlice('\n')
		}
		if len(buf) >= readBufSize {
			return nil, errors.New("chunk header line too long")
		}
		if err := r.fill(len(buf)); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// chunked relays a chunked body's payload, which the gateway's server
// chunks again for the client as it sees fit.
func (r *relayer) chunked() error {
	for {
		line, err := r.line()
		if err != nil {
			return fmt.Errorf("read chunk size: %w", err)
		}
		size, ok := parseChunkSize(line)
		if !ok {
			return fmt.Errorf("malformed chunk size line %q", truncate(line))
		}
		if size == 0 {
			for { // trailers, dropped
				line, err := r.line()
				if err != nil {
					return fmt.Errorf("read trailers: %w", err)
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if err := r.copyN(size); err != nil {
			return err
		}
		line, err = r.line()
		if err != nil {
			return fmt.Errorf("read chunk end: %w", err)
		}
		if len(bytes.TrimRight(line, "\r\n")) != 0 {
			return fmt.Errorf("malformed chunk end %q", truncate(line))
		}
	}
}

func parseChunkSize(line []byte) (int64, bool) {
	line = bytes.TrimRight(line, "\r\n")
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
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

// Common header names and values, so relaying them allocates nothing.
var (
	knownKeys = func() map[string]string {
		m := map[string]string{}
		for _, k := range []string{"Content-Type", "Content-Length", "Transfer-Encoding", "Connection",
			"Keep-Alive", "Date", "Server", "X-Request-Id", "Cache-Control", "Vary", "Te", "Trailer",
			"Upgrade", "Proxy-Connection", "Proxy-Authenticate", "Content-Encoding", "X-Accel-Buffering"} {
			m[k] = k
			m[http.CanonicalHeaderKey(string(bytes.ToLower([]byte(k))))] = k
			m[string(bytes.ToLower([]byte(k)))] = k
		}
		return m
	}()
	knownValues = func() map[string]string {
		m := map[string]string{}
		for _, v := range []string{"application/json", "text/event-stream", "text/event-stream; charset=utf-8",
			"text/plain; charset=utf-8", "uvicorn", "no-cache", "chunked", "keep-alive", "close", "no"} {
			m[v] = v
		}
		return m
	}()
)

func canonicalKey(b []byte) string {
	if k, ok := knownKeys[string(b)]; ok {
		return k
	}
	return http.CanonicalHeaderKey(string(b))
}

func internValue(b []byte) string {
	if v, ok := knownValues[string(b)]; ok {
		return v
	}
	return string(b)
}
