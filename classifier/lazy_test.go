package classifier

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// gated classifies once released, answering class "x:text"; when ran is
// set, it sends the text there once it has written its answer.
type gated struct {
	release chan struct{}
	ran     chan string
}

func (g *gated) Classify(ctx context.Context, text string, r *Result) error {
	<-g.release
	r.Class, r.Score, r.Tier = "x:"+text, 0.9, 2
	r.Top = append(r.Top[:0], Scored{Class: "x:" + text, Score: 0.9})
	if g.ran != nil {
		g.ran <- text
	}
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
	g := &gated{release: make(chan struct{}), ran: make(chan string, 2)}
	l := NewLazy(func() (Classifier, error) { return g, nil })
	if err := l.Wait(); err != nil {
		t.Fatal(err)
	}
	r := Result{Class: "before"}
	if err := l.ClassifyWithin(context.Background(), 10*time.Millisecond, "late", &r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a run past its budget: %v", err)
	}
	close(g.release) // the run can end only now: the call returned without it
	if text := testenv.Receive(t, g.ran, "the late run to end"); text != "late" {
		t.Fatalf("the run that ended was %q's, want the late one's", text)
	}
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

// counting answers "x:text" and counts its runs.
type counting struct{ runs atomic.Int64 }

func (c *counting) Classify(ctx context.Context, text string, r *Result) error {
	c.runs.Add(1)
	r.Class, r.Score, r.Tier, r.Tokens = "x:"+text, 0.75, 2, len(text)
	r.Top = append(r.Top[:0], Scored{Class: "x:" + text, Score: 0.75}, Scored{Class: "y", Score: 0.25})
	r.SetProbs([]float32{0.75, 0.25})
	return nil
}

// A text classified before is answered from the cache, the same result
// without a run; the cache keeps the last texts only.
func TestLazyCachesResults(t *testing.T) {
	c := &counting{}
	l := NewLazy(func() (Classifier, error) { return c, nil })
	l.SetCacheSize(2)
	var first, again Result
	for _, budget := range []time.Duration{0, time.Second} { // offline and live alike
		if err := l.ClassifyWithin(context.Background(), budget, "a", &first); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.ClassifyWithin(context.Background(), time.Second, "a", &again); err != nil {
		t.Fatal(err)
	}
	if c.runs.Load() != 1 || again.Class != first.Class || again.Score != first.Score || again.Tokens != 1 ||
		len(again.Top) != 2 || len(again.Probs) != 2 || again.Probs[0] != 0.75 {
		t.Fatalf("%d runs; first %+v, again %+v", c.runs.Load(), first, again)
	}
	// Changing what the cache returned must not change what it keeps.
	again.Probs[0], again.Top[0].Class = 0, "changed"
	var third Result
	_ = l.ClassifyWithin(context.Background(), 0, "a", &third)
	if third.Probs[0] != 0.75 || third.Top[0].Class != "x:a" {
		t.Fatalf("the cache shares its slices: %+v", third)
	}
	for _, s := range []string{"b", "c", "a"} { // "a" was pushed out by b and c
		_ = l.ClassifyWithin(context.Background(), 0, s, &third)
	}
	if n := c.runs.Load(); n != 4 {
		t.Fatalf("%d runs, want 4 (a, b, c, and a again once evicted)", n)
	}
	if hits, misses := l.CacheStats(); hits != 3 || misses != 4 {
		t.Fatalf("hits %d misses %d", hits, misses)
	}
}

// An answer that came after its request's budget is kept: the retry of
// that request is answered at once.
func TestLazyCachesALateAnswer(t *testing.T) {
	g := &gated{release: make(chan struct{})}
	l := NewLazy(func() (Classifier, error) { return g, nil })
	if err := l.Wait(); err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := l.ClassifyWithin(context.Background(), 10*time.Millisecond, "slow", &r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first: %v", err)
	}
	close(g.release)
	testenv.Wait(t, func() bool {
		if hits, _ := l.CacheStats(); hits > 0 {
			return true
		}
		err := l.ClassifyWithin(context.Background(), time.Nanosecond, "slow", &r)
		if err == nil && r.Class == "x:slow" {
			hits, _ := l.CacheStats() // answered from the cache
			return hits > 0
		}
		return false
	}, "the late answer to reach the cache")
}
