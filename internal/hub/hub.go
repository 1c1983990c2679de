package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// DefaultEndpoint is the hub used when neither Client.Endpoint nor
// $HF_ENDPOINT says otherwise.
const DefaultEndpoint = "https://huggingface.co"

// DefaultRevision is the revision used when none is given.
const DefaultRevision = "main"

// Kind is the kind of a repository.
type Kind string

// The kinds of repositories the client handles.
const (
	Model   Kind = "model"
	Dataset Kind = "dataset"
)

func (k Kind) valid() bool { return k == Model || k == Dataset }

// urlPrefix is the path prefix of the kind's resolve URLs.
func (k Kind) urlPrefix() string {
	if k == Dataset {
		return "datasets/"
	}
	return ""
}

// Client downloads files from a Hugging Face hub. Zero fields take their
// defaults from the environment at each call; see the package comment for
// the cache layout and the concurrency guarantees.
type Client struct {
	// Endpoint is the hub's base URL: default $HF_ENDPOINT, else
	// https://huggingface.co.
	Endpoint string
	// Token is sent as "Authorization: Bearer" to the hub's own origin
	// (never to the CDN it redirects to): default $HF_TOKEN.
	Token string
	// CacheDir is the cache's root: default $TRIAGE_HUB_CACHE, else
	// $XDG_CACHE_HOME/triage/hub, else ~/.cache/triage/hub.
	CacheDir string
	// Offline forbids any request: files are served from the cache or
	// Download fails with ErrOffline. $HF_HUB_OFFLINE=1 (or true, yes, on)
	// sets it too.
	Offline bool
	// HTTP is the client requests go through (default
	// http.DefaultClient). Its CheckRedirect is not used: the client
	// follows redirects itself, to keep the token on the hub's origin.
	HTTP *http.Client
}

func (c *Client) endpoint() string {
	e := c.Endpoint
	if e == "" {
		e = os.Getenv("HF_ENDPOINT")
	}
	if e == "" {
		e = DefaultEndpoint
	}
	return strings.TrimRight(e, "/")
}

func (c *Client) token() string {
	if c.Token != "" {
		return c.Token
	}
	return os.Getenv("HF_TOKEN")
}

func (c *Client) offline() bool {
	if c.Offline {
		return true
	}
	switch strings.ToLower(strings.TrimSpace(os.Getenv("HF_HUB_OFFLINE"))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// Cache returns the absolute path of the cache's root directory (which
// need not exist yet).
func (c *Client) Cache() (string, error) {
	dir := c.CacheDir
	if dir == "" {
		dir = os.Getenv("TRIAGE_HUB_CACHE")
	}
	if dir == "" {
		if x := os.Getenv("XDG_CACHE_HOME"); x != "" && filepath.IsAbs(x) {
			dir = filepath.Join(x, "triage", "hub")
		}
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("hub: no cache directory: set TRIAGE_HUB_CACHE (%w)", err)
		}
		dir = filepath.Join(home, ".cache", "triage", "hub")
	}
	return filepath.Abs(dir)
}

// RepoDir returns the directory of a repo inside the cache:
// {cache}/{kind}s--{org}--{name}.
func (c *Client) RepoDir(kind Kind, repo string) (string, error) {
	if err := checkRepo(kind, repo); err != nil {
		return "", err
	}
	root, err := c.Cache()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, repoFolder(kind, repo)), nil
}

