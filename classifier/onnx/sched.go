package onnx

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/triagegw/triage/classifier"
)

// The scheduler serves the classifications that have a deadline (the
// gateway's, each within its request's tier-2 budget); those without one
// (offline commands) run as they come, one Run each, so that their
// results do not depend on what else was running.
//
// It is built on three rules:
//
//   - Admission: a text is queued only if, at the Runs' measured speed, the
//     queue ahead of it and its own Run would end before its deadline;
//     otherwise it is refused at once (classifier.ErrShed) and nothing runs
//     for it. At batch time a text that can no longer finish is dropped
//     (ErrShed too), and one whose caller has gone (budget spent, client
//     left) is dropped without running. So no Run starts that cannot end
//     within its request's budget; one that ends late all the same (the
//     estimate was wrong) is counted.
//   - Greedy micro-batching, no window: each of a few workers blocks for
//     the first text waiting, then takes only what is queued at that moment,
//     up to maxBatch texts and maxPadded padded tokens, of about one length
//     (the graph pads every row to the longest), and runs them as one Run.
//     At low load every batch is one text and latency is a single Run's;
//     batches form only when texts queue, where a Run's fixed cost (about
//     1 ms for USE lite) is spread over the batch.
//   - A bounded share of the machine: at most `workers` Runs at once, each
//     on one intra-op thread; optionally a CPU share (core-seconds of Runs
//     per second, as a fraction of GOMAXPROCS), and the workers' threads at
//     a lower scheduling priority (nice), so that the proxy path, which
//     needs microseconds a request, gets a core when it wants one.

// schedConfig sets a scheduler up.
type schedConfig struct {
	workers   int     // Runs at once
	maxBatch  int     // texts a Run; 1: no batching
	maxPadded int     // padded tokens a Run (texts × the longest)
	queueLen  int     // texts waiting, at most
	cpuShare  float64 // cores' worth of Runs a second (0: no cap)
	nice      int     // the workers' threads' nice value (0: as the process)
	threads   int     // intra-op threads a Run
}

// runFunc runs one Run over batch (one or more texts' token ids), writing
// each text's unit-length vector into dst[i].
type runFunc func(batch [][]int32, dst [][]float32) error

// textRunFunc is a Run over texts (a remote encoder's: one call for the
// batch), which must end by deadline, the latest of the batch's.
type textRunFunc func(texts []string, dst [][]float32, deadline time.Time) error

type job struct {
	ids      []int32
	text     string // a text Run's input (ids then empty)
	n        int    // its tokens: len(ids), or an estimate for a text
	dst      []float32
	deadline time.Time
	ctx      context.Context
	enq      time.Time
	done     chan error // buffered: a worker never blocks on it
	queued   bool       // under mu: in the queue (not yet taken)
}

type scheduler struct {
	cfg     schedConfig
	run     runFunc
	runText textRunFunc // set: the Runs take texts, not ids

	mu     sync.Mutex
	wake   *sync.Cond
	queue  []*job
	busy   []time.Time // per worker: when its Run should end (zero: idle)
	cost   costModel
	bucket tokenBucket
	closed bool
	wg     sync.WaitGroup

	wait, runTime, batch *classifier.Histogram
	running              int
	shed, expired, late  uint64
}

var errClosed = errors.New("onnx: the encoder is closed")

// newScheduler starts cfg.workers workers running run. prior gives the
// cost model its first two points (a short and a longer text, measured),
// so that admission is sensible from the first request.
func newScheduler(cfg schedConfig, run runFunc, prior [2]costPoint) *scheduler {
	return startScheduler(cfg, run, nil, prior)
}

// newTextScheduler is newScheduler for Runs that take texts.
func newTextScheduler(cfg schedConfig, run textRunFunc, prior [2]costPoint) *scheduler {
	return startScheduler(cfg, nil, run, prior)
}

func startScheduler(cfg schedConfig, run runFunc, runText textRunFunc, prior [2]costPoint) *scheduler {
	cfg.workers = max(cfg.workers, 1)
	cfg.threads = max(cfg.threads, 1)
	cfg.maxBatch = max(cfg.maxBatch, 1)
	cfg.maxPadded = max(cfg.maxPadded, 1)
	cfg.queueLen = max(cfg.queueLen, cfg.workers*cfg.maxBatch)
	s := &scheduler{cfg: cfg, run: run, runText: runText, busy: make([]time.Time, cfg.workers),
		wait:    classifier.NewHistogram(classifier.WaitBounds...),
		runTime: classifier.NewHistogram(classifier.RunBounds...),
		batch:   classifier.NewHistogram(classifier.BatchBounds...)}
	s.wake = sync.NewCond(&s.mu)
	s.cost.init(prior)
	if cfg.cpuShare > 0 && cfg.cpuShare < float64(cfg.workers) {
		s.bucket = tokenBucket{rate: cfg.cpuShare, burst: cfg.cpuShare * 0.1, avail: cfg.cpuShare * 0.1, last: time.Now()}
	}
	s.wg.Add(cfg.workers)
	for w := range cfg.workers {
		go s.worker(w)
	}
	return s
}

