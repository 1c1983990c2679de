package rules

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
)

// withCentroids gives h's tier 1 centroids (their values do not matter
// here: the stand-in tier 1 reports the distance itself).
func withCentroids(h *classifier.Heads) *classifier.Heads {
	h.Tier1.Centroids = &classifier.Centroids{Dims: 1, W: []float32{1, 1, 1, 1}, Rows: classifier.CentroidRowsUser}
	return h
}

func far(text string, probs map[string]float32, d float32) classifiertest.DistRule {
	return classifiertest.DistRule{Contains: text, Probs: probs, Distance: d}
}

type failing struct{}

func (failing) Classify(context.Context, string, *classifier.Result) error {
	return errors.New("encoder broke")
}

// A tier-1 answer above its floor whose text lies unfamiliar_at or
// further from its top class's centroid is not trusted: it goes on as an
// answer below the floor does, to tier 2 (reason unfamiliar); when tier 2
// fails, to tier 1's best route if it clears fallback_floor; with tier 2
// off, to the default pool. Answers below every floor, and close ones,
// are decided as before.
func TestUnfamiliar(t *testing.T) {
	t1 := dist(
		far("near", map[string]float32{"law": 0.95, "other": 0.05}, 0.1),
		far("far", map[string]float32{"law": 0.95, "other": 0.05}, 0.6),
		far("stray", map[string]float32{"law": 0.1, "other": 0.9}, 0.9),
	)
	t2law := dist(on("", map[string]float32{"law": 0.9, "other": 0.1}))
	t2other := dist(on("", map[string]float32{"law": 0.1, "other": 0.9}))
	body := func(tier2 string) string {
		return "floors: {tier1: 0.8, tier2: 0.6}\nroutes: [{name: legal, when: {class: law}, pool: legal}]\ndefault: general\ntier2: " + tier2 + "\n"
	}
	env := func(t2 classifier.Classifier) Env {
		return Env{Heads: withCentroids(testHeads(true, nil)), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return t2, nil }, Tier2Budget: Offline}
	}
	for _, tc := range []struct {
		name, tier2 string
		t2          classifier.Classifier
		text        string
		pool        string
		reason      string
		tier        int
	}{
		{"close", "{enabled: true, escalate_at: 0.25, unfamiliar_at: 0.5}", t2law, "near", "legal", ReasonTier1Confident, 1},
		{"far, tier 2 agrees", "{enabled: true, escalate_at: 0.25, unfamiliar_at: 0.5}", t2law, "far", "legal", ReasonUnfamiliar, 2},
		{"far, tier 2 disagrees", "{enabled: true, escalate_at: 0.25, unfamiliar_at: 0.5}", t2other, "far", "general", ReasonUnfamiliar, 2},
		{"at the threshold", "{enabled: true, escalate_at: 0.25, unfamiliar_at: 0.6}", t2other, "far", "general", ReasonUnfamiliar, 2},
		{"off", "{enabled: true, escalate_at: 0.25, unfamiliar_at: 0}", t2other, "far", "legal", ReasonTier1Confident, 1},
		{"unset", "{enabled: true, escalate_at: 0.25}", t2other, "far", "legal", ReasonTier1Confident, 1},
		{"sure of no route", "{enabled: true, escalate_at: 0.25, unfamiliar_at: 0.5}", t2law, "stray", "general", ReasonDefault, 1},
		{"tier 2 fails, fallback clears", "{enabled: true, escalate_at: 0.25, unfamiliar_at: 0.5, fallback_floor: 0.9}", failing{}, "far", "legal", ReasonTier2Error, 1},
		{"tier 2 fails, fallback does not", "{enabled: true, escalate_at: 0.25, unfamiliar_at: 0.5, fallback_floor: 1}", failing{}, "far", "general", ReasonTier2Error, 1},
		{"tier 2 off", "{enabled: false, escalate_at: 0.25, unfamiliar_at: 0.5}", t2law, "far", "general", ReasonUnfamiliar, 1},
	} {
		s := compile(t, body(tc.tier2), env(tc.t2))
		d := s.Decide(context.Background(), input(t, "auto", tc.text))
		if d.Pool != tc.pool || d.Reason != tc.reason || d.Tier != tc.tier {
			t.Errorf("%s: Decide(%q) = %+v; want pool %s, reason %s, tier %d", tc.name, tc.text, d, tc.pool, tc.reason, tc.tier)
		}
	}
}

