// Package routertest runs a gateway for a test as `triage serve` does: its
// own HTTP/1.1 server on a real loopback socket, with the gateway's
// background work (health checks, sessions shared through Redis) going.
// It takes the gateway as an interface so that the router package's own
// tests can use it.
package routertest

import (
	"context"
	"log"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/triagegw/triage/router/h1"
)

// Gateway is what Serve needs of a *router.Gateway.
type Gateway interface {
	HTTPServer(errLog *log.Logger) *h1.Server
	Run(ctx context.Context)
	Shutdown(ctx context.Context) error
}

// Options change what Serve does; the zero value is `triage serve`.
type Options struct {
	// Wrap, when set, wraps the server's handler, for a test to watch
	// requests as the gateway gets them.
	Wrap func(http.Handler) http.Handler
	// ShutdownWithin bounds gw.Shutdown when the test ends (the last
	// export of spans). Default 10s.
	ShutdownWithin time.Duration
	// ShutdownErr, when set, gets gw.Shutdown's error instead of the
	// test failing with it: for a test whose trace endpoint is down or
	// hangs on purpose.
	ShutdownErr func(error)
}

// Serve serves gw on a loopback socket with gw.Run going, and returns the
// server's address (host:port). When tb ends the server closes, Run must
// return within 5 s, and gw.Shutdown exports what tracing still holds;
// either failing fails tb (see Options.ShutdownErr).
func Serve(tb testing.TB, gw Gateway, o Options) string {
	tb.Helper()
	srv := gw.HTTPServer(nil)
	if o.Wrap != nil {
		srv.Handler = o.Wrap(srv.Handler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { gw.Run(ctx); close(done) }()
	tb.Cleanup(func() {
		srv.Close()
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			tb.Error("Gateway.Run did not return after its context was cancelled")
			return
		}
		within := o.ShutdownWithin
		if within <= 0 {
			within = 10 * time.Second
		}
		sctx, stop := context.WithTimeout(context.Background(), within)
		defer stop()
		err := gw.Shutdown(sctx)
		switch {
		case o.ShutdownErr != nil:
			o.ShutdownErr(err)
		case err != nil:
			tb.Errorf("Gateway.Shutdown: %v", err)
		}
	})
	return ln.Addr().String()
}
