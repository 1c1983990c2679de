// Package logsink is an io.Writer for logs that never makes the request
// path wait on disk or a pipe: Write appends to a memory buffer, and Run
// writes the buffer out in the background. When the buffer is full (the
// output is stuck), lines are dropped and counted, not queued without bound.
//
// Writer is safe for concurrent use. Run exits when its context is done,
// after a final flush.
package logsink

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Writer buffers log lines for a background flusher.
type Writer struct {
	out      io.Writer
	max      int           // bytes held before lines are dropped
	interval time.Duration // flush at least this often

	mu      sync.Mutex
	buf     []byte
	spare   []byte
	kick    chan struct{}
	dropped atomic.Int64
	flushMu sync.Mutex // serialises writes to out
}

// kickAt is how much buffered output wakes the flusher before its interval:
// small enough that the buffers stay small under load.
const kickAt = 64 << 10

// New returns a Writer to out that holds at most max bytes and flushes every
// interval, or sooner when 64 KiB are waiting.
func New(out io.Writer, max int, interval time.Duration) *Writer {
	return &Writer{out: out, max: max, interval: interval, kick: make(chan struct{}, 1)}
}

// Write appends p whole or drops it whole; it never blocks on out and never
// fails.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if len(w.buf)+len(p) > w.max {
		w.mu.Unlock()
		w.dropped.Add(1)
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	n := len(w.buf)
	w.mu.Unlock()
	if n >= kickAt {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// Dropped counts the writes dropped because the buffer was full.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Flush writes out what is buffered now.
func (w *Writer) Flush() error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.mu.Lock()
	b := w.buf
	w.buf = w.spare[:0]
	w.mu.Unlock()
	var err error
	if len(b) > 0 {
		_, err = w.out.Write(b)
	}
	w.mu.Lock()
	if cap(b) <= 4*kickAt { // keep the buffer unless a burst ballooned it
		w.spare = b[:0]
	}
	w.mu.Unlock()
	return err
}

// Run flushes every interval, and when kicked, until ctx is done; then it
// flushes once more and returns.
func (w *Writer) Run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = w.Flush()
			return
		case <-t.C:
		case <-w.kick:
		}
		_ = w.Flush()
	}
}
