//go:build !unix

package models

import (
	"errors"
	"os"
)

// mapsFiles: ReadTable maps table files on this platform.
const mapsFiles = false

// mapFile is not supported here: ReadTable reads tables into the heap.
func mapFile(*os.File, int) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmapFile([]byte) {}

func releasePages([]byte) {}
