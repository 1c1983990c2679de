package models

import "syscall"

// releasePages drops b's pages from the process's resident set: the next
// access faults them back in from the page cache (b is a clean, read-only
// file mapping, so nothing is lost). It is safe while other goroutines
// read b.
func releasePages(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }
