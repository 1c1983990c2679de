package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The errors Download and ListFiles wrap; test them with errors.Is.
var (
	// ErrAuth: the hub refused the request (401 or 403): the repo is gated
	// or private and no token, or a token without access, was sent.
	ErrAuth = errors.New("gated or private: set HF_TOKEN")
	// ErrRepoNotFound: no such repo (or it is private and no token was sent).
	ErrRepoNotFound = errors.New("repository not found")
	// ErrRevisionNotFound: the repo has no such branch, tag or commit.
	ErrRevisionNotFound = errors.New("revision not found")
	// ErrFileNotFound: the revision has no such file.
	ErrFileNotFound = errors.New("file not found")
	// ErrOffline: offline mode is on and the cache cannot answer.
	ErrOffline = errors.New("offline")
	// ErrCorrupt: the downloaded bytes do not match the announced size or
	// hash; the partial download was deleted.
	ErrCorrupt = errors.New("download does not match its checksum")
)

// hubError is an error with a full message that matches a sentinel.
type hubError struct {
	kind error
	msg  string
}

func (e *hubError) Error() string { return e.msg }
func (e *hubError) Unwrap() error { return e.kind }

func errf(kind error, format string, a ...any) error {
	return &hubError{kind: kind, msg: "hub: " + fmt.Sprintf(format, a...)}
}

// netError is a request that got no HTTP answer at all.
type netError struct {
	url string
	err error
}

func (e *netError) Error() string {
	return fmt.Sprintf("hub: cannot reach %s: %v (set HF_HUB_OFFLINE=1 to use only the cache)", e.url, e.err)
}
func (e *netError) Unwrap() error { return e.err }

// statusError explains a failed answer of the hub about repo (and file,
// when not empty). For a 404 on a file it asks the API whether the repo or
// the revision is what is missing, and names a few of the files there are.
func (c *Client) statusError(ctx context.Context, resp *http.Response, kind Kind, repo, revision, file string) error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" && resp.Request != nil && resp.Request.Method != http.MethodHead {
		var body struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &body) == nil {
			msg = body.Error
		}
	}
	status := resp.StatusCode
	detail := fmt.Sprintf("HTTP %d", status)
	if msg != "" {
		detail += ": " + msg
	}
	name := fmt.Sprintf("%s repo %s", kind, repo)
	lowMsg := strings.ToLower(msg)
	switch {
	case code == "RepoNotFound" || (code == "" && file == "" && status == http.StatusNotFound && !strings.Contains(lowMsg, "rev")):
		hint := ""
		if c.token() == "" {
			hint = "; if it is private or gated, set HF_TOKEN"
		}
		return errf(ErrRepoNotFound, "no %s on %s (%s%s)", name, c.endpoint(), detail, hint)
	case code == "RevisionNotFound" || (code == "" && file == "" && status == http.StatusNotFound):
		return errf(ErrRevisionNotFound, "no revision %q in %s (%s)", revision, name, detail)
	case code == "GatedRepo" || status == http.StatusUnauthorized || status == http.StatusForbidden:
		hint := "no token was sent"
		if c.token() != "" {
			hint = "the token sent has no access: accept the repo's conditions on its page, or use a token with read access"
		}
		return errf(ErrAuth, "%s is %v (%s; %s)", name, ErrAuth, detail, hint)
	case status == http.StatusNotFound || code == "EntryNotFound":
		// Ask the API which is missing (the repo, the revision or the file),
		// and name a few of the files there are.
		_, files, err := c.ListFiles(ctx, kind, repo, revision)
		if code != "EntryNotFound" && err != nil &&
			(errors.Is(err, ErrRepoNotFound) || errors.Is(err, ErrRevisionNotFound) || errors.Is(err, ErrAuth)) {
			return err
		}
		return errf(ErrFileNotFound, "no file %q in %s at revision %s%s", file, name, revision, filesHint(files))
	}
	return &statusErr{status: status, msg: fmt.Sprintf("hub: %s: %s %s: %s", name, resp.Request.Method, redact(resp.Request.URL.String()), detail)}
}

// statusErr is an HTTP error of the hub that says nothing of the repo.
type statusErr struct {
	status int
	msg    string
}

func (e *statusErr) Error() string { return e.msg }

// unavailable tells whether err means the hub could not answer (no
// connection, an outage, a rate limit), so that a cached copy may serve.
func unavailable(err error) bool {
	var ne *netError
	var se *statusErr
	return errors.As(err, &ne) || errors.As(err, &se) && (se.status >= 500 || se.status == http.StatusTooManyRequests)
}

// filesHint names a few of a revision's files, for a file not found.
func filesHint(files []string) string {
	if len(files) == 0 {
		return ""
	}
	const most = 10
	more := ""
	if len(files) > most {
		more = fmt.Sprintf(", and %d more", len(files)-most)
		files = files[:most]
	}
	return " (it has " + strings.Join(files, ", ") + more + ")"
}

// redact drops a URL's query, where CDNs carry their signatures.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

// Unavailable reports whether err means the hub could not answer (no
// connection, an outage, a rate limit), as opposed to a refusal or a
// missing repo, revision or file: a caller may then fall back to what the
// cache holds.
func Unavailable(err error) bool { return unavailable(err) }
