package datasets

import (
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	yaml "go.yaml.in/yaml/v3"
)

// Columns maps a file's columns to a row's fields (CSV headers or JSON
// keys). Empty names take the defaults: text, label, source, realism, id.
type Columns struct {
	Text, Label, Source, Realism, ID string
}

func (c Columns) withDefaults() Columns {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Text, "text")
	def(&c.Label, "label")
	def(&c.Source, "source")
	def(&c.Realism, "realism")
	def(&c.ID, "id")
	return c
}

// Read reads a dataset by its extension: .jsonl (one object per line) or
// .csv (a header row), mapping columns. Every column is kept in Row.Cols,
// for slicing reports by any of them.
func Read(path string, cols Columns) (*Set, error) {
	cols = cols.withDefaults()
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv":
		return readCSV(path, cols)
	case ".jsonl", ".json", ".ndjson":
		return readJSONL(path, cols)
	}
	return nil, fmt.Errorf("%s: unknown dataset format (want .jsonl or .csv)", path)
}

func readJSONL(path string, cols Columns) (*Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	set := &Set{Path: path, SHA256: hex.EncodeToString(sum[:])}
	seen := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		keys := keysOf(m)
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				set.Columns = append(set.Columns, k)
			}
		}
		r, err := rowFrom(func(k string) string { return str(m[k]) }, cols, keys)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		r.Line = i + 1
		set.Rows = append(set.Rows, r)
	}
	if len(set.Rows) == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrEmpty)
	}
	sort.Strings(set.Columns)
	return set, nil
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

func rowFrom(get func(string) string, cols Columns, keys []string) (Row, error) {
	r := Row{Text: get(cols.Text), Label: get(cols.Label), Source: get(cols.Source), Realism: get(cols.Realism), ID: get(cols.ID)}
	if r.Text == "" {
		return r, fmt.Errorf("empty %q column", cols.Text)
	}
	r.Cols = map[string]string{}
	for _, k := range keys {
		if v := get(k); v != "" && k != cols.Text {
			r.Cols[k] = v
		}
	}
	return r, nil
}

func readCSV(path string, cols Columns) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	cr := csv.NewReader(io.TeeReader(f, h))
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	pos := map[string]int{}
	for i, k := range header {
		pos[strings.TrimSpace(k)] = i
	}
	if _, ok := pos[cols.Text]; !ok {
		return nil, fmt.Errorf("%s: no %q column to take the text from (its columns: %s)", path, cols.Text, strings.Join(header, ", "))
	}
	set := &Set{Path: path}
	for _, k := range header {
		set.Columns = append(set.Columns, strings.TrimSpace(k))
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err) // a csv.ParseError names the line
		}
		get := func(k string) string {
			if i, ok := pos[k]; ok && i < len(rec) {
				return rec[i]
			}
			return ""
		}
		line, _ := cr.FieldPos(0) // a quoted field may span lines
		r, err := rowFrom(get, cols, header)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		r.Line = line
		set.Rows = append(set.Rows, r)
	}
	if len(set.Rows) == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrEmpty)
	}
	set.SHA256 = hex.EncodeToString(h.Sum(nil))
	return set, nil
}

// LabelMap renames labels: a dataset's own labels to the classes of the
// heads being judged. Labels mapped to "" drop their rows.
type LabelMap map[string]string

// ReadLabelMap reads a JSON or YAML mapping of label to label.
func ReadLabelMap(path string) (LabelMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]string
	if err := yaml.Unmarshal(b, &m); err != nil { // YAML is a superset of JSON
		return nil, fmt.Errorf("%s: want a mapping of label to label: %w", path, err)
	}
	return LabelMap(m), nil
}

// Apply maps every row's label; labels not in the map stay, labels mapped
// to "" are dropped. It reports how many rows were dropped.
func (m LabelMap) Apply(s *Set) int {
	kept := s.Rows[:0]
	for _, r := range s.Rows {
		if to, ok := m[r.Label]; ok {
			if to == "" {
				continue
			}
			r.Label = to
		}
		kept = append(kept, r)
	}
	dropped := len(s.Rows) - len(kept)
	s.Rows = kept
	return dropped
}

// Split divides rows deterministically by a hash of their text (and id):
// about share of them go to the second set. The same rows always land on
// the same side.
func Split(s *Set, share float64) (rest, held *Set) {
	rest, held = &Set{Path: s.Path, SHA256: s.SHA256}, &Set{Path: s.Path, SHA256: s.SHA256}
	for _, r := range s.Rows {
		h := fnv.New64a()
		h.Write([]byte(r.ID))
		h.Write([]byte{0})
		h.Write([]byte(r.Text))
		if float64(h.Sum64()%1_000_000)/1e6 < share {
			held.Rows = append(held.Rows, r)
		} else {
			rest.Rows = append(rest.Rows, r)
		}
	}
	return rest, held
}

// Normalize is how leakage is judged after normalisation: lowercase,
// letters and digits only, single spaces.
func Normalize(s string) string {
	var b strings.Builder
	space := false
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(r)
		} else {
			space = true
		}
	}
	return b.String()
}

// Leak is an evaluation text found in the training data.
type Leak struct {
	Text  string
	Exact bool // the same text; otherwise the same after Normalize
}

// Leakage lists the evaluation texts that appear in train, exactly or after
// normalisation.
func Leakage(train, eval *Set) []Leak {
	exact := map[string]bool{}
	norm := map[string]bool{}
	for _, r := range train.Rows {
		exact[r.Text] = true
		norm[Normalize(r.Text)] = true
	}
	var out []Leak
	for _, r := range eval.Rows {
		switch {
		case exact[r.Text]:
			out = append(out, Leak{Text: r.Text, Exact: true})
		case norm[Normalize(r.Text)]:
			out = append(out, Leak{Text: r.Text})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Exact && !out[j].Exact })
	return out
}

// CheckLabelled reports every row of a labelled set that cannot be used
// to judge or fit with these classes, at once, each with its line: a
// label not among the classes, a text that is blank, and a text seen on
// an earlier line (after trimming spaces: a duplicate counts twice, and
// one with two labels contradicts itself). At most max problems are
// listed, then how many more there are; nil when there are none.
func (s *Set) CheckLabelled(classes []string, max int) error {
	known := map[string]bool{}
	for _, c := range classes {
		known[c] = true
	}
	var errs []error
	more := 0
	add := func(r Row, format string, a ...any) {
		if len(errs) < max {
			errs = append(errs, fmt.Errorf("%s:%d: "+format, append([]any{s.Path, r.Line}, a...)...))
		} else {
			more++
		}
	}
	first := map[string]int{} // text to the line it was first seen on
	for _, r := range s.Rows {
		text := strings.TrimSpace(r.Text)
		switch {
		case text == "":
			add(r, "blank text")
			continue
		case r.Label == "":
			add(r, "no label")
		case !known[r.Label]:
			add(r, "label %q is not a class (%s)", r.Label, strings.Join(classes, ", "))
		}
		if l, ok := first[text]; ok {
			add(r, "the text of line %d again", l)
		} else {
			first[text] = r.Line
		}
	}
	if more > 0 {
		errs = append(errs, fmt.Errorf("%s: and %d more", s.Path, more))
	}
	return errors.Join(errs...)
}
