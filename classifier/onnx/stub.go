//go:build !ort

package onnx

import (
	"context"
	"time"
)

// This file is the package without the `ort` build tag: the same API,
// every call into the runtime failing with errNotBuilt (which wraps
// classifier.ErrUnavailable and says to rebuild with -tags ort).

const available = false

// Init loads the ONNX Runtime library; this build has no runtime.
func Init(path string) error { return errNotBuilt }

// RuntimeVersion is the loaded ONNX Runtime's version: "" in this build.
func RuntimeVersion() string { return "" }

// Encoder runs one ONNX encoder graph; this build cannot make one.
type Encoder struct {
	m Manifest
}

// NewEncoder loads an encoder graph; this build has no runtime.
func NewEncoder(modelPath string, m Manifest, opts Options, modelsDir string) (*Encoder, error) {
	return nil, errNotBuilt
}

// Manifest is the encoder's manifest.
func (e *Encoder) Manifest() Manifest { return e.m }

// Path is the graph's file.
func (e *Encoder) Path() string { return "" }

// Dims is the embedding's length.
func (e *Encoder) Dims() int { return e.m.Dims }

// MaxTokens is the longest input, special tokens included.
func (e *Encoder) MaxTokens() int { return e.m.MaxTokens }

// LoadTime is how long the runtime took to load the graph.
func (e *Encoder) LoadTime() time.Duration { return 0 }

// Options are the options in effect.
func (e *Encoder) Options() Options { return Options{} }

// Close releases the session.
func (e *Encoder) Close() error { return nil }

// Embed writes the embedding of ids into dst; this build has no runtime.
func (e *Encoder) Embed(ctx context.Context, ids []int32, dst []float32) ([]float32, error) {
	return dst, errNotBuilt
}

// HiddenStates writes the last hidden state of ids into dst; this build
// has no runtime.
func (e *Encoder) HiddenStates(ctx context.Context, ids []int32, dst []float32) ([]float32, error) {
	return dst, errNotBuilt
}
