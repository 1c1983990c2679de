//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package hub

import "context"

// lockFile creates the lock file but cannot lock it on this system: the
// process-wide lock alone serializes downloads of a blob.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := openLockFile(path)
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}
