//go:build !unix

package label

import (
	"errors"
	"os"
)

// lock on systems without flock: a PATH.lock file made exclusively, and
// removed by Close (a crash leaves it: remove it by hand).
func lock(f *os.File) error {
	l, err := os.OpenFile(f.Name()+".lock", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return errLocked
	}
	if err != nil {
		return err
	}
	lockMu.Lock()
	lockFiles[f] = l.Name()
	lockMu.Unlock()
	return l.Close()
}
