package rules

import (
	"context"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
)

const pinRules = `routes:
  - {name: vip, when: {headers: {x-tier: gold}}, pool: vip}
  - {name: guard, when: {class: law, keywords: [jailbreak]}, action: block}
  - {name: coding, when: {class: code}, pool: code, fallback: general}
  - {name: legal, when: {class: law}, pool: legal}
default: general
session: {header: x-session-id, turns: 2}
`

func pinTier1() classifier.Classifier {
	return &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "rebase", Class: "code", Score: 0.95},
		{Contains: "deposit", Class: "law", Score: 0.95},
		{Contains: "jailbreak", Class: "law", Score: 0.95},
		{Contains: "aspirin", Class: "health", Score: 0.95},
	}, Default: classifier.Scored{Class: "other", Score: 0.95}}
}

// A caller's pin is part of the decision: a request whose route was
// decided for a pinned class goes to the caller's pool, the route and
// reason staying the rules'; a route decided without a class, a blocked
// request, an unpinned class and a caller without pins are untouched.
func TestDecidePins(t *testing.T) {
	s := compile(t, pinRules, Env{Heads: testHeads(false, nil), Tier1: pinTier1()})
	pins := map[string]string{"law": "vip", "code": "medical", "health": "legal"}
	for _, tc := range []struct {
		name, text, header string
		pins               map[string]string
		want               Decision
	}{
		{name: "pinned class", text: "my deposit", pins: pins,
			want: Decision{Pool: "vip", Route: "legal", Class: "law", Tier: 1, Reason: ReasonTier1Confident, Pinned: true}},
		{name: "the route's fallback goes with its pool", text: "how do I rebase", pins: pins,
			want: Decision{Pool: "medical", Route: "coding", Class: "code", Tier: 1, Reason: ReasonTier1Confident, Pinned: true}},
		{name: "a class no route takes", text: "aspirin dosage", pins: pins,
			want: Decision{Pool: "legal", Class: "health", Tier: 1, Reason: ReasonDefault, Pinned: true}},
		{name: "unpinned class", text: "a recipe", pins: pins,
			want: Decision{Pool: "general", Class: "other", Tier: 1, Reason: ReasonDefault}},
		{name: "no pins", text: "my deposit",
			want: Decision{Pool: "legal", Route: "legal", Class: "law", Tier: 1, Reason: ReasonTier1Confident}},
		{name: "a route without class", text: "my deposit", header: "gold", pins: pins,
			want: Decision{Pool: "vip", Route: "vip", Reason: ReasonRule}},
		{name: "blocked", text: "a jailbreak", pins: pins,
			want: Decision{Route: "guard", Class: "law", Tier: 1, Reason: ReasonTier1Confident, Block: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig := input(t, "auto", tc.text)
			if tc.header != "" {
				sig.Header.Set("X-Tier", tc.header)
			}
			sig.Pins = tc.pins
			d := s.Decide(context.Background(), sig)
			d.Score, d.Mass, d.Floor = 0, 0, 0
			if d != tc.want {
				t.Errorf("Decide(%q) = %+v, want %+v", tc.text, d, tc.want)
			}
		})
	}
}

