package evaluation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/rules"
)

// scoreInText is a tier 1 that reads its verdict from the text: "law
// 0.83 ..." is law at 0.83.
type scoreInText struct{}

func (scoreInText) Classify(_ context.Context, text string, r *classifier.Result) error {
	f := strings.Fields(text)
	s, err := strconv.ParseFloat(f[1], 32)
	if err != nil {
		return err
	}
	v := classifier.Scored{Class: f[0], Score: float32(s)}
	r.Class, r.Score, r.Top = v.Class, v.Score, append(r.Top[:0], v)
	return nil
}

// shiftedSources is a legal route over four sources of 300 requests, each
// scored law between 0.5 and 1 by tier 1. In c and d the score is honest:
// right above 0.7, a coin toss below. In a and b tier 1 is overconfident:
// a coin toss up to 0.88. A floor fitted on the pooled data (about 0.8 at
// precision 0.9) holds in c and d and fails in a and b.
func shiftedSources(t *testing.T) (*rules.Set, []RouteItem) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(p, []byte("routes:\n  - {name: legal, when: {class: law}, pool: legal}\ndefault: general\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := rules.ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	classes := []string{"code", "law", "other"}
	head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, 3), B: make([]float32, 3)}
	set, err := rules.Compile(f, rules.Env{Pools: map[string]bool{"legal": true, "general": true},
		Heads: &classifier.Heads{Format: 1, Classes: classes, Tier1: &classifier.Tier{Head: head}}, Tier1: scoreInText{}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var items []Item
	for _, src := range []string{"a", "b", "c", "d"} {
		honestFrom := 0.7
		if src < "c" {
			honestFrom = 0.88
		}
		for i := range 300 {
			s := 0.5 + 0.5*rng.Float64()
			label := "law"
			if s <= honestFrom && rng.IntN(2) == 0 {
				label = "code"
			}
			items = append(items, Item{Text: fmt.Sprintf("law %.4f %s%d", s, src, i), Label: label, Cols: map[string]string{"source": src}})
		}
	}
	return set, GatherRoutes(context.Background(), set, items, "source", Options{})
}

func TestFitRoutesHeldOutSources(t *testing.T) {
	set, items := shiftedSources(t)
	o := RouteFitOptions{TargetPrecision: 0.9, MinRouted: 50, Folds: 2, EscalateAt: []float32{0.1}, Mix: []float32{0}}
	pooled := FitRoutes(set, items, o)
	if pooled.Selection.HeldOut || !pooled.Selection.Met || len(pooled.Sources) != 4 {
		t.Fatalf("pooled fit: selection %+v, %d sources", pooled.Selection, len(pooled.Sources))
	}
	// The pooled fit keeps its promise on the pooled data, not on a source
	// it did not see.
	if u := pooled.Sources[0].Unseen; u.Routed < 50 || u.Precision >= 0.85 {
		t.Fatalf("pooled fit, source a unseen: %+v", u)
	}

	o.Robust = true
	robust := FitRoutes(set, items, o)
	sel := robust.Selection
	if !sel.HeldOut || !sel.Met || sel.Precision < 0.9 || !sel.Setting.EverySource {
		t.Fatalf("held-out choice: %+v", sel)
	}
	worst := 1.0
	for _, s := range robust.Sources {
		if s.HeldOut.Routed >= o.MinRouted {
			worst = min(worst, s.HeldOut.Precision)
		}
		if s.Source >= "c" && (s.Unseen.Routed < o.MinRouted || s.Unseen.Precision < 0.9) {
			t.Fatalf("source %s unseen: %+v", s.Source, s.Unseen)
		}
	}
	if worst != sel.Precision {
		t.Fatalf("the choice read precision %v; the worst held-out source has %v", sel.Precision, worst)
	}
	if robust.Routes[0].Floor1 <= pooled.Routes[0].Floor1 {
		t.Fatalf("floors that hold per source %v should sit above the pooled fit's %v", robust.Routes[0].Floor1, pooled.Routes[0].Floor1)
	}
	n := robust.NewSource
	if n == nil || n.Sources < 2 || n.Level != float64(n.Sources-1)/float64(n.Sources+1) ||
		n.Precision.Lo > n.Precision.Median || n.Precision.Median > n.Precision.Hi {
		t.Fatalf("new source: %+v", n)
	}

	// The best source instead of the worst: a laxer choice.
	o.SourceQuantile = 1
	lax := FitRoutes(set, items, o)
	if lax.Selection.Precision < sel.Precision || lax.Fitted.Coverage < robust.Fitted.Coverage || lax.Fitted.Coverage == robust.Fitted.Coverage && lax.Routes[0].Floor1 == robust.Routes[0].Floor1 {
		t.Fatalf("quantile 1: selection %+v coverage %v; worst case: %+v coverage %v", lax.Selection, lax.Fitted.Coverage, sel, robust.Fitted.Coverage)
	}

	// An escalation cap is a promise per source too: without tier 2 a
	// request below its floor escalates (and goes to the default), so a
	// floor that holds in a and b escalates most of them.
	o.SourceQuantile, o.MaxEscalation = 0, 0.5
	capped := FitRoutes(set, items, o)
	if capped.Selection.Met || capped.Selection.Escalation <= 0.5 {
		t.Fatalf("a cap no setting keeps in every source: %+v", capped.Selection)
	}
	for _, s := range capped.Sources {
		if s.HeldOut.N >= o.MinRouted && s.HeldOut.Escalation > capped.Selection.Escalation {
			t.Fatalf("source %s escalates %v, more than the choice read (%v)", s.Source, s.HeldOut.Escalation, capped.Selection.Escalation)
		}
	}
	if capped.Selection.Escalation > sel.Escalation {
		t.Fatalf("with a cap no setting keeps, the least escalating: %v, more than the uncapped choice's %v", capped.Selection.Escalation, sel.Escalation)
	}
}

func TestQuantile(t *testing.T) {
	v := []float64{0.9, 0.8, 0.95, 0.85}
	for _, c := range []struct{ q, want float64 }{{0, 0.8}, {1, 0.95}, {0.34, 0.85}, {0.5, 0.85}, {0.67, 0.9}} {
		if got := quantile(v, c.q); got != c.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", v, c.q, got, c.want)
		}
	}
	if quantile(nil, 0) != 0 || v[0] != 0.9 {
		t.Fatal("quantile of nothing, or it sorted its input")
	}
}

