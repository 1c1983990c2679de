package rules_test

import (
	"context"
	"fmt"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/rules"
)

// A rules file compiled against a heads artifact and a tier 1, then asked
// about a prompt: what the gateway does for a request naming "auto", what
// `triage route` explains, and what `triage eval --rules` measures.
func ExampleSet_Decide() {
	f, err := rules.Parse("rules.yaml", []byte(`alias: auto
floors: {tier1: 0.6}
routes:
  - {name: coding, when: {class: code}, pool: code}
default: general
`))
	if err != nil {
		panic(err)
	}
	classes := []string{"code", "other"}
	head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, 2), B: make([]float32, 2)}
	heads := &classifier.Heads{Format: 1, Name: "demo", Version: "1", Classes: classes, Dir: "heads", Tier1: &classifier.Tier{Head: head}}
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "rebase", Class: "code", Score: 0.93}},
		Default: classifier.Scored{Class: "other", Score: 0.8}}
	set, err := rules.Compile(f, rules.Env{Pools: map[string]bool{"code": true, "general": true}, Heads: heads, Tier1: tier1})
	if err != nil {
		panic(err)
	}
	for _, prompt := range []string{"How do I rebase onto main?", "A recipe for banana bread"} {
		d := set.Decide(context.Background(), rules.Signals{Model: "auto", Text: set.Window().Clip(prompt)})
		fmt.Printf("%s → pool %s (route %q, %s, tier %d)\n", prompt, d.Pool, d.Route, d.Reason, d.Tier)
	}
	// Output:
	// How do I rebase onto main? → pool code (route "coding", tier1_confident, tier 1)
	// A recipe for banana bread → pool general (route "", default, tier 1)
}
