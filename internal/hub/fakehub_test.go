package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeHub is a Hugging Face hub in miniature: resolve URLs (HEAD and GET),
// LFS files redirected to a CDN on another origin, the API's revision
// endpoint, gated repos, renamed repos, and faults (cut connections,
// corrupt bytes, ignored ranges, wrong sizes).
type fakeHub struct {
	t   *testing.T
	hub *httptest.Server
	cdn *httptest.Server

	mu    sync.Mutex
	repos map[string]*fakeRepo // "datasets/acme/data", "models/acme/m"
	blobs map[string][]byte    // sha256 → content, for the CDN
	seq   int
	log   []fakeReq

	// Faults.
	cutAfter    int           // > 0: GET bodies stop after this many bytes ...
	cutTimes    int           // ... for this many responses (then whole)
	corrupt     bool          // GET bodies have a byte flipped
	ignoreRange bool          // GETs answer 200 whole whatever the Range
	sizeDelta   int           // added to the announced sizes
	noErrorCode bool          // 404s without X-Error-Code (the API must tell)
	hold        chan struct{} // when set, GET bodies start once it is closed
	down        bool          // every request gets 503
}

type fakeFile struct {
	data []byte
	lfs  bool
}

type fakeRepo struct {
	gated     bool                           // needs the token goodToken
	renamedTo string                         // resolve redirects (relatively) to this repo
	refs      map[string]string              // branch or tag → commit
	trees     map[string]map[string]fakeFile // commit → file → content
}

// fakeReq is one request as a server saw it.
type fakeReq struct {
	server, method, path, auth, rng string
}

const goodToken = "hf_good"

func newFakeHub(t *testing.T) *fakeHub {
	t.Helper()
	h := &fakeHub{t: t, repos: map[string]*fakeRepo{}, blobs: map[string][]byte{}}
	h.hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	t.Cleanup(func() {
		h.hub.Close()
		h.cdn.Close()
	})
	return h
}

// commit makes a commit of files in repo ("datasets/acme/data") and
// points ref at it; it returns the commit's sha.
func (h *fakeHub) commit(repo, ref string, files map[string]fakeFile) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repo]
	if r == nil {
		r = &fakeRepo{refs: map[string]string{}, trees: map[string]map[string]fakeFile{}}
		h.repos[repo] = r
	}
	h.seq++
	sum := sha1.Sum([]byte(fmt.Sprintf("%s %s %d", repo, ref, h.seq)))
	sha := hex.EncodeToString(sum[:])
	r.refs[ref] = sha
	r.trees[sha] = files
	for _, f := range files {
		if f.lfs {
			h.blobs[sha256Hex(f.data)] = f.data
		}
	}
	return sha
}

// setRef points ref of repo at an existing commit (a tag, say).
func (h *fakeHub) setRef(repo, ref, sha string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repos[repo].refs[ref] = sha
}

func (h *fakeHub) repo(key string) *fakeRepo {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.repos[key]
}

func (h *fakeHub) record(server string, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, fakeReq{server, r.Method, r.URL.EscapedPath(), r.Header.Get("Authorization"), r.Header.Get("Range")})
}

// requests returns the requests seen so far and forgets them.
func (h *fakeHub) requests() []fakeReq {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.log
	h.log = nil
	return l
}

func (h *fakeHub) setFaults(f func(h *fakeHub)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func gitBlobSHA1(b []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(b))
	s.Write(b)
	return hex.EncodeToString(s.Sum(nil))
}

// segments splits an escaped path into unescaped segments.
func segments(escaped string) []string {
	parts := strings.Split(strings.Trim(escaped, "/"), "/")
	for i, p := range parts {
		if u, err := url.PathUnescape(p); err == nil {
			parts[i] = u
		}
	}
	return parts
}

