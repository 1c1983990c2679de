package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Split holds the collectors of a live A/B split: each arm's requests by
// route and status class, and its latency. They are registered whether or
// not the rules have a split; their series appear with the first split
// request.
type Split struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// LogDropped counts split log lines the queue had no room for.
	LogDropped prometheus.Counter
	// Unassigned counts requests left outside the split: nothing sticky
	// to assign them by, and split.by_request off.
	Unassigned prometheus.Counter

	mu   sync.Mutex
	arms map[string]*SplitArm
}

// NewSplit creates the split collectors and registers them on reg.
func NewSplit(reg prometheus.Registerer) *Split {
	m := &Split{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_split_requests_total",
			Help: "Requests on each arm of a live A/B split (rules split:), by arm, route (\"default\" for the default pool) and status class (2xx, 4xx, 5xx; 499 counts as 4xx).",
		}, []string{"arm", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "triage_split_request_duration_seconds",
			Help:    "Time from receiving a request on an arm of a live A/B split to the end of its response, streams included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"arm"}),
		LogDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "triage_split_log_dropped_total",
			Help: "Split log lines dropped because the queue to the log file was full.",
		}),
		Unassigned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "triage_split_unassigned_total",
			Help: "Requests a live A/B split left outside both arms, decided by the A rules: no principal and no conversation to assign them by stickily, and split.by_request off.",
		}),
		arms: map[string]*SplitArm{},
	}
	reg.MustRegister(m.requests, m.duration, m.LogDropped, m.Unassigned)
	return m
}

// Arm returns one arm's observers, resolving the labels of routes (and
// the status classes) up front. Call it when building a snapshot, not per
// request; an arm of the same name keeps its observers.
func (m *Split) Arm(name string, routes []string) *SplitArm {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.arms[name]
	if a == nil {
		a = &SplitArm{m: m, name: name, Duration: m.duration.WithLabelValues(name)}
		m.arms[name] = a
	}
	for _, r := range routes {
		a.route(r)
	}
	return a
}

// SplitArm holds one arm's observers.
type SplitArm struct {
	m        *Split
	name     string
	Duration prometheus.Observer
	routes   sync.Map // route -> *[6]prometheus.Counter, by status/100
}

// statusClasses are the status labels, by status/100.
var statusClasses = [6]string{"", "1xx", "2xx", "3xx", "4xx", "5xx"}

func (a *SplitArm) route(r string) *[6]prometheus.Counter {
	if v, ok := a.routes.Load(r); ok {
		return v.(*[6]prometheus.Counter)
	}
	var c [6]prometheus.Counter
	for i := 1; i < len(c); i++ {
		c[i] = a.m.requests.WithLabelValues(a.name, r, statusClasses[i])
	}
	v, _ := a.routes.LoadOrStore(r, &c)
	return v.(*[6]prometheus.Counter)
}

// Request counts a request on the arm by route and HTTP status.
func (a *SplitArm) Request(route string, status int) {
	k := status / 100
	if k < 1 || k > 5 {
		k = 5 // no status: counted as a failure
	}
	a.route(route)[k].Inc()
}
