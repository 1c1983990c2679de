//go:build cgo && ort

package onnx

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// The USE-lite benchmarks run the converted Universal Sentence Encoder lite
// that scripts/fetch-use.sh puts in var/models/use (or $TRIAGE_MODELS/use),
// through Open and Model.Features as the gateway does; they skip when it is
// not there:
//
//	go test -tags ort -run '^$' -bench 'USE(Features|Tokenize)' -benchtime 200x -count 5 ./classifier/onnx
//	go test -c -tags ort -o /tmp/onnx.test ./classifier/onnx
//	for i in 1 2 3; do /tmp/onnx.test -test.run '^$' -test.bench USELoad -test.benchtime 1x; done
//
// bench/tier2.md has the figures.

var (
	useMu     sync.Mutex
	useModels = map[int]*Model{} // by intra-op threads
)

// useDir is the USE-lite model directory; the benchmark skips without it
// (see testenv.Models).
func useDir(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(testenv.Models(tb, "use/"+ManifestFile), "use")
}

// useModel is the USE-lite model with threads intra-op threads per Run
// (and the default MaxConcurrent, GOMAXPROCS), opened once per process.
func useModel(tb testing.TB, threads int) *Model {
	tb.Helper()
	requireORT(tb)
	dir := useDir(tb)
	useMu.Lock()
	defer useMu.Unlock()
	if m, ok := useModels[threads]; ok {
		return m
	}
	m, err := Open(dir, modelsDir(), Options{Threads: threads})
	if err != nil {
		tb.Fatal(err)
	}
	if m.enc.Manifest().Input != InputUSE {
		tb.Fatalf("%s: input %q, want %q", dir, m.enc.Manifest().Input, InputUSE)
	}
	useModels[threads] = m
	return m
}

// useWords make the benchmark texts: ordinary English, a piece or two a
// word.
var useWords = strings.Fields(`how do i fix a type error in my python list comprehension when the
loop reads every line of the log file and the server keeps returning an error about memory
after the last deploy can you explain why and what i should change in the config`)

// useText is a text of ordinary words that m's tokenizer cuts into exactly
// n ids (before the model's max_tokens cut), built deterministically: the
// words in turn while they fit, then one-piece words to make up the count.
func useText(tb testing.TB, m *Model, n int) string {
	tb.Helper()
	count := func(s string) int { return len(m.tok.Encode(nil, s, 0)) }
	var words []string
	for i := 0; ; i++ {
		cand := append(words, useWords[i%len(useWords)])
		c := count(strings.Join(cand, " "))
		if c > n {
			break
		}
		words = cand
		if c == n {
			return strings.Join(words, " ")
		}
	}
	for c := count(strings.Join(words, " ")); c < n; {
		grew := false
		for _, f := range []string{"a", "the", "i", "to", "and", "of"} {
			cand := strings.Join(append(words, f), " ")
			if nc := count(cand); nc == c+1 {
				words, c, grew = append(words, f), nc, true
				break
			}
		}
		if !grew {
			tb.Fatalf("cannot make a text of %d USE tokens (stuck at %d)", n, c)
		}
	}
	return strings.Join(words, " ")
}

func TestUSEText(t *testing.T) {
	m := useModel(t, 1)
	for _, n := range []int{1, 20, 128, 512} {
		s := useText(t, m, n)
		if got := len(m.tok.Encode(nil, s, 0)); got != n {
			t.Errorf("useText(%d): %d tokens: %q", n, got, s)
		}
	}
}

// BenchmarkUSEFeatures is one Model.Features (tokenize, cut to max_tokens,
// one Run, normalise) of a text of 20, 128 and 512 USE tokens, with one
// and two intra-op threads. The graph keeps at most 128 tokens, so the
// 512-token text runs as its first 128 (the tokens metric) and costs what
// 128 do, plus tokenizing the rest.
func BenchmarkUSEFeatures(b *testing.B) {
	for _, threads := range []int{1, 2} {
		for _, n := range []int{20, 128, 512} {
			b.Run(fmt.Sprintf("threads=%d/tokens=%d", threads, n), func(b *testing.B) {
				m := useModel(b, threads)
				text := useText(b, m, n)
				ctx := context.Background()
				dst := make([]float32, m.Dims())
				var used int
				var err error
				for b.Loop() {
					if dst, used, err = m.features(ctx, text, dst); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/text")
				b.ReportMetric(float64(used), "tokens")
			})
		}
	}
}

// BenchmarkUSETokenize is the tokenizer's share of Features: SentencePiece
// (tokenize.Unigram) on the same texts, cut to max_tokens as Features cuts.
func BenchmarkUSETokenize(b *testing.B) {
	for _, n := range []int{20, 128, 512} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			m := useModel(b, 1)
			text := useText(b, m, n)
			ids := make([]int32, 0, 1024)
			for b.Loop() {
				ids = m.tok.Encode(ids[:0], text, m.maxText)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1000/float64(b.N), "µs/text")
		})
	}
}

// BenchmarkUSELoad is Open of the USE-lite directory: the manifest, the
// model's sha256 check, the tokenizer (vocab.json) and the ONNX Runtime
// session. It reports Open's wall time (open-ms), the session's share
// (load-ms, Encoder.LoadTime), the process's RSS after the first Open and
// one Features (rss-MiB) and what that first model added to it
// (model-MiB). As with BenchmarkLoad, only the first iteration's memory
// is counted (the C allocator keeps freed memory): run it with
// -benchtime 1x in fresh processes.
func BenchmarkUSELoad(b *testing.B) {
	requireORT(b)
	dir := useDir(b)
	runtime.GC()
	debug.FreeOSMemory()
	before := vmRSS(b)
	var open, load time.Duration
	var rss int64
	for b.Loop() {
		start := time.Now()
		m, err := Open(dir, modelsDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		open += time.Since(start)
		load += m.enc.LoadTime()
		if _, err := m.Features(context.Background(), "how do I fix a type error in my python code", nil); err != nil {
			b.Fatal(err)
		}
		if rss == 0 {
			runtime.GC()
			debug.FreeOSMemory()
			rss = vmRSS(b)
		}
		if err := m.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(open.Microseconds())/1000/float64(b.N), "open-ms")
	b.ReportMetric(float64(load.Microseconds())/1000/float64(b.N), "load-ms")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(rss-before)/(1<<20), "model-MiB")
}
