package onnx

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"

	"github.com/triagegw/triage/internal/testenv"
)

// These tests drive the scheduler with a Run of known duration: what they
// check is its bookkeeping (who is admitted, batched, dropped, counted),
// which a real encoder's varying speed would blur. sched_ort_test.go runs
// it on the real encoder.

// fakeRun is a Run that takes per text-token wall time plus fixed, writes
// each text's length into its vector, and records the batches it ran.
type fakeRun struct {
	fixed, perToken time.Duration
	gate            chan struct{} // when set, each Run waits for a value first
	mu              sync.Mutex
	batches         []int
	runs            atomic.Int64
}

func (f *fakeRun) run(batch [][]int32, dst [][]float32) error {
	if f.gate != nil {
		<-f.gate
	}
	longest := 0
	for _, ids := range batch {
		longest = max(longest, len(ids))
	}
	// The Run's duration, not a wait for anything: what the scheduler's
	// estimates, deadlines and lateness are checked against.
	time.Sleep(f.fixed + time.Duration(len(batch)*longest)*f.perToken)
	for i, ids := range batch {
		dst[i][0] = float32(len(ids))
	}
	f.mu.Lock()
	f.batches = append(f.batches, len(batch))
	f.mu.Unlock()
	f.runs.Add(1)
	return nil
}

func ids(n int) []int32 { return make([]int32, n) }

// prior tells the scheduler the fake's true cost.
func (f *fakeRun) prior() [2]costPoint {
	return [2]costPoint{{8, f.fixed + 8*f.perToken}, {64, f.fixed + 64*f.perToken}}
}

func TestSchedulerAdmission(t *testing.T) {
	f := &fakeRun{fixed: 200 * time.Millisecond}
	s := newScheduler(schedConfig{workers: 1, maxBatch: 1, maxPadded: 256, queueLen: 64}, f.run, f.prior())
	defer s.close()
	// One worker, 200 ms a Run, a 550 ms budget: the first two finish by
	// 400 ms; a third would end at 600 ms and is refused at once. (The
	// margins let a busy machine start the callers up to 150 ms late.)
	deadline := time.Now().Add(550 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	errs := make([]error, 5)
	var wg sync.WaitGroup
	submit := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.embed(ctx, deadline, ids(10), nil, 4)
		}()
	}
	submit(0)
	testenv.Wait(t, func() bool { return s.stats().Running == 1 }, "s.stats().Running == 1")
	submit(1)
	testenv.Wait(t, func() bool { return s.stats().Queued == 1 }, "s.stats().Queued == 1")
	for i := 2; i < 5; i++ {
		submit(i)
	}
	wg.Wait()
	ok, shed := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, classifier.ErrShed):
			shed++
		default:
			t.Errorf("unexpected error %v", err)
		}
	}
	st := s.stats()
	if ok != 2 || shed != 3 || f.runs.Load() != 2 || st.Shed != 3 {
		t.Fatalf("answered %d, shed %d, Runs %d, stats %+v; want 2 answered in 2 Runs, 3 shed", ok, shed, f.runs.Load(), st)
	}
}

func TestSchedulerNeverStartsALateRun(t *testing.T) {
	// The cost model thinks a Run takes 25 ms; it takes 150. The first
	// text's Run outlives the estimate, so the texts queued behind it,
	// admitted on the estimate, find at batch time that they cannot end
	// within their budget: they are dropped, not run.
	f := &fakeRun{fixed: 150 * time.Millisecond}
	prior := [2]costPoint{{8, 25 * time.Millisecond}, {64, 25 * time.Millisecond}}
	s := newScheduler(schedConfig{workers: 1, maxBatch: 1, maxPadded: 256, queueLen: 64}, f.run, prior)
	defer s.close()
	deadline := time.Now().Add(160 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	submit := func(i int) {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = s.embed(ctx, deadline, ids(10), nil, 4) }()
	}
	submit(0)
	testenv.Wait(t, func() bool { return s.stats().Running == 1 }, "s.stats().Running == 1")
	for i := 1; i < 4; i++ {
		submit(i)
	}
	wg.Wait()
	if errs[0] != nil {
		t.Fatalf("first: %v", errs[0])
	}
	for i, err := range errs[1:] {
		if !errors.Is(err, classifier.ErrShed) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("text %d: %v, want shed or its deadline", i+1, err)
		}
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("%d Runs, want 1: a Run started that could not end in time", n)
	}
}

