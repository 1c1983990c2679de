//go:build cgo && ort

package onnx

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/models/bert"
)

// The benchmarks run a BERT encoder of bge-small-en-v1.5's shape (12
// layers, hidden 384, 33.2M parameters) with seeded random weights,
// generated into a temporary directory on first use (about a second):
//
//	go test -tags ort -run '^$' -bench . -benchtime 20x -count 3 ./classifier/onnx
//
// The cost of a BERT encoder does not depend on its weights' values, so
// these are the real model's latencies on this machine.

var (
	benchMu   sync.Mutex
	benchEncs = map[int]*Encoder{} // by threads
)

func bgeEncoder(b *testing.B, threads int) *Encoder {
	b.Helper()
	requireORT(b)
	benchMu.Lock()
	defer benchMu.Unlock()
	if e, ok := benchEncs[threads]; ok {
		return e
	}
	m, err := ReadManifest(benchDir(b))
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewEncoder(filepath.Join(benchDir(b), DefaultModelFile), *m, Options{Threads: threads}, "")
	if err != nil {
		b.Fatal(err)
	}
	benchEncs[threads] = e
	return e
}

// benchIDs is [CLS], n-2 random word-piece ids, [SEP].
func benchIDs(n int) []int32 {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(1996 + rng.IntN(28000))
	}
	ids[0], ids[n-1] = 101, 102
	return ids
}

// BenchmarkEmbed is one Embed (one Run and the pooling) at 20, 128 and 512
// tokens, with one and two intra-op threads.
func BenchmarkEmbed(b *testing.B) {
	for _, threads := range []int{1, 2} {
		for _, n := range []int{20, 128, 512} {
			b.Run(fmt.Sprintf("threads=%d/tokens=%d", threads, n), func(b *testing.B) {
				e := bgeEncoder(b, threads)
				ids := benchIDs(n)
				ctx := context.Background()
				dst := make([]float32, e.Dims())
				var err error
				for b.Loop() {
					if dst, err = e.Embed(ctx, ids, dst); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/embed")
			})
		}
	}
}

// BenchmarkLoad is the session's load (parse, optimise, allocate) of the
// bge-small-shaped graph. It reports the load time, the process's RSS
// after the first load and one Embed (rss-MiB) and what that first session
// added to it (session-MiB). Later iterations reuse memory the C
// allocator kept from earlier sessions, so only the first one is counted.
// Set TRIAGE_BENCH_BERT to a directory that `triage models gen-bert`
// wrote to keep the generation's Go heap out of the process.
func BenchmarkLoad(b *testing.B) {
	requireORT(b)
	dir := benchDir(b)
	m, err := ReadManifest(dir)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, DefaultModelFile)
	var load time.Duration
	runtime.GC()
	debug.FreeOSMemory()
	before := vmRSS(b)
	var rss int64
	for b.Loop() {
		e, err := NewEncoder(path, *m, Options{}, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Embed(context.Background(), benchIDs(20), nil); err != nil {
			b.Fatal(err)
		}
		if rss == 0 {
			runtime.GC()
			debug.FreeOSMemory()
			rss = vmRSS(b)
		}
		load += e.LoadTime()
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(load.Microseconds())/1000/float64(b.N), "load-ms")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(rss-before)/(1<<20), "session-MiB")
}

// benchDir is $TRIAGE_BENCH_BERT, else a bge-small-shaped model generated
// into a temporary directory.
func benchDir(b *testing.B) string {
	if d := os.Getenv("TRIAGE_BENCH_BERT"); d != "" {
		return d
	}
	return modelDir(b, bert.BGESmall(), PoolCLS)
}

func vmRSS(b *testing.B) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	b.Skip("no VmRSS")
	return 0
}
