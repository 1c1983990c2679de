package embedserver

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/triagegw/triage/classifier"
)

// metrics are the server's collectors. A nil *metrics records nothing.
//
//	triage_encoder_queue_texts            texts waiting for a Run now (what an HPA scales on)
//	triage_encoder_running                Runs now
//	triage_encoder_texts_total{outcome}   texts: ok, shed, timeout, cancelled, error
//	triage_encoder_requests_total{code}   requests by HTTP status (499: the client left)
//	triage_encoder_request_seconds        request durations
//	triage_encoder_batch_texts            texts a Run (the scheduler's histogram)
type metrics struct {
	byOutcome map[string]prometheus.Counter
	requests  *prometheus.CounterVec
	codes     map[int]prometheus.Counter
	seconds   prometheus.Histogram
}

var outcomes = []string{"ok", "shed", "timeout", "cancelled", "error"}

func newMetrics(reg *prometheus.Registry, stats func() (classifier.RunStats, bool)) (*metrics, error) {
	m := &metrics{byOutcome: map[string]prometheus.Counter{}, codes: map[int]prometheus.Counter{}}
	tv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "triage_encoder_texts_total",
		Help: "Texts asked for, by outcome: ok, shed (refused: would not finish in time, or the queue was full), timeout, cancelled (the client left), error."}, []string{"outcome"})
	for _, o := range outcomes {
		m.byOutcome[o] = tv.WithLabelValues(o)
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "triage_encoder_requests_total",
		Help: "Embeddings requests by HTTP status (499: the client left before the answer)."}, []string{"code"})
	for _, c := range []int{200, 400, 401, 404, 405, 413, 429, 499, 500, 503, 504} {
		m.codes[c] = m.requests.WithLabelValues(strconv.Itoa(c))
	}
	m.seconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "triage_encoder_request_seconds",
		Help:    "Embeddings requests' durations, from the request's arrival to its answer.",
		Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10}})
	cs := []prometheus.Collector{tv, m.requests, m.seconds}
	if stats != nil {
		cs = append(cs, &schedCollector{stats: stats})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) request(code int, start time.Time) {
	if m == nil {
		return
	}
	c := m.codes[code]
	if c == nil {
		c = m.requests.WithLabelValues(strconv.Itoa(code))
	}
	c.Inc()
	m.seconds.Observe(time.Since(start).Seconds())
}

func (m *metrics) texts(n int, err error) {
	if m == nil {
		return
	}
	o := "ok"
	switch {
	case err == nil:
	case errors.Is(err, classifier.ErrShed):
		o = "shed"
	case errors.Is(err, context.DeadlineExceeded):
		o = "timeout"
	case errors.Is(err, context.Canceled):
		o = "cancelled"
	default:
		o = "error"
	}
	m.byOutcome[o].Add(float64(n))
}

// schedCollector reads the encoder's scheduler at scrape time.
type schedCollector struct {
	stats func() (classifier.RunStats, bool)
}

var (
	queueDesc   = prometheus.NewDesc("triage_encoder_queue_texts", "Texts waiting for a Run now: the encoder's backlog, what an autoscaler scales on.", nil, nil)
	runningDesc = prometheus.NewDesc("triage_encoder_running", "Runs of the encoder now.", nil, nil)
	shedDesc    = prometheus.NewDesc("triage_encoder_shed_texts_total", "Texts the scheduler refused or dropped because they would not finish in time.", nil, nil)
	expiredDesc = prometheus.NewDesc("triage_encoder_expired_texts_total", "Texts dropped from the queue because their request had gone.", nil, nil)
	batchDesc   = prometheus.NewDesc("triage_encoder_batch_texts", "Texts a Run.", nil, nil)
	runDesc     = prometheus.NewDesc("triage_encoder_run_seconds", "Runs' durations.", nil, nil)
	waitDesc    = prometheus.NewDesc("triage_encoder_wait_seconds", "Texts' waits from enqueue to the start of their Run.", nil, nil)
)

func (c *schedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueDesc, runningDesc, shedDesc, expiredDesc, batchDesc, runDesc, waitDesc} {
		ch <- d
	}
}

func (c *schedCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.stats()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(s.Queued))
	ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(s.Running))
	ch <- prometheus.MustNewConstMetric(shedDesc, prometheus.CounterValue, float64(s.Shed))
	ch <- prometheus.MustNewConstMetric(expiredDesc, prometheus.CounterValue, float64(s.Expired))
	for _, h := range []struct {
		d *prometheus.Desc
		h *classifier.Histogram
	}{{batchDesc, s.Batch}, {runDesc, s.Run}, {waitDesc, s.Wait}} {
		if h.h == nil {
			continue
		}
		bounds, cum, n, sum := h.h.Snapshot()
		buckets := make(map[float64]uint64, len(bounds))
		for i, b := range bounds {
			buckets[b] = cum[i]
		}
		ch <- prometheus.MustNewConstHistogram(h.d, n, sum, buckets)
	}
}