// Download fetches repo's file at revision (default "main": a branch, a
// tag or a commit sha) into the cache, verified, and returns its local
// path: {cache}/{kind}s--{org}--{name}/snapshots/{commit}/{file}.
func (c *Client) Download(ctx context.Context, kind Kind, repo, revision, file string) (string, error) {
	if revision == "" {
		revision = DefaultRevision
	}
	if file == "" {
		return "", fmt.Errorf("hub: %s repo %s: no file named", kind, repo)
	}
	if err := checkArgs(kind, repo, revision, file); err != nil {
		return "", err
	}
	root, err := c.Cache()
	if err != nil {
		return "", err
	}
	folder := repoFolder(kind, repo)
	storage := filepath.Join(root, folder)
	// A commit never changes: when its file is cached, no request is needed.
	if isCommit(revision) {
		if p, ok := cachedFile(storage, revision, file); ok {
			return p, nil
		}
	}
	if c.offline() {
		if p, ok := cachedRevision(storage, revision, file); ok {
			return p, nil
		}
		return "", errf(ErrOffline, "%s repo %s: %q at revision %s is not in the cache %s, and offline mode is on (HF_HUB_OFFLINE=1 or --offline): it must be fetched once with the network",
			kind, repo, file, revision, root)
	}
	m, err := c.head(ctx, kind, repo, revision, file)
	if err != nil {
		// The hub cannot answer (no connection, an outage): serve the cached
		// copy of the revision, if any, like huggingface_hub.
		if unavailable(err) && ctx.Err() == nil {
			if p, ok := cachedRevision(storage, revision, file); ok {
				return p, nil
			}
		}
		return "", err
	}
	if revision != m.commit {
		if err := writeRef(storage, revision, m.commit); err != nil {
			return "", err
		}
	}
	if p, ok := cachedFile(storage, m.commit, file); ok {
		return p, nil
	}
	blob := filepath.Join(storage, "blobs", m.etag)
	pointer := filepath.Join(storage, "snapshots", m.commit, filepath.FromSlash(file))
	unlock, err := lockBlob(ctx, filepath.Join(root, ".locks", folder, m.etag+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	// Another goroutine or process may have fetched the blob meanwhile.
	if !isFile(blob) {
		if err := c.fetch(ctx, m, blob, target{kind, repo, revision, file}); err != nil {
			return "", err
		}
	}
	if err := linkPointer(blob, pointer); err != nil {
		return "", err
	}
	return pointer, nil
}

// ListFiles lists a repo's files at revision (default "main"), from
// {endpoint}/api/{models|datasets}/{repo}/revision/{revision}, and returns
// the commit the revision resolved to (recorded in the cache's refs, as
// Download records it). It needs the network: offline it fails with
// ErrOffline.
func (c *Client) ListFiles(ctx context.Context, kind Kind, repo, revision string) (commit string, files []string, err error) {
	if revision == "" {
		revision = DefaultRevision
	}
	if err := checkArgs(kind, repo, revision, ""); err != nil {
		return "", nil, err
	}
	if c.offline() {
		return "", nil, errf(ErrOffline, "%s repo %s: listing files needs the network, and offline mode is on (HF_HUB_OFFLINE=1 or --offline)", kind, repo)
	}
	u := c.endpoint() + "/api/" + string(kind) + "s/" + repo + "/revision/" + escapeSegment(revision)
	resp, err := c.send(ctx, http.MethodGet, u, sendOpts{header: http.Header{"Accept": {"application/json"}}})
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, c.statusError(ctx, resp, kind, repo, revision, "")
	}
	var info struct {
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
		} `json:"siblings"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&info); err != nil {
		return "", nil, fmt.Errorf("hub: %s repo %s: the file list from %s is not JSON: %w", kind, repo, u, err)
	}
	if !isCommitish(info.SHA) {
		return "", nil, fmt.Errorf("hub: %s repo %s: the file list from %s names no commit (sha %q): is %s a Hugging Face hub?", kind, repo, u, info.SHA, c.endpoint())
	}
	files = make([]string, 0, len(info.Siblings))
	for _, s := range info.Siblings {
		files = append(files, s.RFilename)
	}
	// Remember what the revision resolved to, as Download does, so that
	// files later fetched at that commit are found offline by revision.
	if revision != info.SHA {
		if root, err := c.Cache(); err == nil {
			if err := writeRef(filepath.Join(root, repoFolder(kind, repo)), revision, info.SHA); err != nil {
				return "", nil, err
			}
		}
	}
	return info.SHA, files, nil
}