// close fails the texts waiting and stops the workers once their Runs end.
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	for _, j := range s.queue {
		j.queued = false
		j.done <- errClosed
	}
	s.queue = nil
	s.wake.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
}

var jobs = sync.Pool{New: func() any { return &job{done: make(chan error, 1)} }}

// embed runs ids (which must stay untouched until it returns) through the
// scheduler within ctx's deadline, writing the vector into dst (grown to
// dims). It returns ctx's error when the caller's context ends while the
// text waits (it is then dropped, never run); when its Run has started it
// waits for it and returns its result, even past the deadline: a late
// answer is still right, and the tier's cache keeps it for a retry.
func (s *scheduler) embed(ctx context.Context, deadline time.Time, ids []int32, dst []float32, dims int) ([]float32, error) {
	j := jobs.Get().(*job)
	j.ids, j.n = ids, len(ids)
	return s.submit(ctx, deadline, j, dst, dims)
}

// embedText is embed for a scheduler whose Runs take texts (runText): n
// is the text's tokens as admission and batching count them.
func (s *scheduler) embedText(ctx context.Context, deadline time.Time, text string, n int, dst []float32, dims int) ([]float32, error) {
	j := jobs.Get().(*job)
	j.text, j.n = text, n
	return s.submit(ctx, deadline, j, dst, dims)
}

func (s *scheduler) submit(ctx context.Context, deadline time.Time, j *job, dst []float32, dims int) ([]float32, error) {
	dst = grow(dst, dims)
	j.dst, j.deadline, j.ctx = dst, deadline, ctx
	now := time.Now()
	j.enq = now
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.release(j)
		return dst, errClosed
	}
	if len(s.queue) >= s.cfg.queueLen || s.finish(now, j.n).After(deadline) {
		s.shed++
		s.mu.Unlock()
		s.release(j)
		return dst, classifier.ErrShed
	}
	j.queued = true
	s.queue = append(s.queue, j)
	s.wake.Signal()
	s.mu.Unlock()

	select {
	case err := <-j.done:
		s.release(j)
		return dst, err
	case <-ctx.Done():
	}
	s.mu.Lock()
	if j.queued {
		// Not taken yet: it leaves the queue and never runs.
		for i, q := range s.queue {
			if q == j {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
		j.queued = false
		s.expired++
		s.mu.Unlock()
		s.release(j)
		return dst, ctx.Err()
	}
	s.mu.Unlock()
	// Taken: its Run has started (or the worker is dropping it); the
	// worker owns ids and dst until it answers.
	err := <-j.done
	s.release(j)
	return dst, err
}

// hopeless reports whether even the shortest text queued now would end
// past deadline, and counts it shed if so: checked before tokenizing, so
// that a saturated tier 2 refuses a text for the price of a lock.
func (s *scheduler) hopeless(deadline time.Time) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || (len(s.queue) < s.cfg.queueLen && !s.finish(now, 1).After(deadline)) {
		return false
	}
	s.shed++
	return true
}

func (s *scheduler) release(j *job) {
	j.ids, j.text, j.dst, j.ctx = nil, "", nil, nil
	jobs.Put(j)
}

// finish estimates when a text of n tokens queued now would have its
// answer: the workers take the queue in order, each as a greedy batch,
// from when each is free. Called with mu held.
func (s *scheduler) finish(now time.Time, n int) time.Time {
	var freeBuf [8]time.Time
	free := freeBuf[:0]
	delay := s.bucket.delay(now)
	for _, b := range s.busy {
		t := now
		if b.After(now) {
			t = b
		}
		free = append(free, t.Add(delay))
	}
	q := s.queue
	i := 0
	for {
		w := 0
		for k := range free {
			if free[k].Before(free[w]) {
				w = k
			}
		}
		// The batch the worker would take: from q[i], and the new text
		// after the queue's end.
		k, longest, sum := i, 0, 0
		for k <= len(q) && k-i < s.cfg.maxBatch {
			n1 := n
			if k < len(q) {
				n1 = q[k].n
			}
			l := max(n1, longest)
			if k > i && !s.fits(k-i+1, l, sum+n1) {
				break
			}
			longest, sum = l, sum+n1
			k++
		}
		end := free[w].Add(s.cost.estimate(k-i, longest))
		if k > len(q) {
			return end
		}
		free[w], i = end, k
	}
}

