package label

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
)

// ReadLabels reads a labels file (the standard labelled JSONL, as the page
// and Propose write it); a row without an id takes its text's.
func ReadLabels(path string) ([]Labelled, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Labelled
	err = readLines(f, func(n int, line []byte, whole bool) error {
		if len(bytes.TrimSpace(line)) == 0 {
			return nil
		}
		var l Labelled
		if err := json.Unmarshal(line, &l); err != nil {
			if !whole {
				return nil // a line being written
			}
			return fmt.Errorf("%s:%d: not a label: %v", path, n, err)
		}
		if l.ID == "" {
			l.ID = TextID(l.Text)
		}
		out = append(out, l)
		return nil
	})
	return out, err
}

// Agreement compares a model's labels with a person's on the prompts both
// labelled (matched by id), and counts the person's labels the model was
// not sure of or did not label.
type Agreement struct {
	// Both is the number of prompts both labelled; Agree those they gave
	// the same label; Raw is Agree/Both.
	Both  int     `json:"both"`
	Agree int     `json:"agree"`
	Raw   float64 `json:"raw"`
	// Kappa is Cohen's kappa: (Raw − Pe)/(1 − Pe), Pe the agreement two
	// labellers with these class shares would reach by chance. 1 is
	// perfect, 0 chance; 0 too when Pe is 1 (one class only).
	Kappa float64 `json:"kappa"`
	// Unsure counts the person's labels the model marked not sure;
	// Missing those it has no mark for.
	Unsure  int `json:"model_unsure"`
	Missing int `json:"model_missing"`
	// Classes are per class of the person's labels, in name order.
	Classes []ClassAgreement `json:"classes"`
}

// ClassAgreement is one class: the prompts the person gave it that the
// model labelled too, those the model gave the same class (Agree/Human:
// the model's recall of it), and the prompts the model gave it
// (Agree/Model: its precision).
type ClassAgreement struct {
	Class string  `json:"class"`
	Human int     `json:"human"`
	Model int     `json:"model"`
	Agree int     `json:"agree"`
	Rate  float64 `json:"agreement"`
}

// Agree measures model's labels against human's; unsure are the ids the
// model marked not sure.
func Agree(human, model []Labelled, unsure map[string]bool) Agreement {
	byID := map[string]string{}
	for _, l := range model {
		byID[l.ID] = l.Label
	}
	var a Agreement
	hc, mc, agree := map[string]int{}, map[string]int{}, map[string]int{}
	for _, h := range human {
		m, ok := byID[h.ID]
		switch {
		case ok:
		case unsure[h.ID]:
			a.Unsure++
			continue
		default:
			a.Missing++
			continue
		}
		a.Both++
		hc[h.Label]++
		mc[m]++
		if m == h.Label {
			a.Agree++
			agree[h.Label]++
		}
	}
	if a.Both == 0 {
		return a
	}
	n := float64(a.Both)
	a.Raw = float64(a.Agree) / n
	var pe float64
	var classes []string
	for c := range hc {
		classes = append(classes, c)
	}
	for c := range mc {
		if hc[c] == 0 {
			classes = append(classes, c)
		}
	}
	slices.Sort(classes)
	for _, c := range classes {
		pe += float64(hc[c]) / n * float64(mc[c]) / n
		ca := ClassAgreement{Class: c, Human: hc[c], Model: mc[c], Agree: agree[c]}
		if ca.Human > 0 {
			ca.Rate = float64(ca.Agree) / float64(ca.Human)
		}
		a.Classes = append(a.Classes, ca)
	}
	if pe < 1 {
		a.Kappa = (a.Raw - pe) / (1 - pe)
	}
	return a
}

// ReadUnsure reads the ids a labels file's PATH.unsure marks not sure; no
// file is none.
func ReadUnsure(labelsPath string) (map[string]bool, error) {
	out := map[string]bool{}
	f, err := os.Open(labelsPath + ".unsure")
	if os.IsNotExist(err) {
		return out, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	err = readLines(f, func(n int, line []byte, whole bool) error {
		var u unsureLine
		if err := json.Unmarshal(line, &u); err != nil || u.ID == "" {
			if !whole {
				return nil
			}
			return fmt.Errorf("%s.unsure:%d: not a mark", labelsPath, n)
		}
		out[u.ID] = true
		return nil
	})
	return out, err
}
