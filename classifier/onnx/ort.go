//go:build cgo && ort

package onnx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/triagegw/triage/classifier"
)

const available = true

var (
	initMu   sync.Mutex
	initPath string // the library the environment was created from
	initErr  error  // kept: a failed load is not retried
	initDone bool
)

// Init loads the ONNX Runtime library at path and creates the runtime's
// environment, once per process. Once a library has been loaded (or its
// loading has failed), later calls with the same path return that result
// and calls with another path fail: one process holds one runtime. A path
// with no file loads nothing and may be retried with another. An error
// that the library is missing or unusable names the path, says how to get
// the library and wraps classifier.ErrUnavailable.
func Init(path string) error {
	initMu.Lock()
	defer initMu.Unlock()
	if initDone {
		if path != initPath {
			return fmt.Errorf("onnx: ONNX Runtime is already loaded from %s; cannot load %s too (one runtime per process)", initPath, path)
		}
		return initErr
	}
	if _, err := os.Stat(path); err != nil {
		// Nothing was loaded: a later call may name another library.
		return fmt.Errorf("%w: ONNX Runtime library %s: %v (run scripts/fetch-ort.sh, or set %s to a libonnxruntime of version 1.24 or later)",
			classifier.ErrUnavailable, path, err, LibraryEnv)
	}
	initDone, initPath = true, path
	ort.SetSharedLibraryPath(path)
	// Errors come back as Go errors; the runtime's own log (to stderr)
	// would repeat them outside the gateway's logs.
	if err := ort.InitializeEnvironment(ort.WithLogLevelFatal()); err != nil {
		initErr = fmt.Errorf("%w: loading ONNX Runtime from %s: %v (it must be version 1.24 or later: scripts/fetch-ort.sh fetches 1.24.3)",
			classifier.ErrUnavailable, path, err)
		return initErr
	}
	return nil
}

// ensureInit loads the runtime for NewEncoder: the library opts.Library
// names (which must be the one loaded, if one is), else the one loaded
// already, else LibraryPath(opts, modelsDir).
func ensureInit(opts Options, modelsDir string) error {
	if opts.Library == "" {
		initMu.Lock()
		loaded, err := initDone, initErr
		initMu.Unlock()
		if loaded {
			return err
		}
	}
	return Init(LibraryPath(opts, modelsDir))
}

// RuntimeVersion is the loaded ONNX Runtime's version ("" before Init).
func RuntimeVersion() string {
	initMu.Lock()
	defer initMu.Unlock()
	if !initDone || initErr != nil {
		return ""
	}
	return ort.GetVersion()
}

// session is an Encoder's part in the runtime.
type session struct {
	sess    *ort.DynamicAdvancedSession
	sem     chan struct{} // a slot per Run in flight
	scratch sync.Pool     // *runScratch
}

// runScratch holds one Run's buffers; the tensors wrap them.
type runScratch struct {
	a, b, c []int64   // bert: ids, mask, types; use: indices, values
	out     []float32 // the graph's output
}

// NewEncoder loads the graph at modelPath, described by m, into an ONNX
// Runtime session. It loads the runtime first unless Init has: from
// LibraryPath(opts, modelsDir); modelsDir may be "" when the runtime is
// loaded already or opts or $TRIAGE_ORT_LIB name the library.
func NewEncoder(modelPath string, m Manifest, opts Options, modelsDir string) (*Encoder, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", modelPath, err)
	}
	if err := ensureInit(opts, modelsDir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(modelPath); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	m = m.withDefaults()
	opts = opts.withDefaults()
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: session options: %w", err)
	}
	defer so.Destroy()
	if err := so.SetIntraOpNumThreads(opts.Threads); err != nil {
		return nil, fmt.Errorf("onnx: intra-op threads %d: %w", opts.Threads, err)
	}
	if err := so.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnx: inter-op threads: %w", err)
	}
	if !opts.Spin {
		for _, k := range []string{"session.intra_op.allow_spinning", "session.inter_op.allow_spinning"} {
			if err := so.AddSessionConfigEntry(k, "0"); err != nil {
				return nil, fmt.Errorf("onnx: %s: %w", k, err)
			}
		}
	}
	start := time.Now()
	sess, err := ort.NewDynamicAdvancedSession(modelPath, m.Inputs, []string{m.Output}, so)
	if err != nil {
		return nil, fmt.Errorf("onnx: loading %s (inputs %q, output %q): %w", modelPath, m.Inputs, m.Output, err)
	}
	e := &Encoder{m: m, path: modelPath, opts: opts, loadTime: time.Since(start),
		session: session{sess: sess, sem: make(chan struct{}, opts.MaxConcurrent)}}
	e.scratch.New = func() any { return &runScratch{} }
	return e, nil
}

// Close waits for the Runs in flight and releases the session. Calls after
// Close fail.
func (e *Encoder) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	for range cap(e.sem) {
		e.sem <- struct{}{}
	}
	err := e.sess.Destroy()
	for range cap(e.sem) {
		<-e.sem
	}
	return err
}

