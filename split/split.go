package split

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Record is one line of the split log: a request on one arm of a split,
// its decision and its outcome. It holds no prompt text and no caller
// identity: By says what the arm was assigned by, not who.
type Record struct {
	Time      time.Time `json:"time"`
	Arm       string    `json:"arm"`
	By        string    `json:"by"` // principal, session or request (not sticky)
	RequestID string    `json:"request_id"`
	// Version is the arm's rules version.
	Version string `json:"version"`
	Route   string `json:"route"`
	// Pool is the pool that served the request ("none" when none did: a
	// block route, a refusal).
	Pool   string  `json:"pool"`
	Reason string  `json:"reason"`
	Tier   int     `json:"tier"`
	Class  string  `json:"class,omitempty"`
	Score  float32 `json:"score,omitempty"`
	Status int     `json:"status"`
	// DurationMS is receipt to the end of the response; TTFBMS to the
	// upstream's response head (0: none); DecisionUS the decision's cost.
	DurationMS       float64 `json:"duration_ms"`
	TTFBMS           float64 `json:"ttfb_ms,omitempty"`
	DecisionUS       float64 `json:"decision_us"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
}

// DefaultQueue is how many lines may wait to be written before more are
// dropped.
const DefaultQueue = 4096

type job struct {
	out io.Writer
	rec Record
}

// Log writes split records off the request path. Its queue holds
// pointers to records taken from a pool, so a gateway without a split
// keeps no queue of records (4,096 of them would be ~1 MiB for the
// collector to scan).
type Log struct {
	q       chan *job
	free    sync.Pool
	dropped func()
}

// NewLog returns a Log whose queue holds n lines (DefaultQueue when
// n <= 0), calling dropped for each line it had no room for.
func NewLog(n int, dropped func()) *Log {
	if n <= 0 {
		n = DefaultQueue
	}
	return &Log{q: make(chan *job, n), dropped: dropped}
}

// Offer queues rec for out. It never blocks, and allocates only when the
// pool of records is empty: a full queue drops the line and counts it.
func (l *Log) Offer(out io.Writer, rec *Record) {
	j, _ := l.free.Get().(*job)
	if j == nil {
		j = new(job)
	}
	j.out, j.rec = out, *rec
	select {
	case l.q <- j:
	default:
		l.release(j)
		l.dropped()
	}
}

func (l *Log) release(j *job) {
	*j = job{}
	l.free.Put(j)
}

// Run writes queued lines until ctx is done.
func (l *Log) Run(ctx context.Context) {
	var line []byte
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-l.q:
			b, err := json.Marshal(&j.rec)
			out := j.out
			l.release(j)
			if err != nil {
				continue
			}
			line = append(append(line[:0], b...), '\n')
			_, _ = out.Write(line) // one Write per line: the sink keeps lines whole
		}
	}
}

// Micros and Millis express a duration for a Record.
func Micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
