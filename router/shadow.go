package router

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/triagegw/triage/router/metrics"
	"github.com/triagegw/triage/router/openai"
	"github.com/triagegw/triage/rules"
)

// DefaultShadowQueue is how many sampled requests may wait for their
// shadow decision before more are dropped.
const DefaultShadowQueue = 1024

// shadowJob is a sampled request waiting for its shadow decision: copies of
// what the decision reads, since the request's buffers are reused once it
// ends.
type shadowJob struct {
	set     *rules.Set
	out     io.Writer
	at      time.Time
	id      string
	body    []byte
	header  http.Header
	live    rules.Decision
	version string
	took    time.Duration
}

// shadowRunner decides sampled requests a second way off the request path:
// the request only copies what the decision needs into a bounded queue (or
// drops it, counted, when the queue is full); Run's worker decides, counts
// agreement and appends a line to the shadow log.
type shadowRunner struct {
	q chan *shadowJob
	m *metrics.Metrics
}

func newShadowRunner(n int, m *metrics.Metrics) *shadowRunner {
	if n <= 0 {
		n = DefaultShadowQueue
	}
	return &shadowRunner{q: make(chan *shadowJob, n), m: m}
}

// offer queues a shadow decision for a request routed by live, when the
// live rules have a shadow and the sample takes it.
func (r *shadowRunner) offer(s *snapshot, id string, in *Input, dec *Decision, took time.Duration) {
	set, sample := s.rules.Shadow()
	if set == nil || (sample < 1 && rand.Float64() >= sample) {
		return
	}
	if len(r.q) == cap(r.q) { // full: don't copy what would be dropped
		r.m.ShadowDropped()
		return
	}
	j := &shadowJob{
		set: set, out: s.shadowOut, at: time.Now(), id: id,
		body: append([]byte(nil), in.Body...), header: in.Header.Clone(),
		live:    rules.Decision{Pool: dec.Pool, Fallback: dec.Fallback, Route: dec.Route, Class: dec.Class, Score: dec.Score, Tier: dec.Tier, Reason: dec.Reason},
		version: s.rules.Version(), took: took,
	}
	select {
	case r.q <- j:
	default:
		r.m.ShadowDropped()
	}
}

// run decides queued requests until ctx is done.
func (r *shadowRunner) run(ctx context.Context) {
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

func (r *shadowRunner) decide(ctx context.Context, j *shadowJob, line []byte) []byte {
	req, err := openai.Extract(j.body)
	if err != nil { // it was extracted once already; cannot happen
		return line
	}
	t0 := time.Now()
	d := j.set.DecideShadow(ctx, rules.Input{Req: req, Body: j.body, Header: j.header})
	took := time.Since(t0)
	r.m.ShadowDecided(d.Pool == j.live.Pool)
	if j.out == nil {
		return line
	}
	rec := rules.ShadowRecord{
		Time: j.at.UTC(), RequestID: j.id, Model: req.ModelName(),
		Live:   rules.ShadowSide{Decision: j.live, Version: j.version, Micros: micros(j.took)},
		Shadow: rules.ShadowSide{Decision: d, Version: j.set.Version(), Micros: micros(took)},
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