// worker runs batches until the scheduler closes. Its goroutine keeps its
// thread, whose priority it lowers by cfg.nice: the Run (one intra-op
// thread: ONNX Runtime computes on the calling thread) then yields the
// core to the gateway's own threads when both want it.
func (s *scheduler) worker(w int) {
	defer s.wg.Done()
	if s.cfg.nice != 0 {
		runtime.LockOSThread()
		// Never unlocked: the thread's priority stays with it, and it ends
		// with the goroutine.
		_ = setThreadNice(s.cfg.nice)
	}
	var batch []*job
	var ids [][]int32
	var texts []string
	var dst [][]float32
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed {
			s.wake.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		now := time.Now()
		batch = s.take(now, batch[:0])
		if len(batch) == 0 {
			s.mu.Unlock()
			continue
		}
		longest := 0
		for _, j := range batch {
			longest = max(longest, j.n)
		}
		est := s.cost.estimate(len(batch), longest)
		if wait := s.bucket.delay(now); wait > 0 {
			// Over the CPU share: the batch waits for its turn (it was taken
			// knowing the wait, see take).
			s.busy[w] = now.Add(wait + est)
			s.mu.Unlock()
			time.Sleep(wait)
			s.mu.Lock()
			now = time.Now()
		}
		s.busy[w] = now.Add(est)
		s.running++
		s.mu.Unlock()

		ids, texts, dst = ids[:0], texts[:0], dst[:0]
		last := time.Time{}
		for _, j := range batch {
			ids, texts, dst = append(ids, j.ids), append(texts, j.text), append(dst, j.dst)
			s.wait.ObserveDuration(now.Sub(j.enq))
			if j.deadline.After(last) {
				last = j.deadline
			}
		}
		start := time.Now()
		var err error
		if s.runText != nil {
			err = s.runText(texts, dst, last)
		} else {
			err = s.run(ids, dst)
		}
		end := time.Now()
		took := end.Sub(start)
		s.runTime.ObserveDuration(took)
		s.batch.Observe(float64(len(batch)))

		s.mu.Lock()
		s.running--
		s.busy[w] = time.Time{}
		s.bucket.spend(end, took.Seconds()*float64(s.cfg.threads))
		if err == nil {
			s.cost.observe(len(batch)*longest, took)
		}
		for _, j := range batch {
			if end.After(j.deadline) {
				s.late++
			}
		}
		s.mu.Unlock()
		for _, j := range batch {
			j.done <- err
		}
		clear(ids)
		clear(texts)
		clear(dst)
	}
}

// take forms the next batch from the queue's front: texts whose caller
// has gone are dropped (expired), texts that could not finish even alone
// are dropped (shed), and the batch grows in queue order while every
// text in it still finishes before its deadline, within maxBatch texts
// and maxPadded padded tokens, of texts of about one length (see fits). A
// text that would make the batch late for one already in it, or pad it,
// stays queued for the next Run. Called with mu held.
func (s *scheduler) take(now time.Time, batch []*job) []*job {
	start := now.Add(s.bucket.delay(now))
	keep := s.queue[:0]
	longest, sum := 0, 0
	earliest := time.Time{}
	for _, j := range s.queue {
		switch {
		case j.ctx.Err() != nil:
			j.queued = false
			s.expired++
			j.done <- j.ctx.Err()
			continue
		case start.Add(s.cost.estimate(1, j.n)).After(j.deadline):
			j.queued = false
			s.shed++
			j.done <- classifier.ErrShed
			continue
		}
		if len(batch) < s.cfg.maxBatch {
			l := max(longest, j.n)
			e := j.deadline
			if len(batch) > 0 && earliest.Before(e) {
				e = earliest
			}
			if len(batch) == 0 || s.fits(len(batch)+1, l, sum+j.n) {
				if end := start.Add(s.cost.estimate(len(batch)+1, l)); !end.After(e) || len(batch) == 0 {
					j.queued = false
					batch = append(batch, j)
					longest, sum, earliest = l, sum+j.n, e
					continue
				}
			}
		}
		keep = append(keep, j)
	}
	clear(s.queue[len(keep):])
	s.queue = keep
	return batch
}

