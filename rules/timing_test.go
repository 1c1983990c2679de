package rules

import (
	"context"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
)

// DecideTimed records when each tier ran, and decides as Decide does.
func TestDecideTimed(t *testing.T) {
	t1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "deposit", Class: "law", Score: 0.9, Delay: 2 * time.Millisecond},
		{Contains: "lease", Class: "law", Score: 0.7, Delay: 2 * time.Millisecond},
	}}
	t2 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "lease", Class: "law", Score: 0.75, Delay: 5 * time.Millisecond},
	}}
	s := compile(t, cascade, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return t2, nil }, Tier2Budget: Offline})
	for _, tc := range []struct {
		name, text, hdr string
		tier1, tier2    bool
	}{
		{"tier 1 alone", "my deposit", "", true, false},
		{"tier 1 then tier 2", "my lease", "", true, true},
		{"a rule before the classes", "my deposit", "gold", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.hdr != "" {
				hdr = []string{"X-Tier", tc.hdr}
			}
			sig := input(t, "auto", tc.text, hdr...)
			before := time.Now()
			tm := Timing{Tier2: time.Hour} // overwritten
			got := s.DecideTimed(context.Background(), sig, &tm)
			after := time.Now()
			if want := s.Decide(context.Background(), sig); got != want {
				t.Fatalf("DecideTimed(%q) = %+v, Decide = %+v", tc.text, got, want)
			}
			check := func(tier int, ran bool, start time.Time, d, least time.Duration) {
				t.Helper()
				switch {
				case !ran && (!start.IsZero() || d != 0):
					t.Errorf("DecideTimed(%q): tier %d did not run but is timed %v for %v", tc.text, tier, start, d)
				case ran && (start.Before(before) || start.Add(d).After(after) || d < least):
					t.Errorf("DecideTimed(%q): tier %d timed from %v for %v, want within [%v, %v] and at least %v", tc.text, tier, start, d, before, after, least)
				}
			}
			check(1, tc.tier1, tm.Tier1Start, tm.Tier1, 2*time.Millisecond)
			check(2, tc.tier2, tm.Tier2Start, tm.Tier2, 5*time.Millisecond)
			if tc.tier1 && tc.tier2 && tm.Tier2Start.Before(tm.Tier1Start.Add(tm.Tier1)) {
				t.Errorf("DecideTimed(%q): tier 2 started at %v, before tier 1 ended (%v)", tc.text, tm.Tier2Start, tm.Tier1Start.Add(tm.Tier1))
			}
		})
	}
}
