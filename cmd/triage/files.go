package main

import (
	"io"
	"os"

	"github.com/triagegw/triage/internal/atomicfile"
)

// copyOut copies src to dst, atomically (internal/atomicfile).
func copyOut(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Write(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}