// Embed writes the unit-length embedding of ids (the model's whole input:
// for a bert encoder, [CLS] … [SEP]) into dst, grown to Dims, and returns
// it. It checks ctx before waiting for a Run slot, while waiting and after
// the Run; a Run that has started cannot be interrupted and completes.
//
// A use encoder given no ids (the empty text) returns the zero vector
// without running: its graph cannot take an empty batch.
func (e *Encoder) Embed(ctx context.Context, ids []int32, dst []float32) ([]float32, error) {
	dst = grow(dst, e.m.Dims)
	if len(ids) == 0 && e.m.Input == InputUSE {
		clear(dst)
		return dst, ctx.Err()
	}
	s, seq, err := e.run(ctx, ids)
	if err != nil {
		return dst, err
	}
	var mask []int64
	if e.m.Input == InputBERT {
		mask = s.b[:seq]
	}
	pool(e.m.Pooling, s.out, seq, e.m.Dims, mask, dst)
	e.scratch.Put(s)
	classifier.L2Normalize(dst)
	return dst, ctx.Err()
}

// HiddenStates writes a bert encoder's last hidden state for ids, [seq,
// dims] row-major, before pooling and normalisation, into dst (grown as
// needed) and returns it. For tests and inspection.
func (e *Encoder) HiddenStates(ctx context.Context, ids []int32, dst []float32) ([]float32, error) {
	if e.m.Input != InputBERT {
		return dst, fmt.Errorf("onnx: %s: a %q encoder has no hidden states to show", e.m.Name, e.m.Input)
	}
	s, seq, err := e.run(ctx, ids)
	if err != nil {
		return dst, err
	}
	dst = append(dst[:0], s.out[:seq*e.m.Dims]...)
	e.scratch.Put(s)
	return dst, ctx.Err()
}

func growI64(v []int64, n int) []int64 {
	if cap(v) < n {
		return make([]int64, n, max(n, 2*cap(v)))
	}
	return v[:n]
}

// run feeds ids to the graph; on success the output is in s.out (the
// caller puts s back in the pool) and seq is the token count.
func (e *Encoder) run(ctx context.Context, ids []int32) (s *runScratch, seq int, err error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	n := len(ids)
	switch {
	case n > e.m.MaxTokens:
		return nil, 0, fmt.Errorf("onnx: %d tokens, the encoder %s takes at most %d (truncate before embedding)", n, e.m.Name, e.m.MaxTokens)
	case n == 0 && e.m.Input == InputBERT:
		return nil, 0, errors.New("onnx: no tokens: a bert encoder needs at least [CLS] and [SEP]")
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	defer func() { <-e.sem }()
	if e.closed.Load() {
		return nil, 0, fmt.Errorf("onnx: encoder %s is closed", e.m.Name)
	}

	s = e.scratch.Get().(*runScratch)
	var inputs []ort.Value
	var outShape ort.Shape
	switch e.m.Input {
	case InputBERT:
		s.a, s.b, s.c = growI64(s.a, n), growI64(s.b, n), growI64(s.c, n)
		for i, id := range ids {
			s.a[i], s.b[i], s.c[i] = int64(id), 1, 0
		}
		shape := ort.NewShape(1, int64(n))
		for _, v := range [][]int64{s.a, s.b, s.c}[:len(e.m.Inputs)] {
			t, err := ort.NewTensor(shape, v)
			if err != nil {
				destroy(inputs)
				e.scratch.Put(s)
				return nil, 0, fmt.Errorf("onnx: input tensor: %w", err)
			}
			inputs = append(inputs, t)
		}
		outShape = ort.NewShape(1, int64(n), int64(e.m.Dims))
	case InputUSE:
		s.a, s.b = growI64(s.a, 2*n), growI64(s.b, n)
		for i, id := range ids {
			s.a[2*i], s.a[2*i+1], s.b[i] = 0, int64(i), int64(id)
		}
		for _, t := range []struct {
			shape ort.Shape
			v     []int64
		}{{ort.NewShape(int64(n), 2), s.a}, {ort.NewShape(int64(n)), s.b}} {
			tt, err := ort.NewTensor(t.shape, t.v)
			if err != nil {
				destroy(inputs)
				e.scratch.Put(s)
				return nil, 0, fmt.Errorf("onnx: input tensor: %w", err)
			}
			inputs = append(inputs, tt)
		}
		outShape = ort.NewShape(1, int64(e.m.Dims))
	}
	s.out = grow(s.out, int(outShape.FlattenedSize()))
	out, err := ort.NewTensor(outShape, s.out)
	if err != nil {
		destroy(inputs)
		e.scratch.Put(s)
		return nil, 0, fmt.Errorf("onnx: output tensor: %w", err)
	}
	err = e.sess.Run(inputs, []ort.Value{out})
	destroy(inputs)
	out.Destroy()
	if err != nil {
		e.scratch.Put(s)
		return nil, 0, fmt.Errorf("onnx: running %s on %d tokens: %w", e.m.Name, n, err)
	}
	return s, n, nil
}

func destroy(vs []ort.Value) {
	for _, v := range vs {
		v.Destroy()
	}
}
