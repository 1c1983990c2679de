package evaluation

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/rules"
)

const robustText = "Can my landlord keep my deposit for normal wear and tear? The lease says nothing about painting the walls, and I have photos of every room from the day I moved in."

// TestPerturbations: each listed perturbation, on one text with seed 1
// (row 0), gives the text shown (the streams are part of what a seed
// promises) and keeps what it must: the words, or the text around what it
// adds.
func TestPerturbations(t *testing.T) {
	words := strings.Fields(robustText)
	tests := []struct {
		name string
		want string
		// keeps checks the perturbed text against the original.
		keeps func(out string) bool
	}{
		{"typos", "Can my landlord keep my deposit for nromal wear and tear? The lease says nothing about painting the walls, and I have photos of every room from the day I moved in.",
			func(out string) bool { return wordsChanged(robustText, out) == 1 }},
		{"lowercase", strings.ToLower(robustText), func(out string) bool { return out == strings.ToLower(robustText) }},
		{"uppercase", strings.ToUpper(robustText), func(out string) bool { return out == strings.ToUpper(robustText) }},
		{"greeting", "Hello, " + robustText, func(out string) bool {
			g, rest, _ := strings.Cut(out, robustText)
			return rest == "" && slices.Contains(greetings, strings.TrimRight(g, " \n"))
		}},
		{"quick-question", "Quick question: " + robustText, func(out string) bool { return out == "Quick question: "+robustText }},
		{"sign-off", robustText + "\n\nBest regards,\nAlex", func(out string) bool {
			s, ok := strings.CutPrefix(out, robustText+"\n\n")
			return ok && slices.Contains(signOffs, s)
		}},
		{"thanks", robustText + " thank you", func(out string) bool {
			s, ok := strings.CutPrefix(out, robustText+" ")
			return ok && slices.Contains(thanks, s)
		}},
		{"whitespace", "\n\nCan my landlord keep my deposit for normal wear and tear? The\nlease\tsays nothing about painting\tthe walls, and I have photos\tof every room from the  day I moved in.  \n",
			func(out string) bool { return slices.Equal(strings.Fields(out), words) }},
	}
	perts := Perturbations()
	if len(perts) != len(tests) {
		t.Fatalf("%d perturbations listed, %d tested", len(perts), len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := perts[i]
			if p.Name != tt.name || p.Does == "" {
				t.Fatalf("perturbation %d is %q (%q), want %q with what it does", i, p.Name, p.Does, tt.name)
			}
			out := p.Apply(robustText, rowRand(1, p.Name, 0))
			if out != tt.want {
				t.Errorf("%s(seed 1, row 0) = %q, want %q", p.Name, out, tt.want)
			}
			if !tt.keeps(out) {
				t.Errorf("%s(seed 1, row 0) = %q: not the noise it says it adds", p.Name, out)
			}
			if again := p.Apply(robustText, rowRand(1, p.Name, 0)); again != out {
				t.Errorf("%s twice with one seed: %q, then %q", p.Name, out, again)
			}
			// Over many rows, every draw keeps to the same description.
			seen := map[string]bool{}
			for row := range 200 {
				o := p.Apply(robustText, rowRand(7, p.Name, row))
				if o == robustText || !tt.keeps(o) {
					t.Fatalf("%s(seed 7, row %d) = %q", p.Name, row, o)
				}
				seen[o] = true
			}
			random := tt.name != "lowercase" && tt.name != "uppercase" && tt.name != "quick-question"
			if random && len(seen) < 3 {
				t.Errorf("%s gave %d different texts over 200 rows: its choices do not follow the seed", p.Name, len(seen))
			}
		})
	}
}

// wordsChanged counts the whitespace-separated words that differ between
// a and b (which have as many), or -1.
func wordsChanged(a, b string) int {
	wa, wb := strings.Fields(a), strings.Fields(b)
	if len(wa) != len(wb) {
		return -1
	}
	n := 0
	for i := range wa {
		if wa[i] != wb[i] {
			if wa[i][0] != wb[i][0] {
				return -1 // a first letter changed
			}
			n++
		}
	}
	return n
}

