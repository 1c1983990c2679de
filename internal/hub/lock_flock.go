//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package hub

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// lockFile takes an exclusive flock(2) on path, polling so that ctx can
// end the wait. Where the file system has no locks (some network file
// systems), it goes on with the process-wide lock alone.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := openLockFile(path)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return func() {
				syscall.Flock(fd, syscall.LOCK_UN)
				f.Close()
			}, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				f.Close()
				return nil, ctx.Err()
			case <-t.C:
			}
		default: // ENOLCK, ENOTSUP, ...
			return func() { f.Close() }, nil
		}
	}
}
