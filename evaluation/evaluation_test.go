package evaluation

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/rules"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestTierSummary(t *testing.T) {
	clf := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "law", Class: "law", Score: 0.95},
		{Contains: "code", Class: "code", Score: 0.8},
		{Contains: "vague", Class: "law", Score: 0.55},
	}, Default: classifier.Scored{Class: "other", Score: 0.9}}
	items := []Item{
		{Text: "law 1", Label: "law", Cols: map[string]string{"realism": "exam"}},
		{Text: "law 2", Label: "law", Cols: map[string]string{"realism": "exam"}},
		{Text: "vague", Label: "code", Cols: map[string]string{"realism": "post"}},
		{Text: "code", Label: "code", Cols: map[string]string{"realism": "post"}},
		{Text: "soup", Label: "other", Cols: map[string]string{"realism": "post"}},
		{Text: "law?", Label: "other", Cols: map[string]string{"realism": "post"}},
	}
	out, err := Tier(context.Background(), clf, 1, items, Options{Workers: 3, Floors: map[string]float32{"law": 0.6}})
	if err != nil {
		t.Fatal(err)
	}
	r := Summarize("tier", []string{"code", "law", "other"}, items, out, "realism")
	// predictions: law law law code other law; right: 1,1,0,1,1,0 = 4/6.
	if !near(r.Accuracy, 4.0/6) || r.N != 6 {
		t.Fatalf("accuracy %v n %d", r.Accuracy, r.N)
	}
	law := r.PerClass["law"]
	if law.Predicted != 4 || law.Support != 2 || !near(law.Precision, 0.5) || law.Recall != 1 {
		t.Fatalf("law %+v", law)
	}
	// An "other" item claimed by law costs law precision; coverage counts
	// law predictions at or above 0.6 and code at any score: 4 of 6 (the
	// 0.55 law is below its floor, "other" is not coverage).
	if !near(r.Coverage, 4.0/6) {
		t.Fatalf("coverage %v", r.Coverage)
	}
	if r.Confusion.Counts[1][1] != 2 || r.Confusion.Counts[2][1] != 1 || r.Confusion.Labels[1] != "law" {
		t.Fatalf("confusion %+v", r.Confusion)
	}
	if len(r.Slices) != 2 || r.Slices["exam"].N != 2 || r.Slices["exam"].Accuracy != 1 || r.Slices["post"].N != 4 {
		t.Fatalf("slices %+v", r.Slices)
	}
	if p := r.Latency["tier1"]; p.Count != 6 || p.P50 <= 0 {
		t.Fatalf("latency %+v", r.Latency)
	}
	pts := r.Curves["law"]
	if len(pts) == 0 || pts[0].Count != 4 || !near(pts[0].Precision, 0.5) {
		t.Fatalf("law curve %+v", pts)
	}
	for _, p := range pts {
		if p.Floor > 0.95 && p.Count != 0 {
			t.Fatalf("curve point above every score counted %d", p.Count)
		}
	}
	// Determinism: the same run twice gives the same report.
	out2, _ := Tier(context.Background(), clf, 1, items, Options{Workers: 1, Floors: map[string]float32{"law": 0.6}})
	r2 := Summarize("tier", []string{"code", "law", "other"}, items, out2, "realism")
	if r2.Accuracy != r.Accuracy || r2.MacroF1 != r.MacroF1 || r2.ECE != r.ECE {
		t.Fatal("two runs disagree")
	}
}

func TestReliability(t *testing.T) {
	out := []Outcome{
		{Score: 0.95, ClassRight: true, Tier: 1}, {Score: 0.95, ClassRight: false, Tier: 1}, // bin 14: conf .95, acc .5
		{Score: 0.35, ClassRight: true, Tier: 1}, // bin 5: conf .35, acc 1
	}
	ece, bins := reliability(out, 15)
	// (2*|0.5-0.95| + 1*|1-0.35|)/3 = (0.9 + 0.65)/3
	if math.Abs(ece-(0.9+0.65)/3) > 1e-6 || bins[14].Count != 2 || !near(bins[14].Accuracy, 0.5) || bins[5].Count != 1 {
		t.Fatalf("ece %v bins %+v", ece, bins)
	}
}

