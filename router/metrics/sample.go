package metrics

import "github.com/prometheus/client_golang/prometheus"

// SampleCounts are what prompt sampling (sample.Sampler) did since the
// gateway started.
type SampleCounts struct {
	Written, Dropped, Capped uint64
}

// RegisterSampling registers triage_samples_total, read from counts at
// each scrape: records written; dropped because the sampler's queue was
// full (the request path never waits for it); not taken because the
// hour's cap was reached. Every series is there from the
// start, sampling on or off.
func RegisterSampling(reg prometheus.Registerer, counts func() SampleCounts) {
	reg.MustRegister(&sampleCollector{counts: counts})
}

var samplesDesc = prometheus.NewDesc("triage_samples_total",
	"Sampled prompts by outcome: written (to sample.path, redacted), dropped (the sampler's queue was full), capped (sample.max_per_hour reached).",
	[]string{"outcome"}, nil)

type sampleCollector struct{ counts func() SampleCounts }

func (c *sampleCollector) Describe(ch chan<- *prometheus.Desc) { ch <- samplesDesc }

func (c *sampleCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.counts()
	for _, v := range []struct {
		outcome string
		n       uint64
	}{{"written", n.Written}, {"dropped", n.Dropped}, {"capped", n.Capped}} {
		ch <- prometheus.MustNewConstMetric(samplesDesc, prometheus.CounterValue, float64(v.n), v.outcome)
	}
}
