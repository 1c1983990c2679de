package onnx

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestManifestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m := &Manifest{Format: ManifestFormat, Name: "bge-small", Input: InputBERT, Pooling: PoolCLS, Dims: 384,
		MaxTokens: 512, Tokenizer: "bert-base-uncased.json"}
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("read back %+v, wrote %+v", got, m)
	}
	d := got.withDefaults()
	if d.Model != "model.onnx" || d.Output != "last_hidden_state" || len(d.Inputs) != 3 || d.CLSToken != "[CLS]" {
		t.Errorf("defaults %+v", d)
	}
	u := Manifest{Format: 1, Input: InputUSE, Dims: 512, MaxTokens: 128, Tokenizer: "spm.model"}
	if err := u.Validate(); err != nil {
		t.Errorf("use manifest: %v", err)
	}
	if d := u.withDefaults(); d.Pooling != PoolNone || len(d.Inputs) != 2 {
		t.Errorf("use defaults %+v", d)
	}
}

func TestManifestValidate(t *testing.T) {
	for want, m := range map[string]Manifest{
		"format 2":      {Format: 2, Input: InputBERT, Pooling: PoolCLS, Dims: 4, MaxTokens: 8, Tokenizer: "t"},
		"pooling":       {Format: 1, Input: InputBERT, Pooling: "max", Dims: 4, MaxTokens: 8, Tokenizer: "t"},
		"input \"gpt\"": {Format: 1, Input: "gpt", Dims: 4, MaxTokens: 8, Tokenizer: "t"},
		"dims 0":        {Format: 1, Input: InputBERT, Pooling: PoolCLS, MaxTokens: 8, Tokenizer: "t"},
		"no tokenizer":  {Format: 1, Input: InputBERT, Pooling: PoolCLS, Dims: 4, MaxTokens: 8},
		"not a path":    {Format: 1, Input: InputBERT, Pooling: PoolCLS, Dims: 4, MaxTokens: 8, Tokenizer: "t", Model: "../x.onnx"},
		"inputs":        {Format: 1, Input: InputUSE, Dims: 4, MaxTokens: 8, Tokenizer: "t", Inputs: []string{"a"}},
	} {
		err := m.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an error about %q", m, err, want)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"format":1,"input":"bert"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), ManifestFile) {
		t.Errorf("invalid manifest: %v", err)
	}
}

func TestPool(t *testing.T) {
	hidden := []float32{1, 2, 3, 4, 5, 6, 100, 100} // 4 rows of 2
	dst := make([]float32, 2)
	pool(PoolCLS, hidden, 4, 2, nil, dst)
	if dst[0] != 1 || dst[1] != 2 {
		t.Errorf("cls %v", dst)
	}
	pool(PoolMean, hidden, 4, 2, []int64{1, 1, 1, 0}, dst)
	if dst[0] != 3 || dst[1] != 4 {
		t.Errorf("masked mean %v, want [3 4]", dst)
	}
	pool(PoolMean, hidden, 3, 2, nil, dst)
	if dst[0] != 3 || dst[1] != 4 {
		t.Errorf("mean %v, want [3 4]", dst)
	}
}

func TestLibraryPath(t *testing.T) {
	t.Setenv(LibraryEnv, "")
	if got := LibraryPath(Options{}, "/m"); got != "/m/ort/libonnxruntime.so.1" {
		t.Errorf("default %q", got)
	}
	t.Setenv(LibraryEnv, "/env/lib.so")
	if got := LibraryPath(Options{}, "/m"); got != "/env/lib.so" {
		t.Errorf("env %q", got)
	}
	if got := LibraryPath(Options{Library: "/opt/lib.so"}, "/m"); got != "/opt/lib.so" {
		t.Errorf("option %q", got)
	}
}
