package evaluation

import (
	"bytes"
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
