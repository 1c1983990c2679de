package rules

import (
	"context"
	"time"

	"github.com/triagegw/triage/classifier"
)

// Verdicts asks the tiers about text for a record of a decision (a
// sample of live traffic), off the request path: tier 1 always, tier 2
// within budget when the set uses it and it is loaded already (a record
// never loads the encoder). A tier that did not answer has a zero Result;
// Probs are dropped, Top kept.
func (s *Set) Verdicts(ctx context.Context, text string, budget time.Duration) (t1, t2 classifier.Result) {
	_ = s.tier1.Classify(ctx, text, &t1) // tier 1 does not fail
	t1.Probs = nil
	if s.tier2On && s.tier2.Loaded() {
		if err := s.tier2.ClassifyWithin(ctx, budget, text, &t2); err != nil {
			t2 = classifier.Result{}
		}
		t2.Probs = nil
	}
	return t1, t2
}
