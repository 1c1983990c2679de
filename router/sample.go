package router

import (
	"github.com/triagegw/triage/router/metrics"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/sample"
)

// Prompt sampling (sample:) on the request path costs a request that is
// not sampled one random draw (Take); a sampled one a copy of the
// classifier's text, and a record queued for the sampler's worker, which
// asks the tiers, redacts and writes off the request path.

// sampleText keeps a copy of the classifier's text in al when sampling
// takes this request. Called while text is valid (before the signals'
// buffer is released).
func (g *Gateway) sampleText(s *snapshot, al *accessLine, text string) {
	if s.sampleOut == nil || text == "" || !g.sampler.Take(&s.sampleOpts, al.start) {
		return
	}
	al.sampleText, al.sampleCut = sample.Clip(text)
}

// recordSample queues a sampled request's record, once it is answered.
func (g *Gateway) recordSample(s *snapshot, al *accessLine) {
	set := s.rules
	if al.arm == rules.ArmB && set.Split() != nil {
		set = set.Split().Candidate()
	}
	rec := sample.Record{Time: al.start, Truncated: al.sampleCut, Decision: al.dec, Principal: al.principal}
	g.sampler.Offer(rec, al.sampleText, set, s.sampleOut, &s.sampleOpts)
}

func (g *Gateway) sampleCounts() metrics.SampleCounts {
	c := g.sampler.Counts()
	return metrics.SampleCounts{Written: c.Written, Dropped: c.Dropped, Capped: c.Capped}
}
