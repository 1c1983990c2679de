package logsink

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Files are log files (the shadow decision logs, the usage records), one
// buffered Writer per file, opened when a config first names one and kept
// across reloads. Lines reach the file from Run's goroutine, never from
// the request path.
type Files struct {
	ctx context.Context
	wg  sync.WaitGroup

	mu    sync.Mutex
	sinks map[string]*Writer
	files []io.Closer
	// Opened, when set, is told of each file opened.
	Opened func(path string)
}

// NewFiles returns Files whose writers flush in the background until ctx
// ends.
func NewFiles(ctx context.Context) *Files { return &Files{ctx: ctx} }

// Open returns the writer of the log at path, opening (and creating) the
// file the first time; it grows without bound.
func (l *Files) Open(path string) (io.Writer, error) { return l.OpenRotating(path, 0, 0) }

// OpenRotating is Open for a file rotated by size: past maxBytes it is
// renamed PATH.1 (PATH.1 to PATH.2, and so on, keeping keep of them) and
// a new one started. maxBytes 0: never rotated. The settings of the first
// open of a path stay.
func (l *Files) OpenRotating(path string, maxBytes int64, keep int) (io.Writer, error) {
	return l.open(path, maxBytes, keep, 0o644)
}

// OpenPrivate is OpenRotating for a file only its owner may read (mode
// 0600, and so are the rotated files): a file that exists with a wider
// mode is narrowed when opened.
func (l *Files) OpenPrivate(path string, maxBytes int64, keep int) (io.Writer, error) {
	return l.open(path, maxBytes, keep, 0o600)
}

func (l *Files) open(path string, maxBytes int64, keep int, mode os.FileMode) (io.Writer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.sinks[path]; w != nil {
		return w, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := openRotating(path, maxBytes, keep, mode)
	if err != nil {
		return nil, err
	}
	w := New(f, 4<<20, time.Second)
	if l.sinks == nil {
		l.sinks = map[string]*Writer{}
	}
	l.sinks[path], l.files = w, append(l.files, f)
	l.wg.Go(func() { w.Run(l.ctx) })
	if l.Opened != nil {
		l.Opened(path)
	}
	return w, nil
}

// Dropped counts the lines dropped because a file could not keep up.
func (l *Files) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, w := range l.sinks {
		n += w.Dropped()
	}
	return n
}

// Close waits for the writers' final flushes (once the context given to
// NewFiles has ended) and closes the files.
func (l *Files) Close() error {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var first error
	for _, f := range l.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// rotating is an append-only file rotated by size. Writes come from one
// Writer's flusher, whole lines at a time (a flush never splits a line),
// so a rotation falls between lines.
type rotating struct {
	path     string
	maxBytes int64
	keep     int
	mode     os.FileMode
	f        *os.File
	size     int64
}

func openRotating(path string, maxBytes int64, keep int, mode os.FileMode) (*rotating, error) {
	r := &rotating{path: path, maxBytes: maxBytes, keep: max(keep, 1), mode: mode}
	return r, r.open()
}

func (r *rotating) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, r.mode)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if r.mode&0o077 == 0 && st.Mode().Perm()&0o077 != 0 {
		// A private file others could read (made before, or by hand):
		// narrowed before anything is written to it.
		if err := f.Chmod(r.mode); err != nil {
			f.Close()
			return err
		}
	}
	r.f, r.size = f, st.Size()
	return nil
}

func (r *rotating) Write(p []byte) (int, error) {
	if r.maxBytes > 0 && r.size > 0 && r.size+int64(len(p)) > r.maxBytes {
		if err := r.rotate(); err != nil {
			return 0, fmt.Errorf("rotating %s: %w", r.path, err)
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *rotating) rotate() error {
	if err := r.f.Close(); err != nil {
		return err
	}
	for i := r.keep - 1; i >= 1; i-- {
		_ = os.Rename(fmt.Sprintf("%s.%d", r.path, i), fmt.Sprintf("%s.%d", r.path, i+1))
	}
	if err := os.Rename(r.path, r.path+".1"); err != nil {
		return err
	}
	return r.open()
}

func (r *rotating) Close() error { return r.f.Close() }
