package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// maxAttempts bounds the GETs one Download makes for one blob; an attempt
// that moved the download forward is retried at once, one that did not
// after a short pause.
const maxAttempts = 5

// fetch downloads m's content into blob (through blob.incomplete),
// verified. A failed verification of a resumed download starts over once
// from zero, in case the partial file was the culprit.
func (c *Client) fetch(ctx context.Context, m *meta, blob string, t target) error {
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return fmt.Errorf("hub: cache: %w", err)
	}
	part := blob + ".incomplete"
	for try := 0; ; try++ {
		resumed, err := c.fetchPart(ctx, m, part, t)
		if err == nil {
			break
		}
		if errors.Is(err, ErrCorrupt) && resumed && try == 0 {
			continue
		}
		return err
	}
	if err := os.Rename(part, blob); err != nil {
		return fmt.Errorf("hub: cache: %w", err)
	}
	return nil
}

// fetchPart completes part (resuming it when it holds a prefix) and
// verifies it. It reports whether it resumed. On a mismatch it deletes
// part; on an interruption it keeps it for the next call.
func (c *Client) fetchPart(ctx context.Context, m *meta, part string, t target) (resumed bool, err error) {
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return false, fmt.Errorf("hub: cache: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("hub: cache: %w", cerr)
		}
	}()
	v := newVerifier(m.etag, m.size)
	fw := fileWriter{f}
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, fmt.Errorf("hub: cache: %w", err)
	}
	restart := func() error {
		n = 0
		v.reset()
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("hub: cache: %w", err)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("hub: cache: %w", err)
		}
		return nil
	}
	if m.size >= 0 && n > m.size {
		if err := restart(); err != nil {
			return false, err
		}
	}
	if n > 0 {
		// Hash the prefix already there, then go on from its end.
		resumed = true
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return resumed, fmt.Errorf("hub: cache: %w", err)
		}
		if _, err := io.CopyN(v, f, n); err != nil {
			return resumed, fmt.Errorf("hub: cache: %w", err)
		}
	}
	corrupt := func(format string, a ...any) error {
		f.Close()
		os.Remove(part)
		return errf(ErrCorrupt, "%s: %s: deleted the download; run again to retry (if it persists, the copy behind %s is bad)",
			t, fmt.Sprintf(format, a...), c.endpoint())
	}
	var lastErr error
	for attempt := 1; ; attempt++ {
		if m.size >= 0 && n == m.size {
			break
		}
		if attempt > maxAttempts {
			return resumed, fmt.Errorf("hub: %s: download interrupted at %d of %s bytes after %d attempts: %w (run again to resume from %s)",
				t, n, sizeString(m.size), maxAttempts, lastErr, part)
		}
		hdr := http.Header{"Accept-Encoding": {"identity"}}
		if n > 0 {
			hdr.Set("Range", "bytes="+strconv.FormatInt(n, 10)+"-")
		}
		resp, err := c.send(ctx, http.MethodGet, m.url, sendOpts{header: hdr, crossOrigin: true})
		if err != nil {
			if ctx.Err() != nil {
				return resumed, ctx.Err()
			}
			lastErr = err
			if err := pause(ctx, attempt); err != nil {
				return resumed, err
			}
			continue
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			if n > 0 { // the server ignored the range: start over
				if err := restart(); err != nil {
					resp.Body.Close()
					return resumed, err
				}
			}
		case resp.StatusCode == http.StatusPartialContent && n > 0:
			if start, ok := rangeStart(resp.Header.Get("Content-Range")); !ok || start != n {
				resp.Body.Close()
				lastErr = fmt.Errorf("the server answered range %d- with %q", n, resp.Header.Get("Content-Range"))
				if err := restart(); err != nil {
					return resumed, err
				}
				continue
			}
		case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && n > 0:
			resp.Body.Close()
			lastErr = fmt.Errorf("the server refused range %d-", n)
			if err := restart(); err != nil {
				return resumed, err
			}
			continue
		default:
			err := c.getError(ctx, resp, m, t)
			resp.Body.Close()
			return resumed, err
		}
		body := io.Reader(resp.Body)
		if m.size >= 0 {
			// One byte more than announced is enough to tell it is too much.
			body = io.LimitReader(body, m.size-n+1)
		}
		w, err := io.Copy(io.MultiWriter(fw, v), body)
		resp.Body.Close()
		n += w
		if m.size >= 0 && n > m.size {
			return resumed, corrupt("the hub announced %d bytes, more were served", m.size)
		}
		if err == nil {
			if m.size >= 0 && n < m.size {
				return resumed, corrupt("the hub announced %d bytes, %d were served", m.size, n)
			}
			break
		}
		if ctx.Err() != nil {
			return resumed, ctx.Err()
		}
		var we *writeError
		if errors.As(err, &we) {
			return resumed, fmt.Errorf("hub: cache: %w", we.err)
		}
		lastErr = err
		if w == 0 {
			if err := pause(ctx, attempt); err != nil {
				return resumed, err
			}
		}
	}
	if err := f.Sync(); err != nil {
		return resumed, fmt.Errorf("hub: cache: %w", err)
	}
	if got, ok := v.check(); !ok {
		return resumed, corrupt("its %s is %s, the hub announced %s", v.algo, got, v.want)
	}
	return resumed, nil
}

