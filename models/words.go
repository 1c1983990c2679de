package models

import (
	"fmt"

	"github.com/triagegw/triage/internal/wordindex"
)

// wordIndex is a table's extra words (word i is row vocab+i), held in one
// blob and hashed (see wordindex).
type wordIndex = wordindex.Index

// newWordIndex indexes extra words, rejecting empty and repeated ones.
func newWordIndex(words []string) (wordIndex, error) {
	x, err := wordindex.New(words)
	if err != nil {
		return x, fmt.Errorf("extra %w", err)
	}
	return x, nil
}

// buildWordIndex builds x over the blob and ends a file reader set.
func buildWordIndex(x *wordIndex) error {
	if err := x.Build(); err != nil {
		return fmt.Errorf("extra %w", err)
	}
	return nil
}
