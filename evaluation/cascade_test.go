package evaluation

import (
	"testing"
	"time"
)

func TestCascade(t *testing.T) {
	t1 := []Outcome{
		{Label: "law", Pred: "law", Score: 0.9, ClassRight: true, Correct: true, Tier: 1, Latency: time.Microsecond},
		{Label: "law", Pred: "law", Score: 0.5, ClassRight: true, Correct: true, Tier: 1, Latency: time.Microsecond},
		{Label: "math", Pred: "physics", Score: 0.99, Tier: 1, Latency: time.Microsecond},
		{Label: "math", Pred: "math", Score: 0.99, ClassRight: true, Correct: true, Tier: 1, Latency: time.Microsecond},
	}
	t2 := []Outcome{
		{Label: "law", Pred: "health", Score: 0.6, Tier: 2, Latency: time.Millisecond},
		{Label: "law", Pred: "health", Score: 0.6, Tier: 2, Latency: time.Millisecond},
		{Label: "math", Pred: "math", Score: 0.7, ClassRight: true, Correct: true, Tier: 2, Latency: time.Millisecond},
		{Label: "math", Pred: "math", Score: 0.7, ClassRight: true, Correct: true, Tier: 2, Latency: time.Millisecond},
	}
	// physics has no tier-1 floor: the default (1.01) never trusts it.
	out := Cascade(t1, t2, map[string]float32{"law": 0.8, "math": 0.9}, 1.01)
	wantTier := []int{1, 2, 2, 1}
	wantPred := []string{"law", "health", "math", "math"}
	for i, o := range out {
		if o.Tier != wantTier[i] || o.Pred != wantPred[i] {
			t.Fatalf("item %d: tier %d pred %s, want %d %s", i, o.Tier, o.Pred, wantTier[i], wantPred[i])
		}
	}
	if out[1].Reason != "below_floor" || out[0].Reason != "tier1_confident" || out[1].Latency != time.Millisecond+time.Microsecond {
		t.Fatalf("reasons/latency: %+v", out)
	}
	r := Summarize("tier", []string{"health", "law", "math", "physics"}, []Item{{Label: "law"}, {Label: "law"}, {Label: "math"}, {Label: "math"}}, out, "")
	if r.Accuracy != 0.75 || r.EscalationRate != 0.5 {
		t.Fatalf("accuracy %v escalation %v", r.Accuracy, r.EscalationRate)
	}
	c := CompareTiers(t1, t2)
	if c.N != 4 || c.Tier1Acc != 0.75 || c.Tier2Acc != 0.5 || c.Tier1Only != 2 || c.Tier2Only != 1 || c.Agreement != 0.25 {
		t.Fatalf("compare %+v", c)
	}
}
