package main

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/triagegw/triage/datasets"
)

// dsFakeHub is a Hugging Face hub with one dataset repo, acme/prompts:
// test.jsonl is a regular file, data/train.csv an LFS file behind a
// redirect to a CDN path, gated/x needs a token.
type dsFakeHub struct {
	srv    *httptest.Server
	commit string
	files  map[string][]byte
	lfs    map[string]bool

	mu   sync.Mutex
	reqs []string // "METHOD PATH auth=..."
}

var (
	dsJSONL = []byte(`{"question":"Is a verbal contract binding?","subject":"law"}` + "\n" +
		`{"question":"What is the derivative of x^2?","subject":"maths"}` + "\n" +
		`{"question":"Who wrote Hamlet?","subject":"literature"}` + "\n")
	dsCSV = []byte("question,subject\n\"What causes tides?\",physics\n\"Define tort.\",law\n")
)

func newDSFakeHub(t *testing.T) *dsFakeHub {
	t.Helper()
	h := &dsFakeHub{
		commit: "0123456789abcdef0123456789abcdef01234567",
		files:  map[string][]byte{"test.jsonl": dsJSONL, "data/train.csv": dsCSV},
		lfs:    map[string]bool{"data/train.csv": true},
	}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	for _, k := range []string{"HF_TOKEN", "HF_HUB_OFFLINE", "XDG_CACHE_HOME"} {
		t.Setenv(k, "")
	}
	t.Setenv("HF_ENDPOINT", h.srv.URL)
	t.Setenv("TRIAGE_HUB_CACHE", t.TempDir())
	return h
}

func (h *dsFakeHub) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.reqs
	h.reqs = nil
	return r
}

