package onnx

import (
	"sync/atomic"
	"time"
)

// Encoder runs one ONNX encoder graph: token ids in, one unit-length
// vector out. It is safe for concurrent use. Only NewEncoder makes one, and
// only in a build with the runtime (cgo and the `ort` tag); the runtime's
// part, session, is declared in ort.go, and is empty in stub.go.
type Encoder struct {
	m        Manifest // with defaults
	path     string
	opts     Options
	loadTime time.Duration
	closed   atomic.Bool
	session
}

// Manifest is the encoder's manifest, optional fields filled in.
func (e *Encoder) Manifest() Manifest { return e.m }

// Path is the graph's file.
func (e *Encoder) Path() string { return e.path }

// Dims is the embedding's length.
func (e *Encoder) Dims() int { return e.m.Dims }

// MaxTokens is the longest input, special tokens included.
func (e *Encoder) MaxTokens() int { return e.m.MaxTokens }

// LoadTime is how long ONNX Runtime took to load and optimise the graph.
func (e *Encoder) LoadTime() time.Duration { return e.loadTime }

// Options are the options in effect, defaults filled in.
func (e *Encoder) Options() Options { return e.opts }

// grow returns v with length n, reallocated when its capacity is short.
func grow(v []float32, n int) []float32 {
	if cap(v) < n {
		return make([]float32, n)
	}
	return v[:n]
}
