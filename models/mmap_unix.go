//go:build unix

package models

import (
	"os"
	"syscall"
)

// mapsFiles: ReadTable maps table files on this platform.
const mapsFiles = true

// mapFile maps the first size bytes of f read-only and shared: pages come
// from the page cache and are never copied.
func mapFile(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
}

// unmapFile unmaps what mapFile mapped. Nothing may use b afterwards.
func unmapFile(b []byte) { _ = syscall.Munmap(b) }