func TestRulesSummary(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	os.WriteFile(p, []byte("floors: {tier1: 0.6}\nroutes:\n  - {name: legal, when: {class: law}, pool: legal}\ndefault: general\n"), 0o644)
	f, err := rules.ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	classes := []string{"code", "law", "other"}
	head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, 3), B: make([]float32, 3)}
	clf := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "deposit", Class: "law", Score: 0.9},
		{Contains: "lease", Class: "law", Score: 0.5},
		{Contains: "rebase", Class: "code", Score: 0.99},
	}, Default: classifier.Scored{Class: "other", Score: 0.9}}
	set, err := rules.Compile(f, rules.Env{Pools: map[string]bool{"legal": true, "general": true},
		Heads: &classifier.Heads{Format: 1, Classes: classes, Tier1: &classifier.Tier{Head: head}}, Tier1: clf})
	if err != nil {
		t.Fatal(err)
	}
	items := []Item{
		{Text: "my deposit", Label: "law"},     // legal: right
		{Text: "my lease", Label: "law"},       // below floor → default: wrong (law has a route)
		{Text: "rebase", Label: "code"},        // no route for code → default: right
		{Text: "deposit soup", Label: "other"}, // legal claims an "other": wrong, costs law precision
		{Text: "soup", Label: "other"},         // default: right
	}
	out, err := Rules(context.Background(), set, items, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := Summarize("rules", set.RoutedClasses(), items, out, "")
	if !near(r.Accuracy, 3.0/5) || !near(r.Coverage, 2.0/5) || !near(r.EscalationRate, 1.0/5) || r.Reasons["below_floor"] != 1 {
		t.Fatalf("rules report: acc %v cov %v esc %v reasons %v", r.Accuracy, r.Coverage, r.EscalationRate, r.Reasons)
	}
	if law := r.PerClass["law"]; law.Predicted != 2 || !near(law.Precision, 0.5) || !near(law.Recall, 0.5) {
		t.Fatalf("law %+v", law)
	}
	if last := r.Confusion.Labels[len(r.Confusion.Labels)-1]; last != DefaultLabel {
		t.Fatalf("confusion labels %v", r.Confusion.Labels)
	}
	// The default pool is judged as a class: 3 items went there, 2 rightly
	// (code and soup: no route takes them), and 3 items have no route.
	if d := r.PerClass[DefaultLabel]; d.Predicted != 3 || d.Support != 3 || !near(d.Precision, 2.0/3) || !near(d.Recall, 2.0/3) {
		t.Fatalf("default %+v", d)
	}
	if _, ok := r.PerClass["code"]; ok || len(r.PerClass) != 2 {
		t.Fatalf("per class %v: in rules mode only the routed classes and the default", r.PerClass)
	}
	if !near(r.MacroPrecision, (0.5+2.0/3)/2) || !near(r.MicroF1, r.Accuracy) {
		t.Fatalf("macro precision %v micro F1 %v", r.MacroPrecision, r.MicroF1)
	}
	if _, ok := r.Latency["decision"]; !ok {
		t.Fatalf("latency %v", r.Latency)
	}
}

func TestFitFloors(t *testing.T) {
	// Class "a": predictions at scores 0.99..0.50; right above 0.8, half
	// right below. Group "shifted" is overconfident: wrong at 0.85-0.9.
	rng := rand.New(rand.NewPCG(1, 1))
	var items []Scored
	for i := range 400 {
		s := 0.5 + 0.5*rng.Float64()
		right := s > 0.8 || rng.IntN(2) == 0
		label := "a"
		if !right {
			label = "b"
		}
		items = append(items, Scored{Pred: "a", Score: float32(s), Label: label, Group: "home", Key: string(rune(i))})
	}
	for i := range 100 {
		s := 0.85 + 0.05*rng.Float64()
		label := "a"
		if i%2 == 0 {
			label = "b"
		}
		items = append(items, Scored{Pred: "a", Score: float32(s), Label: label, Group: "shifted", Key: "s" + string(rune(i))})
	}
	plain := FitFloors(items, FloorOptions{TargetPrecision: 0.9, Classes: []string{"a"}})
	robust := FitFloors(items, FloorOptions{TargetPrecision: 0.9, Classes: []string{"a"}, Robust: true})
	pa, ra := plain.Classes[0], robust.Classes[0]
	if !pa.Reachable || pa.Precision < 0.9 || pa.Floor < 0.6 || pa.Floor > 0.9 {
		t.Fatalf("plain floor %+v", pa)
	}
	if ra.Floor < 0.9 || ra.Floor <= pa.Floor {
		t.Fatalf("robust floor %v should clear the shifted group's overconfident 0.85-0.9 (plain %v)", ra.Floor, pa.Floor)
	}
	// Leave-one-group-out tells the truth the pooled fit hides.
	if g := plain.ByGroup["shifted"]; g.N != 100 || g.Precision > 0.7 {
		t.Fatalf("shifted group under the plain floor: %+v", g)
	}
	if plain.CV.Routed == 0 || plain.CV.Precision < 0.8 {
		t.Fatalf("cross-validated %+v", plain.CV)
	}
	// An escalation budget lowers the target.
	budget := FitFloors(items, FloorOptions{TargetPrecision: 0.99, Classes: []string{"a"}, MaxEscalation: 0.2})
	if budget.Escalation > 0.2+1e-9 || budget.Achieved >= 0.99 {
		t.Fatalf("budgeted: escalation %v achieved %v", budget.Escalation, budget.Achieved)
	}
	// Unreachable: never trusted.
	none := FitFloors([]Scored{{Pred: "a", Score: 0.9, Label: "b"}}, FloorOptions{})
	if none.Classes[0].Reachable || none.Classes[0].Floor != 1 {
		t.Fatalf("unreachable %+v", none.Classes[0])
	}
}

