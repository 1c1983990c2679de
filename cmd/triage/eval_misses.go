package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"

	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/internal/atomicfile"
)

// missesFlagHelp is eval's --misses help.
const missesFlagHelp = "also write every item decided wrongly to this JSONL file: its text, label, where it went (route, class, score, tier, reason) and where its label belongs (label_route), with its other columns, to read what the classifier gets wrong"

// miss is one line of eval's --misses file.
type miss struct {
	Text       string            `json:"text"`
	Label      string            `json:"label"`
	LabelRoute string            `json:"label_route,omitempty"`
	Route      string            `json:"route,omitempty"`
	Pool       string            `json:"pool,omitempty"`
	Class      string            `json:"class"`
	Score      float32           `json:"score"`
	Tier       int               `json:"tier"`
	Reason     string            `json:"reason,omitempty"`
	Routed     bool              `json:"routed"`
	Cols       map[string]string `json:"cols,omitempty"`
}

// writeMisses writes the items out got wrong to path, one JSON object a
// line, in the dataset's order; it returns how many it wrote.
func writeMisses(path string, items []evaluation.Item, out []evaluation.Outcome) (int, error) {
	if len(items) != len(out) {
		return 0, fmt.Errorf("--misses: %d outcomes for %d items", len(out), len(items))
	}
	n := 0
	err := atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		n = 0
		for i, o := range out {
			if o.Correct {
				continue
			}
			m := miss{
				Text: items[i].Text, Label: o.Label, LabelRoute: o.LabelRoute,
				Route: o.Route, Pool: o.Pool, Class: o.Pred, Score: o.Score,
				Tier: o.Tier, Reason: o.Reason, Routed: o.Routed,
			}
			if len(items[i].Cols) > 0 {
				m.Cols = maps.Clone(items[i].Cols)
				for _, k := range []string{"text", "label"} {
					delete(m.Cols, k)
				}
			}
			if err := enc.Encode(&m); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("--misses: %w", err)
	}
	return n, nil
}

// missesOf writes --misses, when asked, and says so on stderr.
func (f *evalFlags) missesOf(items []evaluation.Item, out []evaluation.Outcome, stderr io.Writer) error {
	if f.misses == "" {
		return nil
	}
	n, err := writeMisses(f.misses, items, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "eval: wrote %d misses of %d items to %s\n", n, len(items), f.misses)
	return nil
}
