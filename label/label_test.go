package label

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/sample"
)

// writeSample writes sample records for texts: even ones routed to
// "legal" (class law), odd ones to the default pool; tail is appended
// after the last newline.
func writeSample(t testing.TB, dir string, texts []string, tail string) string {
	t.Helper()
	var b strings.Builder
	for i, text := range texts {
		rec := sample.Record{Time: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC), Text: text, RulesVersion: "v1",
			Tiers: map[string][]classifier.Scored{"1": {{Class: "law", Score: 0.6}}, "2": {{Class: "law", Score: 0.8}, {Class: "business", Score: 0.1}}}}
		if i%2 == 0 {
			rec.Decision = rules.Decision{Pool: "legal", Route: "legal", Class: "law", Score: 0.8, Tier: 2, Reason: rules.ReasonBelowFloor}
			rec.RouteClasses = []string{"law"}
		} else {
			rec.Decision = rules.Decision{Pool: "general", Class: "other", Score: 0.7, Tier: 1, Reason: rules.ReasonDefault}
		}
		line, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString(tail)
	p := filepath.Join(dir, "sample.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func texts(n int) []string {
	var out []string
	for i := range n {
		out = append(out, "prompt number "+string(rune('a'+i%26))+strings.Repeat("!", i/26))
	}
	return out
}

func TestReadSamplesCutShort(t *testing.T) {
	dir := t.TempDir()
	p := writeSample(t, dir, []string{"one", "two", "one", "three"}, `{"time":"2026-05-01T10:00:00Z","text":"fou`)
	items, rd, err := ReadSamples(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || rd.Records != 4 || rd.Duplicates != 1 || len(rd.Cut) != 1 || rd.Cut[0] != p {
		t.Fatalf("ReadSamples = %d items, %+v; want 3 items of 4 records, 1 repeated, %s cut", len(items), rd, p)
	}
	if !slices.IsSortedFunc(items, func(a, b Item) int { return strings.Compare(a.ID, b.ID) }) {
		t.Error("items are not in the order of their ids")
	}
	for _, it := range items {
		if it.ID != TextID(it.Text) || len(it.Suggestions) != 2 || it.Suggestions[0].Tier != 2 || it.Suggestions[0].Class != "law" {
			t.Errorf("item %+v: want its id and tier 2's suggestions", it)
		}
	}

	// A whole line that is not a record is refused, with where it is.
	os.WriteFile(p, []byte("{\"text\":\"fine\"}\nnot json\n"), 0o600)
	if _, _, err := ReadSamples(p); err == nil || !strings.Contains(err.Error(), p+":2:") {
		t.Errorf("ReadSamples(bad line 2) = %v, want an error naming %s:2", err, p)
	}
}

func openSession(t *testing.T, samplePath, out string) *Session {
	t.Helper()
	s, err := Open(Options{Samples: []string{samplePath}, Out: out, Classes: []string{"law", "business"}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readLabels(t *testing.T, out string) []Labelled {
	t.Helper()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var ls []Labelled
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var l Labelled
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		ls = append(ls, l)
	}
	return ls
}

// TestSessionLabelUndoResume: labels go to the file as they are made,
// undo takes back the last one (a label, a "not sure" or a skip), and a
// new session goes on where the last stopped, its undo included.
func TestSessionLabelUndoResume(t *testing.T) {
	dir := t.TempDir()
	sp := writeSample(t, dir, texts(6), "")
	out := filepath.Join(dir, "labels.jsonl")
	s := openSession(t, sp, out)
	cur := func(s *Session) *Item { return s.State().Item }

	first := cur(s)
	if err := s.Label(first.ID, "law"); err != nil {
		t.Fatal(err)
	}
	if err := s.Label(first.ID, "law"); !errors.Is(err, ErrStale) {
		t.Errorf("labelling a prompt no longer shown: %v, want ErrStale", err)
	}
	second := cur(s)
	if err := s.Unsure(second.ID); err != nil {
		t.Fatal(err)
	}
	third := cur(s)
	if err := s.Skip(third.ID); err != nil {
		t.Fatal(err)
	}
	fourth := cur(s)
	if err := s.Label(fourth.ID, "nope"); err == nil {
		t.Error("a label that is not a class was taken")
	}
	if err := s.Label(fourth.ID, "business"); err != nil {
		t.Fatal(err)
	}
	if ls := readLabels(t, out); len(ls) != 2 || ls[0].Text != first.Text || ls[0].Label != "law" || ls[0].Source != "traffic" || ls[1].Label != "business" {
		t.Fatalf("labels file = %+v", ls)
	}
	if st := s.State(); st.Labelled != 2 || st.Unsure != 1 || st.Skipped != 1 || st.Left != 3 || st.Classes[0] != (ClassCount{"law", "1", 1}) {
		t.Errorf("state = %+v", st)
	}
	// Undo the label, then the skip: the fourth and third come back.
	for _, want := range []*Item{fourth, third} {
		if ok, err := s.Undo(); !ok || err != nil {
			t.Fatalf("Undo = %v, %v", ok, err)
		}
		if got := cur(s); got.ID != want.ID {
			t.Errorf("after undo, showing %q, want %q", got.Text, want.Text)
		}
	}
	if ls := readLabels(t, out); len(ls) != 1 {
		t.Fatalf("after undo the file holds %d labels, want 1", len(ls))
	}

	// A second process on the same file is refused.
	if _, err := Open(Options{Samples: []string{sp}, Out: out, Classes: []string{"law"}}); !errors.Is(err, ErrLocked) {
		t.Errorf("a second Open = %v, want ErrLocked", err)
	}
	if err := s.Label(third.ID, "law"); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// A label the process died writing (a line with no end) is cut off.
	f, _ := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"text":"half a li`)
	f.Close()
	s = openSession(t, sp, out)
	defer s.Close()
	st := s.State()
	if st.Labelled != 2 || st.Unsure != 1 || st.Left != 3 {
		t.Fatalf("resumed state = %+v", st)
	}
	if got := cur(s); got.ID == first.ID || got.ID == second.ID || got.ID == third.ID {
		t.Errorf("resumed on %q, which is labelled or marked", got.Text)
	}
	// Undo after the restart takes back the last label of the last session.
	if ok, err := s.Undo(); !ok || err != nil {
		t.Fatalf("Undo = %v, %v", ok, err)
	}
	if got := cur(s); got.ID != third.ID {
		t.Errorf("undo after resume shows %q, want %q", got.Text, third.Text)
	}
	if ok, _ := s.Undo(); !ok || cur(s).ID != second.ID || s.State().Unsure != 0 {
		t.Errorf("second undo after resume: showing %q, %d not sure; want %q, 0", cur(s).Text, s.State().Unsure, second.Text)
	}
	if ls := readLabels(t, out); len(ls) != 1 || ls[0].ID != first.ID {
		t.Errorf("labels file after undo = %+v", ls)
	}
	// What eval and calibrate read.
	ds, err := datasets.ReadJSONL(out)
	if err != nil || len(ds.Rows) != 1 || ds.Rows[0].Text != first.Text || ds.Rows[0].Label != "law" || ds.Rows[0].Source != "traffic" {
		t.Errorf("datasets.ReadJSONL(labels) = %+v, %v", ds, err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("labels file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
}

// TestResumeRefusesBadLabels: a labels file with a label that is not a
// class, or an item labelled twice, is refused with its lines.
func TestResumeRefusesBadLabels(t *testing.T) {
	dir := t.TempDir()
	sp := writeSample(t, dir, texts(2), "")
	out := filepath.Join(dir, "labels.jsonl")
	os.WriteFile(out, []byte(`{"text":"a","label":"law"}
{"text":"b","label":"cooking"}
{"text":"a","label":"business"}
`), 0o600)
	_, err := Open(Options{Samples: []string{sp}, Out: out, Classes: []string{"law", "business"}})
	for _, want := range []string{out + `:2: label "cooking" is not one of the classes`, out + `:3: prompt ` + TextID("a") + ` is labelled again (first on line 1)`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open = %v, want %q", err, want)
		}
	}
}

func TestPrecisionHint(t *testing.T) {
	p := Precision{Routed: 100, Right: 90, RoutedRate: 0.5}
	p.fill(0.03)
	lo, hi := 0.8256, 0.9448 // the Wilson interval for 90 of 100
	if math.Abs(p.Low-lo) > 1e-3 || math.Abs(p.High-hi) > 1e-3 || p.Estimate != 0.9 {
		t.Errorf("90/100: %.4f (%.4f-%.4f), want 0.9 (%.4f-%.4f)", p.Estimate, p.Low, p.High, lo, hi)
	}
	// n = 1.96²·0.9·0.1/0.03² = 384.1 → 385; 285 more routed, at half
	// the sample routed: 570 labels.
	if p.Needed != 385 || p.More != 570 {
		t.Errorf("needed %d more %d, want 385 and 570", p.Needed, p.More)
	}
	// Under 30 routed labels the estimate is not trusted: p = 0.5.
	p = Precision{Routed: 10, Right: 10, RoutedRate: 1}
	p.fill(0.03)
	if p.Needed != 1068 || p.More != 1058 {
		t.Errorf("10/10: needed %d more %d, want 1068 and 1058", p.Needed, p.More)
	}
	p = Precision{Routed: 400, Right: 360, RoutedRate: 0.3}
	p.fill(0.03)
	if p.More != 0 {
		t.Errorf("360/400: %d more, want 0 (385 needed)", p.More)
	}
}
