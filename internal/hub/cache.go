package hub

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// checkArgs validates what Download and ListFiles are given, so that no
// name can reach outside its place in the cache or the URL.
func checkArgs(kind Kind, repo, revision, file string) error {
	if err := checkRepo(kind, repo); err != nil {
		return err
	}
	if err := checkRelPath(revision); err != nil {
		return fmt.Errorf("hub: revision %q: %w", revision, err)
	}
	if file != "" {
		if err := checkRelPath(file); err != nil {
			return fmt.Errorf("hub: file %q: %w", file, err)
		}
	}
	return nil
}

func checkRepo(kind Kind, repo string) error {
	if !kind.valid() {
		return fmt.Errorf("hub: kind %q: want %q or %q", kind, Model, Dataset)
	}
	parts := strings.Split(repo, "/")
	if len(parts) > 2 {
		return fmt.Errorf("hub: repo %q: want NAME or ORG/NAME", repo)
	}
	for _, p := range parts {
		if !validRepoPart(p) {
			return fmt.Errorf("hub: repo %q: want NAME or ORG/NAME of letters, digits, '-', '_' and '.' (no '--' or '..')", repo)
		}
	}
	return nil
}

func validRepoPart(p string) bool {
	if p == "" || len(p) > 96 || strings.Contains(p, "--") || strings.Contains(p, "..") {
		return false
	}
	for i := 0; i < len(p); i++ {
		b := p[i]
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		case (b == '-' || b == '_' || b == '.') && i > 0:
		default:
			return false
		}
	}
	return true
}

// checkRelPath accepts a relative slash-separated path without empty, "."
// or ".." segments, backslashes or control characters.
func checkRelPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("control character or backslash")
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("want a relative path without empty, '.' or '..' segments")
		}
	}
	return nil
}

// repoFolder is a repo's directory name in the cache, as huggingface_hub
// names it: datasets--org--name, models--name.
func repoFolder(kind Kind, repo string) string {
	return string(kind) + "s--" + strings.ReplaceAll(repo, "/", "--")
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// isCommit tells whether a revision is a full commit sha (immutable).
func isCommit(rev string) bool { return isHex(rev, 40) || isHex(rev, 64) }

// isCommitish is isCommit for what the hub names as a commit.
func isCommitish(s string) bool { return isCommit(s) }

// validETag accepts an etag as a blob's file name.
func validETag(e string) bool {
	if e == "" || len(e) > 128 || e == "." || e == ".." {
		return false
	}
	for i := 0; i < len(e); i++ {
		b := e[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.') {
			return false
		}
	}
	return !strings.HasSuffix(e, ".incomplete") && !strings.HasSuffix(e, ".lock")
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// cachedFile returns the snapshot path of file at commit if it is there
// (and, being a link, leads to a blob).
func cachedFile(storage, commit, file string) (string, bool) {
	p := filepath.Join(storage, "snapshots", commit, filepath.FromSlash(file))
	return p, isFile(p)
}

// cachedRevision serves file at revision from the cache alone: a commit
// names its snapshot, a branch or tag goes through refs/{revision}.
func cachedRevision(storage, revision, file string) (string, bool) {
	commit := revision
	if !isCommit(revision) {
		b, err := os.ReadFile(filepath.Join(storage, "refs", filepath.FromSlash(revision)))
		if err != nil {
			return "", false
		}
		commit = strings.TrimSpace(string(b))
		if !isCommit(commit) {
			return "", false
		}
	}
	return cachedFile(storage, commit, file)
}

// writeRef records that revision resolved to commit, unless it already says so.
func writeRef(storage, revision, commit string) error {
	p := filepath.Join(storage, "refs", filepath.FromSlash(revision))
	if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("hub: cache: %w", err)
	}
	tmp := tempName(p)
	if err := os.WriteFile(tmp, []byte(commit), 0o644); err != nil {
		return fmt.Errorf("hub: cache: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hub: cache: %w", err)
	}
	return nil
}

var tempSeq atomic.Uint64

// tempName is a name beside p that no other writer uses.
func tempName(p string) string {
	return p + ".tmp-" + strconv.Itoa(os.Getpid()) + "-" +
		strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatUint(tempSeq.Add(1), 36)
}

// linkPointer makes pointer (a snapshot's file) lead to blob: a relative
// symlink, or a copy where symlinks cannot be made. It replaces whatever
// was there, atomically.
func linkPointer(blob, pointer string) error {
	if err := os.MkdirAll(filepath.Dir(pointer), 0o755); err != nil {
		return fmt.Errorf("hub: cache: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(pointer), blob)
	if err != nil {
		return fmt.Errorf("hub: cache: %w", err)
	}
	tmp := tempName(pointer)
	if err := os.Symlink(rel, tmp); err != nil {
		if err := copyFile(blob, tmp); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("hub: cache: %w", err)
		}
	}
	if err := os.Rename(tmp, pointer); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hub: cache: %w", err)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
