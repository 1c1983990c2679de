// Package atomicfile writes files so that readers never see half of one:
// the content goes to a temporary file beside the target (a unique name,
// so concurrent writers do not share it), is synced, and is renamed over
// the target only when whole. On error the temporary file is removed and
// the target is left as it was.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write writes path (mode 0644) through write.
func Write(path string, write func(io.Writer) error) error {
	return WriteMode(path, 0o644, write)
}

// WriteMode writes path with the given mode through write (0600 for
// files that hold secrets' hashes or accounts).
func WriteMode(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// WriteBytes writes b to path.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
