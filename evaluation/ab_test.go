package evaluation

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestMcNemar(t *testing.T) {
	// Exact: b=1, c=9: two-sided p = 2 * P(X<=1 | n=10) = 2 * 11/1024.
	m := mcnemar(1, 9)
	if !m.Exact || math.Abs(m.P-22.0/1024) > 1e-12 {
		t.Fatalf("exact %+v", m)
	}
	// Chi-square with continuity: b=10, c=30: (20-1)^2/40 = 9.025, p ≈ 0.00266.
	m = mcnemar(10, 30)
	if m.Exact || math.Abs(m.Stat-9.025) > 1e-9 || math.Abs(m.P-0.002663) > 1e-5 {
		t.Fatalf("chi-square %+v", m)
	}
	if m := mcnemar(0, 0); m.P != 1 {
		t.Fatalf("no discordant items: %+v", m)
	}
	if m := mcnemar(20, 20); m.P < 0.8 {
		t.Fatalf("balanced: %+v", m)
	}
}

// abOutcomes are two runs over the same 100 items: A is right on 70, B on
// 85; they agree except on the first 30.
func abOutcomes() (a, b []Outcome) {
	for i := range 100 {
		label := []string{"x", "y"}[i%2]
		oa := Outcome{Label: label, Pred: label, Correct: true, Tier: 1, Score: 0.9}
		ob := oa
		if i < 30 {
			oa.Pred, oa.Correct = other(label), false
		}
		if i < 15 {
			ob.Pred, ob.Correct = other(label), false
		}
		a, b = append(a, oa), append(b, ob)
	}
	return a, b
}

func TestAB(t *testing.T) {
	a, b := abOutcomes()
	ra, rb := summarize("tier", []string{"x", "y"}, a), summarize("tier", []string{"x", "y"}, b)
	r := AB("A", "B", ra, rb, a, b, []string{"x", "y"}, 500, 7)
	if math.Abs(r.Accuracy.Delta-0.15) > 1e-9 || r.Accuracy.Lo <= 0 || r.Accuracy.Hi < 0.15 || r.Accuracy.Lo > 0.15 {
		t.Fatalf("accuracy delta %+v", r.Accuracy)
	}
	if r.McNemar.OnlyB != 15 || r.McNemar.OnlyA != 0 || r.McNemar.P > 0.001 {
		t.Fatalf("mcnemar %+v", r.McNemar)
	}
	if math.Abs(r.AgreementRate-0.85) > 1e-9 || r.Differ != 15 {
		t.Fatalf("agreement %v differ %d", r.AgreementRate, r.Differ)
	}
	if d := r.PerClass["x"]; d.Delta <= 0 || d.Lo > d.Delta || d.Hi < d.Delta {
		t.Fatalf("per-class x %+v", d)
	}
	// Same seed, same intervals.
	r2 := AB("A", "B", ra, rb, a, b, []string{"x", "y"}, 500, 7)
	if r2.Accuracy != r.Accuracy {
		t.Fatal("bootstrap not deterministic for a seed")
	}
	var buf bytes.Buffer
	if err := WriteABHTML(&buf, r); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if strings.Contains(page, "NaN") || strings.Count(page, "<svg") != 3 || !strings.Contains(page, "0.150") {
		t.Fatalf("a/b page: %d svgs, NaN %v", strings.Count(page, "<svg"), strings.Contains(page, "NaN"))
	}
	if err := WriteABHTML(&buf, &ABReport{}); err != nil {
		t.Fatal(err)
	}
}

func other(l string) string {
	if l == "x" {
		return "y"
	}
	return "x"
}

