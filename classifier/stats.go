package classifier

import (
	"errors"
	"sync/atomic"
	"time"
)

// ErrShed is returned by a tier that did not start a classification
// because it could not have finished before the caller's deadline: the
// queue ahead of it, at the tier's measured speed, would have taken longer
// than the time left. Nothing ran for it.
var ErrShed = errors.New("classifier: shed: it would not finish within the budget")

// Histogram counts observations into fixed buckets, safe for concurrent
// use without locks: what a tier measures about its own work, read by the
// gateway's metrics at scrape time.
type Histogram struct {
	bounds []float64 // upper bounds, ascending
	counts []atomic.Uint64
	sum    atomic.Uint64 // of the observations, in units of 1e-9
	n      atomic.Uint64
}

// NewHistogram counts into the buckets whose upper bounds are bounds
// (ascending), and one past the last.
func NewHistogram(bounds ...float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe counts v.
func (h *Histogram) Observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(uint64(v * 1e9))
	h.n.Add(1)
}

// ObserveDuration counts d in seconds.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(d.Seconds()) }

// Snapshot is the histogram as Prometheus takes it: the count at or
// below each upper bound (cumulative), the total count and the sum.
func (h *Histogram) Snapshot() (bounds []float64, cumulative []uint64, count uint64, sum float64) {
	cumulative = make([]uint64, len(h.bounds))
	var c uint64
	for i := range h.bounds {
		c += h.counts[i].Load()
		cumulative[i] = c
	}
	return h.bounds, cumulative, h.n.Load(), float64(h.sum.Load()) / 1e9
}

// Bounds of the histograms a tier's scheduler keeps.
var (
	// WaitBounds and RunBounds are in seconds: queue waits and Runs of a
	// few hundred microseconds to past any sensible budget.
	WaitBounds = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25}
	RunBounds  = WaitBounds
	// BatchBounds are texts per Run.
	BatchBounds = []float64{1, 2, 3, 4, 6, 8, 12, 16}
)

// RunStats is what a scheduled tier reports about its work: the queue,
// the Runs, and the requests it did not serve in time. Counters count
// since the tier was loaded.
type RunStats struct {
	// Queued is the texts waiting for a Run now; Running the Runs now.
	Queued, Running int
	// Wait is the time from enqueue to the start of the text's Run, Run
	// each Run's duration, Batch the texts per Run.
	Wait, Run, Batch *Histogram
	// Shed counts texts refused before queueing, or dropped from the queue,
	// because they could not finish in time (ErrShed); Expired, texts whose
	// caller had gone (budget spent or client left) before their Run
	// started; Late, texts whose Run ended after their caller's deadline.
	Shed, Expired, Late uint64
	// Failed counts texts whose Run failed (a remote encoder's call that
	// erred, timed out or answered wrongly); Refused, texts a remote
	// encoder's open breaker turned away (ErrEncoderDown); Down, whether
	// it is open now.
	Failed, Refused uint64
	Down            bool
}

// RunStatser is a tier that schedules its Runs and reports on them.
type RunStatser interface {
	RunStats() (RunStats, bool)
}
