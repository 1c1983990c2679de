package h1

import (
	"context"
	"errors"
	"net"
	"testing"
)

// reqCtx behaves as context.WithCancel's context does, for the context
// package's own helpers too, and moves a watched connection's deadline.
func TestReqCtx(t *testing.T) {
	x := &exchange{}
	x.ctx.Context = context.WithValue(context.Background(), "k", "v")
	ctx := &x.ctx
	if ctx.Err() != nil || ctx.Value("k") != "v" {
		t.Fatal("a fresh context is canceled or lost its values")
	}
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	fired := make(chan struct{})
	context.AfterFunc(ctx, func() { close(fired) })
	stopped := false
	stop := context.AfterFunc(ctx, func() { stopped = true })
	if !stop() {
		t.Fatal("stop before cancel reported false")
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if !ctx.WatchConn(a) {
		t.Fatal("watch on a live context reported false")
	}
	done := ctx.Done()
	select {
	case <-done:
		t.Fatal("done before cancel")
	default:
	}

	ctx.cancel()
	ctx.cancel() // twice: no panic
	<-done
	<-fired
	<-child.Done()
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) || stopped {
		t.Fatalf("after cancel: %v %v stopped=%v", ctx.Err(), child.Err(), stopped)
	}
	// The watched connection's reads fail at once.
	if ctx.UnwatchConn() {
		t.Fatal("unwatch after cancel reported true")
	}
	if _, err := a.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("read on the watched connection: %v", err)
	}
	// Canceled already: a watch moves the deadline at once; Done is closed.
	c2, d2 := net.Pipe()
	defer c2.Close()
	defer d2.Close()
	if ctx.WatchConn(c2) {
		t.Fatal("watch on a canceled context reported true")
	}
	if _, err := c2.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("read after a late watch: %v", err)
	}
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	<-ran
	y := &exchange{}
	y.ctx.Context = context.Background()
	y.ctx.cancel()
	select {
	case <-y.ctx.Done():
	default:
		t.Fatal("Done asked for after cancel is not closed")
	}
}