func (h *fakeHub) fail(w http.ResponseWriter, status int, code, msg string) {
	h.mu.Lock()
	noCode := h.noErrorCode
	h.mu.Unlock()
	if code != "" && !noCode {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// lookup finds a repo and checks the token: it writes the error and
// returns nil when the request cannot go on.
func (h *fakeHub) lookup(w http.ResponseWriter, r *http.Request, key string) *fakeRepo {
	repo := h.repo(key)
	if repo == nil {
		h.fail(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil
	}
	if repo.gated {
		switch r.Header.Get("Authorization") {
		case "Bearer " + goodToken:
		case "":
			h.fail(w, http.StatusUnauthorized, "GatedRepo", "Access to this repo is restricted: you must be authenticated")
			return nil
		default:
			h.fail(w, http.StatusForbidden, "GatedRepo", "Access to this repo is restricted: you have not been granted access")
			return nil
		}
	}
	return repo
}

func (h *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	h.record("hub", r)
	h.mu.Lock()
	down := h.down
	h.mu.Unlock()
	if down {
		http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
		return
	}
	seg := segments(r.URL.EscapedPath())
	if len(seg) > 0 && seg[0] == "api" {
		h.serveAPI(w, r, seg[1:])
		return
	}
	// [datasets/]org/name/resolve/rev/file...
	prefix := "models/"
	if len(seg) > 0 && seg[0] == "datasets" {
		prefix, seg = "datasets/", seg[1:]
	}
	if len(seg) < 5 || seg[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	key := prefix + seg[0] + "/" + seg[1]
	rev, file := seg[3], strings.Join(seg[4:], "/")
	repo := h.lookup(w, r, key)
	if repo == nil {
		return
	}
	if repo.renamedTo != "" {
		to := "/" + strings.TrimPrefix(prefix, "models/") + repo.renamedTo + "/resolve/" + url.PathEscape(rev) + "/" + file
		http.Redirect(w, r, to, http.StatusTemporaryRedirect)
		return
	}
	h.mu.Lock()
	commit := repo.refs[rev]
	if commit == "" && repo.trees[rev] != nil {
		commit = rev
	}
	f, ok := repo.trees[commit][file]
	delta := h.sizeDelta
	h.mu.Unlock()
	if commit == "" {
		h.fail(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	if !ok {
		h.fail(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if f.lfs {
		sum := sha256Hex(f.data)
		pointer := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sum, len(f.data))
		w.Header().Set("ETag", `"`+gitBlobSHA1([]byte(pointer))+`"`)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.data)+delta))
		w.Header().Set("Location", h.cdn.URL+"/cdn/"+sum+"?X-Amz-Signature=secret")
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitBlobSHA1(f.data)+`"`)
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Length", strconv.Itoa(len(f.data)+delta))
		w.WriteHeader(http.StatusOK)
		return
	}
	h.serveBytes(w, r, f.data)
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.record("cdn", r)
	sum := strings.TrimPrefix(r.URL.Path, "/cdn/")
	h.mu.Lock()
	data, ok := h.blobs[sum]
	h.mu.Unlock()
	if !ok || r.URL.Query().Get("X-Amz-Signature") != "secret" {
		http.Error(w, "AccessDenied", http.StatusForbidden)
		return
	}
	h.serveBytes(w, r, data)
}

// serveBytes answers a GET with data, honouring "Range: bytes=N-" and the
// faults.
func (h *fakeHub) serveBytes(w http.ResponseWriter, r *http.Request, data []byte) {
	h.mu.Lock()
	corrupt, ignoreRange, hold := h.corrupt, h.ignoreRange, h.hold
	cut := -1
	if h.cutTimes > 0 && h.cutAfter > 0 {
		h.cutTimes--
		cut = h.cutAfter
	}
	h.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if corrupt {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0x55
	}
	status, body := http.StatusOK, data
	if rng := r.Header.Get("Range"); rng != "" && !ignoreRange {
		start, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rng, "bytes="), "-"))
		if err != nil || start < 0 {
			http.Error(w, "bad range", http.StatusBadRequest)
			return
		}
		if start >= len(data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		status, body = http.StatusPartialContent, data[start:]
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if cut >= 0 && cut < len(body) {
		w.Write(body[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-body
	}
	w.Write(body)
}

// serveAPI answers GET /api/{models|datasets}/{org}/{name}/revision/{rev}.
func (h *fakeHub) serveAPI(w http.ResponseWriter, r *http.Request, seg []string) {
	if len(seg) != 5 || (seg[0] != "models" && seg[0] != "datasets") || seg[3] != "revision" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	key := seg[0] + "/" + seg[1] + "/" + seg[2]
	repo := h.lookup(w, r, key)
	if repo == nil {
		return
	}
	rev := seg[4]
	h.mu.Lock()
	commit := repo.refs[rev]
	if commit == "" && repo.trees[rev] != nil {
		commit = rev
	}
	var names []string
	for name := range repo.trees[commit] {
		names = append(names, name)
	}
	h.mu.Unlock()
	if commit == "" {
		h.fail(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	sort.Strings(names)
	type sibling struct {
		RFilename string `json:"rfilename"`
	}
	sib := make([]sibling, len(names))
	for i, n := range names {
		sib[i] = sibling{n}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": seg[1] + "/" + seg[2], "sha": commit, "siblings": sib})
}
