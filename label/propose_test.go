package label

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestParseAnswer(t *testing.T) {
	classes := []string{"law", "computer science", "other"}
	for _, c := range []struct {
		answer, want string
		ok           bool
	}{
		{"law", "law", true},
		{"  Law\n", "law", true},
		{"COMPUTER SCIENCE", "computer science", true},
		{"other", "other", true},
		{"law.", "", false},
		{`"law"`, "", false},
		{"law, other", "", false},
		{"The answer is law", "", false},
		{"computer  science", "", false},
		{"", "", false},
		{"[sim] lorem ipsum dolor", "", false},
	} {
		got, ok := ParseAnswer(c.answer, classes)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseAnswer(%q) = %q, %v, want %q, %v", c.answer, got, ok, c.want, c.ok)
		}
	}
	if in := Instruction(classes); !strings.Contains(in, "law, computer science, other.") || !strings.Contains(in, "nothing else") {
		t.Errorf("Instruction lists the classes: %q", in)
	}
}

func TestAgree(t *testing.T) {
	// 10 prompts both labelled, 7 alike (4 law, 3 other). The person: 5
	// law, 5 other; the model: 6 law, 4 other. Chance agreement
	// 0.5·0.6 + 0.5·0.4 = 0.5, kappa (0.7−0.5)/(1−0.5) = 0.4. And one
	// prompt the model was not sure of, one it has not labelled.
	var human, model []Labelled
	for i := range 10 {
		h, m := "law", "law"
		if i >= 5 {
			h, m = "other", "other"
		}
		if i == 4 {
			m = "other"
		}
		if i == 5 || i == 6 {
			m = "law"
		}
		id := string(rune('a' + i))
		human = append(human, Labelled{ID: id, Label: h})
		model = append(model, Labelled{ID: id, Label: m})
	}
	human = append(human, Labelled{ID: "x", Label: "law"}, Labelled{ID: "y", Label: "law"})
	a := Agree(human, model, map[string]bool{"x": true})
	if a.Both != 10 || a.Agree != 7 || a.Unsure != 1 || a.Missing != 1 {
		t.Fatalf("Agree: %+v", a)
	}
	pe := 0.5*0.6 + 0.5*0.4
	if want := (0.7 - pe) / (1 - pe); math.Abs(a.Kappa-want) > 1e-9 || math.Abs(a.Raw-0.7) > 1e-9 {
		t.Fatalf("kappa %v raw %v, want %v 0.7", a.Kappa, a.Raw, want)
	}
	if len(a.Classes) != 2 || a.Classes[0] != (ClassAgreement{Class: "law", Human: 5, Model: 6, Agree: 4, Rate: 0.8}) {
		t.Fatalf("classes %+v", a.Classes)
	}
}

