//go:build unix

package label

import (
	"errors"
	"os"
	"syscall"
)

// lock takes an exclusive lock on f for as long as f is open (the kernel
// drops it when the process dies); errLocked when another open file of
// the same path holds it.
func lock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}