func TestSchedulerBatchesWhatQueues(t *testing.T) {
	f := &fakeRun{fixed: time.Millisecond, gate: make(chan struct{})}
	s := newScheduler(schedConfig{workers: 1, maxBatch: 4, maxPadded: 256, queueLen: 64}, f.run, f.prior())
	defer s.close()
	defer close(f.gate) // first: a failed test must not leave close waiting on a Run
	ctx := context.Background()
	deadline := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	res := make([][]float32, 7)
	submit := func(i, n int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := s.embed(ctx, deadline, ids(n), nil, 4)
			if err != nil {
				t.Error(err)
			}
			res[i] = v
		}()
	}
	submit(0, 3)
	testenv.Wait(t, func() bool { return s.stats().Running == 1 }, "s.stats().Running == 1") // the first runs alone
	for i := 1; i < 7; i++ {
		submit(i, 20+i) // of about one length: no more padding than fits allows
	}
	testenv.Wait(t, func() bool { return s.stats().Queued == 6 }, "s.stats().Queued == 6")
	for range 3 {
		f.gate <- struct{}{}
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []int{1, 4, 2}; !equalInts(f.batches, want) {
		t.Errorf("batches %v, want %v: alone while nothing waits, then what queued, at most 4", f.batches, want)
	}
	for i, v := range res {
		if want := float32(20 + i); i > 0 && v[0] != want || i == 0 && v[0] != 3 {
			t.Errorf("text %d got the answer of a %v-token text", i, v[0])
		}
	}
}

func TestSchedulerPaddedTokenCap(t *testing.T) {
	f := &fakeRun{fixed: time.Millisecond, gate: make(chan struct{})}
	s := newScheduler(schedConfig{workers: 1, maxBatch: 8, maxPadded: 256, queueLen: 64}, f.run, f.prior())
	defer s.close()
	defer close(f.gate)
	deadline := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	submit := func(n int) {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = s.embed(context.Background(), deadline, ids(n), nil, 4) }()
	}
	submit(5)
	testenv.Wait(t, func() bool { return s.stats().Running == 1 }, "s.stats().Running == 1")
	// 10, 10, 100: the 100-token text would pad the batch to 300 tokens.
	for k, n := range []int{10, 10, 100, 10} {
		submit(n)
		testenv.Wait(t, func() bool { return s.stats().Queued == k+1 }, "s.stats().Queued == k+1") // in this order
	}
	testenv.Wait(t, func() bool { return s.stats().Queued == 4 }, "s.stats().Queued == 4")
	for range 3 {
		f.gate <- struct{}{}
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []int{1, 3, 1}; !equalInts(f.batches, want) {
		t.Errorf("batches %v, want %v (the three short ones, passing the long one, which would pad them to 4×100 > 256; then it)", f.batches, want)
	}
}

func TestSchedulerDropsTextsWhoseCallerLeft(t *testing.T) {
	f := &fakeRun{fixed: time.Millisecond, gate: make(chan struct{})}
	s := newScheduler(schedConfig{workers: 1, maxBatch: 1, maxPadded: 256, queueLen: 64}, f.run, f.prior())
	defer s.close()
	ungate := sync.OnceFunc(func() { close(f.gate) })
	defer ungate()
	deadline := time.Now().Add(time.Hour)
	go func() { _, _ = s.embed(context.Background(), deadline, ids(5), nil, 4) }()
	testenv.Wait(t, func() bool { return s.stats().Running == 1 }, "s.stats().Running == 1")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := s.embed(ctx, deadline, ids(5), nil, 4); errc <- err }()
	testenv.Wait(t, func() bool { return s.stats().Queued == 1 }, "s.stats().Queued == 1")
	cancel()
	if err := testenv.Receive(t, errc, "the cancelled embed to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	f.gate <- struct{}{}
	testenv.Wait(t, func() bool { return f.runs.Load() == 1 && s.stats().Running == 0 }, "f.runs.Load() == 1 && s.stats().Running == 0")
	if st := s.stats(); st.Expired != 1 || st.Queued != 0 {
		t.Errorf("stats %+v, want 1 expired, none queued", st)
	}
	// A text queued after it: the one worker takes the queue in order, so
	// once this one is answered, the text whose caller left has run, or
	// never will.
	ungate()
	if v, err := s.embed(context.Background(), deadline, ids(9), nil, 4); err != nil || v[0] != 9 {
		t.Fatalf("the text after: %v %v", v, err)
	}
	if n := f.runs.Load(); n != 2 {
		t.Errorf("%d Runs, want 2 (the first text, the one after): the text whose caller left ran", n)
	}
}

