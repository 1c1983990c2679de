//go:build !cgo || !ort

package onnx

import "context"

// This file is the package without the runtime (built without cgo or
// without the `ort` tag): the same API, every call into the runtime
// failing with errNotBuilt (which wraps classifier.ErrUnavailable and says
// to rebuild with -tags ort and CGO_ENABLED=1).

const available = false

// session is empty: this build makes no Encoder.
type session struct{}

// Init loads the ONNX Runtime library; this build has no runtime.
func Init(path string) error { return errNotBuilt }

// RuntimeVersion is the loaded ONNX Runtime's version: "" in this build.
func RuntimeVersion() string { return "" }

// NewEncoder loads an encoder graph; this build has no runtime.
func NewEncoder(modelPath string, m Manifest, opts Options, modelsDir string) (*Encoder, error) {
	return nil, errNotBuilt
}

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

// embedBatch embeds a batch in one Run; this build has no runtime.
func (e *Encoder) embedBatch(ctx context.Context, batch [][]int32, dst [][]float32) ([][]float32, error) {
	return dst, errNotBuilt
}
