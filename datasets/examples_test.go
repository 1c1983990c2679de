package datasets

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestExamplesSubjects checks the hand-written example set shipped in
// examples/subjects.jsonl: 20 rows for each of the 14 subject classes, no
// other label, unique non-empty texts and ids, and a known realism value.
func TestExamplesSubjects(t *testing.T) {
	classes := []string{
		"math", "computer science", "physics", "chemistry", "biology",
		"engineering", "health", "law", "business", "economics",
		"psychology", "history", "philosophy", "other",
	}
	const perClass = 20
	realism := map[string]bool{"question": true, "request": true, "conversation-turn": true}

	s, err := ReadJSONL(filepath.Join("examples", "subjects.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if want := perClass * len(classes); len(s.Rows) != want {
		t.Errorf("%d rows, want %d", len(s.Rows), want)
	}
	count := map[string]int{}
	for _, c := range classes {
		count[c] = 0
	}
	texts := map[string]int{}
	ids := map[string]int{}
	for i, r := range s.Rows {
		line := i + 1
		if _, ok := count[r.Label]; !ok {
			t.Errorf("line %d: label %q is not one of the 14 classes", line, r.Label)
		} else {
			count[r.Label]++
		}
		if r.Text == "" {
			t.Errorf("line %d: empty text", line)
		}
		if prev, ok := texts[r.Text]; ok {
			t.Errorf("line %d: text repeats line %d: %q", line, prev, r.Text)
		}
		texts[r.Text] = line
		if r.ID == "" {
			t.Errorf("line %d: empty id", line)
		} else if prev, ok := ids[r.ID]; ok {
			t.Errorf("line %d: id %q repeats line %d", line, r.ID, prev)
		}
		ids[r.ID] = line
		if !realism[r.Realism] {
			t.Errorf("line %d: realism %q, want question, request or conversation-turn", line, r.Realism)
		}
		if r.Source != "triage-examples" {
			t.Errorf("line %d: source %q, want triage-examples", line, r.Source)
		}
	}
	for _, c := range classes {
		if count[c] != perClass {
			t.Errorf("class %q has %d rows, want %d", c, count[c], perClass)
		}
	}
}

// TestExamplesMisses checks the known misses: the example set's format, a
// class label, source triage-misses, and no text shared with the example
// set.
func TestExamplesMisses(t *testing.T) {
	m, err := ReadJSONL(filepath.Join("examples", "misses.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadJSONL(filepath.Join("examples", "subjects.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	labels, texts := map[string]bool{}, map[string]bool{}
	for _, r := range s.Rows {
		labels[r.Label], texts[r.Text] = true, true
	}
	if len(m.Rows) == 0 {
		t.Fatal("no rows")
	}
	for i, r := range m.Rows {
		if !labels[r.Label] || r.Text == "" || r.Source != "triage-misses" || !strings.HasPrefix(r.ID, "miss-") || texts[r.Text] {
			t.Errorf("line %d: %+v", i+1, r)
		}
	}
}
