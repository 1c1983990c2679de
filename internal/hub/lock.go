package hub

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// procLocks holds one lock per blob lock path, for the whole process (so
// that two Clients sharing a cache agree); an entry lives while someone
// holds or waits for it.
var procLocks = struct {
	sync.Mutex
	m map[string]*procLock
}{m: map[string]*procLock{}}

type procLock struct {
	ch      chan struct{} // holds a token while the lock is held
	waiters int
}

// lockBlob takes the download lock of a blob: the process-wide mutex, then
// the lock file (flock(2) where there is one), waiting as long as ctx
// allows. The returned function releases both.
func lockBlob(ctx context.Context, path string) (unlock func(), err error) {
	procLocks.Lock()
	l := procLocks.m[path]
	if l == nil {
		l = &procLock{ch: make(chan struct{}, 1)}
		procLocks.m[path] = l
	}
	l.waiters++
	procLocks.Unlock()
	release := func() {
		procLocks.Lock()
		l.waiters--
		if l.waiters == 0 {
			delete(procLocks.m, path)
		}
		procLocks.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	unlockFile, err := lockFile(ctx, path)
	if err != nil {
		<-l.ch
		release()
		return nil, err
	}
	return func() {
		unlockFile()
		<-l.ch
		release()
	}, nil
}

// openLockFile creates (if need be) and opens a lock file.
func openLockFile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("hub: cache: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hub: cache: %w", err)
	}
	return f, nil
}
