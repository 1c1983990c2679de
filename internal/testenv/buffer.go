package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that a writer (a child process's output
// copier, a log, a worker) and the test reading it may use at the same
// time. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