// getError explains a failed GET: the hub's own errors as statusError
// does, a CDN's plainly.
func (c *Client) getError(ctx context.Context, resp *http.Response, m *meta, t target) error {
	if m.hubURL && sameOrigin(resp.Request.URL, mustParse(c.endpoint())) {
		return c.statusError(ctx, resp, t.kind, t.repo, t.revision, t.file)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("hub: %s: GET %s: HTTP %d %s", t, redact(resp.Request.URL.String()), resp.StatusCode, strings.TrimSpace(string(msg)))
}

// target is the file a download is for, to name in messages.
type target struct {
	kind                 Kind
	repo, revision, file string
}

func (t target) String() string {
	return fmt.Sprintf("%s repo %s: %s at revision %s", t.kind, t.repo, t.file, t.revision)
}

func sizeString(n int64) string {
	if n < 0 {
		return "?"
	}
	return strconv.FormatInt(n, 10)
}

// pause waits a little before a retry that made no progress.
func pause(ctx context.Context, attempt int) error {
	t := time.NewTimer(time.Duration(attempt) * 200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// rangeStart reads the first byte of a "bytes START-END/TOTAL" Content-Range.
func rangeStart(cr string) (int64, bool) {
	s, ok := strings.CutPrefix(strings.TrimSpace(cr), "bytes ")
	if !ok {
		return 0, false
	}
	s, _, ok = strings.Cut(s, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// writeError marks a failure to write the cache, as opposed to reading
// the network.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

type fileWriter struct{ f *os.File }

func (w fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = &writeError{err}
	}
	return n, err
}

// verifier hashes a download as it is written, for the check the etag
// allows: sha256 for an LFS etag (64 hex digits), the git blob sha1 for a
// regular file's (40 hex digits, the size known), none else.
type verifier struct {
	h      hash.Hash
	algo   string
	want   string
	prefix []byte
}

func newVerifier(etag string, size int64) *verifier {
	switch {
	case isHex(etag, 64):
		return &verifier{h: sha256.New(), algo: "sha256", want: etag}
	case isHex(etag, 40) && size >= 0:
		v := &verifier{h: sha1.New(), algo: "git blob sha1", want: etag,
			prefix: []byte("blob " + strconv.FormatInt(size, 10) + "\x00")}
		v.h.Write(v.prefix)
		return v
	}
	return &verifier{}
}

func (v *verifier) Write(p []byte) (int, error) {
	if v.h != nil {
		v.h.Write(p)
	}
	return len(p), nil
}

func (v *verifier) reset() {
	if v.h != nil {
		v.h.Reset()
		v.h.Write(v.prefix)
	}
}

// check returns the hash and whether it is the one wanted; with nothing
// to check it passes.
func (v *verifier) check() (string, bool) {
	if v.h == nil {
		return "", true
	}
	got := hex.EncodeToString(v.h.Sum(nil))
	return got, got == v.want
}