// TestPropose: a model that answers a class for some prompts and
// anything else for the others; its labels, its "not sure" marks, the
// bound on calls in flight and the token budget.
func TestPropose(t *testing.T) {
	dir := t.TempDir()
	prompts := texts(40)
	p := writeSample(t, dir, prompts, "")
	out := filepath.Join(dir, "model.jsonl")
	s, err := Open(Options{Samples: []string{p}, Out: out, Classes: []string{"law", "business"}})
	if err != nil {
		t.Fatal(err)
	}
	var inFlight, most atomic.Int32
	var mu sync.Mutex
	asked := map[string]int{}
	ask := func(ctx context.Context, system, prompt string) (Answer, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		mu.Lock()
		asked[prompt]++
		mu.Unlock()
		if !strings.Contains(system, "law, business, other") {
			return Answer{}, errors.New("the instruction does not list the classes")
		}
		switch prompt[len("prompt number ")] % 3 {
		case 0:
			return Answer{Text: " Law ", Tokens: 10}, nil
		case 1:
			return Answer{Text: "I think this is about business.", Tokens: 10}, nil
		}
		return Answer{Text: "other", Tokens: 10}, nil
	}
	st, err := Propose(context.Background(), s, ProposeOptions{Ask: ask, Labeller: "model:judge", Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	if most.Load() > 3 || most.Load() < 1 {
		t.Fatalf("%d calls in flight at most, want 1 to 3", most.Load())
	}
	if st.Asked != 40 || st.Labelled+st.Unsure != 40 || st.Unsure == 0 || st.Labelled == 0 || st.Tokens != 400 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	for p, n := range asked {
		if n != 1 {
			t.Fatalf("%q asked %d times", p, n)
		}
	}
	s.Close()
	labels, err := ReadLabels(out)
	if err != nil {
		t.Fatal(err)
	}
	unsure, err := ReadUnsure(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(labels) != st.Labelled || len(unsure) != st.Unsure {
		t.Fatalf("%d labels and %d not sure on disk; stats %+v", len(labels), len(unsure), st)
	}
	for _, l := range labels {
		if l.Labeller != "model:judge" || (l.Label != "law" && l.Label != "other") {
			t.Fatalf("label %+v", l)
		}
	}
	// Resumed, nothing is left to ask.
	s, err = Open(Options{Samples: []string{p}, Out: out, Classes: []string{"law", "business"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err = Propose(context.Background(), s, ProposeOptions{Ask: ask, Labeller: "model:judge"})
	s.Close()
	if err != nil || st.Asked != 0 {
		t.Fatalf("a second run asked %d (%v)", st.Asked, err)
	}
}

func TestProposeBudgetAndFailures(t *testing.T) {
	dir := t.TempDir()
	p := writeSample(t, dir, texts(20), "")
	open := func(name string) *Session {
		s, err := Open(Options{Samples: []string{p}, Out: filepath.Join(dir, name), Classes: []string{"law"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	// Each call reserves 30 and costs 25: a budget of 100 covers three
	// (the fourth's 30 would pass 100 once three cost 75).
	calls := 0
	st, err := Propose(context.Background(), open("budget.jsonl"), ProposeOptions{Concurrency: 1, MaxTokensTotal: 100,
		Reserve: func(string) int { return 30 },
		Ask: func(context.Context, string, string) (Answer, error) {
			calls++
			return Answer{Text: "law", Tokens: 25}, nil
		}})
	if err != nil || calls != 3 || st.Tokens != 75 || st.Budget != 17 || st.Labelled != 3 {
		t.Fatalf("budget 100: %d calls, stats %+v, %v", calls, st, err)
	}
	// A refusal stops at once, the prompt left pending.
	s := open("refused.jsonl")
	st, err = Propose(context.Background(), s, ProposeOptions{Concurrency: 1,
		Ask: func(context.Context, string, string) (Answer, error) {
			return Answer{}, &StatusError{Code: 401, Message: "invalid API key"}
		}})
	if !errors.Is(err, ErrFailing) || st.Failed != 1 || len(s.Pending()) != 20 {
		t.Fatalf("401: stats %+v, %v, %d pending", st, err, len(s.Pending()))
	}
	// Failures in a row stop after MaxFailures.
	st, err = Propose(context.Background(), open("down.jsonl"), ProposeOptions{Concurrency: 1, MaxFailures: 5,
		Ask: func(context.Context, string, string) (Answer, error) {
			return Answer{}, errors.New("connection refused")
		}})
	if !errors.Is(err, ErrFailing) || st.Failed != 5 {
		t.Fatalf("down: stats %+v, %v", st, err)
	}
}

// TestInstructionDocumented: the instruction docs/own-traffic-workflow.md
// quotes is the one sent, word for word (the classes stand as CLASSES).
func TestInstructionDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "own-traffic-workflow.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "> " + Instruction([]string{"CLASSES"}) + "\n"; !strings.Contains(string(b), want) {
		t.Fatalf("docs/own-traffic-workflow.md does not quote the instruction sent:\n%s", want)
	}
}

// FuzzParseAnswer: a model's answer is a label only when, trimmed, it is
// one of the classes but for case; and then it is that class as named.
func FuzzParseAnswer(f *testing.F) {
	classes := []string{"law", "computer science", "other"}
	for _, s := range []string{"law", " LAW\n", "computer science", "law.", "Law, other", "", "\u212aaw", "[sim] lorem"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		got, ok := ParseAnswer(answer, classes)
		if !ok {
			if got != "" {
				t.Fatalf("ParseAnswer(%q) = %q, false: a refusal names no class", answer, got)
			}
			for _, c := range classes {
				if strings.EqualFold(strings.TrimSpace(answer), c) {
					t.Fatalf("ParseAnswer(%q) refused class %q", answer, c)
				}
			}
			return
		}
		if !slices.Contains(classes, got) || !strings.EqualFold(strings.TrimSpace(answer), got) {
			t.Fatalf("ParseAnswer(%q) = %q", answer, got)
		}
	})
}
