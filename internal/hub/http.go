package hub

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

const (
	userAgent    = "triage-hub/1 (Go; +https://github.com/triagegw/triage)"
	maxRedirects = 10
)

// sendOpts shapes one send.
type sendOpts struct {
	header http.Header
	// crossOrigin follows redirects to other origins (without the token);
	// else send stops at such a redirect and returns it, as huggingface_hub
	// does for the HEAD whose redirect to the CDN carries the metadata.
	crossOrigin bool
	// trail, when set, collects the headers of every answer, first to last.
	trail *[]http.Header
}

// send makes a request, following redirects by hand so that the token is
// sent to the hub's origin only: Go's own redirect policy would forward it
// to any port of the same host name.
func (c *Client) send(ctx context.Context, method, rawURL string, o sendOpts) (*http.Response, error) {
	hubURL, err := url.Parse(c.endpoint())
	if err != nil || hubURL.Host == "" || (hubURL.Scheme != "http" && hubURL.Scheme != "https") {
		return nil, fmt.Errorf("hub: endpoint %q is not an http(s) URL (HF_ENDPOINT?)", c.endpoint())
	}
	hc := *c.httpClient()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("hub: bad URL %q: %w", rawURL, err)
	}
	for hops := 0; ; hops++ {
		req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
		if err != nil {
			return nil, fmt.Errorf("hub: bad URL %q: %w", redact(u.String()), err)
		}
		for k, v := range o.header {
			req.Header[k] = v
		}
		req.Header.Set("User-Agent", userAgent)
		if tok := c.token(); tok != "" && sameOrigin(u, hubURL) {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &netError{url: redact(u.String()), err: unwrapURLError(err)}
		}
		if o.trail != nil {
			*o.trail = append(*o.trail, resp.Header)
		}
		loc := resp.Header.Get("Location")
		if !isRedirect(resp.StatusCode) || loc == "" {
			return resp, nil
		}
		next, err := u.Parse(loc)
		if err != nil || (next.Scheme != "http" && next.Scheme != "https") {
			resp.Body.Close()
			return nil, fmt.Errorf("hub: %s %s redirected to a bad location %q", method, redact(u.String()), redact(loc))
		}
		if !o.crossOrigin && !sameOrigin(next, u) {
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if hops >= maxRedirects {
			return nil, fmt.Errorf("hub: %s %s: more than %d redirects", method, redact(rawURL), maxRedirects)
		}
		u = next
	}
}

func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// sameOrigin tells whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && hostPort(a) == hostPort(b)
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// resolveURL is the URL of a file: {endpoint}/{datasets/}{repo}/resolve/{revision}/{file}.
func (c *Client) resolveURL(kind Kind, repo, revision, file string) string {
	parts := strings.Split(file, "/")
	for i, p := range parts {
		parts[i] = escapeSegment(p)
	}
	return c.endpoint() + "/" + kind.urlPrefix() + repo + "/resolve/" + escapeSegment(revision) + "/" + strings.Join(parts, "/")
}

// escapeSegment escapes s as one path segment ("/" too, as huggingface_hub
// does for revisions like refs/pr/1).
func escapeSegment(s string) string { return url.PathEscape(s) }

// meta is what the hub says about a file at a revision.
type meta struct {
	commit string // the commit the revision resolved to
	etag   string // the blob's name: sha256 for LFS files, git sha1 else
	size   int64  // -1 when unknown
	url    string // where to GET the content (the CDN for LFS files)
	hubURL bool   // url is on the hub's origin (its errors are the hub's)
}

// head asks the hub about a file, with a HEAD on its resolve URL.
func (c *Client) head(ctx context.Context, kind Kind, repo, revision, file string) (*meta, error) {
	var trail []http.Header
	u := c.resolveURL(kind, repo, revision, file)
	resp, err := c.send(ctx, http.MethodHead, u, sendOpts{
		header: http.Header{"Accept-Encoding": {"identity"}},
		trail:  &trail,
	})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, c.statusError(ctx, resp, kind, repo, revision, file)
	}
	m := &meta{size: -1, url: resp.Request.URL.String(), hubURL: true}
	if isRedirect(resp.StatusCode) {
		// A redirect to another origin: the CDN holding an LFS file.
		loc := resp.Header.Get("Location")
		next, err := resp.Request.URL.Parse(loc)
		if err != nil || loc == "" {
			return nil, fmt.Errorf("hub: %s repo %s: bad redirect for %s (Location %q)", kind, repo, file, redact(loc))
		}
		m.url, m.hubURL = next.String(), false
	} else if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("hub: %s repo %s: HEAD %s: unexpected HTTP %d", kind, repo, u, resp.StatusCode)
	}
	// The answers of a same-origin chain (renamed repo, cache paths) speak
	// for the file: the hub's own headers are taken from the last answer
	// that has them, ETag and Content-Length from the final one.
	h := resp.Header
	last := func(key string) string {
		for i := len(trail) - 1; i >= 0; i-- {
			if v := trail[i].Get(key); v != "" {
				return v
			}
		}
		return ""
	}
	m.commit = last("X-Repo-Commit")
	etag := last("X-Linked-Etag")
	if etag == "" {
		etag = h.Get("ETag")
	}
	m.etag = normalizeETag(etag)
	if s := last("X-Linked-Size"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("hub: %s repo %s: bad X-Linked-Size %q for %s", kind, repo, s, file)
		}
		m.size = n
	} else if s := h.Get("Content-Length"); s != "" && resp.StatusCode == http.StatusOK {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
			m.size = n
		}
	}
	switch {
	case !isCommitish(m.commit):
		return nil, fmt.Errorf("hub: %s repo %s: the answer for %s names no commit (X-Repo-Commit %q): is %s a Hugging Face hub, and no proxy in between?", kind, repo, file, m.commit, c.endpoint())
	case !validETag(m.etag):
		return nil, fmt.Errorf("hub: %s repo %s: the answer for %s has no usable ETag (%q): is %s a Hugging Face hub, and no proxy in between?", kind, repo, file, etag, c.endpoint())
	}
	return m, nil
}

// normalizeETag drops the weak prefix and the quotes of an ETag.
func normalizeETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	return strings.Trim(s, `"`)
}

// mustParse parses a URL known to be valid (send checked the endpoint).
func mustParse(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return &url.URL{}
	}
	return u
}
