package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestEvalMissesCLI: --misses writes exactly the items the report counts
// wrong, each with its text as in the data, its label and where it went,
// in rules mode and in tier mode.
func TestEvalMissesCLI(t *testing.T) {
	heads, models := defaultHeadsOrSkip(t)
	t.Setenv("TRIAGE_MODELS", models)
	data := filepath.Join(repoRoot(), "datasets", "examples", "subjects.jsonl")
	texts := map[string]string{}
	f, err := os.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct{ Text, Label string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		texts[r.Text] = r.Label
	}
	f.Close()
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"rules", []string{"--rules", filepath.Join(repoRoot(), "rules.yaml"), "--config", filepath.Join(repoRoot(), "triage.yaml")}},
		{"tier 1", []string{"--heads", heads, "--models", models}},
	} {
		misses := filepath.Join(t.TempDir(), "misses.jsonl")
		var out, errb bytes.Buffer
		args := append(append([]string{}, mode.args...), "--data", data, "--json", "--misses", misses)
		if err := runEval(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("%s: %v\n%s", mode.name, err, errb.String())
		}
		var r struct {
			N        int     `json:"n"`
			Accuracy float64 `json:"accuracy"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(misses)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
		want := r.N - int(math.Round(r.Accuracy*float64(r.N)))
		if want == 0 || len(lines) != want {
			t.Fatalf("%s: %d misses written, the report counts %d wrong of %d", mode.name, len(lines), want, r.N)
		}
		for _, l := range lines {
			var m miss
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("%s: %s: %v", mode.name, l, err)
			}
			label, ok := texts[m.Text]
			if !ok || label != m.Label || m.Class == "" || m.Tier < 1 || m.Cols["source"] == "" {
				t.Fatalf("%s: miss %+v: not an item of the data as it was (label %q, found %v)", mode.name, m, label, ok)
			}
			if mode.name == "tier 1" && m.Class == m.Label {
				t.Fatalf("tier 1: %q counted wrong with its label as the top class", m.Text)
			}
		}
	}
}
