package evaluation

import (
	"context"
	"fmt"

	yaml "go.yaml.in/yaml/v3"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/rules"
)

// The heads-only cascade ("triage eval --tier heads-cascade", "triage ab
// heads-cascade") is the gateway's decision over a rule set made from the
// heads alone: one route per class, in the heads' order, each to a pool
// named for its class, tier 2 on, and nothing else. It is compiled by the
// rules package and decided by its policy (Set.Gather, then Set.Replay),
// so it is what the gateway would do with that rule set, and nothing here
// compares a score with a floor.

// HeadsCascadeRules is the rules file of the heads-only cascade of h: one
// route per class to a pool of the class's name, the floors the heads
// hold (tier 1 and tier 2), defaultFloor at tier 1 for a class the heads
// have no tier-1 floor for (the file's floors: tier1), tier 2 enabled. The
// heads' fitted routing settings apply as they would to any rule set.
func HeadsCascadeRules(h *classifier.Heads, defaultFloor float64) (*rules.File, error) {
	type when struct {
		Class string `yaml:"class"`
	}
	type route struct {
		Name string `yaml:"name"`
		When when   `yaml:"when"`
		Pool string `yaml:"pool"`
	}
	doc := struct {
		Heads   string             `yaml:"heads"`
		Floors  map[string]float64 `yaml:"floors"`
		Routes  []route            `yaml:"routes"`
		Default string             `yaml:"default"`
		Tier2   map[string]bool    `yaml:"tier2"`
	}{Heads: h.Dir, Floors: map[string]float64{"tier1": defaultFloor}, Default: DefaultLabel, Tier2: map[string]bool{"enabled": true}}
	for _, c := range h.Classes {
		doc.Routes = append(doc.Routes, route{Name: c, When: when{Class: c}, Pool: c})
	}
	src, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return rules.Parse("heads-cascade of "+h.Dir, src)
}

// CompileHeadsCascade compiles the heads-only cascade of h (see
// HeadsCascadeRules) with its two tiers, for offline work: tier 2 has no
// budget.
func CompileHeadsCascade(h *classifier.Heads, tier1, tier2 classifier.Classifier, defaultFloor float64) (*rules.Set, error) {
	f, err := HeadsCascadeRules(h, defaultFloor)
	if err != nil {
		return nil, err
	}
	pools := map[string]bool{DefaultLabel: true}
	for _, c := range h.Classes {
		pools[c] = true
	}
	env := rules.Env{Pools: pools, Heads: h, Tier1: tier1, Tier2Budget: rules.Offline}
	if tier2 != nil {
		env.Tier2 = func() (classifier.Classifier, error) { return tier2, nil }
	}
	return rules.Compile(f, env)
}

// HeadsCascade runs a rule set's decision over items, judged on classes as
// a tier is (Tier): the decided class against the label. Each item is
// asked of both tiers once (Set.Gather) and decided by the set's policy
// on that evidence (Set.Replay), so the same run also gives each tier
// alone, compared in the TierComparison. An item's latency is tier 1's,
// and tier 2's too when the decision asked it. Routed: a class route took
// the item, for a class outside Options.DefaultClasses. A tier 2 that
// gave no verdict is an error: the figures would be of a cascade without
// it.
func HeadsCascade(ctx context.Context, set *rules.Set, items []Item, o Options) ([]Outcome, *TierComparison, error) {
	defaults := defaultClasses(o)
	alias, window := set.Aliases()[0], set.Window()
	params := set.Params()
	out := make([]Outcome, len(items))
	t1, t2 := make([]Outcome, len(items)), make([]Outcome, len(items))
	errs := make([]error, len(items))
	parallel(len(items), o, func(i int) {
		label := items[i].Label
		ev := set.Gather(ctx, rules.Signals{Model: alias, Text: window.Clip(items[i].Text)})
		d := set.Replay(ev, &params)
		top1, _ := ev.Top(1)
		top2, ok := ev.Top(2)
		if !ok {
			why := ev.Tier2Failed()
			if why == "" {
				why = "not asked"
			}
			errs[i] = fmt.Errorf("item %d: tier 2 gave no verdict (%s)", i, why)
			return
		}
		tm := ev.Timing()
		lat := tm.Tier1
		if Escalated(d.Reason) {
			lat += tm.Tier2
		}
		out[i] = Outcome{Label: label, Pred: d.Class, Score: d.Score, Correct: d.Class == label, ClassRight: d.Class == label,
			Routed: d.Route != "" && !defaults[d.Class], Tier: d.Tier, Reason: d.Reason, Route: d.Route, Latency: lat}
		t1[i] = Outcome{Label: label, Pred: top1.Class, Score: top1.Score, ClassRight: top1.Class == label, Tier: 1}
		t2[i] = Outcome{Label: label, Pred: top2.Class, Score: top2.Score, ClassRight: top2.Class == label, Tier: 2}
	})
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return out, CompareTiers(t1, t2), nil
}

// CompareTiers puts two full runs, tier 1 and tier 2 over the same items,
// side by side.
func CompareTiers(t1, t2 []Outcome) *TierComparison {
	c := &TierComparison{N: len(t1)}
	if c.N == 0 {
		return c
	}
	var r1, r2, agree int
	for i := range t1 {
		a, b := t1[i].ClassRight, t2[i].ClassRight
		if a {
			r1++
		}
		if b {
			r2++
		}
		if t1[i].Pred == t2[i].Pred {
			agree++
		}
		switch {
		case a && !b:
			c.Tier1Only++
		case b && !a:
			c.Tier2Only++
		}
	}
	n := float64(c.N)
	c.Tier1Acc, c.Tier2Acc, c.Agreement = float64(r1)/n, float64(r2)/n, float64(agree)/n
	return c
}
