package label

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/rules"
)

// Item is one prompt to label.
type Item struct {
	// ID is the first 16 hex digits of the text's SHA-256: the same text
	// is one item, and labels find their item again on resume.
	ID        string         `json:"id"`
	Text      string         `json:"text"`
	Truncated bool           `json:"truncated,omitempty"`
	Decision  rules.Decision `json:"decision"`
	// RouteClasses are the classes the decision's route takes: a label
	// among them means the gateway routed the prompt right.
	RouteClasses []string `json:"route_classes,omitempty"`
	// Suggestions are tier 2's top classes when the record has them,
	// else tier 1's.
	Suggestions []Suggestion `json:"suggestions,omitempty"`
}

// Suggestion is a tier's verdict on a class.
type Suggestion struct {
	Class string  `json:"class"`
	Score float32 `json:"score"`
	Tier  int     `json:"tier"`
}

// record is what is read of a sample line: package sample's Record, or
// any JSONL line with a "text" (a dataset to relabel).
type record struct {
	Text         string                         `json:"text"`
	Truncated    bool                           `json:"truncated"`
	Decision     rules.Decision                 `json:"decision"`
	RouteClasses []string                       `json:"route_classes"`
	Tiers        map[string][]classifier.Scored `json:"tiers"`
}

// TextID is an item's id for text.
func TextID(text string) string {
	h := sha256.Sum256([]byte(text))
	return hex.EncodeToString(h[:8])
}

// Read is what ReadSamples found besides the items.
type Read struct {
	Records    int // whole records read
	Duplicates int // records whose text an earlier one had
	Empty      int // records with an empty text
	// Cut names a file whose last line had no end (a file being written,
	// or cut short): it was left out.
	Cut []string
}

// ReadSamples reads the sample files in turn: each line one record, each
// text one item (the first record of a text is kept). A file's last line
// without a newline is a record cut short, and is left out (Read.Cut); a
// whole line that is not a record is an error naming the file and line.
// Items come in the order of their ids: a shuffle that is the same on
// every run, so a session stopped early has labelled a random subset.
func ReadSamples(paths ...string) ([]Item, Read, error) {
	var rd Read
	seen := map[string]bool{}
	var items []Item
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, rd, err
		}
		err = readLines(f, func(n int, line []byte, whole bool) error {
			if !whole {
				rd.Cut = append(rd.Cut, p)
				return nil
			}
			if len(bytes.TrimSpace(line)) == 0 {
				return nil
			}
			var r record
			if err := json.Unmarshal(line, &r); err != nil {
				return fmt.Errorf("%s:%d: not a sample record: %v", p, n, err)
			}
			rd.Records++
			if strings.TrimSpace(r.Text) == "" {
				rd.Empty++
				return nil
			}
			id := TextID(r.Text)
			if seen[id] {
				rd.Duplicates++
				return nil
			}
			seen[id] = true
			items = append(items, r.item(id))
			return nil
		})
		f.Close()
		if err != nil {
			return nil, rd, err
		}
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].ID < items[j].ID })
	return items, rd, nil
}

func (r *record) item(id string) Item {
	it := Item{ID: id, Text: r.Text, Truncated: r.Truncated, Decision: r.Decision, RouteClasses: r.RouteClasses}
	tier := 2
	top := r.Tiers["2"]
	if len(top) == 0 {
		tier, top = 1, r.Tiers["1"]
	}
	for _, s := range top {
		it.Suggestions = append(it.Suggestions, Suggestion{Class: s.Class, Score: s.Score, Tier: tier})
	}
	return it
}

// readLines calls fn for each line of r (without its newline), numbered
// from 1; whole is false for a last line with no newline.
func readLines(r io.Reader, fn func(n int, line []byte, whole bool) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			whole := line[len(line)-1] == '\n'
			if whole {
				line = line[:len(line)-1]
			}
			if ferr := fn(n, line, whole); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