func TestTypos(t *testing.T) {
	// One typo per twenty words of four letters or more, never in a
	// shorter word or a word's first letter; none in a text without such
	// words.
	long := strings.Repeat("alpha bravo charlie delta echo ", 12) // 60 words of ≥ 4 letters
	tests := []struct {
		text  string
		typos int
	}{
		{long, 3},
		{"Why is the sky blue?", 0}, // "blue" is the only word of four letters: one typo
		{"a b c", -1},               // no word to misspell: unchanged
		{"", -1},
		{"Grüße aus Köln, schöne Straße", 1},
	}
	for _, tt := range tests {
		for row := range 50 {
			out := typos(tt.text, rowRand(3, "typos", row))
			if tt.typos < 0 {
				if out != tt.text {
					t.Fatalf("typos(%q) = %q, want it unchanged", tt.text, out)
				}
				continue
			}
			if !utf8.ValidString(out) {
				t.Fatalf("typos(%q) = %q: not UTF-8", tt.text, out)
			}
			want := max(tt.typos, 1)
			if n := wordsChanged(tt.text, out); n != want {
				t.Fatalf("typos(%q) = %q: %d words changed, want %d", tt.text, out, n, want)
			}
			for i, w := range strings.Fields(tt.text) {
				if utf8.RuneCountInString(strings.Trim(w, "?,")) < 4 && strings.Fields(out)[i] != w {
					t.Fatalf("typos(%q) = %q: the short word %q changed", tt.text, out, w)
				}
			}
		}
	}
}

func TestSampleRows(t *testing.T) {
	if got := SampleRows(4, 0, 1); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("SampleRows(4, 0) = %v", got)
	}
	if got := SampleRows(4, 9, 1); len(got) != 4 {
		t.Fatalf("SampleRows(4, 9) = %v", got)
	}
	a, b := SampleRows(1000, 50, 1), SampleRows(1000, 50, 1)
	if len(a) != 50 || !slices.Equal(a, b) || !slices.IsSorted(a) {
		t.Fatalf("SampleRows(1000, 50, 1) = %v, then %v", a, b)
	}
	if slices.Equal(a, SampleRows(1000, 50, 2)) {
		t.Fatal("seeds 1 and 2 sample the same rows")
	}
	if len(slices.Compact(slices.Clone(a))) != 50 {
		t.Fatalf("a row sampled twice: %v", a)
	}
}

// robustSet is a rule set over a classifier double: "deposit" is law
// (the legal route), "rebase" code (the coding route), anything else
// other (the default pool). The double matches case-sensitively, so
// casing moves some texts, as a case-sensitive table would.
func robustSet(t *testing.T) (*rules.Set, *classifiertest.Fixed) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(p, []byte("floors: {tier1: 0.6}\nroutes:\n  - {name: legal, when: {class: law}, pool: legal}\n  - {name: coding, when: {class: code}, pool: coding}\ndefault: general\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := rules.ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	classes := []string{"code", "law", "other"}
	head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, 3), B: make([]float32, 3)}
	clf := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "deposit", Class: "law", Score: 0.9},
		{Contains: "rebase", Class: "code", Score: 0.95},
	}, Default: classifier.Scored{Class: "other", Score: 0.9}}
	set, err := rules.Compile(f, rules.Env{Pools: map[string]bool{"legal": true, "coding": true, "general": true},
		Heads: &classifier.Heads{Format: 1, Classes: classes, Tier1: &classifier.Tier{Head: head}}, Tier1: clf})
	if err != nil {
		t.Fatal(err)
	}
	return set, clf
}

// robustItems and robustPerts are chosen so that every count is known:
// see the comments, and TestRobustRules' figures.
var robustItems = []Item{
	{Text: "my deposit", Label: "law", Cols: map[string]string{"src": "a"}},      // legal
	{Text: "My Deposit", Label: "law", Cols: map[string]string{"src": "a"}},      // default (wrong: law has a route)
	{Text: "git rebase", Label: "code", Cols: map[string]string{"src": "b"}},     // coding
	{Text: "soup recipe", Label: "other", Cols: map[string]string{"src": "b"}},   // default
	{Text: "deposit, rebase", Label: "law", Cols: map[string]string{"src": "b"}}, // legal: "deposit" matches first
	{Text: "a b c", Label: "other"},                                              // default, no src
}

var robustPerts = []Perturbation{
	// Changes only item 1, to "my deposit": default → legal, mended.
	{Name: "lower", Does: "lower case", Apply: func(s string, _ *rand.Rand) string { return strings.ToLower(s) }},
	// Changes all six: items 0, 2 and 4 go to the default (broke); 1, 3
	// and 5 stay there.
	{Name: "upper", Does: "capitals", Apply: func(s string, _ *rand.Rand) string { return strings.ToUpper(s) }},
	// Changes items 0 and 4: 0 to the default, 4 to coding (both broke).
	{Name: "misspell", Does: "deposit misspelt", Apply: func(s string, _ *rand.Rand) string { return strings.ReplaceAll(s, "deposit", "depsoit") }},
}

