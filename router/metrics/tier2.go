package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/triagegw/triage/classifier"
)

// Tier2State is tier 2 as the current rules have it: where its load
// stands ("off", "not loaded", "loading", "loaded", "failed"), its
// scheduler (when it has one) and its result cache.
type Tier2State struct {
	State                string
	Scheduled            bool
	Run                  classifier.RunStats
	CacheHits, CacheMiss uint64
}

// Tier2States are the values triage_tier2_state takes.
var Tier2States = []string{"off", "not loaded", "loading", "loaded", "failed"}

// RegisterTier2 registers tier 2's metrics, read from state at each
// scrape: its load state, queue, Runs, the texts it shed, dropped or
// answered late, and its cache. Every series is there from the start
// (zero until tier 2 runs), so dashboards and alerts find them.
func RegisterTier2(reg prometheus.Registerer, state func() Tier2State) {
	reg.MustRegister(&tier2Collector{state: state})
}

var (
	tier2StateDesc = prometheus.NewDesc("triage_tier2_state",
		"1 for the state tier 2 is in (off: no rule can reach it; not loaded: loaded on first need; loading; loaded; failed), 0 for the others.",
		[]string{"state"}, nil)
	tier2QueueDesc = prometheus.NewDesc("triage_tier2_queue_depth",
		"Texts waiting for a tier-2 Run.", nil, nil)
	tier2RunningDesc = prometheus.NewDesc("triage_tier2_runs_in_flight",
		"Tier-2 Runs in progress.", nil, nil)
	tier2WaitDesc = prometheus.NewDesc("triage_tier2_queue_wait_seconds",
		"Time from a text's arrival at tier 2 to the start of its Run.", nil, nil)
	tier2RunDesc = prometheus.NewDesc("triage_tier2_run_seconds",
		"Duration of each tier-2 Run (one text, or a batch).", nil, nil)
	tier2BatchDesc = prometheus.NewDesc("triage_tier2_batch_size",
		"Texts in each tier-2 Run.", nil, nil)
	tier2DroppedDesc = prometheus.NewDesc("triage_tier2_dropped_total",
		"Escalations tier 2 did not run: shed (they could not have finished within the budget, so no Run started; the decision's reason is tier2_shed), expired (the request had moved on, past its budget or its client gone, before its Run), failed (a remote encoder's call failed: tier2_error or tier2_timeout), encoder_down (a remote encoder's breaker was open: tier2_encoder_down).",
		[]string{"reason"}, nil)
	tier2LateDesc = prometheus.NewDesc("triage_tier2_late_total",
		"Texts whose Run ended after their request's budget: the estimate that admitted them was wrong (their answers are still cached).", nil, nil)
	tier2CacheDesc = prometheus.NewDesc("triage_tier2_cache_lookups_total",
		"Tier-2 result cache lookups, by result (hit: answered without a Run).", []string{"result"}, nil)
)

type tier2Collector struct{ state func() Tier2State }

func (c *tier2Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{tier2StateDesc, tier2QueueDesc, tier2RunningDesc, tier2WaitDesc, tier2RunDesc,
		tier2BatchDesc, tier2DroppedDesc, tier2LateDesc, tier2CacheDesc} {
		ch <- d
	}
}

var (
	emptyWait  = classifier.NewHistogram(classifier.WaitBounds...)
	emptyRun   = classifier.NewHistogram(classifier.RunBounds...)
	emptyBatch = classifier.NewHistogram(classifier.BatchBounds...)
)

func (c *tier2Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.state()
	for _, st := range Tier2States {
		v := 0.0
		if st == s.State {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(tier2StateDesc, prometheus.GaugeValue, v, st)
	}
	r := s.Run
	if !s.Scheduled {
		r = classifier.RunStats{}
	}
	ch <- prometheus.MustNewConstMetric(tier2QueueDesc, prometheus.GaugeValue, float64(r.Queued))
	ch <- prometheus.MustNewConstMetric(tier2RunningDesc, prometheus.GaugeValue, float64(r.Running))
	for _, h := range []struct {
		d     *prometheus.Desc
		h, or *classifier.Histogram
	}{{tier2WaitDesc, r.Wait, emptyWait}, {tier2RunDesc, r.Run, emptyRun}, {tier2BatchDesc, r.Batch, emptyBatch}} {
		hist := h.h
		if hist == nil {
			hist = h.or
		}
		bounds, cum, n, sum := hist.Snapshot()
		buckets := make(map[float64]uint64, len(bounds))
		for i, b := range bounds {
			buckets[b] = cum[i]
		}
		ch <- prometheus.MustNewConstHistogram(h.d, n, sum, buckets)
	}
	ch <- prometheus.MustNewConstMetric(tier2DroppedDesc, prometheus.CounterValue, float64(r.Shed), "shed")
	ch <- prometheus.MustNewConstMetric(tier2DroppedDesc, prometheus.CounterValue, float64(r.Expired), "expired")
	ch <- prometheus.MustNewConstMetric(tier2DroppedDesc, prometheus.CounterValue, float64(r.Failed), "failed")
	ch <- prometheus.MustNewConstMetric(tier2DroppedDesc, prometheus.CounterValue, float64(r.Refused), "encoder_down")
	ch <- prometheus.MustNewConstMetric(tier2LateDesc, prometheus.CounterValue, float64(r.Late))
	ch <- prometheus.MustNewConstMetric(tier2CacheDesc, prometheus.CounterValue, float64(s.CacheHits), "hit")
	ch <- prometheus.MustNewConstMetric(tier2CacheDesc, prometheus.CounterValue, float64(s.CacheMiss), "miss")
}
