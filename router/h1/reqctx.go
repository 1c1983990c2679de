package h1

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/triagegw/triage/router/internal/wire"
)

// exchange is what one fast-path request needs beyond its http.Request,
// in one allocation: its context, URL, body and response writer.
type exchange struct {
	ctx  reqCtx
	url  url.URL
	body body
	resp response
}

// reqCtx is a fast-path request's context: canceled when its client leaves
// (the watch) or its handler returns, as context.WithCancel's would be,
// but without a separate allocation for itself, its Done channel (made
// only if asked for) or a cancel function. A proxy can also have it move
// an upstream connection's deadline into the past when it is canceled
// (WatchConn), which context.AfterFunc would do at the cost of four
// allocations per upstream attempt.
type reqCtx struct {
	context.Context // the connection's: deadline-free, never canceled; values

	mu      sync.Mutex
	done    chan struct{}
	err     error
	watched interface{ SetDeadline(time.Time) error }
	afters  []*afterFunc

	fieldBytes, fields int      // HeadSize
	keys, vals         []string // HeaderLines
}

// HeadSize is the size of the request's header section as it arrived: its
// lines' bytes, CRLFs included, and their number (Host's among them). A
// handler that bounds what it forwards can check these first and count
// the header map only when they are near its limits.
func (c *reqCtx) HeadSize() (bytes, lines int) { return c.fieldBytes, c.fields }

// HeaderLines is the request's header as it arrived: each line's
// canonical name and its value, in the order the client sent them. Host
// and Transfer-Encoding, which are not in Request.Header, have a blank
// name; Request.Header holds the other lines, grouped by name. A proxy
// can write the header on from these, in the client's order, without
// iterating the map (which a handler must then not have changed).
func (c *reqCtx) HeaderLines() (names, values []string) { return c.keys, c.vals }

// headKey finds a fast-path request's context through any context
// derived from it (context.WithValue, WithCancel, a middleware's wrapper):
// its head's facts are not lost when a handler's context is not the one
// the server made.
type headKey struct{}

func (c *reqCtx) Value(key any) any {
	if _, ok := key.(headKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// HeadSize is the size of the header section of the request whose
// context is ctx (or is derived from its context), as HeadSize says; 0,
// 0 for a request this server did not parse. A context that reports its
// own HeadSize is asked directly.
func HeadSize(ctx context.Context) (bytes, lines int) {
	if hs, ok := ctx.(interface{ HeadSize() (bytes, lines int) }); ok {
		return hs.HeadSize()
	}
	if c, ok := ctx.Value(headKey{}).(*reqCtx); ok {
		return c.HeadSize()
	}
	return 0, 0
}

// HeaderLines is the header of the request whose context is ctx (or is
// derived from its context) as it arrived, as HeaderLines says; nil for a
// request this server did not parse. A context that reports its own
// HeaderLines is asked directly.
func HeaderLines(ctx context.Context) (names, values []string) {
	if hl, ok := ctx.(interface {
		HeaderLines() (names, values []string)
	}); ok {
		return hl.HeaderLines()
	}
	if c, ok := ctx.Value(headKey{}).(*reqCtx); ok {
		return c.HeaderLines()
	}
	return nil, nil
}

type afterFunc struct{ f func() }

// closedDone is the Done channel of a context canceled before anyone asked.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *reqCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			c.done = closedDone
		} else {
			c.done = make(chan struct{})
		}
	}
	return c.done
}

func (c *reqCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// cancel ends the context: Done closes, Err says Canceled, a watched
// connection's deadline moves into the past and AfterFunc's functions run.
func (c *reqCtx) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	if c.done != nil {
		close(c.done)
	}
	w, afters := c.watched, c.afters
	c.afters = nil
	c.mu.Unlock()
	if w != nil {
		_ = w.SetDeadline(wire.ALongTimeAgo)
	}
	for _, a := range afters {
		go a.f()
	}
}

// AfterFunc is context.AfterFunc's hook (the context package calls it
// for contexts derived from this one, and for AfterFunc itself): f runs
// in its own goroutine once the context is canceled; stop unregisters it.
func (c *reqCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a := &afterFunc{f: f}
	c.afters = append(c.afters, a)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, b := range c.afters {
			if b == a {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// WatchConn has conn's deadline moved into the past when the context is
// canceled, until UnwatchConn; one connection at a time. When the context
// is canceled already, it moves it at once and reports false.
func (c *reqCtx) WatchConn(conn interface{ SetDeadline(time.Time) error }) bool {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		_ = conn.SetDeadline(wire.ALongTimeAgo)
		return false
	}
	c.watched = conn
	c.mu.Unlock()
	return true
}

// UnwatchConn ends the watch WatchConn began, and reports false when the
// context was canceled meanwhile (the deadline was moved).
func (c *reqCtx) UnwatchConn() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watched = nil
	return c.err == nil
}
