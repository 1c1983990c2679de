//go:build cgo && ort

package onnx

import (
	"context"
	"fmt"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/triagegw/triage/classifier"
)

// embedBatch is Embed for several inputs in one Run of a use encoder: the
// unit-length embedding of batch[i] goes to dst[i] (grown to Dims; dst is
// grown to len(batch)). USE lite takes a batch natively (indices rows
// [row, position]); the graph pads every row to the batch's longest, so a
// batch costs about its size times its longest input. Empty inputs get
// the zero vector and no row (the graph cannot take an empty row). One Run
// slot of the semaphore is held for the whole batch.
//
// It is the scheduler's batched Run (Model.runBatch, sched.go), first
// measured by the micro-batching study (bench_batch_test.go,
// bench/tier2.md): batches pay off only when texts queue, and only for
// texts of about one length.
func (e *Encoder) embedBatch(ctx context.Context, batch [][]int32, dst [][]float32) ([][]float32, error) {
	if e.m.Input != InputUSE {
		return dst, fmt.Errorf("onnx: %s: batched embedding takes a %q encoder, not %q", e.m.Name, InputUSE, e.m.Input)
	}
	if cap(dst) < len(batch) {
		dst = append(dst[:cap(dst)], make([][]float32, len(batch)-cap(dst))...)
	}
	dst = dst[:len(batch)]
	rows, n := 0, 0
	for i, ids := range batch {
		dst[i] = grow(dst[i], e.m.Dims)
		if len(ids) > e.m.MaxTokens {
			return dst, fmt.Errorf("onnx: batch input %d: %d tokens, the encoder %s takes at most %d (truncate before embedding)", i, len(ids), e.m.Name, e.m.MaxTokens)
		}
		if len(ids) == 0 {
			clear(dst[i])
			continue
		}
		rows++
		n += len(ids)
	}
	if err := ctx.Err(); err != nil || rows == 0 {
		return dst, err
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return dst, ctx.Err()
	}
	defer func() { <-e.sem }()
	if e.closed.Load() {
		return dst, fmt.Errorf("onnx: encoder %s is closed", e.m.Name)
	}

	s := e.scratch.Get().(*runScratch)
	defer e.scratch.Put(s)
	s.a, s.b = growI64(s.a, 2*n), growI64(s.b, n)
	k, row := 0, 0
	for _, ids := range batch {
		if len(ids) == 0 {
			continue
		}
		for p, id := range ids {
			s.a[2*k], s.a[2*k+1], s.b[k] = int64(row), int64(p), int64(id)
			k++
		}
		row++
	}
	it, err := ort.NewTensor(ort.NewShape(int64(n), 2), s.a)
	if err != nil {
		return dst, fmt.Errorf("onnx: input tensor: %w", err)
	}
	defer it.Destroy()
	vt, err := ort.NewTensor(ort.NewShape(int64(n)), s.b)
	if err != nil {
		return dst, fmt.Errorf("onnx: input tensor: %w", err)
	}
	defer vt.Destroy()
	s.out = grow(s.out, rows*e.m.Dims)
	out, err := ort.NewTensor(ort.NewShape(int64(rows), int64(e.m.Dims)), s.out)
	if err != nil {
		return dst, fmt.Errorf("onnx: output tensor: %w", err)
	}
	defer out.Destroy()
	if err := e.sess.Run([]ort.Value{it, vt}, []ort.Value{out}); err != nil {
		return dst, fmt.Errorf("onnx: running %s on a batch of %d inputs, %d tokens: %w", e.m.Name, rows, n, err)
	}
	row = 0
	for i, ids := range batch {
		if len(ids) == 0 {
			continue
		}
		copy(dst[i], s.out[row*e.m.Dims:(row+1)*e.m.Dims])
		classifier.L2Normalize(dst[i])
		row++
	}
	return dst, ctx.Err()
}
