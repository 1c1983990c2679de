package rules

import (
	"context"
	"testing"
)

// A session outlives the Set it was recorded with: the Set deciding a
// later turn sends it where its route goes now, and ends it when the
// route is gone. Recorded hears of each route recorded.
func TestSessionsAcrossSets(t *testing.T) {
	tier1 := pinTier1()
	before := compile(t, pinRules, Env{Heads: testHeads(false, nil), Tier1: tier1})
	moved := compile(t, "routes: [{name: coding, when: {class: code}, pool: vip}]\ndefault: general\nsession: {turns: 5}\n", Env{Heads: testHeads(false, nil), Tier1: tier1})
	gone := compile(t, "routes: [{name: legal, when: {class: law}, pool: legal}]\ndefault: general\nsession: {turns: 5}\n", Env{Heads: testHeads(false, nil), Tier1: tier1})
	store := NewSessions(before.Sessions())
	var recorded []string
	store.Recorded = func(principal, id string, d Decision) { recorded = append(recorded, principal+"/"+id+"/"+d.Route) }
	ask := func(s *Set, text string) Decision {
		sig := input(t, "auto", text)
		sig.Principal, sig.Session, sig.Sessions = "ann", "c", store
		return s.Decide(context.Background(), sig)
	}
	ask(before, "how do I rebase")
	if len(recorded) != 1 || recorded[0] != "ann/c/coding" {
		t.Fatalf("Recorded heard %q", recorded)
	}
	store.Configure(moved.Sessions())
	if d := ask(moved, "and then?"); d.Route != "coding" || d.Pool != "vip" || d.Fallback != "" || d.Reason != ReasonSession {
		t.Fatalf("after the route's pool moved: %+v, want the route's new pool", d)
	}
	if d := ask(gone, "and then?"); d.Reason != ReasonDefault || d.Pool != "general" {
		t.Fatalf("after the route went: %+v, want the turn decided on its own", d)
	}
	if n := store.Len(); n != 0 {
		t.Fatalf("%d sessions kept after their route went", n)
	}
	// A smaller size drops the least recently used.
	for _, id := range []string{"a", "b", "c"} {
		sig := input(t, "auto", "how do I rebase")
		sig.Session, sig.Sessions = id, store
		before.Decide(context.Background(), sig)
	}
	store.Configure(Session{Enabled: true, Turns: 5, Size: 1})
	if n := store.Len(); n != 1 {
		t.Fatalf("%d sessions after resizing to 1", n)
	}
}

// A session learned from another replica is kept as its route goes here,
// whatever the entry says of its pool, fallback, blocking or pin: only
// this request's caller pins it.
func TestSessionLearnedKeptAsTheRouteGoesHere(t *testing.T) {
	s := compile(t, pinRules, Env{Heads: testHeads(false, nil), Tier1: pinTier1()})
	store := NewSessions(s.Sessions())
	store.Learn("", "c", Decision{Pool: "vip", Route: "coding", Class: "code", Tier: 1, Reason: ReasonTier1Confident, Pinned: true, Block: true})
	sig := input(t, "auto", "and then?")
	sig.Session, sig.Sessions = "c", store
	d := s.Decide(context.Background(), sig)
	if d.Pool != "code" || d.Fallback != "general" || d.Pinned || d.Block || d.Reason != ReasonSession {
		t.Fatalf("Decide = %+v, want the coding route as it goes here, unpinned", d)
	}
}
