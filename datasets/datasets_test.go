package datasets

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadFormatsAndColumns(t *testing.T) {
	j := write(t, "a.jsonl", `{"text":"one","label":"x","source":"s1","lang":"en"}`+"\n\n"+`{"text":"two","label":"y","source":"s2","n":3}`+"\n")
	s, err := Read(j, Columns{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rows) != 2 || s.Rows[0].Label != "x" || s.Rows[0].Source != "s1" || s.Rows[0].Cols["lang"] != "en" || s.Rows[1].Cols["n"] != "3" || s.SHA256 == "" {
		t.Fatalf("jsonl rows %+v", s.Rows)
	}
	c := write(t, "b.csv", "question,topic,origin\n\"what, exactly?\",law,forum\nplain,math,exam\n")
	s, err = Read(c, Columns{Text: "question", Label: "topic", Source: "origin"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rows) != 2 || s.Rows[0].Text != "what, exactly?" || s.Rows[0].Label != "law" || s.Rows[1].Source != "exam" || s.Rows[1].Cols["origin"] != "exam" {
		t.Fatalf("csv rows %+v", s.Rows)
	}
	if _, err := Read(write(t, "c.csv", "q\nx\n"), Columns{}); err == nil {
		t.Fatal("a CSV without the text column was accepted")
	}
	if _, err := Read(write(t, "d.txt", "x"), Columns{}); err == nil {
		t.Fatal("an unknown extension was accepted")
	}
	if _, err := Read(write(t, "e.jsonl", `{"label":"x"}`+"\n"), Columns{}); err == nil {
		t.Fatal("a row without text was accepted")
	}
}

func TestLabelMapSplitLeakage(t *testing.T) {
	s := &Set{Rows: []Row{{Text: "a", Label: "cs"}, {Text: "b", Label: "drop"}, {Text: "c", Label: "law"}}}
	m, err := ReadLabelMap(write(t, "m.yaml", "cs: computer science\ndrop: \"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := m.Apply(s); n != 1 || len(s.Rows) != 2 || s.Rows[0].Label != "computer science" || s.Rows[1].Label != "law" {
		t.Fatalf("Apply dropped %d: %+v", n, s.Rows)
	}
	big := &Set{}
	for i := range 1000 {
		big.Rows = append(big.Rows, Row{Text: string(rune('a'+i%26)) + string(rune(i))})
	}
	rest, held := Split(big, 0.2)
	rest2, held2 := Split(big, 0.2)
	if len(held.Rows) < 150 || len(held.Rows) > 250 || len(rest.Rows)+len(held.Rows) != 1000 || len(held2.Rows) != len(held.Rows) || len(rest2.Rows) != len(rest.Rows) {
		t.Fatalf("Split: %d held of 1000 (want about 200, the same twice)", len(held.Rows))
	}
	train := &Set{Rows: []Row{{Text: "How do I rebase?"}, {Text: "What is law"}}}
	eval := &Set{Rows: []Row{{Text: "How do I rebase?"}, {Text: "what   is LAW!"}, {Text: "new"}}}
	l := Leakage(train, eval)
	if len(l) != 2 || !l[0].Exact || l[1].Exact || l[1].Text != "what   is LAW!" {
		t.Fatalf("Leakage = %+v", l)
	}
}

func TestEmptyDatasetsAreRefused(t *testing.T) {
	for name, body := range map[string]string{
		"empty.jsonl": "", "blank.jsonl": "\n\n  \n", "header-only.csv": "text,label\n",
	} {
		p := write(t, name, body)
		_, err := Read(p, Columns{})
		if !errors.Is(err, ErrEmpty) || !strings.Contains(err.Error(), p+": no rows: the dataset is empty") {
			t.Errorf("Read(%s) = %v, want ErrEmpty naming the file", name, err)
		}
		if strings.HasSuffix(name, ".jsonl") {
			if _, err := ReadJSONL(p); !errors.Is(err, ErrEmpty) {
				t.Errorf("ReadJSONL(%s) = %v, want ErrEmpty", name, err)
			}
		}
	}
	if _, err := Read(write(t, "empty.csv", ""), Columns{}); err == nil || !strings.Contains(err.Error(), "header") {
		t.Errorf("a CSV without a header: %v", err)
	}
}

func TestColumns(t *testing.T) {
	s, err := Read(write(t, "a.csv", "question,topic\nwhat?,law\n"), Columns{Text: "question"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.Columns, ",") != "question,topic" {
		t.Fatalf("csv Columns = %v", s.Columns)
	}
	s, err = Read(write(t, "a.jsonl", `{"text":"a","topic":"law"}`+"\n"+`{"text":"b","source":"x"}`+"\n"), Columns{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.Columns, ",") != "source,text,topic" {
		t.Fatalf("jsonl Columns = %v", s.Columns)
	}
	_, err = Read(write(t, "b.csv", "q,label\nx,y\n"), Columns{})
	if err == nil || !strings.Contains(err.Error(), `no "text" column to take the text from (its columns: q, label)`) {
		t.Fatalf("csv without the text column: %v", err)
	}
}

// TestCheckLabelled: every row that cannot be fitted on is named by its
// line, all at once.
func TestCheckLabelled(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mine.jsonl")
	body := `{"text": "how do I sue my landlord", "label": "law"}
{"text": "integrate x squared", "label": "math"}

{"text": "   ", "label": "law"}
{"text": "what is a tort", "label": "lawyering"}
{"text": "integrate x squared ", "label": "math"}
{"text": "how do I sue my landlord", "label": "other"}
{"text": "a fine question", "label": "other"}
`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := Read(p, Columns{})
	if err != nil {
		t.Fatal(err)
	}
	err = set.CheckLabelled([]string{"law", "math", "other"}, 10)
	if err == nil {
		t.Fatal("a file with a blank text, an unknown label and two repeated texts passed")
	}
	want := []string{
		p + `:4: blank text`,
		p + `:5: label "lawyering" is not a class (law, math, other)`,
		p + `:6: the text of line 2 again`,
		p + `:7: the text of line 1 again`,
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Fatalf("CheckLabelled:\n%s\nwant\n%s", err, strings.Join(want, "\n"))
	}
	// At most max listed, then how many more.
	err = set.CheckLabelled([]string{"law", "math", "other"}, 1)
	if got := strings.Split(err.Error(), "\n"); len(got) != 2 || got[1] != p+": and 3 more" {
		t.Fatalf("max 1:\n%s", err)
	}
	// A clean file passes.
	clean := &Set{Path: p, Rows: set.Rows[:2]}
	if err := clean.CheckLabelled([]string{"law", "math"}, 10); err != nil {
		t.Fatal(err)
	}
	// A CSV row's line is where its record starts, a quoted field spanning
	// lines or not.
	c := filepath.Join(dir, "mine.csv")
	if err := os.WriteFile(c, []byte("text,label\n\"two\nlines\",law\nagain,law\n\"two\nlines\",math\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs, err := Read(c, Columns{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CheckLabelled([]string{"law", "math"}, 10); err == nil || err.Error() != c+":5: the text of line 2 again" {
		t.Fatalf("CSV: %v", err)
	}
}