// maxPadding is how much a batch may pad its texts: at most a quarter
// more tokens run than the texts hold. The graph pads every row to the
// longest, and a Run costs about its padded tokens, so a short text
// batched with a long one costs more than its own Run would; batches are
// made of texts of about one length.
const maxPadding = 1.25

// fits reports whether b texts, the longest of longest tokens and sum in
// all, may run as one batch.
func (s *scheduler) fits(b, longest, sum int) bool {
	padded := b * longest
	return padded <= s.cfg.maxPadded && float64(padded) <= maxPadding*float64(sum)
}

// stats reports the scheduler's state and counters.
func (s *scheduler) stats() classifier.RunStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return classifier.RunStats{Queued: len(s.queue), Running: s.running,
		Wait: s.wait, Run: s.runTime, Batch: s.batch,
		Shed: s.shed, Expired: s.expired, Late: s.late}
}

// costPoint is one measured Run: padded tokens, and how long it took.
type costPoint struct {
	tokens int
	took   time.Duration
}

// costModel estimates a Run's duration as fixed + perToken × padded
// tokens, fitted by least squares over recent Runs (each Run's weight
// decays by 1% a Run, so the fit follows the machine's load within a few
// hundred Runs), times spread: the 90th percentile of how much longer
// than the fit Runs have taken. A Run that shares its core takes longer
// than its fit now and then; admitting on the mean alone made one text in
// six end past its deadline on a saturated 2-core machine.
type costModel struct {
	n, x, y, xx, xy float64 // decayed sums
	fixed, perToken float64 // seconds
	spread          float64 // ≥ 1
}

// spreadQuantile is the share of Runs the estimate should cover, and
// spreadStep how fast its tracking moves (relative, per Run).
const (
	spreadQuantile = 0.9
	spreadStep     = 0.02
)

const costDecay = 0.99

func (c *costModel) init(prior [2]costPoint) {
	c.spread = 1
	for _, p := range prior {
		c.add(float64(p.tokens), p.took.Seconds(), 8)
	}
	c.fit()
}

func (c *costModel) add(x, y, w float64) {
	c.n, c.x, c.y, c.xx, c.xy = c.n*costDecay+w, c.x*costDecay+w*x, c.y*costDecay+w*y, c.xx*costDecay+w*x*x, c.xy*costDecay+w*x*y
}

func (c *costModel) observe(tokens int, took time.Duration) {
	if base := c.fixed + c.perToken*float64(tokens); base > 0 {
		// Stochastic quantile tracking: up by q·step when a Run took
		// longer than spread × the fit, down by (1-q)·step when not, so
		// that it settles where a share q of the Runs are covered.
		if took.Seconds() > base*c.spread {
			c.spread *= 1 + spreadStep*spreadQuantile
		} else {
			c.spread *= 1 - spreadStep*(1-spreadQuantile)
		}
		c.spread = min(max(c.spread, 1), 10)
	}
	c.add(float64(tokens), took.Seconds(), 1)
	c.fit()
}

func (c *costModel) fit() {
	mx, my := c.x/c.n, c.y/c.n
	vx := c.xx/c.n - mx*mx
	slope := 0.0
	if vx > 1e-9 {
		slope = (c.xy/c.n - mx*my) / vx
	}
	slope = max(slope, 0)
	fixed := my - slope*mx
	if fixed < 0 {
		// Through the origin instead.
		fixed, slope = 0, c.xy/math.Max(c.xx, 1e-12)
	}
	c.fixed, c.perToken = fixed, slope
}

// estimate is a Run of b texts padded to longest tokens, at the spread
// most Runs stay within.
func (c *costModel) estimate(b, longest int) time.Duration {
	return time.Duration((c.fixed + c.perToken*float64(b*longest)) * c.spread * 1e9)
}

// tokenBucket caps the Runs' CPU: rate cores' worth of Run time a second,
// with a burst of a tenth of a second's worth. The zero value is no cap.
type tokenBucket struct {
	rate, burst, avail float64
	last               time.Time
}

func (b *tokenBucket) refill(now time.Time) {
	if b.rate == 0 {
		return
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.avail = math.Min(b.burst, b.avail+dt*b.rate)
		b.last = now
	}
}

// delay is how long a Run must wait before it may start.
func (b *tokenBucket) delay(now time.Time) time.Duration {
	if b.rate == 0 {
		return 0
	}
	b.refill(now)
	if b.avail >= 0 {
		return 0
	}
	return time.Duration(-b.avail / b.rate * 1e9)
}

func (b *tokenBucket) spend(now time.Time, seconds float64) {
	if b.rate == 0 {
		return
	}
	b.refill(now)
	b.avail -= seconds
}