func (h *dsFakeHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.reqs = append(h.reqs, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
	h.mu.Unlock()
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/datasets/acme/gated/"), strings.HasPrefix(p, "/api/datasets/acme/gated/"):
		w.Header().Set("X-Error-Code", "GatedRepo")
		w.WriteHeader(http.StatusUnauthorized)
	case p == "/api/datasets/acme/prompts/revision/main":
		type sib struct {
			R string `json:"rfilename"`
		}
		json.NewEncoder(w).Encode(map[string]any{"sha": h.commit, "siblings": []sib{{"data/train.csv"}, {"test.jsonl"}}})
	case strings.HasPrefix(p, "/cdn/"):
		for _, data := range h.files {
			if s := sha256.Sum256(data); hex.EncodeToString(s[:]) == strings.TrimPrefix(p, "/cdn/") {
				w.Write(data)
				return
			}
		}
		http.NotFound(w, r)
	case strings.HasPrefix(p, "/datasets/acme/prompts/resolve/main/"):
		file := strings.TrimPrefix(p, "/datasets/acme/prompts/resolve/main/")
		data, ok := h.files[file]
		if !ok {
			w.Header().Set("X-Error-Code", "EntryNotFound")
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("X-Repo-Commit", h.commit)
		if h.lfs[file] {
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
	default:
		w.Header().Set("X-Error-Code", "RepoNotFound")
		w.WriteHeader(http.StatusNotFound)
	}
}

func runDatasetsArgs(args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	err = runDatasets(context.Background(), args, &o, &e)
	return o.String(), e.String(), err
}

func TestDatasetsFetch(t *testing.T) {
	h := newDSFakeHub(t)
	cache := os.Getenv("TRIAGE_HUB_CACHE")
	for file, data := range h.files {
		stdout, stderr, err := runDatasetsArgs("fetch", "acme/prompts", file)
		if err != nil {
			t.Fatalf("fetch %s: %v\n%s", file, err, stderr)
		}
		p := strings.TrimSpace(stdout)
		want := filepath.Join(cache, "datasets--acme--prompts", "snapshots", h.commit, filepath.FromSlash(file))
		if p != want {
			t.Errorf("fetch %s printed %q, want %q", file, p, want)
		}
		if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, data) {
			t.Errorf("fetch %s: content %q, %v", file, b, err)
		}
	}
	// The fetched files are read as published, by eval's reader.
	dir := filepath.Join(cache, "datasets--acme--prompts", "snapshots", h.commit)
	for file, n := range map[string]int{"test.jsonl": 3, "data/train.csv": 2} {
		set, err := datasets.Read(filepath.Join(dir, filepath.FromSlash(file)), datasets.Columns{Text: "question", Label: "subject"})
		if err != nil || len(set.Rows) != n || set.Rows[0].Label == "" {
			t.Errorf("datasets.Read(%s): %v, %v", file, set, err)
		}
	}
	// Offline, from the cache: no request; flags after the arguments; --out.
	h.requests()
	out := filepath.Join(t.TempDir(), "test.jsonl")
	stdout, stderr, err := runDatasetsArgs("fetch", "--offline", "acme/prompts", "test.jsonl", "--out", out)
	if err != nil {
		t.Fatalf("fetch --offline --out: %v\n%s", err, stderr)
	}
	if b, err := os.ReadFile(out); err != nil || !bytes.Equal(b, dsJSONL) {
		t.Errorf("--out: %q, %v", b, err)
	}
	if strings.TrimSpace(stdout) != filepath.Join(dir, "test.jsonl") || !strings.Contains(stderr, out) {
		t.Errorf("stdout %q stderr %q", stdout, stderr)
	}
	if reqs := h.requests(); len(reqs) != 0 {
		t.Errorf("--offline made requests: %v", reqs)
	}
	// --cache elsewhere, offline: a miss that says how to fetch.
	_, _, err = runDatasetsArgs("fetch", "--offline", "--cache", t.TempDir(), "acme/prompts", "test.jsonl")
	if err == nil || !strings.Contains(err.Error(), "triage datasets fetch --revision main acme/prompts test.jsonl") {
		t.Errorf("offline miss: %v", err)
	}
	// A second online fetch costs one HEAD.
	if _, _, err := runDatasetsArgs("fetch", "acme/prompts", "test.jsonl"); err != nil {
		t.Fatal(err)
	}
	if reqs := h.requests(); len(reqs) != 1 || !strings.HasPrefix(reqs[0], "HEAD ") {
		t.Errorf("cached fetch: requests %v", reqs)
	}
}

func TestDatasetsFetchErrors(t *testing.T) {
	h := newDSFakeHub(t)
	_, _, err := runDatasetsArgs("fetch", "acme/prompts", "nope.jsonl")
	if err == nil || !strings.Contains(err.Error(), `no file "nope.jsonl" in dataset repo acme/prompts at revision main`) ||
		!strings.Contains(err.Error(), "test.jsonl") {
		t.Errorf("missing file: %v", err)
	}
	_, _, err = runDatasetsArgs("fetch", "acme/gated", "x.jsonl")
	if err == nil || !strings.Contains(err.Error(), "gated or private: set HF_TOKEN") {
		t.Errorf("gated: %v", err)
	}
	t.Setenv("HF_TOKEN", "hf_secret")
	h.requests()
	if _, _, err := runDatasetsArgs("fetch", "acme/prompts", "data/train.csv"); err != nil {
		t.Fatal(err)
	}
	for _, r := range h.requests() {
		if strings.HasPrefix(r, "GET /cdn/") || strings.HasPrefix(r, "HEAD /datasets/") {
			if !strings.HasSuffix(r, "auth=Bearer hf_secret") {
				t.Errorf("%s: the token goes to the hub's origin (here the CDN path is on it)", r)
			}
		}
	}
}

func TestDatasetsLs(t *testing.T) {
	newDSFakeHub(t)
	stdout, stderr, err := runDatasetsArgs("ls", "acme/prompts")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if stdout != "data/train.csv\ntest.jsonl\n" || !strings.Contains(stderr, "0123456789abcdef") {
		t.Errorf("ls: stdout %q stderr %q", stdout, stderr)
	}
	if _, _, err := runDatasetsArgs("ls", "acme/none"); err == nil || !strings.Contains(err.Error(), "no dataset repo acme/none") {
		t.Errorf("ls, missing repo: %v", err)
	}
	// Wired into the command table.
	var o, e bytes.Buffer
	if code := run(context.Background(), []string{"datasets", "ls", "--revision", "main", "acme/prompts"}, &o, &e); code != 0 || !strings.Contains(o.String(), "test.jsonl") {
		t.Errorf("triage datasets ls: exit %d, %q %q", code, o.String(), e.String())
	}
}

func TestDatasetsUsage(t *testing.T) {
	newDSFakeHub(t)
	for _, args := range [][]string{
		{},
		{"pull"},
		{"fetch"},
		{"fetch", "acme/prompts"},
		{"fetch", "acme/prompts", "a", "b"},
		{"fetch", "--bogus", "acme/prompts", "a"},
		{"ls"},
		{"ls", "acme/prompts", "extra"},
	} {
		if _, _, err := runDatasetsArgs(args...); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	_, stderr, err := runDatasetsArgs("-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr, "triage eval --heads DIR --data FILE --text-col COL --label-col COL --label-map") {
		t.Errorf("-h: %v\n%s", err, stderr)
	}
	if _, _, err := runDatasetsArgs("fetch", "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("fetch -h: %v", err)
	}
	var o, e bytes.Buffer
	if code := run(context.Background(), []string{"datasets"}, &o, &e); code != 2 {
		t.Errorf("triage datasets: exit %d", code)
	}
}
