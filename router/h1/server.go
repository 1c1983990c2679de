// Package h1 is the gateway's HTTP/1.1 server. It runs an http.Handler (the
// gin engine) like net/http's server does, with less work per request on
// the path every OpenAI call takes:
//
//   - A request head is parsed straight from the connection's read buffer:
//     one string allocation holds every header value, and common header
//     names are not re-canonicalised.
//   - There is no background read per request. net/http starts one as soon
//     as the body is read, to notice a client that leaves, and stops it when
//     the handler returns: a goroutine, a read, a deadline and a goroutine
//     wake-up per request. Here the watch starts only for a request still
//     running after WatchAfter; shorter ones finish before a departure
//     could save any upstream work.
//   - One read deadline per request (head and body) and one while idle.
//
// Only plain requests take this path: GET or POST, an origin-form target
// without escapes, HTTP/1.1, a body framed by Content-Length or chunked
// (not both), no Expect but 100-continue (answered when the handler first
// reads the body, as net/http does), no Upgrade, a head that fits in the
// 4 KiB read buffer. At the first request
// that is not plain, the connection (with what has been read of it) goes to
// a net/http server running the same handler, which serves it from then on;
// so every corner of HTTP/1.x that the fast path leaves out keeps net/http's
// behaviour.
package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/triagegw/triage/router/internal/rawio"
)

// Server serves HTTP/1.1 with Handler. Set the fields before Serve.
type Server struct {
	Handler http.Handler
	// ReadTimeout bounds reading a request's head and body, from its first
	// byte. Zero means no limit.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that waits this long for
	// its next request. Zero means ReadTimeout, as in net/http.
	IdleTimeout time.Duration
	// SendTimeout bounds each write to the client, as nginx's send_timeout
	// does: a client that stops reading a response (a stream it no longer
	// drains) is cut after this, and the handler's writes fail. It bounds
	// the gap between writes that make progress, not the whole response.
	// Zero means no limit.
	SendTimeout time.Duration
	// WatchAfter is how long a request runs, after its body has been read,
	// before the server starts watching for its client leaving (which
	// cancels the request's context). Default 20ms.
	WatchAfter time.Duration
	// MaxHeaderBytes bounds a request head that net/http reads (the fast
	// path takes only heads that fit its 4 KiB buffer); beyond it net/http
	// answers 431. Zero means net/http's default, 1 MiB.
	MaxHeaderBytes int
	// ErrorLog receives connection errors and handler panics; nil means the
	// log package's standard logger.
	ErrorLog *log.Logger

	initOnce sync.Once
	fallback *http.Server
	handed   *chanListener

	mu         sync.Mutex
	listeners  map[net.Listener]struct{}
	conns      map[*conn]struct{}
	inShutdown atomic.Bool
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		s.fallback = &http.Server{
			Handler:        s.Handler,
			ReadTimeout:    s.ReadTimeout,
			IdleTimeout:    s.IdleTimeout,
			MaxHeaderBytes: s.MaxHeaderBytes,
			ErrorLog:       s.ErrorLog,
			ConnState: func(nc net.Conn, st http.ConnState) {
				if h, ok := nc.(*handedConn); ok && st == http.StateIdle {
					h.requestRead()
				}
			},
		}
		s.handed = newChanListener()
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*conn]struct{}{}
		go func() { _ = s.fallback.Serve(s.handed) }()
	})
}

func (s *Server) watchAfter() time.Duration {
	if s.WatchAfter > 0 {
		return s.WatchAfter
	}
	return 20 * time.Millisecond
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return s.ReadTimeout
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

// Serve accepts connections on l until Shutdown or Close, and returns
// http.ErrServerClosed then.
func (s *Server) Serve(l net.Listener) error {
	s.init()
	s.mu.Lock()
	if s.inShutdown.Load() {
		s.mu.Unlock()
		l.Close()
		return http.ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.handed.setAddr(l.Addr())
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	base := context.WithValue(context.Background(), http.ServerContextKey, s.fallback)
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				// Out of file descriptors, or a connection reset before
				// it was accepted: wait and try again, as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logf("h1: accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := s.newConn(rawio.Wrap(nc), base)
		if c == nil {
			continue
		}
		go c.serve()
	}
}

func (s *Server) newConn(nc net.Conn, base context.Context) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inShutdown.Load() {
		nc.Close()
		return nil
	}
	c := newConn(s, nc, base)
	s.conns[c] = struct{}{}
	return c
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting connections, closes the idle ones, and waits for
// requests in flight (streams included) to finish, or for ctx to end, in
// which case it returns ctx's error and leaves the rest to Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.inShutdown.Store(true)
	s.closeListeners()
	fb := make(chan error, 1)
	go func() { fb <- s.fallback.Shutdown(ctx) }()
	t := time.NewTimer(time.Millisecond)
	defer t.Stop()
	wait := time.Millisecond
	for {
		if s.closeIdle() {
			return <-fb
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			wait = min(2*wait, 100*time.Millisecond)
			t.Reset(wait)
		}
	}
}

// Close closes the listeners and every connection now.
func (s *Server) Close() error {
	s.init()
	s.inShutdown.Store(true)
	s.closeListeners()
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	return s.fallback.Close()
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	for l := range s.listeners {
		l.Close()
	}
	s.mu.Unlock()
}

// closeIdle closes the connections waiting for a request, and new ones
// that have sent none for newConnGrace, and reports whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) ||
			time.Since(c.born) > newConnGrace && c.state.CompareAndSwap(stateNew, stateClosed) {
			c.nc.Close()
		}
	}
	return len(s.conns) == 0
}

// chanListener is the listener the fallback net/http server accepts
// handed-over connections from.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr atomic.Pointer[net.Addr]
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) setAddr(a net.Addr) { l.addr.CompareAndSwap(nil, &a) }

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr {
	if a := l.addr.Load(); a != nil {
		return *a
	}
	return &net.TCPAddr{}
}

// deliver hands c to the fallback server, or closes it when that server is
// closed.
func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

// NewTLSListener is tls.NewListener for Serve: each accepted TCP
// connection gets the raw reads and writes Serve gives plain ones
// (router/internal/rawio) under its TLS.
func NewTLSListener(inner net.Listener, cfg *tls.Config) net.Listener {
	return &tlsListener{Listener: inner, cfg: cfg}
}

type tlsListener struct {
	net.Listener
	cfg *tls.Config
}

func (l *tlsListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(rawio.Wrap(nc), l.cfg), nil
}
