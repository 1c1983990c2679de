package classifier

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gated classifies once released, answering class "x".
type gated struct{ release chan struct{} }

func (g *gated) Classify(ctx context.Context, text string, r *Result) error {
	<-g.release
	r.Class, r.Score, r.Tier = "x:"+text, 0.9, 2
	r.Top = append(r.Top[:0], Scored{Class: "x:" + text, Score: 0.9})
	return nil
}

func TestLazyLoadsOnceOnFirstNeed(t *testing.T) {
	var loads atomic.Int64
	loading := make(chan struct{})
	g := &gated{release: make(chan struct{})}
	close(g.release)
	l := NewLazy(func() (Classifier, error) { loads.Add(1); <-loading; return g, nil })
	if s := l.State(); s != "not loaded" {
		t.Fatalf("before any need: %q", s)
	}
	var r Result
	// While it loads, a classification gives up at its budget.
	if err := l.ClassifyWithin(context.Background(), 10*time.Millisecond, "a", &r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("while loading: %v", err)
	}
	if s := l.State(); s != "loading" || r.Class != "" {
		t.Fatalf("while loading: state %q, result %+v", s, r)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { l.Start() })
	}
	wg.Wait()
	close(loading)
	if err := l.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := l.ClassifyWithin(context.Background(), time.Second, "b", &r); err != nil || r.Class != "x:b" || r.Tier != 2 {
		t.Fatalf("once loaded: %v %+v", err, r)
	}
	if n := loads.Load(); n != 1 || l.State() != "loaded" || !l.Loaded() {
		t.Fatalf("loads %d, state %q", n, l.State())
	}
}

func TestLazyBudgetDropsALateAnswer(t *testing.T) {
	g := &gated{release: make(chan struct{})}
	l := NewLazy(func() (Classifier, error) { return g, nil })
	if err := l.Wait(); err != nil {
		t.Fatal(err)
	}
	r := Result{Class: "before"}
	if err := l.ClassifyWithin(context.Background(), 10*time.Millisecond, "late", &r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a run past its budget: %v", err)
	}
	close(g.release) // the run can end only now: the call returned without it
	time.Sleep(10 * time.Millisecond)
	if r.Class != "before" {
		t.Fatalf("a dropped answer reached the result: %+v", r)
	}
	// No budget: waits for the answer (offline work).
	if err := l.ClassifyWithin(context.Background(), 0, "now", &r); err != nil || r.Class != "x:now" {
		t.Fatalf("without a budget: %v %+v", err, r)
	}
}

func TestLazyFailedLoad(t *testing.T) {
	boom := errors.New("model.onnx: sha256 mismatch")
	l := NewLazy(func() (Classifier, error) { return nil, boom })
	var r Result
	err := l.ClassifyWithin(context.Background(), time.Second, "a", &r)
	var le *LoadError
	if !errors.As(err, &le) || !errors.Is(err, boom) || l.State() != "failed" || l.Loaded() {
		t.Fatalf("failed load: %v, state %q", err, l.State())
	}
	if err := NewLazy(nil).Wait(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no loader: %v", err)
	}
}
