//go:build cgo && ort

package onnx

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/bert"
)

// tmpRoot holds the model directories the tests and benchmarks generate;
// TestMain removes it.
var tmpRoot string

func TestMain(m *testing.M) {
	var err error
	if tmpRoot, err = os.MkdirTemp("", "triage-onnx-test-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

func modelsDir() string { return testenv.ModelsDir() }

// requireORT loads the ONNX Runtime library, or skips the test when it is
// not there (scripts/fetch-ort.sh fetches it) unless TRIAGE_REQUIRE_ORT=1,
// when a missing runtime fails the test.
func requireORT(t testing.TB) {
	t.Helper()
	err := ensureInit(Options{}, modelsDir())
	switch {
	case err == nil:
	case os.Getenv("TRIAGE_REQUIRE_ORT") == "1":
		t.Fatalf("TRIAGE_REQUIRE_ORT=1 and the runtime did not load: %v", err)
	case errors.Is(err, classifier.ErrUnavailable):
		t.Skipf("no ONNX Runtime (run scripts/fetch-ort.sh or set TRIAGE_ORT_LIB): %v", err)
	default:
		t.Fatal(err)
	}
}

// smallBERT is a two-layer encoder over the real bert-base-uncased
// vocabulary: quick to build and run, fed by the real tokenizer.
func smallBERT() bert.Config {
	return bert.Config{Layers: 2, Hidden: 32, Heads: 4, Intermediate: 64, Vocab: 30522, MaxPos: 32, TypeVocab: 2, Seed: 3}
}

type genKey struct {
	cfg     bert.Config
	pooling string
}

var (
	genMu   sync.Mutex
	genDirs = map[genKey]string{}
)

// modelDir writes (once per config and pooling) a model directory for c:
// model.onnx, encoder.json and the bert-base-uncased tokenizer.
func modelDir(t testing.TB, c bert.Config, pooling string) string {
	t.Helper()
	genMu.Lock()
	defer genMu.Unlock()
	k := genKey{c, pooling}
	if d, ok := genDirs[k]; ok {
		return d
	}
	tokSrc, err := tokenize.ModuleFile()
	if err != nil {
		t.Fatalf("tokenizer: %v", err)
	}
	dir, err := os.MkdirTemp(tmpRoot, "model-")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tokSrc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bert-base-uncased.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := bert.Build(c).WriteFile(filepath.Join(dir, DefaultModelFile)); err != nil {
		t.Fatal(err)
	}
	sum, err := models.FileSHA256(filepath.Join(dir, DefaultModelFile))
	if err != nil {
		t.Fatal(err)
	}
	tokSum, err := models.FileSHA256(filepath.Join(dir, "bert-base-uncased.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := &Manifest{Format: ManifestFormat, Name: filepath.Base(dir), Source: "test", Input: InputBERT, Pooling: pooling,
		Dims: c.Hidden, MaxTokens: c.MaxPos, Vocab: c.Vocab, ModelSHA256: sum, Tokenizer: "bert-base-uncased.json", TokenizerSHA256: tokSum}
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	genDirs[k] = dir
	return dir
}
