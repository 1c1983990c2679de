package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/triagegw/triage/router/internal/rawio"
	"github.com/triagegw/triage/router/internal/wire"
	"github.com/triagegw/triage/router/pool"
)

// readBufSize is the per-connection read buffer: it bounds a response header
// line and is the unit in which bodies are relayed. SSE events are far
// smaller; 8 KiB keeps 100 idle connections under 1 MiB.
const readBufSize = 8 << 10

// Transport owns keep-alive connections to upstream replicas, keyed by
// scheme and address so they outlive config reloads that keep a replica.
type Transport struct {
	// IdleTimeout closes a connection idle for longer; keep it below the
	// upstream's keep-alive timeout (uvicorn, under vLLM, closes after 5s).
	// Default 4s.
	IdleTimeout time.Duration
	// TLS is the client TLS config for https replicas of pools without tls
	// settings of their own (pool.Backend.TLS, used as it is when set); nil
	// means defaults (the system roots). It is cloned per connection, with
	// ServerName set to the replica's host when empty and ALPN http/1.1.
	TLS *tls.Config
	// Dialer dials upstream connections; nil means a net.Dialer with TCP
	// keep-alive.
	Dialer *net.Dialer
	// Now is the clock that ages idle connections; nil means time.Now.
	// I/O deadlines always use the real clock.
	Now func() time.Time

	hosts sync.Map // key string -> *hostConns
}

type hostConns struct {
	mu   sync.Mutex
	idle []*conn // a stack: the most recently used on top
}

type conn struct {
	nc     net.Conn
	br     *bufio.Reader
	host   *hostConns
	idleAt time.Time
	reused bool // served a request before this one
	probe  prober
	up     upstream // the response being read on it
	// interrupt moves the deadline into the past (a canceled request's
	// context.AfterFunc), made once.
	interrupt func()
}

func (t *Transport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Transport) idleTimeout() time.Duration {
	if t.IdleTimeout > 0 {
		return t.IdleTimeout
	}
	return 4 * time.Second
}

func (t *Transport) host(b *pool.Backend) *hostConns {
	if h, ok := t.hosts.Load(b.Key); ok {
		return h.(*hostConns)
	}
	h, _ := t.hosts.LoadOrStore(b.Key, &hostConns{})
	return h.(*hostConns)
}

// get returns an idle connection to b, or dials a new one.
func (t *Transport) get(ctx context.Context, b *pool.Backend, connectTimeout time.Duration) (*conn, error) {
	h := t.host(b)
	if c := t.popIdle(h); c != nil {
		return c, nil
	}
	return t.dial(ctx, b, h, connectTimeout)
}

// popIdle takes the most recently used idle connection that is still
// fit for a request. A connection on which the replica sent anything while
// it was idle (bytes no request asked for, or its end) is closed: reusing
// it would hand those bytes to the next client as its answer.
func (t *Transport) popIdle(h *hostConns) *conn {
	cutoff := t.now().Add(-t.idleTimeout())
	h.mu.Lock()
	for n := len(h.idle); n > 0; n = len(h.idle) {
		c := h.idle[n-1]
		h.idle[n-1] = nil
		h.idle = h.idle[:n-1]
		if c.idleAt.After(cutoff) {
			h.mu.Unlock()
			if c.quiet() {
				return c
			}
			c.nc.Close()
			h.mu.Lock()
			continue
		}
		// The top is the freshest: if it is stale, all are.
		stale := append([]*conn{c}, h.idle...)
		clear(h.idle)
		h.idle = h.idle[:0]
		h.mu.Unlock()
		for _, s := range stale {
			s.nc.Close()
		}
		return nil
	}
	h.mu.Unlock()
	return nil
}

