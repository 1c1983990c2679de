package proxy

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"
)

// TestFillKeepsTheCancel: a client that leaves while the relay moves its
// read deadline must still end the read. The cancel sets Err, then moves
// the deadline into the past; if that lands just before fill sets the
// next idle deadline, the later deadline used to win and the read waited
// for the idle timeout (a minute here) with the replica still generating.
// The order is forced: the context is canceled and its interrupt has run
// before fill moves the deadline.
func TestFillKeepsTheCancel(t *testing.T) {
	replica, gw := net.Pipe()
	defer replica.Close()
	defer gw.Close()
	c := &conn{nc: gw, br: bufio.NewReader(gw)}
	c.interrupt = func() { _ = gw.SetDeadline(time.Unix(1, 0)) }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.interrupt() // the cancel's deadline in the past, landed first
	c.up = upstream{c: c, hook: cancelHook{stop: func() bool { return false }, ctx: ctx}}
	r := &relayer{u: &c.up, idle: time.Minute, total: time.Now().Add(time.Hour)}
	done := make(chan error, 1)
	go func() { done <- r.fill(0) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("fill read bytes nobody sent")
		}
	case <-time.After(10 * time.Second):
		gw.Close() // end the read, so the goroutine does not outlive the test
		<-done
		t.Fatal("fill waited on the replica after the client left: the cancel's deadline was overwritten")
	}
}
