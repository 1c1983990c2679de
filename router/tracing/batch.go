package tracing

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// batcher is the span processor: ended spans wait in a queue, and one
// goroutine exports them in batches, when a batch is full or every delay.
// A span's end takes a lock and an append, never waits, and past max
// spans waiting is dropped and counted (queueFull), as is every span of a
// batch whose export fails (exportFailed). The SDK's batch processor
// drops as well, but counts its drops where only its own instrumentation
// can read them, and hands each span to its goroutine over a channel (a
// wake-up per span); this one wakes its goroutine once per batch.
type batcher struct {
	exp     sdktrace.SpanExporter
	max     int           // spans waiting, at most
	size    int           // spans per export
	delay   time.Duration // the longest a span waits for its batch to fill
	timeout time.Duration // one export

	mu    sync.Mutex
	queue []sdktrace.ReadOnlySpan
	spare []sdktrace.ReadOnlySpan // the last batch's array, for the next queue
	shut  bool

	full    chan struct{}   // a batch is waiting (cap 1)
	flushes chan chan error // ForceFlush's requests
	stop    chan struct{}
	done    chan struct{} // closed when run has exported the last spans

	queueFull, exportFailed atomic.Uint64
}

func newBatcher(exp sdktrace.SpanExporter, max, size int, delay, timeout time.Duration) *batcher {
	b := &batcher{exp: exp, max: max, size: min(size, max), delay: delay, timeout: timeout,
		full: make(chan struct{}, 1), flushes: make(chan chan error), stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

func (*batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	if b.shut || len(b.queue) >= b.max {
		shut := b.shut
		b.mu.Unlock()
		if !shut {
			b.queueFull.Add(1)
		}
		return
	}
	b.queue = append(b.queue, s)
	n := len(b.queue)
	b.mu.Unlock()
	if n == b.size {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

// run exports batches until Shutdown, then what is left.
func (b *batcher) run() {
	defer close(b.done)
	t := time.NewTicker(b.delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.export(false)
		case <-b.full:
			b.export(true)
		case reply := <-b.flushes:
			reply <- b.export(false)
		case <-b.stop:
			b.export(false)
			return
		}
	}
}

// export sends what is queued, batch by batch (only full batches when
// fullOnly), and reports the last failure.
func (b *batcher) export(fullOnly bool) error {
	var last error
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.size)
		if n == 0 || fullOnly && n < b.size {
			b.mu.Unlock()
			return last
		}
		batch := b.queue[:n:n]
		rest := b.queue[n:]
		// The rest moves to the spare array; this batch's array becomes
		// the spare once exported.
		b.queue = append(b.spare[:0], rest...)
		b.spare = nil
		b.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		err := b.exp.ExportSpans(ctx, batch)
		cancel()
		if err != nil {
			b.exportFailed.Add(uint64(n))
			last = err
			otelHandle(err)
		}
		clear(batch)
		b.mu.Lock()
		if b.spare == nil {
			b.spare = batch[:0:cap(batch)]
		}
		b.mu.Unlock()
	}
}

func (b *batcher) ForceFlush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case b.flushes <- reply:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *batcher) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.shut {
		b.mu.Unlock()
		return nil
	}
	b.shut = true
	b.mu.Unlock()
	close(b.stop)
	select {
	case <-b.done:
	case <-ctx.Done():
		return errors.Join(ctx.Err(), b.exp.Shutdown(ctx))
	}
	return b.exp.Shutdown(ctx)
}
