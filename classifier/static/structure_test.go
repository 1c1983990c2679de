package static

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
)

func TestAppendMarkers(t *testing.T) {
	var rows [numMarkers]int32
	for i := range rows {
		rows[i] = int32(100 + i)
	}
	count := func(text string) map[string]int {
		got := map[string]int{}
		for _, r := range AppendMarkers(nil, text, &rows) {
			got[Markers[r-100]]++
		}
		return got
	}
	for _, tc := range []struct {
		text string
		want map[string]int
	}{
		{"How do I rebase my branch onto main?", map[string]int{}},
		{"The end. Next sentence. e.g. this", map[string]int{}},
		{"Why does this fail?\n```python\nimport os\nprint(os.getcwd())\n```\nthanks", map[string]int{"<fence>": 2, "<code>": 2}},
		{"my function:\n\n    def f(x):\n        return x\n\nwhy?", map[string]int{"<code>": 2}},
		{"Traceback (most recent call last):\n  File \"main.py\", line 3, in <module>\nValueError: bad value", map[string]int{"<trace>": 3, "<file>": 1}},
		{"Exception in thread:\njava.lang.NullPointerException\n    at com.foo.Bar.run(Bar.java:12)", map[string]int{"<trace>": 2, "<code>": 1, "<file>": 1}},
		{"Prove it.\n1. Assume n is even.\n2. Then n = 2k.\nStep 3: conclude.\n(a) first part", map[string]int{"<step>": 4}},
		{"Options:\n- fast\n* cheap\n• good", map[string]int{"<bullet>": 3}},
		{"I ran\n$ ls -la\nsudo apt-get install foo\ngit push origin main", map[string]int{"<shell>": 3}},
		{`Evaluate $$\int_0^1 x^2 \, dx$$ and \frac{a}{b} or \(x\)`, map[string]int{"<latex>": 5}},
		{"Edit config.yaml and src/app.ts, not README.md or notes.txt. Version 1.5 is fine.", map[string]int{"<file>": 4}},
	} {
		got := count(tc.text)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("AppendMarkers(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	long := strings.Repeat("    x = 1\n", 100)
	if got := count(long)["<code>"]; got != maxMarkers {
		t.Errorf("100 code lines: %d <code> rows, want the cap %d", got, maxMarkers)
	}
}

// AppendMarkers, and Classify with a head trained on the markers, allocate
// nothing.
func TestStructureAllocs(t *testing.T) {
	var rows [numMarkers]int32
	for i := range rows {
		rows[i] = int32(100 + i)
	}
	dst := make([]int32, 0, numMarkers*maxMarkers)
	if n := testing.AllocsPerRun(100, func() { AppendMarkers(dst[:0], "a\n```\n    b\n```\n1. c $$x$$ main.py", &rows) }); n != 0 {
		t.Errorf("AppendMarkers allocates %v times a call", n)
	}
	tk := tokenizer(t)
	base := tinyTable(t, tk, 8, nil, 0)
	texts := []string{"look\n    add one", "look\nadd one", "take\n    the value", "take\nthe value"}
	tuned, head, enc, err := Tune(tk, base, texts, []int{0, 1, 0, 1}, []string{"code", "prose"}, TuneOptions{Epochs: 1, Structure: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(tk, tuned, head, enc)
	if err != nil {
		t.Fatal(err)
	}
	var r classifier.Result
	m.Classify(context.Background(), "warm up", &r)
	// sync.Pool drops items at random under the race detector.
	if n := testing.AllocsPerRun(50, func() { m.Classify(context.Background(), "x\n    y\n1. z $$w$$ a.py", &r) }); n != 0 && !raceEnabled {
		t.Errorf("Classify with structure allocates %v times a call", n)
	}
}

// Two classes told apart by layout alone (the same words, as indented code
// lines or as plain lines): with Structure the tuned model learns it, and
// the Model built from it classifies by it (without, the two probes have
// the same tokens and cannot both be right); Classify still allocates
// nothing.
func TestTuneStructure(t *testing.T) {
	tk := tokenizer(t)
	base := tinyTable(t, tk, 8, nil, 0)
	words := []string{"take", "the", "value", "and", "add", "one", "then", "return", "it"}
	var texts []string
	var y []int
	for i := range 400 {
		var b strings.Builder
		b.WriteString("please look\n")
		for j := range 3 {
			w := words[(i+j)%len(words)] + " " + words[(i+2*j+1)%len(words)]
			if i%2 == 0 {
				b.WriteString("    ")
			}
			b.WriteString(w + "\n")
		}
		texts, y = append(texts, b.String()), append(y, i%2)
	}
	classes := []string{"code", "prose"}
	probe := map[string]string{"look at this\n    add one\n    return it": "code", "look at this\nadd one\nreturn it": "prose"}
	accuracy := func(structure bool) (int, *Model) {
		tuned, head, enc, err := Tune(tk, base, texts, y, classes, TuneOptions{Epochs: 10, LearningRate: 0.5, Structure: structure})
		if err != nil {
			t.Fatal(err)
		}
		if enc.Structure != structure {
			t.Fatalf("encoder structure %v, want %v", enc.Structure, structure)
		}
		m, err := New(tk, tuned, head, enc)
		if err != nil {
			t.Fatal(err)
		}
		var r classifier.Result
		hit := 0
		for text, want := range probe {
			m.Classify(context.Background(), text, &r)
			if r.Class == want {
				hit++
			}
		}
		return hit, m
	}
	if hit, _ := accuracy(true); hit != len(probe) {
		t.Fatalf("with structure: %d of %d probes right", hit, len(probe))
	}
	if hit, _ := accuracy(false); hit == len(probe) {
		t.Fatal("without structure both probes came out right: they do not differ in layout alone")
	}
	// A table without the markers' rows cannot serve a head trained with them.
	tuned, head, enc, err := Tune(tk, base, texts, y, classes, TuneOptions{Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	enc.Structure = true
	if _, err := New(tk, tuned, head, enc); err == nil || !strings.Contains(err.Error(), "<code>") {
		t.Fatalf("New with structure over a table without markers: %v", err)
	}
}

// A per-text temperature divides the logits by exp(w·φ): with w = (ln 2,
// 0, 0) every text's logits are half the model's without it; one naming
// features this build does not compute is refused.
func TestConfidenceScalesLogits(t *testing.T) {
	m := newTiny(t, 50)
	c, err := m.WithConfidence(&classifier.Confidence{Features: Familiarity, W: []float32{0.6931472, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := make([]float32, len(m.Classes())), make([]float32, len(m.Classes()))
	m.Logits(classifyText, a)
	c.Logits(classifyText, b)
	for i := range a {
		if d := a[i]/2 - b[i]; d > 1e-5 || d < -1e-5 {
			t.Fatalf("logit %d: %v with the temperature, %v without", i, b[i], a[i])
		}
	}
	phi := make([]float32, len(Familiarity))
	m.Phi("a b c", phi)
	if phi[0] != 1 || phi[1] <= 0 || phi[2] != 0 {
		t.Fatalf("Phi(%q) = %v", "a b c", phi)
	}
	if _, err := m.WithConfidence(&classifier.Confidence{Features: []string{"bias", "length"}, W: []float32{0, 0}}); err == nil {
		t.Fatal("WithConfidence took features this build does not compute")
	}
}