func TestRulesRoutePrecision(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	os.WriteFile(p, []byte("floors: {tier1: 0.6}\nroutes:\n  - {name: stem, when: {classes: [math, physics]}, pool: stem}\n  - {name: legal, when: {class: law}, pool: legal}\ndefault: general\n"), 0o644)
	f, err := rules.ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	classes := []string{"law", "math", "other", "physics"}
	head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, 4), B: make([]float32, 4)}
	clf := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "torque", Class: "math", Score: 0.9},   // a physics question decided as math: stem is right
		{Contains: "integral", Class: "math", Score: 0.9}, // right
		{Contains: "lease", Class: "law", Score: 0.9},
		{Contains: "proof", Class: "physics", Score: 0.9}, // an "other" item stem takes: wrong
	}, Default: classifier.Scored{Class: "other", Score: 0.9}}
	set, err := rules.Compile(f, rules.Env{Pools: map[string]bool{"stem": true, "legal": true, "general": true},
		Heads: &classifier.Heads{Format: 1, Classes: classes, Tier1: &classifier.Tier{Head: head}}, Tier1: clf})
	if err != nil {
		t.Fatal(err)
	}
	items := []Item{
		{Text: "torque", Label: "physics", Cols: map[string]string{"realism": "post"}},
		{Text: "integral", Label: "math", Cols: map[string]string{"realism": "exam"}},
		{Text: "lease", Label: "law", Cols: map[string]string{"realism": "post"}},
		{Text: "proof", Label: "other", Cols: map[string]string{"realism": "post"}},
		{Text: "law soup", Label: "law", Cols: map[string]string{"realism": "exam"}}, // default: law missed
	}
	out, err := Rules(context.Background(), set, items, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := Summarize("rules", set.RoutedClasses(), items, out, "realism")
	// Routed: torque, integral, lease, proof; right: the first three.
	if !near(r.RoutePrecision, 3.0/4) {
		t.Fatalf("route precision %v, want 0.75", r.RoutePrecision)
	}
	stem, legal := r.PerRoute["stem"], r.PerRoute["legal"]
	if stem.Taken != 3 || stem.Right != 2 || !near(stem.Precision, 2.0/3) || stem.Support != 2 || stem.Recall != 1 {
		t.Fatalf("stem %+v", stem)
	}
	if legal.Taken != 1 || legal.Precision != 1 || legal.Support != 2 || !near(legal.Recall, 0.5) {
		t.Fatalf("legal %+v", legal)
	}
	// Decided as math, the physics question is still rightly routed: math's
	// precision counts it, and physics' recall.
	if m := r.PerClass["math"]; m.Predicted != 2 || m.Precision != 1 {
		t.Fatalf("math %+v: a route of several classes is right when it covers the label", m)
	}
	if ph := r.PerClass["physics"]; ph.Support != 1 || ph.Recall != 1 || ph.Predicted != 1 || ph.Precision != 0 {
		t.Fatalf("physics %+v", ph)
	}
	if s := r.Slices["post"]; s == nil || !near(s.RoutePrecision, 2.0/3) || r.Slices["exam"].RoutePrecision != 1 {
		t.Fatalf("slices: post %+v exam %+v", r.Slices["post"], r.Slices["exam"])
	}
}
