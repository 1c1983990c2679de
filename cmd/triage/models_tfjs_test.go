package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/models"
)

// TestModelsImportTFJS converts Universal Sentence Encoder lite (when
// scripts/fetch-use.sh has fetched it) and checks that encoder.json says
// what the runtime needs. (models/tfjs tests that two conversions give the
// same bytes.)
func TestModelsImportTFJS(t *testing.T) {
	root := testenv.Models(t, "use/tfjs/model.json")
	dir := filepath.Join(root, "use", "tfjs")
	vocab := filepath.Join(root, "use", "vocab.json")
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := runModelsImportTFJS(context.Background(), []string{"--dir", dir, "--vocab", vocab, "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	t.Log(strings.TrimSpace(stdout.String()))
	sum, err := models.FileSHA256(filepath.Join(out, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	// fetch-use.sh converts with the same flags and records the sha256;
	// a difference means the converter changed since it last ran.
	if rec, err := os.ReadFile(filepath.Join(root, "use", "model.onnx.sha256")); err == nil {
		if want := strings.Fields(string(rec)); len(want) > 0 && want[0] != sum {
			t.Logf("model.onnx sha256 %s differs from %s recorded by fetch-use.sh (the converter changed since; run it again)", sum, want[0])
		}
	}
	raw, err := os.ReadFile(filepath.Join(out, "encoder.json"))
	if err != nil {
		t.Fatal(err)
	}
	var man map[string]any
	if err := json.Unmarshal(raw, &man); err != nil {
		t.Fatal(err)
	}
	vsum, _ := models.FileSHA256(vocab)
	want := map[string]any{"name": "use-lite", "source": useSource, "input": "use", "dims": 512.0, "format": 1.0,
		"pooling": "none", "tokenizer": "vocab.json", "tokenizer_sha256": vsum, "max_tokens": 128.0}
	for k, v := range want {
		if man[k] != v {
			t.Errorf("encoder.json %s = %v, want %v", k, man[k], v)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "vocab.json")); err != nil {
		t.Errorf("vocab.json not copied beside the model: %v", err)
	}
}

func TestModelsImportTFJSUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := runModelsImportTFJS(context.Background(), []string{"--dir", "x"}, &stdout, &stderr); err != errUsage {
		t.Errorf("err = %v, want errUsage", err)
	}
	if !strings.Contains(stderr.String(), "--out is required") {
		t.Errorf("stderr %q", stderr.String())
	}
	err := runModelsImportTFJS(context.Background(), []string{"--dir", t.TempDir(), "--out", t.TempDir()}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "model.json") {
		t.Errorf("empty dir: %v", err)
	}
}
