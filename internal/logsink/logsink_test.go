package logsink

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

type blockingWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	release chan struct{}
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	<-b.release
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *blockingWriter) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.buf.String() }

func TestWriterNeverBlocksAndDropsWhenFull(t *testing.T) {
	out := &blockingWriter{release: make(chan struct{})}
	w := New(out, 64, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()

	line := []byte("0123456789abcdef\n") // 17 bytes
	finished := make(chan struct{})
	go func() {
		for range 10 {
			w.Write(line) // must return even though out is stuck
		}
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("Write blocked on a stuck output")
	}
	if w.Dropped() == 0 {
		t.Fatal("10 lines of 17 bytes into a 64-byte buffer with a stuck output dropped none")
	}
	close(out.release)
	cancel()
	<-done
	got := out.String()
	if n := strings.Count(got, "\n"); int64(n)+w.Dropped() != 10 {
		t.Fatalf("written %d + dropped %d != 10", n, w.Dropped())
	}
	if strings.Contains(strings.ReplaceAll(got, string(line), ""), "0") {
		t.Fatalf("a line was split: %q", got)
	}
}

func TestRunFlushesOnInterval(t *testing.T) {
	out := &blockingWriter{release: make(chan struct{})}
	close(out.release)
	w := New(out, 1<<20, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	w.Write([]byte("hello\n"))
	testenv.WaitWithin(t, testenv.WaitTimeout, "the line flushed", func() (bool, string) {
		s := out.String()
		return s == "hello\n", fmt.Sprintf("%q", s)
	})
}
