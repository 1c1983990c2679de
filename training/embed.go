package training

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/triagegw/triage/internal/atomicfile"
)

// Embedder is a sentence encoder as training sees it: a tier-2 model's
// pooled output (classifier/onnx's Model is one). Features must be safe for
// concurrent use.
type Embedder interface {
	// Features returns the embedding of text, in dst if it has room.
	Features(ctx context.Context, text string, dst []float32) ([]float32, error)
	// Dims is the embedding's length.
	Dims() int
}

// Embed embeds texts on workers goroutines (at least one); out[i] is
// texts[i]'s embedding. progress, if set, is called now and then with the
// texts embedded so far and their total, and once at the end; never
// concurrently. Embed stops at the first error, or when ctx ends.
func Embed(ctx context.Context, e Embedder, texts []string, workers int, progress func(done, total int)) ([][]float32, error) {
	out := make([][]float32, len(texts))
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	done := 0
	next := make(chan int)
	for range max(workers, 1) {
		wg.Go(func() {
			for i := range next {
				v, err := e.Features(ctx, texts[i], nil)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("embedding text %d: %w", i+1, err)
					cancel()
				}
				out[i] = v
				done++
				if progress != nil && (done%64 == 0 || done == len(texts)) {
					progress(done, len(texts))
				}
				mu.Unlock()
			}
		})
	}
feed:
	for i := range texts {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := parent.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// cachedEmbeddings embeds texts, or reads their embeddings from path where
// an earlier run left them: the file is named by the model's and the
// data's sha256, and holds len(texts) rows of float32, little-endian.
// Embedding a training set takes minutes; fitting a head on it, seconds.
// An empty path caches nothing.
func cachedEmbeddings(ctx context.Context, path string, e Embedder, texts []string, workers int, progress func(done, total int)) ([][]float32, error) {
	if x, ok := readRows(path, len(texts), e.Dims()); ok {
		return x, nil
	}
	x, err := Embed(ctx, e, texts, workers, progress)
	if err != nil || path == "" {
		return x, err
	}
	writeRows(path, x)
	return x, nil
}

// readRows reads a cache of n rows of d float32 (little-endian) from path;
// false when path is empty, absent or holds another shape.
func readRows(path string, n, d int) ([][]float32, bool) {
	if path == "" {
		return nil, false
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) != 4*d*n {
		return nil, false
	}
	x := make([][]float32, n)
	for i := range x {
		x[i] = make([]float32, d)
		for j := range x[i] {
			x[i][j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*(i*d+j):]))
		}
	}
	return x, true
}

// writeRows writes x to path as readRows reads it. A cache that cannot be
// written costs the next run time, nothing else.
func writeRows(path string, x [][]float32) {
	var b []byte
	for _, v := range x {
		for _, f := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		_ = atomicfile.WriteBytes(path, b)
	}
}
