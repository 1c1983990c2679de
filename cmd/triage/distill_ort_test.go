//go:build ort

package main

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/distill"
	"github.com/triagegw/triage/models/sif"
	"github.com/triagegw/triage/models/vocab"
)

// useModels returns the models directory when it holds Universal Sentence
// Encoder lite, the ONNX runtime and the tier-1 tokenizer; otherwise the
// test is skipped (or failed, see testenv.Models).
func useModels(t *testing.T) string {
	t.Helper()
	return testenv.Models(t, "use/model.onnx", "ort/libonnxruntime.so.1", "tokenizer/bert-base-uncased.json")
}

// TestDistillCommand distills the first 200 tokens of bert-base-uncased
// from USE lite through the command and reads the table back.
func TestDistillCommand(t *testing.T) {
	mdir := useModels(t)
	out := filepath.Join(t.TempDir(), "d.tbl")
	var stdout, stderr bytes.Buffer
	err := runDistill(context.Background(), []string{"--teacher", filepath.Join(mdir, "use"), "--models", mdir,
		"--out", out, "--dims", "16", "--limit", "200", "--quant", "i8", "--threads", "2"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	tab, err := models.ReadTable(out)
	if err != nil {
		t.Fatal(err)
	}
	vocab, sum, err := vocab.ReadFile(filepath.Join(mdir, "tokenizer", "bert-base-uncased.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := tab.Manifest
	if tab.VocabSize() != len(vocab) || tab.Rows() != len(vocab) || tab.Dims() != 16 || tab.Quant() != models.QuantI8 ||
		m.Method != "distill" || m.TokenizerSHA256 != sum || m.Name != "distill-use-lite-16d" || !strings.Contains(m.Source, "use-lite") {
		t.Fatalf("table %d rows (vocab %d) x %d %s, manifest %+v", tab.Rows(), tab.VocabSize(), tab.Dims(), tab.Quant(), m)
	}
	weighted := 0
	for r := range tab.Rows() {
		if tab.Weight(int32(r)) > 0 {
			weighted++
		}
	}
	if weighted != 200 {
		t.Errorf("%d rows with a weight, want the 200 distilled", weighted)
	}
	for _, tok := range []int32{0, 100, 101, 102, 103} { // [PAD] [UNK] [CLS] [SEP] [MASK]
		if tab.Weight(tok) != 0 {
			t.Errorf("special row %d (%s) has weight %v", tok, vocab[tok], tab.Weight(tok))
		}
	}
	if !strings.Contains(stdout.String(), "wrote "+out) {
		t.Errorf("stdout %q", stdout.String())
	}
}

// TestDistillUSENeighbours distills a small vocabulary from USE lite with
// distill.Table and checks that the static vectors keep the teacher's
// sense of similarity.
func TestDistillUSENeighbours(t *testing.T) {
	mdir := useModels(t)
	m, err := onnx.Open(filepath.Join(mdir, "use"), mdir, onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	vocab := []string{"[PAD]", "[UNK]", "cat", "dog", "kitten", "puppy", "algebra", "equation", "calculus",
		"court", "lawyer", "judge", "protein", "enzyme", "cell", "guitar", "piano", "violin", "##s"}
	embed := func(ctx context.Context, s string) ([]float32, error) { return m.Features(ctx, s, nil) }
	tab, err := distill.Table(context.Background(), vocab, embed, distill.Options{Dims: 12})
	if err != nil {
		t.Fatal(err)
	}
	row := map[string]int32{}
	for i, w := range vocab {
		row[w] = int32(i)
	}
	nearest := func(w string) string {
		v := tab.Vector(row[w], nil)
		best, bestCos := "", -2.0
		for _, o := range vocab {
			if o == w || tab.Weight(row[o]) == 0 || o == "##s" {
				continue
			}
			if c := cosine(v, tab.Vector(row[o], nil)); c > bestCos {
				best, bestCos = o, c
			}
		}
		return best
	}
	groups := [][]string{{"cat", "dog", "kitten", "puppy"}, {"algebra", "equation", "calculus"},
		{"court", "lawyer", "judge"}, {"protein", "enzyme", "cell"}, {"guitar", "piano", "violin"}}
	misses := 0
	for _, g := range groups {
		for _, w := range g {
			n := nearest(w)
			in := false
			for _, o := range g {
				in = in || o == n
			}
			if !in {
				misses++
				t.Logf("%s: nearest %s, outside its group %v", w, n, g)
			}
		}
	}
	if misses > 2 {
		t.Errorf("%d of 16 words have their nearest neighbour outside their group", misses)
	}
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// TestDistillWeightsFrom checks the merge of a table's weights with the
// Zipf-rank ones (it needs no runtime, but lives with the command's tests).
func TestDistillWeightsFrom(t *testing.T) {
	vocab := []string{"[PAD]", "the", "law", "##s", "court"}
	extra := []string{"lawyers", "courts"}
	// The source weighs "law" and its extra word "lawyers", not "##s" or
	// "court" (weight 0), and has an extra word we do not ask for.
	vecs := [][]float32{{0}, {1}, {2}, {3}, {4}, {5}, {6}}
	src, err := models.NewTable(models.Manifest{Name: "src"}, len(vocab), []string{"unrelated", "lawyers"}, vecs, []float32{0, 0.25, 0.5, 0, 0, 0.75, 0.875})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "src.tbl")
	if _, err := src.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	w, note, err := distillWeightsFrom(path, vocab, extra, "", sif.A, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	zipf := distill.RankWeights(vocab, extra, sif.A)
	want := []float32{0, 0.25, 0.5, zipf[3], zipf[4], 0.875, zipf[6]}
	for i := range want {
		if w[i] != want[i] {
			t.Errorf("row %d: weight %v, want %v (all: %v)", i, w[i], want[i], w)
		}
	}
	if !strings.Contains(note, "for the 3 rows it weighs") {
		t.Errorf("note %q", note)
	}
	if _, _, err := distillWeightsFrom(path, vocab[:4], nil, "", sif.A, t.Logf); err == nil {
		t.Error("a table of another vocabulary size: no error")
	}
}