// TestRobustRules counts flips through the real rule set: every perturbed
// text is decided by Rules, and each change of route is counted once, for
// its perturbation, its label's class and its slice.
func TestRobustRules(t *testing.T) {
	set, clf := robustSet(t)
	ctx := context.Background()
	base, err := Rules(ctx, set, robustItems, Options{})
	if err != nil {
		t.Fatal(err)
	}
	robust := func(workers int, o RobustOptions) *Robustness {
		t.Helper()
		run := func(ctx context.Context, items []Item) ([]Outcome, error) {
			return Rules(ctx, set, items, Options{Workers: workers})
		}
		r, err := Robust(ctx, "rules", robustItems, base, run, o)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	calls := clf.Calls.Load()
	r := robust(1, RobustOptions{Seed: 1, By: "src", Perturbations: robustPerts})
	if n := clf.Calls.Load() - calls; n != 9 {
		t.Fatalf("the classifier was asked %d times, want 9 (the perturbed texts that differ from their original)", n)
	}
	if r.JudgedOn != "route" || r.Rows != 6 || r.Of != 6 || r.N != 9 || r.Flips.Flips != 6 || !near(r.Rate, 6.0/9) || r.Broke != 5 || r.Mended != 1 {
		t.Fatalf("overall: %+v", r)
	}
	wantPerts := []PerturbationFlips{
		{Name: "lower", Does: "lower case", Flips: Flips{N: 1, Flips: 1, Rate: 1}, Unchanged: 5, Mended: 1},
		{Name: "upper", Does: "capitals", Flips: Flips{N: 6, Flips: 3, Rate: 0.5}, Broke: 3},
		{Name: "misspell", Does: "deposit misspelt", Flips: Flips{N: 2, Flips: 2, Rate: 1}, Unchanged: 4, Broke: 2},
	}
	if !reflect.DeepEqual(r.Perturbations, wantPerts) {
		t.Fatalf("per perturbation:\n got %+v\nwant %+v", r.Perturbations, wantPerts)
	}
	group := func(n, flips int, by map[string][2]int) GroupFlips {
		g := GroupFlips{Flips: Flips{N: n, Flips: flips, Rate: ratio(flips, n)}, ByPerturbation: map[string]Flips{}}
		for k, v := range by {
			g.ByPerturbation[k] = Flips{N: v[0], Flips: v[1], Rate: ratio(v[1], v[0])}
		}
		return g
	}
	wantClass := map[string]GroupFlips{
		"law":   group(6, 5, map[string][2]int{"lower": {1, 1}, "upper": {3, 2}, "misspell": {2, 2}}),
		"code":  group(1, 1, map[string][2]int{"upper": {1, 1}}),
		"other": group(2, 0, map[string][2]int{"upper": {2, 0}}),
	}
	if !reflect.DeepEqual(r.PerClass, wantClass) {
		t.Fatalf("per class:\n got %+v\nwant %+v", r.PerClass, wantClass)
	}
	wantSlices := map[string]GroupFlips{
		"a":      group(4, 3, map[string][2]int{"lower": {1, 1}, "upper": {2, 1}, "misspell": {1, 1}}),
		"b":      group(4, 3, map[string][2]int{"upper": {3, 2}, "misspell": {1, 1}}),
		"(none)": group(1, 0, map[string][2]int{"upper": {1, 0}}),
	}
	if r.By != "src" || !reflect.DeepEqual(r.Slices, wantSlices) {
		t.Fatalf("per slice of %q:\n got %+v\nwant %+v", r.By, r.Slices, wantSlices)
	}
	wantMoves := []Move{{"legal", DefaultLabel, 3}, {DefaultLabel, "legal", 1}, {"coding", DefaultLabel, 1}, {"legal", "coding", 1}}
	if !reflect.DeepEqual(r.Moves, wantMoves) {
		t.Fatalf("moves %+v, want %+v", r.Moves, wantMoves)
	}
	// In parallel, the same report.
	if again := robust(4, RobustOptions{Seed: 1, By: "src", Perturbations: robustPerts}); !reflect.DeepEqual(again, r) {
		t.Fatalf("with 4 workers:\n%+v\nwith 1:\n%+v", again, r)
	}
	// A sample of rows: as many as asked, the same ones for a seed.
	s1, s2 := robust(2, RobustOptions{Seed: 5, Rows: 3, Perturbations: robustPerts}), robust(2, RobustOptions{Seed: 5, Rows: 3, Perturbations: robustPerts})
	if s1.Rows != 3 || s1.Of != 6 || !reflect.DeepEqual(s1, s2) || s1.Slices != nil {
		t.Fatalf("a sample of 3 rows: %+v, then %+v", s1, s2)
	}
	// The listed perturbations by default, each with its texts decided.
	d := robust(2, RobustOptions{Seed: 1})
	if len(d.Perturbations) != len(Perturbations()) || d.N == 0 {
		t.Fatalf("default perturbations: %+v", d.Perturbations)
	}
	for _, p := range d.Perturbations {
		if p.N+p.Unchanged != len(robustItems) {
			t.Errorf("%s: %d decided + %d unchanged, want %d rows", p.Name, p.N, p.Unchanged, len(robustItems))
		}
	}
}

// TestRobustTier judges a bare tier on its top class, and passes on a
// failing run's error.
func TestRobustTier(t *testing.T) {
	_, clf := robustSet(t)
	ctx := context.Background()
	base, err := Tier(ctx, clf, 1, robustItems, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context, items []Item) ([]Outcome, error) { return Tier(ctx, clf, 1, items, Options{}) }
	r, err := Robust(ctx, "tier", robustItems, base, run, RobustOptions{Perturbations: robustPerts})
	if err != nil {
		t.Fatal(err)
	}
	wantMoves := []Move{{"law", "other", 3}, {"code", "other", 1}, {"law", "code", 1}, {"other", "law", 1}}
	if r.JudgedOn != "class" || r.Flips.Flips != 6 || !reflect.DeepEqual(r.Moves, wantMoves) {
		t.Fatalf("tier: judged on %s, %d flips, moves %+v", r.JudgedOn, r.Flips.Flips, r.Moves)
	}
	failing := &classifiertest.Fixed{Err: classifier.ErrUnavailable}
	bad := func(ctx context.Context, items []Item) ([]Outcome, error) {
		return Tier(ctx, failing, 1, items, Options{})
	}
	if _, err := Robust(ctx, "tier", robustItems, base, bad, RobustOptions{}); !errors.Is(err, classifier.ErrUnavailable) {
		t.Fatalf("a failing classifier: %v", err)
	}
	if _, err := Robust(ctx, "tier", robustItems, base[:2], run, RobustOptions{}); err == nil {
		t.Fatal("2 outcomes for 6 items: no error")
	}
}

// htmlTestRobustness is a robustness run over classes, with the listed
// perturbations, rates rising with a class's index, and a slice per
// realism value.
func htmlTestRobustness(classes []string) *Robustness {
	perts := Perturbations()
	rb := &Robustness{JudgedOn: "route", Seed: 1, Rows: 4000, Of: 4472, PerClass: map[string]GroupFlips{},
		By: "realism", Slices: map[string]GroupFlips{}}
	group := func(k int) GroupFlips {
		g := GroupFlips{ByPerturbation: map[string]Flips{}}
		for j, p := range perts {
			f := Flips{N: 300, Flips: (k*7 + j*5) % 40}
			if p.Name == "lowercase" && k%4 == 0 {
				f = Flips{} // no text of the class had capitals
			}
			f.finish()
			g.ByPerturbation[p.Name] = f
			g.N += f.N
			g.Flips.Flips += f.Flips
		}
		g.finish()
		return g
	}
	for k, c := range classes {
		rb.PerClass[c] = group(k)
	}
	for k, s := range []string{"synthetic", "paraphrased", "real-world"} {
		rb.Slices[s] = group(k + 3)
	}
	for j, p := range perts {
		pf := PerturbationFlips{Name: p.Name, Does: p.Does, Flips: Flips{N: 4000 - 300*(j%2), Flips: 40 + 37*j}, Broke: 20 + 9*j, Mended: 10 + 3*j}
		if p.Name == "lowercase" {
			pf.Unchanged = 300
		}
		pf.finish()
		rb.Perturbations = append(rb.Perturbations, pf)
		rb.N += pf.N
		rb.Flips.Flips += pf.Flips.Flips
		rb.Broke += pf.Broke
		rb.Mended += pf.Mended
	}
	rb.Flips.finish()
	rb.Moves = []Move{{"stem", DefaultLabel, 310}, {DefaultLabel, "humanities", 120}, {"medical", "stem", 41}}
	return rb
}

// TestWriteHTMLRobustness: the flip rate beside accuracy, and a section
// with each perturbation (what it does, its rate), the classes and slices
// by perturbation, and the most frequent changes; none of it without a
// robustness run.
func TestWriteHTMLRobustness(t *testing.T) {
	r := htmlTestReport(htmlTestClasses, 4000, 1)
	plain := checkPage(t, htmlRender(t, r))
	if byID(plain, "robustness") != nil {
		t.Error("a robustness section without a robustness run")
	}
	if _, ok := figureTexts(t, plain)["Flip rate"]; ok {
		t.Error("a flip rate figure without a robustness run")
	}

	r.Robustness = htmlTestRobustness(htmlTestClasses)
	rb := r.Robustness
	page := htmlRender(t, r)
	doc := checkPage(t, page)
	if got, want := figureTexts(t, doc)["Flip rate"], [2]string{htmlRate(rb.Rate), "under noise"}; got != want {
		t.Errorf("flip rate figure %q, want %q", got, want)
	}
	var labels []string
	for _, f := range byClass(doc, "fig") {
		labels = append(labels, textOf(byClass(f, "l")[0]))
	}
	if len(labels) != 9 || labels[0] != "Accuracy" || labels[1] != "Flip rate" {
		t.Errorf("figures %q: the flip rate belongs beside accuracy", labels)
	}
	rows := rowsOf(t, doc, "robustness")
	perts := Perturbations()
	// The perturbations, the total, a row per class, a row per slice.
	if len(rows) != len(perts)+1+len(htmlTestClasses)+3 {
		t.Fatalf("%d rows in the robustness section", len(rows))
	}
	for i, p := range perts {
		pf := rb.Perturbations[i]
		want := []string{p.Name, p.Does, htmlRate(pf.Rate), "", htmlCount(pf.Flips.Flips), htmlCount(pf.N), htmlCount(pf.Broke), htmlCount(pf.Mended)}
		if !slices.Equal(rows[i], want) {
			t.Errorf("row %q, want %q", rows[i], want)
		}
	}
	if total := rows[len(perts)]; total[0] != "all" || total[2] != htmlRate(rb.Rate) || total[5] != htmlCount(rb.N) {
		t.Errorf("total row %q", total)
	}
	classRows := rowsOf(t, doc, "robust-classes")
	if len(classRows) != len(htmlTestClasses) || classRows[0][0] != "biology" || len(classRows[0]) != 3+len(perts) {
		t.Fatalf("class rows %q", classRows)
	}
	bio := rb.PerClass["biology"]
	if classRows[0][2] != htmlRate(bio.Rate) || classRows[0][3] != htmlRate(bio.ByPerturbation["typos"].Rate) || classRows[0][4] != "–" {
		t.Errorf("biology's row %q (lowercase changed none of its texts: –)", classRows[0])
	}
	if s := rowsOf(t, doc, "robust-slices"); len(s) != 3 || s[0][0] != "paraphrased" {
		t.Errorf("slice rows %q", s)
	}
	for _, want := range []string{"seed 1 · 4,000 of 4,472 rows", "Most frequent changes", "humanities"} {
		if !strings.Contains(textOf(byID(doc, "robustness")), want) {
			t.Errorf("the robustness section lacks %q", want)
		}
	}

	// Names from the data are escaped wherever they go.
	evil := htmlTestRobustness(append([]string{pageEvil}, htmlTestClasses[:3]...))
	evil.By = hostile
	evil.Slices[hostile] = evil.Slices["synthetic"]
	evil.Moves = append(evil.Moves, Move{From: hostile, To: pageEvil, Count: 3})
	r.Robustness = evil
	page = htmlRender(t, r)
	checkPage(t, page)
	for _, raw := range []string{"<script>", "<img"} {
		if strings.Contains(page, raw) {
			t.Errorf("page contains raw %q", raw)
		}
	}
	if again := htmlRender(t, r); again != page {
		t.Error("two renders of the same report differ")
	}
	// A tier's run is judged on classes.
	evil.JudgedOn = "class"
	if got := textOf(byID(checkPage(t, htmlRender(t, r)), "robustness")); !strings.Contains(got, "How often the class changes") {
		t.Errorf("a tier's robustness section says %q", got)
	}
}
