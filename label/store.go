package label

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// errLocked is lock's error for a labels file another process holds.
var errLocked = errors.New("locked")

// lockFiles are the lock files of systems without flock, by labels file.
var (
	lockMu    sync.Mutex
	lockFiles = map[*os.File]string{}
)

// Labelled is one line of the labels file: the standard labelled JSONL
// (text, label, source, id), with when it was labelled and, for a label a
// model proposed (Propose), by which ("model:POOL"; empty: a person on
// the page).
type Labelled struct {
	Text     string    `json:"text"`
	Label    string    `json:"label"`
	Source   string    `json:"source"`
	ID       string    `json:"id"`
	At       time.Time `json:"labelled_at"`
	Labeller string    `json:"labeller,omitempty"`
}

// unsureLine is one line of the not-sure file (PATH.unsure): an item the
// labeller could not decide, kept out of the labels and not asked again.
type unsureLine struct {
	ID       string    `json:"id"`
	At       time.Time `json:"at"`
	Labeller string    `json:"labeller,omitempty"`
}

// file is an append-only JSONL file of one kind of mark, synced per line;
// undo truncates its last line.
type file struct {
	f    *os.File
	size int64
}

func openFile(path string) (*file, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &file{f: f}, nil
}

// read calls fn for each whole line; a last line without a newline (a
// write the process died in, never acknowledged) is cut off the file.
// It leaves the offset at the end.
func (w *file) read(fn func(n int, line []byte, end int64) error) (cut int, err error) {
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	var off int64
	err = readLines(w.f, func(n int, line []byte, whole bool) error {
		if !whole {
			cut = len(line)
			return nil
		}
		off += int64(len(line)) + 1
		if len(bytes.TrimSpace(line)) == 0 {
			return nil
		}
		return fn(n, line, off)
	})
	if err != nil {
		return 0, err
	}
	if cut > 0 {
		if err := w.f.Truncate(off); err != nil {
			return 0, err
		}
		if err := w.f.Sync(); err != nil {
			return 0, err
		}
	}
	w.size = off
	_, err = w.f.Seek(off, io.SeekStart)
	return cut, err
}

// append writes v as one line and syncs it; it returns the offset the
// line starts at.
func (w *file) append(v any) (int64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	start := w.size
	n, err := w.f.WriteAt(append(b, '\n'), start)
	if err == nil {
		err = w.f.Sync()
	}
	if err != nil {
		_ = w.f.Truncate(start) // leave no part of it
		return 0, fmt.Errorf("%s: %w", w.f.Name(), err)
	}
	w.size += int64(n)
	return start, nil
}

// truncate removes what follows off (the last line), synced.
func (w *file) truncate(off int64) error {
	if err := w.f.Truncate(off); err != nil {
		return err
	}
	if err := w.f.Sync(); err != nil {
		return err
	}
	w.size = off
	return nil
}

func (w *file) close() error { return w.f.Close() }
