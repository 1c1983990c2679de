//go:build cgo && ort

package onnx

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/datasets"
)

// The micro-batching study: does running concurrent requests' texts as one
// batched Run of USE lite (Encoder.embedBatch) beat today's one Run per
// request (Model.Features, at most GOMAXPROCS Runs at once) on throughput
// and p99 latency under load? bench/tier2.md has the results.
//
//	go test -tags ort -run '^$' -bench 'USEBatchRun' -benchtime 100x -count 3 ./classifier/onnx
//	go test -tags ort -run '^$' -bench 'USEServe' -benchtime 2000x -count 3 -timeout 60m ./classifier/onnx
//
// BenchmarkUSEServe's loads can be chosen with $TRIAGE_STUDY_RATES
// (open-loop arrival rates, requests/s, comma-separated) and
// $TRIAGE_STUDY_CALLERS (closed-loop caller counts).

// TestUSEEmbedBatch checks the batched Run against one Run per text: the
// same embeddings for texts of mixed lengths (padded in the batch), an
// empty text (the zero vector, no row) in the middle and a text past
// max_tokens.
func TestUSEEmbedBatch(t *testing.T) {
	m := useModel(t, 1)
	ctx := context.Background()
	texts := []string{
		"what's the derivative of x^2 sin x",
		"",
		"Can my landlord keep my security deposit if I gave notice late?",
		"hi",
		useText(t, m, 300),
	}
	batch := make([][]int32, len(texts))
	for i, s := range texts {
		batch[i] = m.tok.Encode(nil, s, m.maxText)
	}
	got, err := m.enc.embedBatch(ctx, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range texts {
		want, err := m.Features(ctx, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(got[i], want); d > 1e-4 {
			t.Errorf("text %d (%d tokens): batched embedding differs from the single one by %g", i, len(batch[i]), d)
		}
	}
	if _, err := m.enc.embedBatch(ctx, [][]int32{make([]int32, m.enc.MaxTokens()+1)}, nil); err == nil {
		t.Error("a batch input past max_tokens: no error")
	}
}

// BenchmarkUSEBatchRun is one batched Run of B texts of the same length,
// one intra-op thread: what a batch costs against B single Runs
// (ms/text at B=1).
func BenchmarkUSEBatchRun(b *testing.B) {
	for _, n := range []int{20, 60} {
		for _, size := range []int{1, 2, 4, 8, 16} {
			b.Run(fmt.Sprintf("tokens=%d/B=%d", n, size), func(b *testing.B) {
				m := useModel(b, 1)
				ids := m.tok.Encode(nil, useText(b, m, n), m.maxText)
				batch := make([][]int32, size)
				for i := range batch {
					batch[i] = ids
				}
				ctx := context.Background()
				var dst [][]float32
				var err error
				for b.Loop() {
					if dst, err = m.enc.embedBatch(ctx, batch, dst); err != nil {
						b.Fatal(err)
					}
				}
				ms := float64(b.Elapsed().Microseconds()) / 1000 / float64(b.N)
				b.ReportMetric(ms, "ms/run")
				b.ReportMetric(ms/float64(size), "ms/text")
			})
		}
	}
}

// A server is a way to serve one request: text in, features out.
type server interface {
	serve(ctx context.Context, text string, dst []float32) ([]float32, error)
	stats() (runs, texts int64)
	close()
}

// single is today's path: one Model.Features, one Run, per request.
type single struct{ m *Model }

func (s single) serve(ctx context.Context, text string, dst []float32) ([]float32, error) {
	return s.m.Features(ctx, text, dst)
}
func (single) stats() (int64, int64) { return 0, 0 }
func (single) close()                {}

// batcher is a micro-batcher: the caller tokenizes, hands the ids to one
// of workers goroutines, which takes the first request waiting, then more
// until it has maxBatch or window has passed since the first (window 0:
// only those queued already, no waiting), and runs them as one batch.
type batcher struct {
	m        *Model
	reqs     chan *batchReq
	window   time.Duration
	maxBatch int
	wg       sync.WaitGroup
	runs     atomic.Int64
	texts    atomic.Int64
}

type batchReq struct {
	ids  []int32
	dst  []float32
	err  error
	done chan struct{}
}

var batchReqs = sync.Pool{New: func() any { return &batchReq{done: make(chan struct{}, 1)} }}

func newBatcher(m *Model, workers, maxBatch int, window time.Duration) *batcher {
	bt := &batcher{m: m, reqs: make(chan *batchReq, 1024), window: window, maxBatch: maxBatch}
	for range workers {
		bt.wg.Add(1)
		go bt.work()
	}
	return bt
}

func (bt *batcher) serve(ctx context.Context, text string, dst []float32) ([]float32, error) {
	r := batchReqs.Get().(*batchReq)
	r.ids = bt.m.tok.Encode(r.ids[:0], text, bt.m.maxText)
	r.dst = dst
	bt.reqs <- r
	<-r.done
	dst, err := r.dst, r.err
	r.dst, r.err = nil, nil
	batchReqs.Put(r)
	return dst, err
}

func (bt *batcher) work() {
	defer bt.wg.Done()
	reqs := make([]*batchReq, 0, bt.maxBatch)
	ids := make([][]int32, 0, bt.maxBatch)
	out := make([][]float32, bt.maxBatch)
	var timer *time.Timer
	for first := range bt.reqs {
		reqs = append(reqs[:0], first)
		if bt.window > 0 {
			if timer == nil {
				timer = time.NewTimer(bt.window)
			} else {
				timer.Reset(bt.window)
			}
		}
	collect:
		for len(reqs) < bt.maxBatch {
			if bt.window == 0 {
				select {
				case r, ok := <-bt.reqs:
					if !ok {
						break collect
					}
					reqs = append(reqs, r)
				default:
					break collect
				}
				continue
			}
			select {
			case r, ok := <-bt.reqs:
				if !ok {
					break collect
				}
				reqs = append(reqs, r)
			case <-timer.C:
				break collect
			}
		}
		if timer != nil {
			timer.Stop()
		}
		ids = ids[:0]
		for i, r := range reqs {
			ids = append(ids, r.ids)
			out[i] = r.dst
		}
		got, err := bt.m.enc.embedBatch(context.Background(), ids, out[:len(reqs)])
		bt.runs.Add(1)
		bt.texts.Add(int64(len(reqs)))
		for i, r := range reqs {
			r.dst, r.err = got[i], err
			r.done <- struct{}{}
		}
	}
}

func (bt *batcher) stats() (runs, texts int64) { return bt.runs.Load(), bt.texts.Load() }

func (bt *batcher) close() {
	close(bt.reqs)
	bt.wg.Wait()
}

// studyTexts are the workload's texts: the 280 prompts of
// datasets/examples/subjects.jsonl (real prompts of mixed lengths: the
// tokens and max-tokens metrics), or ("t20") one text of 20 tokens, the
// best case for batching (no padding).
func studyTexts(b *testing.B, m *Model, workload string) []string {
	if workload == "t20" {
		return []string{useText(b, m, 20)}
	}
	_, file, _, _ := runtime.Caller(0)
	set, err := datasets.ReadJSONL(filepath.Join(filepath.Dir(file), "..", "..", "datasets", "examples", "subjects.jsonl"))
	if err != nil {
		b.Skipf("no example prompts: %v", err)
	}
	texts := make([]string, len(set.Rows))
	for i, r := range set.Rows {
		texts[i] = r.Text
	}
	return texts
}

func envInts(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// BenchmarkUSEServe drives b.N requests through each server, side by side
// under the same load:
//
//   - closed loop, callers=N: N goroutines, each sending its next request
//     when the last one returns (throughput at saturation; latency is
//     mostly queueing);
//   - open loop, rate=R: Poisson arrivals at R requests/s from a seeded
//     generator, each request in its own goroutine, latency measured from
//     its scheduled arrival (no coordinated omission).
//
// The servers: single (today: Model.Features, at most GOMAXPROCS Runs of
// one intra-op thread) and batchers with 2 workers (one Run each, one
// intra-op thread: the same 2 cores' worth) taking what is queued
// (greedy, window 0) or waiting up to a window, capped at a batch size.
// It reports req/s, p50 and p99 latency (ms), the mean batch and the
// workload's mean and longest input (tokens, max-tokens).
func BenchmarkUSEServe(b *testing.B) {
	type mode struct {
		name string
		make func(m *Model) server
	}
	modes := []mode{
		{"single", func(m *Model) server { return single{m} }},
		{"greedy8", func(m *Model) server { return newBatcher(m, 2, 8, 0) }},
		{"greedy16", func(m *Model) server { return newBatcher(m, 2, 16, 0) }},
		{"win2ms16", func(m *Model) server { return newBatcher(m, 2, 16, 2*time.Millisecond) }},
	}
	type load struct {
		name    string
		callers int     // closed loop
		rate    float64 // open loop
	}
	var loads []load
	for _, n := range envInts("TRIAGE_STUDY_CALLERS", []int{4, 8, 16}) {
		loads = append(loads, load{name: fmt.Sprintf("callers=%d", n), callers: n})
	}
	for _, r := range envInts("TRIAGE_STUDY_RATES", []int{150, 250, 350}) {
		loads = append(loads, load{name: fmt.Sprintf("rate=%d", r), rate: float64(r)})
	}
	for _, workload := range []string{"examples", "t20"} {
		for _, ld := range loads {
			for _, md := range modes {
				b.Run(fmt.Sprintf("%s/%s/%s", workload, ld.name, md.name), func(b *testing.B) {
					m := useModel(b, 1)
					texts := studyTexts(b, m, workload)
					srv := md.make(m)
					defer srv.close()
					// Warm up with bursts of 32 concurrent requests, so
					// that a batcher makes batches of many sizes.
					for range 3 {
						var wg sync.WaitGroup
						for i := range 32 {
							wg.Go(func() {
								if _, err := srv.serve(context.Background(), texts[i%len(texts)], nil); err != nil {
									b.Error(err)
								}
							})
						}
						wg.Wait()
					}
					runs0, texts0 := srv.stats()
					var tokens, longest int
					for i := range b.N {
						n := len(m.tok.Encode(nil, texts[(i*7)%len(texts)], m.maxText))
						tokens, longest = tokens+n, max(longest, n)
					}
					b.ResetTimer()
					lat := make([]time.Duration, b.N)
					var elapsed time.Duration
					if ld.callers > 0 {
						elapsed = closedLoop(b, srv, texts, ld.callers, lat)
					} else {
						elapsed = openLoop(b, srv, texts, ld.rate, lat)
					}
					slices.Sort(lat)
					pct := func(p float64) float64 {
						i := int(math.Ceil(p*float64(len(lat)))) - 1
						return float64(lat[max(i, 0)].Microseconds()) / 1000
					}
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
					b.ReportMetric(pct(0.50), "p50-ms")
					b.ReportMetric(pct(0.99), "p99-ms")
					b.ReportMetric(float64(tokens)/float64(b.N), "tokens")
					b.ReportMetric(float64(longest), "max-tokens")
					if runs, n := srv.stats(); runs > runs0 {
						b.ReportMetric(float64(n-texts0)/float64(runs-runs0), "batch")
					} else {
						b.ReportMetric(1, "batch")
					}
				})
			}
		}
	}
}

func closedLoop(b *testing.B, srv server, texts []string, callers int, lat []time.Duration) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			dst := make([]float32, 0, 512)
			var err error
			for {
				i := int(next.Add(1)) - 1
				if i >= len(lat) {
					return
				}
				t := time.Now()
				if dst, err = srv.serve(context.Background(), texts[(i*7+c)%len(texts)], dst); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

func openLoop(b *testing.B, srv server, texts []string, rate float64, lat []time.Duration) time.Duration {
	rng := rand.New(rand.NewPCG(uint64(rate), 7))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	var at time.Duration
	for i := range lat {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		due := start.Add(at)
		if d := time.Until(due); d > 0 {
			time.Sleep(d) // the arrival's time on the open loop's clock, whatever the answers'
		}
		wg.Go(func() {
			if _, err := srv.serve(context.Background(), texts[(i*7)%len(texts)], nil); err != nil {
				b.Error(err)
				return
			}
			lat[i] = time.Since(due)
		})
	}
	wg.Wait()
	return time.Since(start)
}
