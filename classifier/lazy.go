package classifier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Lazy is a tier loaded on first need. The load starts in the background
// the first time it is needed (Start, or a classification), and a
// classification waits for it only within its budget: the first requests
// after a start go on without it while a model loads, instead of holding
// for the second or so a session takes.
//
// A Lazy is safe for concurrent use. The load runs once, on a goroutine of
// its own that ends when the load does; a classification that outlives its
// budget runs on to its end on its own goroutine (a model run cannot be
// interrupted) and its answer is dropped.
type Lazy struct {
	load    func() (Classifier, error)
	once    sync.Once
	started atomic.Bool
	ready   chan struct{} // closed when the load has finished
	c       Classifier
	err     error
	cache   *resultCache // nil: off
}

// LoadError is a tier that could not be loaded: the classification did not
// run, and will not until a new Lazy tries again.
type LoadError struct{ Err error }

func (e *LoadError) Error() string { return "load: " + e.Err.Error() }
func (e *LoadError) Unwrap() error { return e.Err }

// NewLazy returns a tier that load makes on first need. A nil load gives a
// tier that is never available (ErrUnavailable).
func NewLazy(load func() (Classifier, error)) *Lazy {
	if load == nil {
		load = func() (Classifier, error) {
			return nil, fmt.Errorf("no encoder for this tier: %w", ErrUnavailable)
		}
	}
	return &Lazy{load: load, ready: make(chan struct{}), cache: newResultCache(DefaultCacheSize)}
}

// SetCacheSize keeps the results of the last n distinct texts (0: none).
// Call it before the first classification.
func (l *Lazy) SetCacheSize(n int) {
	l.cache = nil
	if n > 0 {
		l.cache = newResultCache(n)
	}
}

// CacheStats reports the cache's hits and misses so far.
func (l *Lazy) CacheStats() (hits, misses uint64) {
	if l.cache == nil {
		return 0, 0
	}
	return l.cache.hits.Load(), l.cache.misses.Load()
}

// RunStats reports the loaded tier's scheduler: its queue, Runs, and the
// texts it shed, dropped or answered late (false: not loaded, or a tier
// that does not schedule its Runs).
func (l *Lazy) RunStats() (RunStats, bool) {
	if !l.Loaded() {
		return RunStats{}, false
	}
	if s, ok := l.c.(RunStatser); ok {
		return s.RunStats()
	}
	return RunStats{}, false
}

// Start begins the load in the background, once.
func (l *Lazy) Start() {
	l.once.Do(func() {
		l.started.Store(true)
		go func() {
			defer close(l.ready)
			l.c, l.err = l.load()
			if l.err == nil && l.c == nil {
				l.err = errors.New("the loader returned no classifier")
			}
		}()
	})
}

// Wait starts the load if it has not started, waits for it, and returns
// its error.
func (l *Lazy) Wait() error {
	l.Start()
	<-l.ready
	return l.loadErr()
}

func (l *Lazy) loadErr() error {
	if l.err != nil {
		return &LoadError{l.err}
	}
	return nil
}

// Get starts the load if it has not started, waits for it, and returns
// the loaded tier.
func (l *Lazy) Get() (Classifier, error) {
	if err := l.Wait(); err != nil {
		return nil, err
	}
	return l.c, nil
}

// Loaded reports whether the tier has loaded successfully.
func (l *Lazy) Loaded() bool {
	select {
	case <-l.ready:
		return l.err == nil
	default:
		return false
	}
}

// State says where the load stands: "not loaded" (not needed yet),
// "loading", "loaded" or "failed".
func (l *Lazy) State() string {
	select {
	case <-l.ready:
		if l.err != nil {
			return "failed"
		}
		return "loaded"
	default:
	}
	if l.started.Load() {
		return "loading"
	}
	return "not loaded"
}

// ClassifyWithin classifies text into r, starting the load if needed, and
// gives up after budget (zero: no budget, for offline work whose results
// must not depend on timing). The budget covers the load and the
// classification. Past it, the error is context.DeadlineExceeded and the
// classification, which cannot be interrupted, runs on with its own copy
// of text; its answer is dropped and r is left as it was. A failed load
// gives a *LoadError.
func (l *Lazy) ClassifyWithin(ctx context.Context, budget time.Duration, text string, r *Result) error {
	return l.ClassifyFor(ctx, budget, "", text, r)
}

// ClassifyFor is ClassifyWithin for a request of tenant (the principal;
// "": none): the cache answers it only with results its own tenant's
// requests left, so that a text answered in microseconds instead of
// milliseconds does not tell one tenant another sent it.
func (l *Lazy) ClassifyFor(ctx context.Context, budget time.Duration, tenant, text string, r *Result) error {
	if budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, budget)
		defer cancel()
	}
	l.Start()
	select {
	case <-l.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := l.loadErr(); err != nil {
		return err
	}
	var key uint64
	if l.cache != nil {
		// A text classified before is answered from the cache: the same
		// result the model would give, without running it.
		if key = l.cache.key(tenant, text); l.cache.get(key, r) {
			return nil
		}
	}
	if budget <= 0 {
		err := l.c.Classify(ctx, text, r)
		if err == nil && l.cache != nil {
			l.cache.put(key, r)
		}
		return err
	}
	type answer struct {
		r   Result
		err error
	}
	done := make(chan answer, 1)
	c, own := l.c, strings.Clone(text) // text is valid only during this call
	cache := l.cache
	go func() {
		var a answer
		a.err = c.Classify(ctx, own, &a.r)
		if a.err == nil && cache != nil {
			// Kept even when the request has gone on without it: its
			// retry, or the next request with the same text, is answered
			// at once.
			cache.put(key, &a.r)
		}
		done <- a
	}()
	select {
	case a := <-done:
		if a.err != nil {
			return a.err
		}
		r.Class, r.Score, r.Tier, r.Tokens = a.r.Class, a.r.Score, a.r.Tier, a.r.Tokens
		r.Top = append(r.Top[:0], a.r.Top...)
		r.Probs = append(r.Probs[:0], a.r.Probs...)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
