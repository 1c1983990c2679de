package shadow

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/triagegw/triage/rules"
)

// Record is one line of the shadow decision log: a sampled live request,
// the decision that routed it and the one the shadow rule set would have
// made. It holds no prompt text.
type Record struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	Model     string    `json:"model"`
	// Arm is the split arm that served the request; empty without a
	// split, or for a request the split left out.
	Arm    string `json:"arm,omitempty"`
	Live   Side   `json:"live"`
	Shadow Side   `json:"shadow"`
}

// Side is one side's decision, the version of the rules that made it (for
// the live side under a split, the serving arm's rules) and how long it
// took, in microseconds.
type Side struct {
	rules.Decision
	Version string  `json:"version"`
	Micros  float64 `json:"us"`
}

// Counter counts what the worker does, for metrics.
type Counter interface {
	// ShadowDecided counts a shadow decision; agree when it chose the
	// live decision's pool.
	ShadowDecided(agree bool)
	// ShadowDropped counts a sampled request the queue had no room for.
	ShadowDropped()
}

// DefaultQueue is how many sampled requests may wait for their shadow
// decision before more are dropped.
const DefaultQueue = 1024

// job is a sampled request waiting for its shadow decision: copies of what
// the decision reads, since the request's buffers are reused once it ends.
type job struct {
	set     *rules.Set
	out     io.Writer
	at      time.Time
	id      string
	sig     rules.Signals
	live    rules.Decision
	arm     string
	version string
	took    time.Duration
}

// Runner decides sampled requests a second way.
type Runner struct {
	q chan *job
	c Counter
}

// NewRunner returns a Runner whose queue holds n requests (DefaultQueue
// when n <= 0), counting into c.
func NewRunner(n int, c Counter) *Runner {
	if n <= 0 {
		n = DefaultQueue
	}
	return &Runner{q: make(chan *job, n), c: c}
}

// Offer queues a shadow decision of a request the live rules decided as
// live, when they have a shadow set and its sample takes the request.
// Under a split, sig.Arm names the arm whose rules decided it, and the
// record names that arm and its rules version. The caller's pins
// (sig.Pins) apply to the candidate's decision as they did to the live
// one, so that a tenant's pin is not counted as the candidate's
// disagreement.
// out is the shadow log (nil: agreement is counted, nothing logged). It
// copies what it keeps of sig and never blocks.
func (r *Runner) Offer(live *rules.Set, out io.Writer, id string, sig *rules.Signals, dec rules.Decision, took time.Duration) {
	set, sample := live.Shadow()
	if set == nil || (sample < 1 && rand.Float64() >= sample) {
		return
	}
	if len(r.q) == cap(r.q) { // full: don't copy what would be dropped
		r.c.ShadowDropped()
		return
	}
	var arm string
	if sp := live.Split(); sp != nil {
		arm = sp.Name(sig.Arm)
	}
	j := &job{set: set, out: out, at: time.Now(), id: id, live: dec, arm: arm, version: live.ArmVersion(sig.Arm), took: took,
		sig: rules.Signals{Model: sig.Model, Text: strings.Clone(sig.Text), Header: sig.Header.Clone(), Session: sig.Session,
			Pins: sig.Pins}} // the snapshot's, never written: safe to keep
	if j.sig.Header == nil {
		j.sig.Header = http.Header{}
	}
	select {
	case r.q <- j:
	default:
		r.c.ShadowDropped()
	}
}

// Run decides queued requests until ctx is done.
func (r *Runner) Run(ctx context.Context) {
	var line []byte
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-r.q:
			line = r.decide(ctx, j, line[:0])
		}
	}
}

func (r *Runner) decide(ctx context.Context, j *job, line []byte) []byte {
	t0 := time.Now()
	d := j.set.DecideShadow(ctx, j.sig)
	took := time.Since(t0)
	r.c.ShadowDecided(d.Pool == j.live.Pool)
	if j.out == nil {
		return line
	}
	rec := Record{
		Time: j.at.UTC(), RequestID: j.id, Model: j.sig.Model, Arm: j.arm,
		Live:   Side{Decision: j.live, Version: j.version, Micros: micros(j.took)},
		Shadow: Side{Decision: d, Version: j.set.Version(), Micros: micros(took)},
	}
	b, err := json.Marshal(&rec)
	if err != nil {
		return line
	}
	line = append(append(line, b...), '\n')
	_, _ = j.out.Write(line) // one Write per line: the sink keeps lines whole
	return line
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