// A turn its session kept is pinned by the class the session's route was
// decided for, not by this turn's own class; so is the shadow's decision
// by its own.
func TestDecidePinsSessionKeptTurn(t *testing.T) {
	s := compile(t, pinRules, Env{Heads: testHeads(false, nil), Tier1: pinTier1()})
	store := NewSessions(s.Sessions())
	ctx := context.Background()
	// The follow-up's own class (other) is pinned elsewhere: only the
	// session's class may move it.
	pins := map[string]string{"code": "medical", "other": "legal"}
	ask := func(text string) Decision {
		sig := input(t, "auto", text)
		sig.Principal, sig.Session, sig.Sessions, sig.Pins = "acme", "conv-1", store, pins
		return s.Decide(ctx, sig)
	}
	if d := ask("how do I rebase"); d.Pool != "medical" || !d.Pinned || d.Reason != ReasonTier1Confident {
		t.Fatalf("first turn: %+v", d)
	}
	d := ask("and then?")
	if d.Pool != "medical" || !d.Pinned || d.Reason != ReasonSession || d.SessionClass != "code" || d.Route != "coding" || d.Fallback != "" {
		t.Fatalf("a turn the session kept: %+v, want the pin of the session's class (code → medical)", d)
	}
	// Without the session the same turn is pinned by its own class.
	sig := input(t, "auto", "and then?")
	sig.Pins = pins
	if d := s.Decide(ctx, sig); d.Pool != "legal" || !d.Pinned || d.Reason != ReasonDefault {
		t.Fatalf("the same turn without its session: %+v", d)
	}
	if d := s.DecideShadow(ctx, sig); d.Pool != "legal" || !d.Pinned {
		t.Fatalf("DecideShadow: %+v, want pinned as Decide is", d)
	}
}

// Pins and a session's kept turn cost the decision no allocation.
func TestDecidePinsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	s := compile(t, pinRules, Env{Heads: testHeads(false, nil), Tier1: constant{Class: "other", Score: 0.95}})
	store := NewSessions(Session{Enabled: true, Turns: 1 << 30, Size: 10}) // turns enough for every run
	store.Learn("", "conv-1", Decision{Pool: "code", Route: "coding", Class: "code", Tier: 1, Reason: ReasonTier1Confident})
	sig := input(t, "auto", "and then?")
	sig.Session, sig.Sessions, sig.Pins = "conv-1", store, map[string]string{"code": "medical"}
	ctx := context.Background()
	if d := s.Decide(ctx, sig); d.Pool != "medical" || d.Reason != ReasonSession {
		t.Fatalf("Decide = %+v", d)
	}
	if n := testing.AllocsPerRun(100, func() { s.Decide(ctx, sig) }); n != 0 {
		t.Errorf("Decide with pins and a kept session allocates %v times", n)
	}
}

// BenchmarkDecidePinned is BenchmarkDecide's decision with the caller's
// part: a pin that applies, then also a session that keeps the turn (the
// store's lock and lookup).
//
//	go test ./rules -run '^$' -bench 'Decide(Pinned)?$' -benchmem
func BenchmarkDecidePinned(b *testing.B) {
	t1 := constant{Class: "code", Score: 0.9}
	f, _ := Parse("r.yaml", []byte(cascade))
	s, err := Compile(f, Env{Pools: pools, Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return t1, nil }})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	pins := map[string]string{"code": "vip", "law": "legal"}
	b.Run("pin", func(b *testing.B) {
		in := input(b, "auto", "How do I rebase my feature branch onto main without losing my commits?")
		in.Pins = pins
		b.ReportAllocs()
		for b.Loop() {
			if d := s.Decide(ctx, in); d.Pool != "vip" {
				b.Fatal(d)
			}
		}
	})
	b.Run("pin-session", func(b *testing.B) {
		unsure := compileBench(b, f, constant{Class: "code", Score: 0.1}) // below escalate_at: default, not confident
		store := NewSessions(Session{Enabled: true, Turns: 1 << 62, Size: 10})
		store.Learn("", "conv-1", Decision{Pool: "code", Route: "coding", Class: "code", Tier: 1, Reason: ReasonTier1Confident})
		in := input(b, "auto", "and then?")
		in.Pins, in.Session, in.Sessions = pins, "conv-1", store
		b.ReportAllocs()
		for b.Loop() {
			if d := unsure.Decide(ctx, in); d.Pool != "vip" || d.Reason != ReasonSession {
				b.Fatal(d)
			}
		}
	})
}

func compileBench(b *testing.B, f *File, t1 classifier.Classifier) *Set {
	s, err := Compile(f, Env{Pools: pools, Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return t1, nil }})
	if err != nil {
		b.Fatal(err)
	}
	return s
}
