package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/bert"
	"github.com/triagegw/triage/models/onnxpb"
)

func TestModelsQuantize(t *testing.T) {
	in, out := t.TempDir(), filepath.Join(t.TempDir(), "int8")
	cfg := bert.Config{Layers: 1, Hidden: 64, Heads: 2, Intermediate: 256, Vocab: 300, MaxPos: 32, TypeVocab: 2, Seed: 3}
	if err := bert.Build(cfg).WriteFile(filepath.Join(in, "model.onnx")); err != nil {
		t.Fatal(err)
	}
	sum, _ := models.FileSHA256(filepath.Join(in, "model.onnx"))
	os.WriteFile(filepath.Join(in, "tok.json"), []byte("{}"), 0o644)
	if err := onnx.WriteManifest(in, &onnx.Manifest{Format: 1, Name: "tiny", Input: onnx.InputBERT, Pooling: onnx.PoolCLS, Dims: 64,
		MaxTokens: 32, Model: "model.onnx", ModelSHA256: sum, Tokenizer: "tok.json"}); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := runModelsArgs("quantize", "--in", in, "--out", out, "--min-elements", "1000"); err != nil {
		t.Fatalf("quantize: %v\n%s", err, errOut)
	}
	m, err := onnx.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	qsum, _ := models.FileSHA256(filepath.Join(out, m.Model))
	if m.Name != "tiny-int8" || m.ModelSHA256 != qsum || qsum == sum {
		t.Fatalf("manifest %+v (file sha256 %s)", m, qsum)
	}
	b, _ := os.ReadFile(filepath.Join(out, m.Model))
	g, err := onnxpb.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	for _, n := range g.Graph.Nodes {
		ops[n.Op]++
	}
	if ops["MatMulInteger"] == 0 || ops["DynamicQuantizeLinear"] == 0 {
		t.Fatalf("no quantised MatMul in %v", ops)
	}
	if _, err := os.Stat(filepath.Join(out, "tok.json")); err != nil {
		t.Fatalf("tokenizer not copied: %v", err)
	}
	for _, args := range [][]string{
		{"quantize", "--in", in, "--out", in},
		{"quantize", "--out", out},
	} {
		if _, errOut, err := runModelsArgs(args...); err == nil {
			t.Fatalf("%v succeeded:\n%s", args, errOut)
		} else if !strings.Contains(err.Error()+errOut, "--") {
			t.Fatalf("%v: %v %s", args, err, errOut)
		}
	}
}
