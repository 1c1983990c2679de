package rules

import (
	"context"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
)

// TestTier2CachePerTenant: tier 2's result cache answers a tenant only
// with what its own requests left there, so that a text answered from the
// cache (in microseconds, not milliseconds) does not tell one tenant that
// another sent it; the decision itself is the same for everyone. Without
// access control (no principal) it is one cache, as before.
func TestTier2CachePerTenant(t *testing.T) {
	t1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "lease", Class: "law", Score: 0.7}}} // below law's 0.8: tier 2 is asked
	t2 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "lease", Class: "law", Score: 0.75}}}
	s := compile(t, cascade, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return t2, nil }, Tier2Budget: Offline})
	var first Decision
	for i, step := range []struct {
		principal    string
		hits, misses uint64
	}{
		{"acme", 0, 1},
		{"acme", 1, 1},
		{"globex", 1, 2}, // the same text, another tenant: a miss
		{"globex", 2, 2},
		{"", 2, 3}, // no access control: a partition of its own
		{"", 3, 3},
		{"acme", 4, 3},
	} {
		sig := input(t, "auto", "my lease")
		sig.Principal = step.principal
		d := s.Decide(context.Background(), sig)
		if i == 0 {
			first = d
		}
		if d != first || d.Tier != 2 {
			t.Fatalf("request %d (%q): %+v, want tier 2's %+v", i, step.principal, d, first)
		}
		if _, _, hits, misses := s.Tier2Stats(); hits != step.hits || misses != step.misses {
			t.Fatalf("after request %d (%q): %d hits %d misses, want %d and %d", i, step.principal, hits, misses, step.hits, step.misses)
		}
	}
}
