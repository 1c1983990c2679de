package main

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/models/onnxpb"
)

// modelHub is a fake Hugging Face hub with model repos: files by repo, the
// .onnx ones stored in LFS behind a CDN redirect.
type modelHub struct {
	srv    *httptest.Server
	commit string
	repos  map[string]map[string][]byte
	mu     sync.Mutex
	gets   []string
}

func newModelHub(t *testing.T) *modelHub {
	t.Helper()
	h := &modelHub{commit: "89abcdef0123456789abcdef0123456789abcdef", repos: map[string]map[string][]byte{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	for _, k := range []string{"HF_TOKEN", "HF_HUB_OFFLINE", "XDG_CACHE_HOME"} {
		t.Setenv(k, "")
	}
	t.Setenv("HF_ENDPOINT", h.srv.URL)
	t.Setenv("TRIAGE_HUB_CACHE", t.TempDir())
	return h
}

func (h *modelHub) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	h.mu.Lock()
	h.gets = append(h.gets, r.Method+" "+p)
	h.mu.Unlock()
	if rest, ok := strings.CutPrefix(p, "/cdn/"); ok {
		for _, files := range h.repos {
			for _, data := range files {
				if s := sha256.Sum256(data); hex.EncodeToString(s[:]) == rest {
					w.Write(data)
					return
				}
			}
		}
		http.NotFound(w, r)
		return
	}
	for repo, files := range h.repos {
		if p == "/api/models/"+repo+"/revision/main" {
			type sib struct {
				R string `json:"rfilename"`
			}
			var sibs []sib
			for f := range files {
				sibs = append(sibs, sib{f})
			}
			json.NewEncoder(w).Encode(map[string]any{"sha": h.commit, "siblings": sibs})
			return
		}
		for _, rev := range []string{"main", h.commit} {
			file, ok := strings.CutPrefix(p, "/"+repo+"/resolve/"+rev+"/")
			if !ok {
				continue
			}
			data, ok := files[file]
			if !ok {
				w.Header().Set("X-Error-Code", "EntryNotFound")
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Header().Set("X-Repo-Commit", h.commit)
			if strings.HasSuffix(file, ".onnx") {
				s := sha256.Sum256(data)
				w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(s[:])+`"`)
				w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
				http.Redirect(w, r, "/cdn/"+hex.EncodeToString(s[:]), http.StatusFound)
				return
			}
			g := sha1.New()
			fmt.Fprintf(g, "blob %d\x00", len(data))
			g.Write(data)
			w.Header().Set("ETag", `"`+hex.EncodeToString(g.Sum(nil))+`"`)
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.Write(data)
			return
		}
	}
	w.Header().Set("X-Error-Code", "RepoNotFound")
	w.WriteHeader(http.StatusNotFound)
}

func tinyONNX() []byte {
	m := &onnxpb.Model{Producer: "test", Graph: onnxpb.Graph{Name: "g",
		Nodes:   []onnxpb.Node{{Name: "id", Op: "Identity", Inputs: []string{"x"}, Outputs: []string{"y"}}},
		Inputs:  []onnxpb.ValueInfo{{Name: "x", Type: onnxpb.Float, Dims: onnxpb.Dims("n")}},
		Outputs: []onnxpb.ValueInfo{{Name: "y", Type: onnxpb.Float, Dims: onnxpb.Dims("n")}}}}
	return m.Marshal()
}

func TestModelsPull(t *testing.T) {
	h := newModelHub(t)
	model, tok := tinyONNX(), []byte(`{"model":{"type":"WordPiece"}}`)
	h.repos["BAAI/bge-small-en-v1.5"] = map[string][]byte{
		"onnx/model.onnx":       model,
		"tokenizer.json":        tok,
		"config.json":           []byte(`{"model_type":"bert","hidden_size":384,"max_position_embeddings":512,"type_vocab_size":2}`),
		"1_Pooling/config.json": []byte(`{"word_embedding_dimension":384,"pooling_mode_cls_token":true,"pooling_mode_mean_tokens":false}`),
		"README.md":             []byte("# bge"),
	}
	h.repos["acme/minilm"] = map[string][]byte{
		"model.onnx":     model,
		"tokenizer.json": tok,
		"config.json":    []byte(`{"model_type":"bert","hidden_size":32,"max_position_embeddings":128,"type_vocab_size":2}`),
	}
	h.repos["acme/no-onnx"] = map[string][]byte{"model.safetensors": []byte("x"), "onnx/model_qint8.onnx": model, "config.json": []byte(`{"model_type":"bert"}`)}
	h.repos["acme/gpt"] = map[string][]byte{"model.onnx": model, "tokenizer.json": tok, "config.json": []byte(`{"model_type":"gpt2","hidden_size":8}`)}
	mdir := t.TempDir()

	out, errOut, err := runModelsArgs("pull", "--models", mdir, "BAAI/bge-small-en-v1.5")
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, errOut)
	}
	dir := filepath.Join(mdir, "bge-small-en-v1.5")
	if strings.TrimSpace(out) != dir {
		t.Fatalf("stdout %q, want the directory", out)
	}
	m, err := onnx.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	ms, ts := sha256.Sum256(model), sha256.Sum256(tok)
	if m.Input != onnx.InputBERT || m.Pooling != onnx.PoolCLS || m.Dims != 384 || m.MaxTokens != 512 ||
		m.ModelSHA256 != hex.EncodeToString(ms[:]) || m.TokenizerSHA256 != hex.EncodeToString(ts[:]) ||
		m.Source != "huggingface.co/BAAI/bge-small-en-v1.5@"+h.commit {
		t.Fatalf("manifest %+v", m)
	}
	for f, want := range map[string][]byte{m.Model: model, m.Tokenizer: tok} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%s: %v", f, err)
		}
	}
	// Every file came from the commit the revision resolved to.
	for _, g := range h.gets {
		if strings.Contains(g, "/resolve/main/") {
			t.Fatalf("a file fetched at main, not the listed commit: %v", h.gets)
		}
	}

	// Pulled again offline: the cache answers, no request.
	h.gets = nil
	if _, errOut, err := runModelsArgs("pull", "--models", mdir, "--offline", "--out", filepath.Join(mdir, "again"), "BAAI/bge-small-en-v1.5"); err != nil {
		t.Fatalf("offline pull: %v\n%s", err, errOut)
	}
	if len(h.gets) != 0 {
		t.Fatalf("offline pull made requests: %v", h.gets)
	}

	// No 1_Pooling: mean pooling, and max_tokens from the config.
	if _, errOut, err := runModelsArgs("pull", "--models", mdir, "acme/minilm"); err != nil {
		t.Fatalf("pull minilm: %v\n%s", err, errOut)
	} else if m, err := onnx.ReadManifest(filepath.Join(mdir, "minilm")); err != nil || m.Pooling != onnx.PoolMean || m.MaxTokens != 128 || m.Dims != 32 {
		t.Fatalf("minilm manifest %+v %v", m, err)
	} else if !strings.Contains(errOut, "mean pooling") {
		t.Fatalf("stderr does not say how it pools:\n%s", errOut)
	}

	for repo, want := range map[string]string{
		"acme/no-onnx":  "only onnx/model_qint8.onnx",
		"acme/gpt":      `"gpt2" model`,
		"acme/missing":  "no model repo acme/missing",
		"not a repo id": "",
	} {
		if _, errOut, err := runModelsArgs("pull", "--models", mdir, repo); err == nil {
			t.Errorf("pull %s succeeded:\n%s", repo, errOut)
		} else if !strings.Contains(err.Error(), want) {
			t.Errorf("pull %s: %v, want %q", repo, err, want)
		}
	}
}
