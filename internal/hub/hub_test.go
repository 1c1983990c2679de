package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

const dataRepo = "datasets/acme/data"

// isolate clears the environment the client reads, so that a developer's
// HF_TOKEN or HF_HUB_OFFLINE cannot change what a test sees.
func isolate(t *testing.T) {
	t.Helper()
	for _, k := range []string{"HF_ENDPOINT", "HF_TOKEN", "HF_HUB_OFFLINE", "TRIAGE_HUB_CACHE", "XDG_CACHE_HOME"} {
		t.Setenv(k, "")
	}
}

func newClient(t *testing.T, h *fakeHub) *Client {
	t.Helper()
	isolate(t)
	return &Client{Endpoint: h.hub.URL, CacheDir: t.TempDir()}
}

// jsonl makes n lines of a labelled JSONL set, different per seed.
func jsonl(seed string, n int) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"text":"%s prompt number %d about the law","label":"legal"}`+"\n", seed, i)
	}
	return b.Bytes()
}

var (
	regularData = jsonl("small", 20)
	lfsData     = jsonl("large", 1500) // ~80 KB
	csvData     = []byte("text,label\n\"a question\",science\n")
)

func dataFiles() map[string]fakeFile {
	return map[string]fakeFile{
		"README.md":     {data: []byte("# acme/data\n")},
		"train.jsonl":   {data: regularData},
		"big.jsonl":     {data: lfsData, lfs: true},
		"data/test.csv": {data: csvData},
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func count(reqs []fakeReq, server, method string) int {
	n := 0
	for _, r := range reqs {
		if r.server == server && r.method == method {
			n++
		}
	}
	return n
}

func storage(c *Client) string { return filepath.Join(c.CacheDir, "datasets--acme--data") }

func noLeftovers(t *testing.T, c *Client) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(storage(c), "blobs", "*.incomplete"))
	if len(m) > 0 {
		t.Errorf("partial downloads left: %v", m)
	}
}

func TestDownloadRegularFile(t *testing.T) {
	h := newFakeHub(t)
	commit := h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	p, err := c.Download(context.Background(), Dataset, "acme/data", "", "train.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(storage(c), "snapshots", commit, "train.jsonl"); p != want {
		t.Fatalf("path %s, want %s", p, want)
	}
	if !bytes.Equal(mustRead(t, p), regularData) {
		t.Fatal("content differs")
	}
	blob := filepath.Join(storage(c), "blobs", gitBlobSHA1(regularData))
	if !bytes.Equal(mustRead(t, blob), regularData) {
		t.Fatal("blob differs")
	}
	if st, err := os.Lstat(p); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("snapshot file is not a symlink: %v %v", st, err)
	} else if l, _ := os.Readlink(p); l != filepath.Join("..", "..", "blobs", gitBlobSHA1(regularData)) {
		t.Errorf("link %s", l)
	}
	if ref := string(mustRead(t, filepath.Join(storage(c), "refs", "main"))); ref != commit {
		t.Errorf("refs/main = %q, want %q", ref, commit)
	}
	reqs := h.requests()
	want := []fakeReq{
		{"hub", "HEAD", "/datasets/acme/data/resolve/main/train.jsonl", "", ""},
		{"hub", "GET", "/datasets/acme/data/resolve/main/train.jsonl", "", ""},
	}
	if !slices.Equal(reqs, want) {
		t.Errorf("requests %v, want %v", reqs, want)
	}
	// A file in a folder: the link climbs one level more.
	p, err = c.Download(context.Background(), Dataset, "acme/data", "main", "data/test.csv")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustRead(t, p), csvData) || p != filepath.Join(storage(c), "snapshots", commit, "data", "test.csv") {
		t.Fatalf("data/test.csv at %s", p)
	}
	if l, _ := os.Readlink(p); l != filepath.Join("..", "..", "..", "blobs", gitBlobSHA1(csvData)) {
		t.Errorf("link %s", l)
	}
	noLeftovers(t, c)
}

func TestDownloadLFSFileViaCDN(t *testing.T) {
	h := newFakeHub(t)
	commit := h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	c.Token = goodToken
	p, err := c.Download(context.Background(), Dataset, "acme/data", "main", "big.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustRead(t, p), lfsData) {
		t.Fatal("content differs")
	}
	// The blob is named by the sha256 (X-Linked-Etag), not the pointer's ETag.
	if !bytes.Equal(mustRead(t, filepath.Join(storage(c), "blobs", sha256Hex(lfsData))), lfsData) {
		t.Fatal("no blob named by the sha256")
	}
	if p != filepath.Join(storage(c), "snapshots", commit, "big.jsonl") {
		t.Fatalf("path %s", p)
	}
	reqs := h.requests()
	want := []fakeReq{
		{"hub", "HEAD", "/datasets/acme/data/resolve/main/big.jsonl", "Bearer " + goodToken, ""},
		{"cdn", "GET", "/cdn/" + sha256Hex(lfsData), "", ""},
	}
	if !slices.Equal(reqs, want) {
		t.Errorf("requests %v, want %v (the token goes to the hub, not to the CDN)", reqs, want)
	}
	noLeftovers(t, c)
}

func TestCacheHit(t *testing.T) {
	h := newFakeHub(t)
	commit := h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	ctx := context.Background()
	first := map[string]string{}
	for _, f := range []string{"train.jsonl", "big.jsonl"} {
		p, err := c.Download(ctx, Dataset, "acme/data", "main", f)
		if err != nil {
			t.Fatal(err)
		}
		first[f] = p
	}
	h.requests()
	for _, f := range []string{"train.jsonl", "big.jsonl"} {
		// A branch: one HEAD to learn it has not moved, nothing else.
		p, err := c.Download(ctx, Dataset, "acme/data", "main", f)
		if err != nil || p != first[f] {
			t.Fatalf("%s again: %s, %v", f, p, err)
		}
		if reqs := h.requests(); len(reqs) != 1 || reqs[0].method != "HEAD" || reqs[0].server != "hub" {
			t.Errorf("%s again: requests %v, want one HEAD", f, reqs)
		}
		// A commit never moves: no request at all.
		p, err = c.Download(ctx, Dataset, "acme/data", commit, f)
		if err != nil || p != first[f] {
			t.Fatalf("%s at the commit: %s, %v", f, p, err)
		}
		if reqs := h.requests(); len(reqs) != 0 {
			t.Errorf("%s at the commit: requests %v, want none", f, reqs)
		}
	}
}

func TestRevisionResolution(t *testing.T) {
	h := newFakeHub(t)
	v1 := h.commit(dataRepo, "main", map[string]fakeFile{
		"train.jsonl": {data: []byte("{\"text\":\"v1\"}\n")},
		"big.jsonl":   {data: lfsData, lfs: true},
	})
	h.setRef(dataRepo, "v1.0", v1)
	c := newClient(t, h)
	ctx := context.Background()
	ref := func(rev string) string {
		t.Helper()
		return string(mustRead(t, filepath.Join(storage(c), "refs", filepath.FromSlash(rev))))
	}
	if _, err := c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl"); err != nil {
		t.Fatal(err)
	}
	p, err := c.Download(ctx, Dataset, "acme/data", "main", "train.jsonl")
	if err != nil || string(mustRead(t, p)) != "{\"text\":\"v1\"}\n" || ref("main") != v1 {
		t.Fatalf("main at v1: %s %v", p, err)
	}
	// main moves on; big.jsonl keeps its content.
	v2 := h.commit(dataRepo, "main", map[string]fakeFile{
		"train.jsonl": {data: []byte("{\"text\":\"v2\"}\n")},
		"big.jsonl":   {data: lfsData, lfs: true},
	})
	h.requests()
	p, err = c.Download(ctx, Dataset, "acme/data", "main", "train.jsonl")
	if err != nil || string(mustRead(t, p)) != "{\"text\":\"v2\"}\n" {
		t.Fatalf("main at v2: %v", err)
	}
	if ref("main") != v2 || !strings.Contains(p, v2) {
		t.Errorf("refs/main = %s, path %s, want commit %s", ref("main"), p, v2)
	}
	// The tag still names v1, whose file is cached: a HEAD only.
	h.requests()
	p, err = c.Download(ctx, Dataset, "acme/data", "v1.0", "train.jsonl")
	if err != nil || string(mustRead(t, p)) != "{\"text\":\"v1\"}\n" || ref("v1.0") != v1 {
		t.Fatalf("tag v1.0: %s %v", p, err)
	}
	if reqs := h.requests(); len(reqs) != 1 {
		t.Errorf("tag v1.0: requests %v", reqs)
	}
	// Same content at a new commit: the blob is shared, nothing downloaded.
	p, err = c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl")
	if err != nil || !strings.Contains(p, v2) || !bytes.Equal(mustRead(t, p), lfsData) {
		t.Fatalf("big.jsonl at v2: %s %v", p, err)
	}
	if reqs := h.requests(); count(reqs, "cdn", "GET") != 0 || len(reqs) != 1 {
		t.Errorf("big.jsonl at v2: requests %v, want one HEAD", reqs)
	}
	// A revision with slashes is one escaped URL segment, and a path under refs/.
	h.setRef(dataRepo, "refs/pr/1", v1)
	if _, err := c.Download(ctx, Dataset, "acme/data", "refs/pr/1", "train.jsonl"); err != nil {
		t.Fatal(err)
	}
	if reqs := h.requests(); len(reqs) != 1 || reqs[0].path != "/datasets/acme/data/resolve/refs%2Fpr%2F1/train.jsonl" {
		t.Errorf("refs/pr/1: requests %v", reqs)
	}
	if ref("refs/pr/1") != v1 {
		t.Errorf("refs/refs/pr/1 = %s", ref("refs/pr/1"))
	}
	// A commit sha resolves to itself: no ref is written for it.
	if _, err := c.Download(ctx, Dataset, "acme/data", v2, "README.md"); err == nil {
		t.Error("README.md is not in v2")
	}
	if _, err := os.Stat(filepath.Join(storage(c), "refs", v2)); err == nil {
		t.Error("a ref was written for a commit sha")
	}
}

func TestOffline(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	ctx := context.Background()
	c.Offline = true
	_, err := c.Download(ctx, Dataset, "acme/data", "main", "train.jsonl")
	if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") || !strings.Contains(err.Error(), "not in the cache") {
		t.Fatalf("offline miss: %v", err)
	}
	if _, _, err := c.ListFiles(ctx, Dataset, "acme/data", "main"); !errors.Is(err, ErrOffline) {
		t.Errorf("offline ListFiles: %v", err)
	}
	if reqs := h.requests(); len(reqs) != 0 {
		t.Fatalf("offline: requests %v", reqs)
	}
	c.Offline = false
	online, err := c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	h.requests()
	c.Offline = true
	p, err := c.Download(ctx, Dataset, "acme/data", "", "big.jsonl")
	if err != nil || p != online {
		t.Fatalf("offline hit: %s %v", p, err)
	}
	if _, err := c.Download(ctx, Dataset, "acme/data", "v9", "big.jsonl"); !errors.Is(err, ErrOffline) {
		t.Errorf("offline, unknown revision: %v", err)
	}
	// HF_HUB_OFFLINE=1 is offline mode too.
	c.Offline = false
	t.Setenv("HF_HUB_OFFLINE", "1")
	if p, err := c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl"); err != nil || p != online {
		t.Errorf("HF_HUB_OFFLINE=1 hit: %s %v", p, err)
	}
	if _, err := c.Download(ctx, Dataset, "acme/data", "main", "train.jsonl"); !errors.Is(err, ErrOffline) {
		t.Errorf("HF_HUB_OFFLINE=1 miss: %v", err)
	}
	if reqs := h.requests(); len(reqs) != 0 {
		t.Errorf("offline: requests %v", reqs)
	}
}

func TestUnreachableHubServesCache(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	ctx := context.Background()
	online, err := c.Download(ctx, Dataset, "acme/data", "main", "train.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Endpoint = "http://" + ln.Addr().String()
	ln.Close()
	if p, err := c.Download(ctx, Dataset, "acme/data", "main", "train.jsonl"); err != nil || p != online {
		t.Errorf("unreachable, cached: %s %v", p, err)
	}
	_, err = c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl")
	if err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("unreachable, not cached: %v", err)
	}
}

func TestHubOutageServesCache(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	ctx := context.Background()
	online, err := c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	h.setFaults(func(h *fakeHub) { h.down = true })
	if p, err := c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl"); err != nil || p != online {
		t.Errorf("hub down, cached: %s %v", p, err)
	}
	_, err = c.Download(ctx, Dataset, "acme/data", "main", "train.jsonl")
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("hub down, not cached: %v", err)
	}
	// A refusal is not an outage: it is reported even when cached.
	h.setFaults(func(h *fakeHub) { h.down = false })
	h.repo(dataRepo).gated = true
	if _, err := c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl"); !errors.Is(err, ErrAuth) {
		t.Errorf("gated since, cached: %v", err)
	}
}

func TestResumeWithinOneCall(t *testing.T) {
	for _, tc := range []struct {
		file, server, path string
		data               []byte
	}{
		{"big.jsonl", "cdn", "/cdn/" + sha256Hex(lfsData), lfsData},
		{"train.jsonl", "hub", "/datasets/acme/data/resolve/main/train.jsonl", regularData},
	} {
		t.Run(tc.file, func(t *testing.T) {
			h := newFakeHub(t)
			h.commit(dataRepo, "main", dataFiles())
			c := newClient(t, h)
			h.setFaults(func(h *fakeHub) { h.cutAfter, h.cutTimes = 700, 1 })
			p, err := c.Download(context.Background(), Dataset, "acme/data", "main", tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mustRead(t, p), tc.data) {
				t.Fatal("the resumed file is not whole")
			}
			var gets []fakeReq
			for _, r := range h.requests() {
				if r.method == "GET" {
					gets = append(gets, r)
				}
			}
			want := []fakeReq{{tc.server, "GET", tc.path, "", ""}, {tc.server, "GET", tc.path, "", "bytes=700-"}}
			if !slices.Equal(gets, want) {
				t.Errorf("GETs %v, want %v", gets, want)
			}
			noLeftovers(t, c)
		})
	}
}

func TestResumeAcrossCalls(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	ctx := context.Background()
	h.setFaults(func(h *fakeHub) { h.cutAfter, h.cutTimes = 1000, 1<<30 })
	_, err := c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl")
	if err == nil || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "resume") {
		t.Fatalf("cut every time: %v", err)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut every time: %v does not wrap its cause, io.ErrUnexpectedEOF", err)
	}
	part := filepath.Join(storage(c), "blobs", sha256Hex(lfsData)+".incomplete")
	if st, err := os.Stat(part); err != nil || st.Size() != maxAttempts*1000 {
		t.Fatalf("partial file: %v %v, want %d bytes", st, err, maxAttempts*1000)
	}
	if gets := count(h.requests(), "cdn", "GET"); gets != maxAttempts {
		t.Errorf("%d GETs, want %d", gets, maxAttempts)
	}
	h.setFaults(func(h *fakeHub) { h.cutTimes = 0 })
	p, err := c.Download(ctx, Dataset, "acme/data", "main", "big.jsonl")
	if err != nil || !bytes.Equal(mustRead(t, p), lfsData) {
		t.Fatalf("resumed: %v", err)
	}
	reqs := h.requests()
	if count(reqs, "cdn", "GET") != 1 || reqs[len(reqs)-1].rng != fmt.Sprintf("bytes=%d-", maxAttempts*1000) {
		t.Errorf("requests %v, want one GET with Range bytes=%d-", reqs, maxAttempts*1000)
	}
	noLeftovers(t, c)
}

// A cache that cannot be written: the error wraps the file system's.
func TestCacheErrorWrapsCause(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.CacheDir = filepath.Join(file, "cache")
	_, err := c.Download(context.Background(), Dataset, "acme/data", "main", "train.jsonl")
	if err == nil || !strings.HasPrefix(err.Error(), "hub: cache: ") || !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("cache under a regular file: %v, want a hub: cache: error wrapping ENOTDIR", err)
	}
}

func TestResumeRangeIgnored(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	h.setFaults(func(h *fakeHub) { h.cutAfter, h.cutTimes, h.ignoreRange = 900, 1, true })
	p, err := c.Download(context.Background(), Dataset, "acme/data", "main", "big.jsonl")
	if err != nil || !bytes.Equal(mustRead(t, p), lfsData) {
		t.Fatalf("200 to a Range request must restart from zero: %v", err)
	}
}

func TestResumeFromBadPartialStartsOver(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	part := filepath.Join(storage(c), "blobs", sha256Hex(lfsData)+".incomplete")
	os.MkdirAll(filepath.Dir(part), 0o755)
	if err := os.WriteFile(part, bytes.Repeat([]byte("x"), 1234), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := c.Download(context.Background(), Dataset, "acme/data", "main", "big.jsonl")
	if err != nil || !bytes.Equal(mustRead(t, p), lfsData) {
		t.Fatalf("a bad partial file: %v", err)
	}
	var rng []string
	for _, r := range h.requests() {
		if r.method == "GET" {
			rng = append(rng, r.rng)
		}
	}
	if !slices.Equal(rng, []string{"bytes=1234-", ""}) {
		t.Errorf("GET ranges %q, want a resume then a restart", rng)
	}
}

func TestCorruptContentRejected(t *testing.T) {
	for _, tc := range []struct{ file, algo, etag string }{
		{"big.jsonl", "sha256", sha256Hex(lfsData)},
		{"train.jsonl", "git blob sha1", gitBlobSHA1(regularData)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			h := newFakeHub(t)
			commit := h.commit(dataRepo, "main", dataFiles())
			c := newClient(t, h)
			ctx := context.Background()
			h.setFaults(func(h *fakeHub) { h.corrupt = true })
			_, err := c.Download(ctx, Dataset, "acme/data", "main", tc.file)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.algo) || !strings.Contains(err.Error(), tc.etag) {
				t.Fatalf("corrupt bytes: %v", err)
			}
			for _, p := range []string{
				filepath.Join(storage(c), "blobs", tc.etag),
				filepath.Join(storage(c), "blobs", tc.etag+".incomplete"),
				filepath.Join(storage(c), "snapshots", commit, tc.file),
			} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s is left after a corrupt download", p)
				}
			}
			h.setFaults(func(h *fakeHub) { h.corrupt = false })
			if p, err := c.Download(ctx, Dataset, "acme/data", "main", tc.file); err != nil || !bytes.Equal(mustRead(t, p), dataFiles()[tc.file].data) {
				t.Fatalf("after the fault: %v", err)
			}
		})
	}
}

func TestWrongSizeRejected(t *testing.T) {
	for _, delta := range []int{+5, -1} {
		for _, file := range []string{"big.jsonl", "train.jsonl"} {
			t.Run(fmt.Sprintf("%s%+d", file, delta), func(t *testing.T) {
				h := newFakeHub(t)
				h.commit(dataRepo, "main", dataFiles())
				c := newClient(t, h)
				h.setFaults(func(h *fakeHub) { h.sizeDelta = delta })
				_, err := c.Download(context.Background(), Dataset, "acme/data", "main", file)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "announced") {
					t.Fatalf("announced size off by %d: %v", delta, err)
				}
				noLeftovers(t, c)
			})
		}
	}
}

func TestGatedRepoAndToken(t *testing.T) {
	h := newFakeHub(t)
	h.commit("datasets/acme/secret", "main", dataFiles())
	h.repo("datasets/acme/secret").gated = true
	c := newClient(t, h)
	ctx := context.Background()
	_, err := c.Download(ctx, Dataset, "acme/secret", "main", "big.jsonl")
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "gated or private: set HF_TOKEN") || !strings.Contains(err.Error(), "401") {
		t.Fatalf("no token: %v", err)
	}
	c.Token = "hf_bad"
	_, err = c.Download(ctx, Dataset, "acme/secret", "main", "big.jsonl")
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "no access") {
		t.Fatalf("bad token: %v", err)
	}
	if _, _, err := c.ListFiles(ctx, Dataset, "acme/secret", ""); !errors.Is(err, ErrAuth) {
		t.Errorf("ListFiles, bad token: %v", err)
	}
	// HF_TOKEN is the default token.
	c.Token = ""
	t.Setenv("HF_TOKEN", goodToken)
	h.requests()
	for _, f := range []string{"big.jsonl", "train.jsonl"} {
		p, err := c.Download(ctx, Dataset, "acme/secret", "main", f)
		if err != nil || !bytes.Equal(mustRead(t, p), dataFiles()[f].data) {
			t.Fatalf("%s with HF_TOKEN: %v", f, err)
		}
	}
	reqs := h.requests()
	for _, r := range reqs {
		if want := map[string]string{"hub": "Bearer " + goodToken, "cdn": ""}[r.server]; r.auth != want {
			t.Errorf("%s %s %s carried Authorization %q, want %q", r.server, r.method, r.path, r.auth, want)
		}
	}
	if count(reqs, "cdn", "GET") != 1 || count(reqs, "hub", "GET") != 1 {
		t.Errorf("requests %v", reqs)
	}
}

func TestRenamedRepoKeepsTokenOnHub(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	h.commit("datasets/acme/old", "main", nil)
	h.repo("datasets/acme/old").renamedTo = "acme/data"
	c := newClient(t, h)
	c.Token = goodToken
	for _, f := range []string{"train.jsonl", "big.jsonl"} {
		p, err := c.Download(context.Background(), Dataset, "acme/old", "main", f)
		if err != nil || !bytes.Equal(mustRead(t, p), dataFiles()[f].data) {
			t.Fatalf("%s through a rename: %v", f, err)
		}
		if !strings.Contains(p, "datasets--acme--old") {
			t.Errorf("cached at %s, want under the name asked for", p)
		}
	}
	reqs := h.requests()
	for _, r := range reqs {
		if (r.server == "hub") != (r.auth == "Bearer "+goodToken) {
			t.Errorf("%s %s %s carried Authorization %q", r.server, r.method, r.path, r.auth)
		}
	}
	if !slices.ContainsFunc(reqs, func(r fakeReq) bool {
		return r.server == "hub" && r.method == "GET" && r.path == "/datasets/acme/data/resolve/main/train.jsonl"
	}) {
		t.Errorf("requests %v: want the GET at the new name", reqs)
	}
}

func TestNotFound(t *testing.T) {
	for _, noCode := range []bool{false, true} {
		t.Run(fmt.Sprintf("noErrorCode=%v", noCode), func(t *testing.T) {
			h := newFakeHub(t)
			h.commit(dataRepo, "main", dataFiles())
			h.setFaults(func(h *fakeHub) { h.noErrorCode = noCode })
			c := newClient(t, h)
			ctx := context.Background()
			_, err := c.Download(ctx, Dataset, "acme/data", "main", "nope.jsonl")
			if !errors.Is(err, ErrFileNotFound) || !strings.Contains(err.Error(), `no file "nope.jsonl" in dataset repo acme/data at revision main`) ||
				!strings.Contains(err.Error(), "train.jsonl") {
				t.Errorf("missing file: %v", err)
			}
			_, err = c.Download(ctx, Dataset, "acme/none", "main", "train.jsonl")
			if !errors.Is(err, ErrRepoNotFound) || !strings.Contains(err.Error(), "no dataset repo acme/none") {
				t.Errorf("missing repo: %v", err)
			}
			_, err = c.Download(ctx, Dataset, "acme/data", "nobranch", "train.jsonl")
			if !errors.Is(err, ErrRevisionNotFound) || !strings.Contains(err.Error(), `no revision "nobranch"`) {
				t.Errorf("missing revision: %v", err)
			}
			if _, _, err := c.ListFiles(ctx, Dataset, "acme/none", ""); !errors.Is(err, ErrRepoNotFound) {
				t.Errorf("ListFiles, missing repo: %v", err)
			}
			if _, _, err := c.ListFiles(ctx, Dataset, "acme/data", "nobranch"); !errors.Is(err, ErrRevisionNotFound) {
				t.Errorf("ListFiles, missing revision: %v", err)
			}
		})
	}
}

func TestListFiles(t *testing.T) {
	h := newFakeHub(t)
	v1 := h.commit(dataRepo, "main", map[string]fakeFile{"old.jsonl": {data: []byte("{}\n")}})
	h.setRef(dataRepo, "v1", v1)
	v2 := h.commit(dataRepo, "main", dataFiles())
	h.commit("models/acme/m", "main", map[string]fakeFile{"config.json": {data: []byte("{}")}})
	c := newClient(t, h)
	ctx := context.Background()
	commit, files, err := c.ListFiles(ctx, Dataset, "acme/data", "")
	if err != nil || commit != v2 || !slices.Equal(files, []string{"README.md", "big.jsonl", "data/test.csv", "train.jsonl"}) {
		t.Fatalf("ListFiles main: %s %v %v", commit, files, err)
	}
	commit, files, err = c.ListFiles(ctx, Dataset, "acme/data", "v1")
	if err != nil || commit != v1 || !slices.Equal(files, []string{"old.jsonl"}) {
		t.Fatalf("ListFiles v1: %s %v %v", commit, files, err)
	}
	if _, files, err := c.ListFiles(ctx, Model, "acme/m", "main"); err != nil || !slices.Equal(files, []string{"config.json"}) {
		t.Fatalf("ListFiles model: %v %v", files, err)
	}
	reqs := h.requests()
	paths := []string{"/api/datasets/acme/data/revision/main", "/api/datasets/acme/data/revision/v1", "/api/models/acme/m/revision/main"}
	for i, r := range reqs {
		if r.method != "GET" || r.path != paths[i] {
			t.Errorf("request %d: %v, want GET %s", i, r, paths[i])
		}
	}
}

func TestModelRepo(t *testing.T) {
	h := newFakeHub(t)
	cfg := []byte(`{"hidden_size": 8}`)
	weights := bytes.Repeat([]byte{1, 2, 3, 4}, 5000)
	commit := h.commit("models/acme/m", "main", map[string]fakeFile{
		"config.json":       {data: cfg},
		"model.safetensors": {data: weights, lfs: true},
	})
	c := newClient(t, h)
	for f, data := range map[string][]byte{"config.json": cfg, "model.safetensors": weights} {
		p, err := c.Download(context.Background(), Model, "acme/m", "", f)
		if err != nil || !bytes.Equal(mustRead(t, p), data) {
			t.Fatalf("%s: %v", f, err)
		}
		if want := filepath.Join(c.CacheDir, "models--acme--m", "snapshots", commit, f); p != want {
			t.Errorf("path %s, want %s", p, want)
		}
	}
	if reqs := h.requests(); reqs[0].path != "/acme/m/resolve/main/config.json" && reqs[0].path != "/acme/m/resolve/main/model.safetensors" {
		t.Errorf("model URLs have no prefix: %v", reqs)
	}
	if d, err := c.RepoDir(Model, "acme/m"); err != nil || d != filepath.Join(c.CacheDir, "models--acme--m") {
		t.Errorf("RepoDir: %s %v", d, err)
	}
	if got := repoFolder(Model, "gpt2"); got != "models--gpt2" {
		t.Errorf("repoFolder(gpt2) = %s", got)
	}
}

func TestBadArguments(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	ctx := context.Background()
	for _, tc := range []struct {
		kind                 Kind
		repo, revision, file string
	}{
		{"space", "acme/data", "main", "train.jsonl"},
		{Dataset, "", "main", "train.jsonl"},
		{Dataset, "../data", "main", "train.jsonl"},
		{Dataset, "acme/data/x", "main", "train.jsonl"},
		{Dataset, "acme--x/data", "main", "train.jsonl"},
		{Dataset, "acme/da ta", "main", "train.jsonl"},
		{Dataset, "acme/data", "..", "train.jsonl"},
		{Dataset, "acme/data", "a/../../b", "train.jsonl"},
		{Dataset, "acme/data", "main", ""},
		{Dataset, "acme/data", "main", "../../../etc/passwd"},
		{Dataset, "acme/data", "main", "/etc/passwd"},
		{Dataset, "acme/data", "main", "a//b"},
		{Dataset, "acme/data", "main", `a\b`},
	} {
		if p, err := c.Download(ctx, tc.kind, tc.repo, tc.revision, tc.file); err == nil {
			t.Errorf("Download(%q, %q, %q, %q) = %s, want an error", tc.kind, tc.repo, tc.revision, tc.file, p)
		}
	}
	if reqs := h.requests(); len(reqs) != 0 {
		t.Errorf("bad arguments made requests: %v", reqs)
	}
}

func TestEnvironmentDefaults(t *testing.T) {
	h := newFakeHub(t)
	h.commit("datasets/acme/secret", "main", dataFiles())
	h.repo("datasets/acme/secret").gated = true
	isolate(t)
	dir := t.TempDir()
	t.Setenv("HF_ENDPOINT", h.hub.URL+"/")
	t.Setenv("HF_TOKEN", goodToken)
	t.Setenv("TRIAGE_HUB_CACHE", dir)
	var c Client
	p, err := c.Download(context.Background(), Dataset, "acme/secret", "", "train.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p, filepath.Join(dir, "datasets--acme--secret")+string(filepath.Separator)) {
		t.Errorf("path %s is not under TRIAGE_HUB_CACHE %s", p, dir)
	}
	if reqs := h.requests(); len(reqs) == 0 || reqs[0].path != "/datasets/acme/secret/resolve/main/train.jsonl" || reqs[0].auth != "Bearer "+goodToken {
		t.Errorf("requests %v", reqs)
	}
	t.Setenv("TRIAGE_HUB_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if got, _ := c.Cache(); got != filepath.Join("/xdg", "triage", "hub") {
		t.Errorf("cache with XDG_CACHE_HOME: %s", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	home, err := os.UserHomeDir()
	if err == nil {
		if got, _ := c.Cache(); got != filepath.Join(home, ".cache", "triage", "hub") {
			t.Errorf("default cache: %s", got)
		}
	}
	if c.endpoint() != h.hub.URL {
		t.Errorf("endpoint %s", c.endpoint())
	}
	t.Setenv("HF_ENDPOINT", "")
	if c.endpoint() != DefaultEndpoint {
		t.Errorf("default endpoint %s", c.endpoint())
	}
}

// countingTransport counts the requests of a caller's own http.Client.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestConcurrentDownloadsShareOneFetch(t *testing.T) {
	h := newFakeHub(t)
	h.commit(dataRepo, "main", dataFiles())
	c := newClient(t, h)
	tr := &countingTransport{}
	c.HTTP = &http.Client{Transport: tr}
	// The files' GETs wait until every download holds or waits for its
	// blob's lock: all twelve are in flight at once, past their HEAD and
	// their look in the cache.
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	defer release()
	h.setFaults(func(h *fakeHub) { h.hold = hold })
	root, err := c.Cache()
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	paths := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := []string{"big.jsonl", "train.jsonl"}[i%2]
			paths[i], errs[i] = c.Download(context.Background(), Dataset, "acme/data", "main", f)
		}()
	}
	testenv.Wait(t, func() bool { return lockWaiters(root) == n }, fmt.Sprintf("%d downloads to hold or wait for their blob's lock", n))
	release()
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if paths[i] != paths[i%2] {
			t.Errorf("paths differ: %s, %s", paths[i], paths[i%2])
		}
		if !bytes.Equal(mustRead(t, paths[i]), dataFiles()[filepath.Base(paths[i])].data) {
			t.Errorf("%s: content differs", paths[i])
		}
	}
	reqs := h.requests()
	if count(reqs, "cdn", "GET") != 1 || count(reqs, "hub", "GET") != 1 || count(reqs, "hub", "HEAD") != n {
		t.Errorf("requests %v: want %d HEADs and one GET per file", reqs, n)
	}
	if tr.n.Load() != int64(len(reqs)) {
		t.Errorf("the caller's client made %d requests, the servers saw %d", tr.n.Load(), len(reqs))
	}
	if c.HTTP.CheckRedirect != nil {
		t.Error("the caller's client was changed")
	}
	noLeftovers(t, c)
}

// lockWaiters counts the goroutines holding or waiting for a blob lock of
// the cache at root.
func lockWaiters(root string) int {
	procLocks.Lock()
	defer procLocks.Unlock()
	n := 0
	for path, l := range procLocks.m {
		if strings.HasPrefix(path, root+string(filepath.Separator)) {
			n += l.waiters
		}
	}
	return n
}

func TestLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".locks", "x", "etag.lock")
	unlock, err := lockBlob(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := lockBlob(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lockBlob while held: %v", err)
	}
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		// The file lock alone (as another process would meet it).
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := lockFile(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("lockFile while held: %v", err)
		}
	}
	unlock()
	unlock2, err := lockBlob(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	unlock2()
	procLocks.Lock()
	left := len(procLocks.m)
	procLocks.Unlock()
	if left != 0 {
		t.Errorf("%d process locks left", left)
	}
}