// TestABRoutePrecision: two rule sets judged on the same items get their
// route precisions compared, each with a Wilson interval that narrows
// with the labels, and a paired interval of the difference that holds
// the true difference.
func TestABRoutePrecision(t *testing.T) {
	outcomes := func(n int) (a, b []Outcome) {
		for i := range n {
			// A routes every item and is right on 80%; B routes the same
			// items but leaves the first 10% (half of A's errors) to the
			// default, where they are wrong too: B's route precision is
			// 0.8/0.9 = 0.889.
			oa := Outcome{Label: "x", Pred: "x", Correct: i%10 >= 2, Routed: true, Route: "r"}
			ob := oa
			if i%10 == 0 {
				ob.Routed, ob.Pred, ob.Route = false, DefaultLabel, ""
			}
			a, b = append(a, oa), append(b, ob)
		}
		return a, b
	}
	width := map[int]float64{}
	for _, n := range []int{100, 400} {
		a, b := outcomes(n)
		ra, rb := summarize("rules", []string{"x"}, a), summarize("rules", []string{"x"}, b)
		r := AB("A", "B", ra, rb, a, b, []string{"x"}, 500, 7)
		d := r.RoutePrecision
		if d == nil {
			t.Fatalf("n=%d: no route precision delta for two rule sets", n)
		}
		want := 0.8/0.9 - 0.8
		if math.Abs(d.A-0.8) > 1e-9 || math.Abs(d.Delta-want) > 1e-9 || d.Lo > want || d.Hi < want || d.Lo <= 0 {
			t.Fatalf("n=%d: route precision %+v, want delta %.4f inside an interval above 0", n, d, want)
		}
		if d.CIA == nil || d.CIB == nil || d.CIA.Lo > 0.8 || d.CIA.Hi < 0.8 || d.CIB.Lo > 0.889 || d.CIB.Hi < 0.889 {
			t.Fatalf("n=%d: side intervals %+v %+v", n, d.CIA, d.CIB)
		}
		if r.Accuracy.CIA == nil || *r.Accuracy.CIA != Wilson(n*8/10, n) {
			t.Fatalf("n=%d: accuracy interval of A %+v", n, r.Accuracy.CIA)
		}
		width[n] = d.CIA.Hi - d.CIA.Lo
		// The page shows both sides' route precisions with their intervals,
		// and the paired interval of the difference.
		var page bytes.Buffer
		if err := WriteABHTML(&page, r); err != nil {
			t.Fatal(err)
		}
		figs := figureTexts(t, checkPage(t, page.String()))
		ciA := fmt.Sprintf("95%% %.3f–%.3f", d.CIA.Lo, d.CIA.Hi)
		if figs["Route prec. A"] != [2]string{"0.800", ciA} || figs["Route prec. B"][0] != "0.889" ||
			figs["Route prec. B − A"][0] != "+0.089" || !strings.HasSuffix(figs["Route prec. B − A"][1], "] paired") {
			t.Fatalf("n=%d: page figures %q", n, figs)
		}
	}
	// Four times the labels, half the width (as 1/√n, within rounding).
	if ratio := width[100] / width[400]; ratio < 1.8 || ratio > 2.2 {
		t.Fatalf("interval widths %v: 4× the labels narrow it %.2f×, want about 2×", width, ratio)
	}
	a, b := abOutcomes()
	ra, rb := summarize("tier", []string{"x", "y"}, a), summarize("tier", []string{"x", "y"}, b)
	if r := AB("A", "B", ra, rb, a, b, []string{"x", "y"}, 100, 7); r.RoutePrecision != nil {
		t.Fatalf("heads compared on classes have no route precision: %+v", r.RoutePrecision)
	}
}

func TestWilson(t *testing.T) {
	for _, c := range []struct {
		k, n   int
		lo, hi float64
	}{
		{0, 0, 0, 1}, {0, 10, 0, 0.2775}, {10, 10, 0.7225, 1}, {90, 100, 0.8256, 0.9448}, {270, 300, 0.8608, 0.9291},
	} {
		got := Wilson(c.k, c.n)
		if math.Abs(got.Lo-c.lo) > 5e-5 || math.Abs(got.Hi-c.hi) > 5e-5 {
			t.Errorf("Wilson(%d, %d) = %+v, want [%.4f, %.4f]", c.k, c.n, got, c.lo, c.hi)
		}
	}
}
