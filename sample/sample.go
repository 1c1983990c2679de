package sample

import (
	"context"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/rules"
)

// Record is one line of the sample file: what the classifier saw of a
// request, redacted, and what the gateway decided.
type Record struct {
	// Time is when the request was decided: to the second with the
	// principal recorded, else to the hour, so that a record cannot be
	// joined to the access log's line (which names the principal) by its
	// time.
	Time time.Time `json:"time"`
	// Text is the conversation text the classifier saw (the rules'
	// window), redacted, at most MaxText bytes.
	Text string `json:"text"`
	// Truncated: Text was cut at MaxText bytes.
	Truncated bool `json:"truncated,omitempty"`
	// Decision is the live decision: route, pool, class and score of the
	// tier that decided, the route's mass and floor, and the reason.
	Decision rules.Decision `json:"decision"`
	// RouteClasses are the classes the decision's route takes (none for
	// the default pool or a route without class conditions): a label in
	// them means the route was right.
	RouteClasses []string `json:"route_classes,omitempty"`
	// Tiers are each tier's top classes for the text, asked again off the
	// request path: "1" always, "2" when tier 2 is on and loaded.
	Tiers map[string][]classifier.Scored `json:"tiers,omitempty"`
	// RulesVersion is the version of the rules that decided.
	RulesVersion string `json:"rules_version"`
	// Principal is who sent it, when the config asks for it (sample.principal).
	Principal string `json:"principal,omitempty"`
}

// MaxText bounds the text a record keeps, in bytes: the classifier reads
// far less (its token cap), and a sample must not copy a huge
// conversation on the request path.
const MaxText = 16 << 10

// DefaultQueue is how many chosen requests may wait for the worker before
// more are dropped.
const DefaultQueue = 256

// Options are the sampling settings of a snapshot of the config.
type Options struct {
	// Rate is the share of routed requests sampled, above 0 and at most 1.
	Rate float64
	// PerHour caps the records taken in one clock hour; 0: no cap.
	PerHour int64
	// Principal records the principal's name.
	Principal bool
}

// Sampler chooses requests, and writes their records from one worker.
// It outlives reloads: the hourly cap and the counts carry over.
type Sampler struct {
	q chan *job

	hour  atomic.Int64 // the hour the count is of (Unix hours)
	count atomic.Int64 // records taken in that hour

	taken, written, dropped, capped atomic.Uint64
}

type job struct {
	rec  Record
	text string // unredacted: redacted by the worker, never written as it is
	set  *rules.Set
	out  io.Writer
}

// New returns a Sampler whose queue holds n records (DefaultQueue when
// n <= 0).
func New(n int) *Sampler {
	if n <= 0 {
		n = DefaultQueue
	}
	return &Sampler{q: make(chan *job, n)}
}

// Take decides whether a request decided at now is sampled under o: one
// random draw, then the hourly cap. It is the only call a request that is
// not sampled makes.
func (s *Sampler) Take(o *Options, now time.Time) bool {
	if o.Rate < 1 && rand.Float64() >= o.Rate {
		return false
	}
	if o.PerHour <= 0 {
		s.taken.Add(1)
		return true
	}
	h := now.Unix() / 3600
	if cur := s.hour.Load(); cur != h {
		if s.hour.CompareAndSwap(cur, h) {
			s.count.Store(0)
		}
	}
	if s.count.Add(1) > o.PerHour {
		s.capped.Add(1)
		return false
	}
	s.taken.Add(1)
	return true
}

// Clip copies what a record keeps of the classifier's text (the request's
// buffer is reused once it ends): at most MaxText bytes, cut on a UTF-8
// boundary.
func Clip(text string) (string, bool) {
	if len(text) <= MaxText {
		return strings.Clone(text), false
	}
	cut := MaxText
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return strings.Clone(text[:cut]), true
}

// Offer queues the record of a sampled request: text as Clip returned it,
// the decision set made (its version and routes), rec's other fields
// filled by the caller. out receives the line; it must not block
// (logsink.Writer). Offer never blocks: a full queue drops the record and
// counts it.
func (s *Sampler) Offer(rec Record, text string, set *rules.Set, out io.Writer, o *Options) {
	if !o.Principal {
		rec.Principal = ""
		rec.Time = rec.Time.Truncate(time.Hour)
	} else {
		rec.Time = rec.Time.Truncate(time.Second)
	}
	rec.Time = rec.Time.UTC()
	select {
	case s.q <- &job{rec: rec, text: text, set: set, out: out}:
	default:
		s.dropped.Add(1)
	}
}

// Counts are what a Sampler did since it started: requests taken,
// records written, dropped for want of room in the queue, and requests
// not taken because of the hourly cap.
type Counts struct {
	Taken, Written, Dropped, Capped uint64
}

// Counts returns what the sampler did so far.
func (s *Sampler) Counts() Counts {
	return Counts{Taken: s.taken.Load(), Written: s.written.Load(), Dropped: s.dropped.Load(), Capped: s.capped.Load()}
}

// tier2Budget bounds the worker's wait for tier 2's verdict on a record.
const tier2Budget = 2 * time.Second

// Run writes queued records until ctx is done.
func (s *Sampler) Run(ctx context.Context) {
	var line []byte
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-s.q:
			line = s.write(ctx, j, line[:0])
		}
	}
}

func (s *Sampler) write(ctx context.Context, j *job, line []byte) []byte {
	rec := &j.rec
	if j.set != nil {
		t1, t2 := j.set.Verdicts(ctx, j.text, tier2Budget)
		rec.Tiers = map[string][]classifier.Scored{}
		if len(t1.Top) > 0 {
			rec.Tiers["1"] = t1.Top
		}
		if len(t2.Top) > 0 {
			rec.Tiers["2"] = t2.Top
		}
		rec.RulesVersion = j.set.Version()
		if rec.Decision.Route != "" {
			for _, r := range j.set.Routes() {
				if r.Name == rec.Decision.Route {
					rec.RouteClasses = r.Classes
				}
			}
		}
	}
	rec.Text = Redact(j.text)
	line = append(appendRecord(line, rec), '\n')
	_, _ = j.out.Write(line) // one Write per line: the sink keeps lines whole
	s.written.Add(1)
	return line
}