func (t *Transport) dial(ctx context.Context, b *pool.Backend, h *hostConns, timeout time.Duration) (*conn, error) {
	d := t.Dialer
	if d == nil {
		d = &net.Dialer{KeepAlive: 30 * time.Second}
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := d.DialContext(dctx, "tcp", b.Addr)
	if err != nil {
		return nil, &connectError{err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	nc = rawio.Wrap(nc)
	if b.Scheme == "https" {
		cfg := b.TLS // the pool's, ready to use
		if cfg == nil {
			cfg = &tls.Config{}
			if t.TLS != nil {
				cfg = t.TLS.Clone()
			}
			if cfg.ServerName == "" {
				host, _, _ := net.SplitHostPort(b.Addr)
				cfg.ServerName = host
			}
			cfg.NextProtos = []string{"http/1.1"}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			nc.Close()
			return nil, &connectError{fmt.Errorf("TLS handshake: %w", err)}
		}
		nc = tc
	}
	c := &conn{nc: nc, br: bufio.NewReaderSize(nc, readBufSize), host: h}
	c.interrupt = func() { _ = nc.SetDeadline(wire.ALongTimeAgo) }
	c.probe.init(nc)
	return c, nil
}

// put returns a connection whose last response was read in full to its
// host's idle stack, or closes it when the stack is full or the replica
// sent more than the response.
func (t *Transport) put(c *conn, maxIdle int) {
	if c.br.Buffered() > 0 {
		c.nc.Close()
		return
	}
	c.idleAt = t.now()
	c.reused = true // its deadline is stale; the next roundTrip sets one first
	h := c.host
	h.mu.Lock()
	if len(h.idle) >= maxIdle {
		h.mu.Unlock()
		c.nc.Close()
		return
	}
	h.idle = append(h.idle, c)
	h.mu.Unlock()
}

// Retain closes the idle connections of replicas not in keep (keys as in
// pool.Backend.Key) and forgets them: call it after a reload.
func (t *Transport) Retain(keep map[string]bool) {
	t.hosts.Range(func(k, v any) bool {
		if !keep[k.(string)] {
			t.hosts.Delete(k)
			closeAll(v.(*hostConns))
		}
		return true
	})
}

// CloseStale closes idle connections past the idle timeout. Call it
// periodically: without traffic nothing else would, and the replica would
// hold them open (or close them under the gateway's feet).
func (t *Transport) CloseStale() {
	cutoff := t.now().Add(-t.idleTimeout())
	t.hosts.Range(func(_, v any) bool {
		h := v.(*hostConns)
		h.mu.Lock()
		// The stack is ordered oldest first: cut the stale prefix.
		n := 0
		for n < len(h.idle) && !h.idle[n].idleAt.After(cutoff) {
			n++
		}
		stale := append([]*conn(nil), h.idle[:n]...)
		rest := copy(h.idle, h.idle[n:])
		clear(h.idle[rest:])
		h.idle = h.idle[:rest]
		h.mu.Unlock()
		for _, c := range stale {
			c.nc.Close()
		}
		return true
	})
}

// CloseIdle closes every idle connection.
func (t *Transport) CloseIdle() {
	t.hosts.Range(func(_, v any) bool {
		closeAll(v.(*hostConns))
		return true
	})
}

func closeAll(h *hostConns) {
	h.mu.Lock()
	idle := h.idle
	h.idle = nil
	h.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// IdleConns counts idle connections, for tests and metrics.
func (t *Transport) IdleConns() int {
	n := 0
	t.hosts.Range(func(_, v any) bool {
		h := v.(*hostConns)
		h.mu.Lock()
		n += len(h.idle)
		h.mu.Unlock()
		return true
	})
	return n
}

// connectError marks a failure to reach a replica: safe to retry elsewhere,
// because the request never left.
type connectError struct{ err error }

func (e *connectError) Error() string { return "connect: " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// quiet reports whether an idle connection can carry a request: the
// replica has sent nothing since the last response ended and has not
// closed it.
func (c *conn) quiet() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.probe.tls {
		// Bytes TLS has already read from the socket are invisible to the
		// kernel: ask TLS, with a deadline that lets it read nothing new.
		// The next request sets its own deadline.
		_ = c.nc.SetReadDeadline(wire.ALongTimeAgo)
		if _, err := c.br.Peek(1); !isTimeout(err) {
			return false
		}
	}
	return c.probe.quiet()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
