package evaluation

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/rules"
)

// cascadeHeads are heads over classes with a tier-1 and a tier-2 head
// (their weights unused: the tiers are stand-ins) and the given floors.
func cascadeHeads(classes []string, floors map[string]classifier.Floors) *classifier.Heads {
	head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, len(classes)), B: make([]float32, len(classes))}
	return &classifier.Heads{Format: 1, Dir: "testheads", Classes: classes, Tier1: &classifier.Tier{Head: head}, Tier2: &classifier.Tier{Head: head}, Floors: floors}
}

func f32(v float32) *float32 { return &v }

// The heads-only cascade is the rules' decision over one route per class:
// tier 1 where a class clears its tier-1 floor (the heads', or the default
// one), tier 2 otherwise, at its own floors; judged on classes.
func TestHeadsCascade(t *testing.T) {
	classes := []string{"health", "law", "math", "other", "physics"}
	h := cascadeHeads(classes, map[string]classifier.Floors{
		"law":     {Tier1: f32(0.4)},
		"math":    {Tier1: f32(0.9)},
		"physics": {Tier2: f32(0.9)}, // no tier-1 floor: the default floor
	})
	t1 := &classifiertest.Dist{Classes: classes, Rules: []classifiertest.DistRule{
		{Contains: "deposit", Probs: map[string]float32{"law": 0.9, "other": 0.1}},
		{Contains: "lease", Probs: map[string]float32{"law": 0.3, "other": 0.7}},
		{Contains: "integral", Probs: map[string]float32{"physics": 0.99, "math": 0.01}},
		{Contains: "sum", Probs: map[string]float32{"math": 0.99, "other": 0.01}},
		// The top class is physics, below the default floor; law, second,
		// clears its own floor of 0.4: the first route that clears its
		// floor takes the item, as the gateway's rules do.
		{Contains: "liability", Probs: map[string]float32{"physics": 0.55, "law": 0.45}},
		{Contains: "force", Probs: map[string]float32{"physics": 0.7, "math": 0.3}},
	}, Default: map[string]float32{"other": 1}}
	t2 := &classifiertest.Dist{Classes: classes, Rules: []classifiertest.DistRule{
		{Contains: "lease", Probs: map[string]float32{"health": 0.6, "law": 0.4}},
		{Contains: "integral", Probs: map[string]float32{"math": 0.7, "physics": 0.3}},
		// Tier 2's top class below its tier-2 floor: the default pool,
		// judged on tier 2's class, not routed.
		{Contains: "force", Probs: map[string]float32{"physics": 0.6, "math": 0.4}},
	}, Default: map[string]float32{"other": 1}}
	items := []Item{
		{Text: "my deposit", Label: "law"},
		{Text: "my lease", Label: "law"},
		{Text: "an integral", Label: "math"},
		{Text: "a sum", Label: "math"},
		{Text: "liability", Label: "law"},
		{Text: "force", Label: "physics"},
	}
	type want struct {
		tier          int
		pred, reason  string
		route         string
		routed, right bool
	}
	for _, tc := range []struct {
		floor float64
		want  []want
	}{
		{1, []want{
			{1, "law", "tier1_confident", "law", true, true},
			{2, "health", "below_floor", "health", true, false},
			{2, "math", "below_floor", "math", true, true},
			{1, "math", "tier1_confident", "math", true, true},
			{1, "law", "tier1_confident", "law", true, true},
			{2, "physics", "below_floor", "", false, true},
		}},
		// physics at 0.7 clears a default floor of 0.5 at tier 1.
		{0.5, []want{
			{1, "law", "tier1_confident", "law", true, true},
			// other at 0.7 clears the default floor too (and is no coverage).
			{1, "other", "tier1_confident", "other", false, false},
			{1, "physics", "tier1_confident", "physics", true, false},
			{1, "math", "tier1_confident", "math", true, true},
			// law's route comes before physics' in the heads' order.
			{1, "law", "tier1_confident", "law", true, true},
			{1, "physics", "tier1_confident", "physics", true, true},
		}},
	} {
		set, err := CompileHeadsCascade(h, t1, t2, tc.floor)
		if err != nil {
			t.Fatal(err)
		}
		out, cmp, err := HeadsCascade(context.Background(), set, items, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			w := tc.want[i]
			got := want{o.Tier, o.Pred, o.Reason, o.Route, o.Routed, o.Correct}
			if got != w || o.ClassRight != o.Correct {
				t.Errorf("default floor %v: %q: %+v, want %+v", tc.floor, items[i].Text, got, w)
			}
			if o.Latency <= 0 {
				t.Errorf("default floor %v: %q: latency %v", tc.floor, items[i].Text, o.Latency)
			}
		}
		// Each tier alone, from the same evidence: tier 1's top classes are
		// law, other, physics, math, physics, physics (3 right of 6); tier
		// 2's other, health, math, other, other, physics (2 right).
		if cmp.N != 6 || !near(cmp.Tier1Acc, 3.0/6) || !near(cmp.Tier2Acc, 2.0/6) || cmp.Tier1Only != 2 || cmp.Tier2Only != 1 || !near(cmp.Agreement, 1.0/6) {
			t.Errorf("default floor %v: compare %+v", tc.floor, cmp)
		}
	}
	set, err := CompileHeadsCascade(h, t1, t2, 1)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := HeadsCascade(context.Background(), set, items, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := Summarize("tier", classes, items, out, "")
	if !near(r.Accuracy, 5.0/6) || !near(r.EscalationRate, 3.0/6) || !near(r.Coverage, 5.0/6) || r.Reasons["below_floor"] != 3 {
		t.Fatalf("accuracy %v escalation %v coverage %v reasons %v", r.Accuracy, r.EscalationRate, r.Coverage, r.Reasons)
	}
	if _, ok := r.Latency["tier2"]; !ok {
		t.Fatalf("latency %v: the escalated items are tier 2's", r.Latency)
	}
}

// The rule set is a rules file like any other: every class routed to a
// pool of its name, a default pool no class names, tier 2 on, and the
// default floor as the file's tier-1 floors.
func TestHeadsCascadeRules(t *testing.T) {
	classes := []string{"computer science", "law", "other"}
	f, err := HeadsCascadeRules(cascadeHeads(classes, nil), 0.7)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range f.Routes {
		if len(r.When.Classes) != 1 || r.When.Classes[0] != r.Name || r.Pool != r.Name || r.Blocks() {
			t.Errorf("route %+v: want one class, to a pool of its name", r)
		}
		got = append(got, r.Name)
	}
	if !slices.Equal(got, classes) || f.Default != DefaultLabel || !f.Tier2.Enabled || f.Floors.Tier1 == nil || *f.Floors.Tier1 != 0.7 || f.Floors.Tier2 != nil {
		t.Fatalf("routes %v default %q tier2 %v floors %+v", got, f.Default, f.Tier2.Enabled, f.Floors)
	}
	if _, err := HeadsCascadeRules(cascadeHeads(classes, nil), 1.5); err == nil || !strings.Contains(err.Error(), "floors.tier1") && !strings.Contains(err.Error(), "between 0 and 1") {
		t.Fatalf("a default floor of 1.5: %v", err)
	}
}

// A tier 2 that gives no verdict fails the run instead of leaving figures
// of a cascade without it; heads without tier 2 are refused by the rules.
func TestHeadsCascadeTier2Fails(t *testing.T) {
	classes := []string{"law", "other"}
	t1 := &classifiertest.Dist{Classes: classes, Default: map[string]float32{"law": 0.3, "other": 0.7}}
	broken := &classifiertest.Fixed{Err: errors.New("encoder gone")}
	set, err := CompileHeadsCascade(cascadeHeads(classes, nil), t1, broken, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = HeadsCascade(context.Background(), set, []Item{{Text: "x", Label: "law"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "tier 2 gave no verdict ("+rules.ReasonTier2Error+")") {
		t.Fatalf("tier 2 failing: %v", err)
	}
	h := cascadeHeads(classes, nil)
	h.Tier2 = nil
	if _, err := CompileHeadsCascade(h, t1, nil, 0.5); err == nil || !strings.Contains(err.Error(), "no tier-2 head") {
		t.Fatalf("heads without tier 2: %v", err)
	}
}

func TestCompareTiers(t *testing.T) {
	t1 := []Outcome{
		{Pred: "law", ClassRight: true}, {Pred: "law", ClassRight: true},
		{Pred: "physics"}, {Pred: "math", ClassRight: true},
	}
	t2 := []Outcome{
		{Pred: "health"}, {Pred: "health"},
		{Pred: "math", ClassRight: true}, {Pred: "math", ClassRight: true, Latency: time.Millisecond},
	}
	c := CompareTiers(t1, t2)
	if c.N != 4 || c.Tier1Acc != 0.75 || c.Tier2Acc != 0.5 || c.Tier1Only != 2 || c.Tier2Only != 1 || c.Agreement != 0.25 {
		t.Fatalf("compare %+v", c)
	}
}
