package testenv

import (
	"net"
	"testing"
)

// ServeConns listens on a loopback port until tb's cleanup and hands each
// connection to handle in a goroutine of its own, closing it when handle
// returns: the raw upstreams tests put behind the gateway. It returns the
// listener's address.
func ServeConns(tb testing.TB, handle func(net.Conn)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}
