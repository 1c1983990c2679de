package training

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/static"
)

// Training tier 1 computes its class centroids (by default of the rows
// that are not exam questions), even when the head folds into the table;
// the loaded model then reports distances. AddCentroids gives an artifact
// trained without them the same centroids from the same data, and
// refuses other data.
func TestTier1Centroids(t *testing.T) {
	f := newFixture(t, true)
	// A third of the rows become exam questions.
	b, err := os.ReadFile(f.data)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := range lines {
		if i%3 == 0 {
			lines[i] = strings.Replace(lines[i], `"realism":"synthetic"`, `"realism":"exam"`, 1)
		}
	}
	if err := os.WriteFile(f.data, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(f.dir, "heads")
	o := f.tier1(out)
	o.Ensemble = 1 // one model, folded by static.New: the centroids need its vectors all the same
	res, err := Tier1(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Heads.Tier1.Centroids
	fitted := res.Heads.Tier1.Training.Rows
	if c == nil || c.Rows != classifier.CentroidRowsUser || c.Fit["data_sha256"] != res.Heads.Tier1.Training.DataSHA256 {
		t.Fatalf("centroids %+v", c)
	}
	if n, _ := strconv.Atoi(c.Fit["rows"]); n == 0 || n >= fitted {
		t.Fatalf("centroids of %s rows of the %d fitted: want the ones not exam questions", c.Fit["rows"], fitted)
	}
	h, err := classifier.LoadHeads(out)
	if err != nil {
		t.Fatal(err)
	}
	m, err := static.Load(h, filepath.Dir(f.tokenizer))
	if err != nil {
		t.Fatal(err)
	}
	var r classifier.Result
	if m.Classify(context.Background(), "what about my guitar chord", &r); r.Distance <= 0 || r.Distance >= 2 {
		t.Fatalf("loaded tier 1: distance %v", r.Distance)
	}

	// The same artifact without them, completed.
	h.Tier1.Centroids = nil
	if err := h.Save(out); err != nil {
		t.Fatal(err)
	}
	added, err := AddCentroids(AddCentroidsOptions{Dir: out, ModelsDir: filepath.Dir(f.tokenizer), Data: f.data})
	if err != nil {
		t.Fatal(err)
	}
	if a := added.Tier1.Centroids; !slices.Equal(a.W, c.W) || a.Fit["rows"] != c.Fit["rows"] || added.Version != res.Heads.Version+"+centroids" {
		t.Fatalf("added centroids %+v (version %s), trained %+v", a, added.Version, c)
	}
	if back, err := classifier.LoadHeads(out); err != nil || back.Tier1.Centroids == nil || back.Tier1.Head.Temperature != res.Heads.Tier1.Head.Temperature {
		t.Fatalf("saved: %v %+v", err, back)
	}
	all, err := AddCentroids(AddCentroidsOptions{Dir: out, ModelsDir: filepath.Dir(f.tokenizer), Data: f.data, Rows: classifier.CentroidRowsAll})
	if err != nil || all.Tier1.Centroids.Fit["rows"] != strconv.Itoa(fitted) || all.Version != added.Version {
		t.Fatalf("all rows: %v, %+v", err, all.Tier1.Centroids)
	}
	// Other data than the artifact was trained on.
	other := filepath.Join(f.dir, "other.jsonl")
	if err := os.WriteFile(other, []byte(strings.Join(lines[1:], "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := AddCentroids(AddCentroidsOptions{Dir: out, ModelsDir: filepath.Dir(f.tokenizer), Data: other}); err == nil || !strings.Contains(err.Error(), "was trained on train.jsonl (sha256") {
		t.Fatalf("AddCentroids from other data: %v", err)
	}
}