// TestFitRoutesPrior: the user's traffic is a source where tier 1 is
// overconfident (a coin toss up to 0.88); the public data is honest (right
// above 0.7). Floors fitted on the public data alone miss the target on
// the user's traffic; 200 own labels leaning on the public data reach it
// on fresh rows of that traffic, where the same labels pooled unweighted
// with the public data are drowned by it.
func TestFitRoutesPrior(t *testing.T) {
	set, items := shiftedSources(t)
	// Sources a and b: the user's traffic (a: labels, b: fresh rows);
	// c and d: the public data, ten copies of it (the public data outnumbers
	// a user's labels) under other keys.
	var own, fresh, public []RouteItem
	for _, it := range items {
		switch it.Group {
		case "a":
			own = append(own, it)
		case "b":
			fresh = append(fresh, it)
		default:
			for k := range 10 {
				c := it
				c.Key, c.Prior = fmt.Sprintf("%s/%d", it.Key, k), true
				public = append(public, c)
			}
		}
	}
	own = own[:200]
	o := RouteFitOptions{TargetPrecision: 0.9, Folds: 5, EscalateAt: []float32{0.1}, Mix: []float32{0}}
	precisionOn := func(rep RouteFitReport, items []RouteItem) RouteSummary {
		f := routeFitter{set: set, routes: set.Routes(), o: o}
		return f.judge(items, &rep.Params)
	}

	publicOnly := FitRoutes(set, unprior(public), o)
	if s := precisionOn(publicOnly, fresh); s.Precision >= 0.85 {
		t.Fatalf("floors fitted on the public data alone reach %.3f on the user's traffic; the test needs them to miss", s.Precision)
	}

	withPrior := FitRoutes(set, append(slices.Clone(own), public...), o)
	if withPrior.Own != 200 || withPrior.Prior != len(public) || math.Abs(withPrior.PriorWeight-200.0/float64(len(public))) > 1e-9 {
		t.Fatalf("own %d, prior %d, prior weight %v", withPrior.Own, withPrior.Prior, withPrior.PriorWeight)
	}
	if sel := withPrior.Selection; !sel.Own || sel.HeldOut || !sel.Met {
		t.Fatalf("selection %+v: want chosen on the own labels, cross-validated, keeping the target", sel)
	}
	if withPrior.CV.N != 200 || withPrior.Before.N != 200 {
		t.Fatalf("judged on %d (cv) and %d (before) items, want the 200 own labels", withPrior.CV.N, withPrior.Before.N)
	}
	got := precisionOn(withPrior, fresh)
	if got.Routed < 30 || got.Precision < 0.87 {
		t.Fatalf("own labels with the prior: route precision %.3f on %d routed fresh rows, want within 0.03 of 0.9", got.Precision, got.Routed)
	}
	if ci := withPrior.CV.PrecisionCI; ci.Lo > withPrior.CV.Precision || ci.Hi < withPrior.CV.Precision || ci.Hi-ci.Lo < 0.02 {
		t.Fatalf("cross-validated precision %.3f, interval %+v", withPrior.CV.Precision, ci)
	}

	// The same labels without the weighting, pooled with the public data
	// (as if it were the user's): the public data decides.
	drowned := FitRoutes(set, append(slices.Clone(own), unprior(public)...), o)
	t.Logf("route precision on fresh rows: public only %.3f, own with prior %.3f (%d routed), pooled unweighted %.3f",
		precisionOn(publicOnly, fresh).Precision, got.Precision, got.Routed, precisionOn(drowned, fresh).Precision)
	if s := precisionOn(drowned, fresh); s.Precision >= got.Precision {
		t.Fatalf("pooled unweighted: %.3f on fresh rows, the weighted fit %.3f: the weighting should matter", s.Precision, got.Precision)
	}
}

func unprior(items []RouteItem) []RouteItem {
	out := slices.Clone(items)
	for i := range out {
		out[i].Prior = false
	}
	return out
}
