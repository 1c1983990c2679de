//go:build ort

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/internal/testenv"
)

// TestTrainTeacher trains a small tier 1 on the default heads' tier 2
// (their encoder, Universal Sentence Encoder lite in int8, and its head)
// through the command: the teacher's scores are cached under the models
// directory, a second run reads them instead of opening the encoder, and a
// third, the cache gone, scores again: all three write the same artifact,
// byte for byte.
func TestTrainTeacher(t *testing.T) {
	teacher := filepath.Join(testenv.Root(), "models", "heads", "subjects")
	h, err := classifier.LoadHeads(teacher)
	if err != nil {
		t.Fatal(err)
	}
	enc := h.Tier2.Encoder.Model
	real := testenv.Models(t, enc+"/model.onnx", enc+"/vocab.json", "ort/libonnxruntime.so.1", "tokenizer/bert-base-uncased.json", "tables/glove-100d-i8.tbl")
	// A models directory of links to the real files, so the cache is the
	// test's own.
	dir := t.TempDir()
	mdir := filepath.Join(dir, "models")
	os.MkdirAll(mdir, 0o755)
	for _, sub := range []string{enc, "ort", "tokenizer", "tables"} {
		if err := os.Symlink(filepath.Join(real, sub), filepath.Join(mdir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	topics := map[string]string{"math": "What is the integral of x squared", "law": "Can my landlord keep the deposit",
		"health": "Is it safe to take ibuprofen with a cold", "other": "What should I cook for dinner tonight"}
	var data, more bytes.Buffer
	for i, c := range h.Classes {
		for j := range 6 {
			text, ok := topics[c]
			if !ok {
				text = "a question about " + c
			}
			fmt.Fprintf(&data, `{"text":%q,"label":%q}`+"\n", fmt.Sprintf("%s, case %d.%d", text, i, j), c)
		}
	}
	for i := range 20 {
		fmt.Fprintf(&more, `{"text":%q,"label":"weather"}`+"\n", fmt.Sprintf("will it rain in city %d tomorrow", i))
	}
	dataPath, morePath := filepath.Join(dir, "train.jsonl"), filepath.Join(dir, "more.jsonl")
	os.WriteFile(dataPath, data.Bytes(), 0o644)
	os.WriteFile(morePath, more.Bytes(), 0o644)
	var sums []string
	cache := filepath.Join(mdir, "cache", "teacher")
	for run := range 3 {
		if run == 2 {
			if cached, _ := filepath.Glob(filepath.Join(cache, "*.f32")); len(cached) != 2 {
				t.Errorf("cache holds %v, want one file per dataset", cached)
			}
			os.RemoveAll(cache)
		}
		out := filepath.Join(dir, fmt.Sprint("out", run))
		args := []string{"--data", dataPath, "--out", out, "--name", "student", "--models", mdir, "--teacher", teacher, "--unlabeled", morePath,
			"--hard-weight", "0.5", "--epochs", "2", "--ensemble", "1", "--bigrams", "64", "--holdout", "0.3", "--threads", "2"}
		t.Setenv("SOURCE_DATE_EPOCH", "1704067200")
		var stdout, stderr bytes.Buffer
		if err := runTrain(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("train --teacher: %v\n%s", err, stderr.String())
		}
		want := []string{"104 texts (0 read from the cache)", "104 texts (104 read from the cache)", "104 texts (0 read from the cache)"}[run]
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("run %d: log lacks %q:\n%s", run, want, stderr.String())
		}
		got, err := classifier.LoadHeads(out)
		if err != nil {
			t.Fatal(err)
		}
		if got.Tier2 == nil || got.Tier2.Encoder.ModelSHA256 != h.Tier2.Encoder.ModelSHA256 || got.Tier1.Training.Params["unlabeled_rows"] != float64(20) {
			t.Fatalf("artifact: tier 2 %v, params %v", got.Tier2 != nil, got.Tier1.Training.Params)
		}
		for _, name := range []string{classifier.HeadsFile, "student-tier1.tbl"} {
			b, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				t.Fatal(err)
			}
			sums = append(sums, string(b))
		}
	}
	for run := 1; run < 3; run++ {
		if sums[2*run] != sums[0] || sums[2*run+1] != sums[1] {
			t.Errorf("run %d wrote another artifact than run 0", run)
		}
	}
}