// triage route shows the setting and tier 1's distance.
func TestUnfamiliarTrace(t *testing.T) {
	t1 := dist(far("far", map[string]float32{"law": 0.95, "other": 0.05}, 0.6))
	s := compile(t, "floors: {tier1: 0.8}\nroutes: [{name: legal, when: {class: law}, pool: legal}]\ndefault: general\ntier2: {unfamiliar_at: 0.5}\n",
		Env{Heads: withCentroids(testHeads(false, nil)), Tier1: t1})
	tr := s.ExplainDecision(context.Background(), input(t, "auto", "far"))
	if tr.UnfamiliarAt != 0.5 || tr.Tier1 == nil || tr.Tier1.Distance != 0.6 || tr.Decision.Reason != ReasonUnfamiliar {
		t.Fatalf("trace: unfamiliar_at %v, tier 1 %+v, decision %+v", tr.UnfamiliarAt, tr.Tier1, tr.Decision)
	}
}

// The setting comes from the file, else from what calibration fitted into
// the heads; it needs centroids to measure from, and a distance.
func TestUnfamiliarSetting(t *testing.T) {
	fitted := float32(0.4)
	h := withCentroids(testHeads(true, nil))
	h.Routing = &classifier.Routing{UnfamiliarAt: &fitted}
	const routes = "routes: [{name: legal, when: {class: law}, pool: legal}]\ndefault: general\n"
	if got := compile(t, routes, Env{Heads: h, Tier1: &classifiertest.Fixed{}}).Params().UnfamiliarAt; got != 0.4 {
		t.Errorf("from the heads: unfamiliar_at %v, want 0.4", got)
	}
	if got := compile(t, routes+"tier2: {unfamiliar_at: 0}\n", Env{Heads: h, Tier1: &classifiertest.Fixed{}}).Params().UnfamiliarAt; got != 0 {
		t.Errorf("the file's 0 turns the fitted one off: unfamiliar_at %v", got)
	}
	// A tier 1 whose floors are all 0 still escalates unfamiliar text.
	s := compile(t, "floors: {tier1: 0}\n"+routes+"tier2: {enabled: true, unfamiliar_at: 0.5}\n",
		Env{Heads: h, Tier1: &classifiertest.Fixed{}, Tier2: func() (classifier.Classifier, error) { return &classifiertest.Fixed{}, nil }})
	if !s.NeedsTier2() {
		t.Error("floors of 0 and unfamiliar_at: tier 2 is needed")
	}

	f, err := ParseFile(write(t, routes+"tier2: {unfamiliar_at: 0.3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(f, Env{Pools: pools, Heads: testHeads(true, nil), Tier1: &classifiertest.Fixed{}})
	if err == nil || !strings.Contains(err.Error(), ":3:") || !strings.Contains(err.Error(), "tier2.unfamiliar_at: tier 1 of the heads in /heads has no class centroids") {
		t.Errorf("no centroids: %v", err)
	}
	for _, v := range []string{"2.5", "-0.1", "far"} {
		_, err := Parse("r.yaml", []byte(routes+"tier2: {unfamiliar_at: "+v+"}\n"))
		if err == nil || !strings.Contains(err.Error(), "r.yaml:3:24:") || !strings.Contains(err.Error(), "between 0") {
			t.Errorf("unfamiliar_at: %s: %v", v, err)
		}
	}
}