func TestSchedulerCountsLateRuns(t *testing.T) {
	// Estimated at 1 ms, taking 100: admitted, run, answered, counted late.
	f := &fakeRun{fixed: 100 * time.Millisecond}
	prior := [2]costPoint{{8, time.Millisecond}, {64, time.Millisecond}}
	s := newScheduler(schedConfig{workers: 1, maxBatch: 1, maxPadded: 256, queueLen: 64}, f.run, prior)
	defer s.close()
	deadline := time.Now().Add(50 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	v, err := s.embed(ctx, deadline, ids(7), nil, 4)
	if err != nil || v[0] != 7 {
		t.Fatalf("late answer: %v %v; want it answered (its cache keeps it)", v, err)
	}
	if st := s.stats(); st.Late != 1 {
		t.Errorf("late %d, want 1", st.Late)
	}
}

func TestSchedulerCloseFailsWaiting(t *testing.T) {
	f := &fakeRun{fixed: time.Millisecond, gate: make(chan struct{})}
	s := newScheduler(schedConfig{workers: 1, maxBatch: 1, maxPadded: 256, queueLen: 64}, f.run, f.prior())
	released := false
	defer func() {
		if !released {
			close(f.gate)
		}
	}()
	deadline := time.Now().Add(time.Hour)
	go func() { _, _ = s.embed(context.Background(), deadline, ids(5), nil, 4) }()
	testenv.Wait(t, func() bool { return s.stats().Running == 1 }, "s.stats().Running == 1")
	errc := make(chan error, 1)
	go func() { _, err := s.embed(context.Background(), deadline, ids(5), nil, 4); errc <- err }()
	testenv.Wait(t, func() bool { return s.stats().Queued == 1 }, "s.stats().Queued == 1")
	closed := make(chan struct{})
	go func() { s.close(); close(closed) }()
	if err := <-errc; !errors.Is(err, errClosed) {
		t.Errorf("waiting text: %v, want errClosed", err)
	}
	f.gate <- struct{}{} // the Run in flight ends, then close returns
	<-closed
	released = true
	if _, err := s.embed(context.Background(), deadline, ids(5), nil, 4); !errors.Is(err, errClosed) {
		t.Errorf("after close: %v", err)
	}
}

func TestSchedulerQueueBound(t *testing.T) {
	f := &fakeRun{fixed: time.Millisecond, gate: make(chan struct{})}
	s := newScheduler(schedConfig{workers: 1, maxBatch: 1, maxPadded: 256, queueLen: 2}, f.run, f.prior())
	defer s.close()
	defer close(f.gate)
	deadline := time.Now().Add(time.Hour)
	go func() { _, _ = s.embed(context.Background(), deadline, ids(5), nil, 4) }()
	testenv.Wait(t, func() bool { return s.stats().Running == 1 }, "s.stats().Running == 1")
	for range 2 {
		go func() { _, _ = s.embed(context.Background(), deadline, ids(5), nil, 4) }()
	}
	testenv.Wait(t, func() bool { return s.stats().Queued == 2 }, "s.stats().Queued == 2")
	if _, err := s.embed(context.Background(), deadline, ids(5), nil, 4); !errors.Is(err, classifier.ErrShed) {
		t.Errorf("past the queue's bound: %v, want ErrShed", err)
	}
}

func TestCostModelFits(t *testing.T) {
	var c costModel
	c.init([2]costPoint{{8, 10 * time.Millisecond}, {64, 10 * time.Millisecond}}) // a wrong prior
	// The truth: 1 ms + 50 µs a padded token.
	for i := range 400 {
		x := 8 + (i*37)%250
		c.observe(x, time.Millisecond+time.Duration(x)*50*time.Microsecond)
	}
	if math.Abs(c.fixed-0.001) > 1e-4 || math.Abs(c.perToken-50e-6) > 5e-6 {
		t.Errorf("fit %.6f s + %.7f s/token, want 0.001 + 0.00005", c.fixed, c.perToken)
	}
	if got := c.estimate(4, 20); got < 4*time.Millisecond || got > 6*time.Millisecond {
		t.Errorf("estimate of 4×20 tokens %v, want 5ms", got)
	}
}

func TestTokenBucketCapsRunTime(t *testing.T) {
	start := time.Now()
	b := tokenBucket{rate: 0.5, burst: 0.05, avail: 0.05, last: start}
	if d := b.delay(start); d != 0 {
		t.Fatalf("delay %v with credit left", d)
	}
	b.spend(start, 0.15) // 150 ms of Run: 100 ms past the credit
	// At half a core a second, the debt of 0.1 s takes 200 ms to repay.
	if d := b.delay(start); d < 199*time.Millisecond || d > 201*time.Millisecond {
		t.Errorf("delay %v, want 200ms", d)
	}
	if d := b.delay(start.Add(150 * time.Millisecond)); d < 49*time.Millisecond || d > 51*time.Millisecond {
		t.Errorf("delay 150 ms later %v, want 50ms", d)
	}
	var off tokenBucket
	off.spend(start, 10)
	if d := off.delay(start); d != 0 {
		t.Errorf("no cap: delay %v", d)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCostModelSpreadCoversMostRuns(t *testing.T) {
	var c costModel
	c.init([2]costPoint{{8, time.Millisecond}, {64, time.Millisecond}})
	// Runs of 1 ms, but every fifth takes 3 ms (its core was busy): the
	// estimate should cover the 80% and sit between them, covering
	// spreadQuantile of the Runs only by rising towards the slow ones.
	covered := 0
	for i := range 2000 {
		took := time.Millisecond
		if i%5 == 4 {
			took = 3 * time.Millisecond
		}
		if i >= 1000 && took <= c.estimate(1, 32) {
			covered++
		}
		c.observe(32, took)
	}
	if share := float64(covered) / 1000; share < 0.8 || share > 0.95 {
		t.Errorf("the estimate covered %.0f%% of the Runs, want about %.0f%%", share*100, spreadQuantile*100)
	}
	if e := c.estimate(1, 32); e < time.Millisecond {
		t.Errorf("estimate %v below the common Run", e)
	}
}
