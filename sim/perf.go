package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Perf is a performance model of one vLLM replica serving
// Llama-3.1-8B-Instruct in BF16 on one H100 SXM 80 GB, the defaults'
// reference. With Enabled false (the default) the replica answers after
// Options.Latency and Options.ChunkDelay as before.
//
// With it on, chat and completion requests go through a scheduler: a
// waiting queue in arrival order, and a running batch of at most MaxSeqs
// sequences whose KV blocks fit in the cache. A step of the engine takes
// the prefill of the sequences it admits, at PrefillTokensPerSecond of
// their uncached prompt tokens, plus, when some sequence is decoding,
// DecodeStep and DecodePerSeq for each; at its end each admitted sequence
// has its first token and each decoding one its next. A sequence needs a
// block of BlockTokens for each prompt block not in the cache and for its
// output; a prompt's blocks are kept after it ends, for reuse by any
// later prompt that starts with the same text (vLLM's automatic prefix
// caching) under the same cache_salt, and the least recently used unused
// blocks are evicted when space is needed. A prompt is the request's messages rendered in order
// (role and text of each) or its prompt, BytesPerToken bytes to a token.
// When a chat sequence ends, the blocks of its answer are kept too, as
// the next turn will render it ("assistant: " and the text), so that a
// conversation's next turn finds its whole history, as with vLLM, which
// keeps the KV of generated tokens. Responses, Messages and embeddings
// requests are not modelled.
//
// GET /metrics then answers vLLM's gauges and counters:
// vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc (0..1), vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total (in tokens); and usage reports
// prompt_tokens_details.cached_tokens, as vLLM does with
// --enable-prompt-tokens-details.
type Perf struct {
	Enabled bool
	// KVBlocks is the KV cache's capacity in blocks. Default 26000:
	// Llama-3.1-8B keeps 128 KiB of KV per token (32 layers × K and V ×
	// 8 KV heads × 128 dims × 2 bytes); 90% of 80 GB (vLLM's
	// --gpu-memory-utilization) less 16 GB of weights and about 4 GB of
	// activations and CUDA graphs leaves ~52 GB, ~420k tokens.
	KVBlocks int
	// BlockTokens is the tokens per KV block. Default 16 (vLLM's
	// --block-size on CUDA).
	BlockTokens int
	// MaxSeqs bounds the running batch. Default 256 (vLLM's
	// --max-num-seqs in the V0 engine).
	MaxSeqs int
	// PrefillTokensPerSecond is the prefill rate. Default 25000:
	// prefill is compute-bound, 2 FLOPs per parameter per token (16 GFLOP
	// for 8B) against the H100's 989 dense BF16 TFLOP/s at 40% model FLOPs
	// utilisation, in line with the 20-30k tokens/s vLLM's serving
	// benchmarks show for 8B models on one H100.
	PrefillTokensPerSecond float64
	// DecodeStep is a decode step's fixed cost. Default 7ms: decoding is
	// memory-bound, one read of the 16 GB of weights per step at ~70% of
	// the H100's 3.35 TB/s (vLLM reports 6-8 ms between tokens for 8B
	// models on one H100 at low batch).
	DecodeStep time.Duration
	// DecodePerSeq is what each decoding sequence adds to a step.
	// Default 60µs: reading a ~1.5k-token context's KV (190 MB) at the
	// same bandwidth.
	DecodePerSeq time.Duration
	// BytesPerToken converts prompt text to tokens. Default 4 (English
	// text with Llama 3's tokenizer).
	BytesPerToken int
}

func (p *Perf) withDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&p.KVBlocks, 26000)
	def(&p.BlockTokens, 16)
	def(&p.MaxSeqs, 256)
	def(&p.BytesPerToken, 4)
	if p.PrefillTokensPerSecond == 0 {
		p.PrefillTokensPerSecond = 25000
	}
	if p.DecodeStep == 0 {
		p.DecodeStep = 7 * time.Millisecond
	}
	if p.DecodePerSeq == 0 {
		p.DecodePerSeq = 60 * time.Microsecond
	}
}

func (p *Perf) validate() error {
	var errs []error
	if p.KVBlocks < 1 {
		errs = append(errs, fmt.Errorf("perf kv blocks %d must be >= 1", p.KVBlocks))
	}
	if p.BlockTokens < 1 {
		errs = append(errs, fmt.Errorf("perf block tokens %d must be >= 1", p.BlockTokens))
	}
	if p.MaxSeqs < 1 {
		errs = append(errs, fmt.Errorf("perf max seqs %d must be >= 1", p.MaxSeqs))
	}
	if !(p.PrefillTokensPerSecond > 0) {
		errs = append(errs, fmt.Errorf("perf prefill rate %v must be positive", p.PrefillTokensPerSecond))
	}
	if p.DecodeStep < 0 || p.DecodePerSeq < 0 {
		errs = append(errs, errors.New("perf decode times must not be negative"))
	}
	if p.BytesPerToken < 1 {
		errs = append(errs, fmt.Errorf("perf bytes per token %d must be >= 1", p.BytesPerToken))
	}
	return errors.Join(errs...)
}

// registerFlags binds the model's settings to -perf and -perf-* flags.
func (p *Perf) registerFlags(fs *flag.FlagSet) {
	fs.BoolVar(&p.Enabled, "perf", p.Enabled, "model a vLLM replica's performance: a KV cache with prefix reuse, prefill and decode times, a bounded batch and a waiting queue, and vLLM's /metrics (default false: -latency and -chunk-delay pace the answers)")
	fs.IntVar(&p.KVBlocks, "perf-kv-blocks", p.KVBlocks, "with -perf: KV cache capacity in blocks (default 26000, Llama-3.1-8B on one 80 GB H100)")
	fs.IntVar(&p.BlockTokens, "perf-block-tokens", p.BlockTokens, "with -perf: tokens per KV block (default 16, vLLM's)")
	fs.IntVar(&p.MaxSeqs, "perf-max-seqs", p.MaxSeqs, "with -perf: most sequences in the running batch (default 256)")
	fs.Float64Var(&p.PrefillTokensPerSecond, "perf-prefill-tps", p.PrefillTokensPerSecond, "with -perf: prefill rate in uncached prompt tokens per second (default 25000)")
	fs.DurationVar(&p.DecodeStep, "perf-decode-step", p.DecodeStep, "with -perf: fixed time of a decode step, one token per running sequence (default 7ms)")
	fs.DurationVar(&p.DecodePerSeq, "perf-decode-per-seq", p.DecodePerSeq, "with -perf: time each decoding sequence adds to a step (default 60µs)")
	fs.IntVar(&p.BytesPerToken, "perf-bytes-per-token", p.BytesPerToken, "with -perf: prompt bytes per token (default 4)")
}

// kvBlock is a cached prompt block: its hash, the running sequences using
// it, and its place in the LRU list of unused blocks.
type kvBlock struct {
	hash       uint64
	refs       int
	prev, next *kvBlock
}

// seqState is a sequence in the engine.
type seqState struct {
	blocks   []uint64 // its prompt's chained block hashes
	answer   []uint64 // those of its prompt and answer beyond blocks, kept when it ends
	prompt   int      // tokens
	out      int      // tokens to generate
	cached   int      // prompt tokens found in the cache
	uncached int
	private  int        // blocks held for its output
	pinned   []*kvBlock // its prompt blocks, pinned while it runs
	done     int        // tokens generated
	gone     bool       // its client left

	tok    chan struct{} // one value per generated token
	admit  chan struct{} // closed when it is admitted (cached is set)
	finish chan struct{} // closed when it leaves the engine
}

// engine is the scheduler and KV cache of Perf. Its goroutine (run) exits
// when stop is closed.
type engine struct {
	p Perf

	mu       sync.Mutex
	wake     chan struct{} // a sequence arrived
	waiting  []*seqState
	running  []*seqState
	cache    map[uint64]*kvBlock
	lru      kvBlock // sentinel: lru.next is the least recently used unused block
	private  int     // blocks held by running sequences' outputs
	inUse    int     // cached blocks pinned by running sequences
	queries  int64   // prompt tokens looked up
	hits     int64   // of which found cached
	stop     chan struct{}
	stopOnce sync.Once
	stopped  chan struct{}
}

func newEngine(p Perf) *engine {
	e := &engine{p: p, wake: make(chan struct{}, 1), cache: map[uint64]*kvBlock{},
		stop: make(chan struct{}), stopped: make(chan struct{})}
	e.lru.prev, e.lru.next = &e.lru, &e.lru
	go e.run()
	return e
}

func (e *engine) close() {
	e.stopOnce.Do(func() { close(e.stop) })
	<-e.stopped
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errTooLong refuses a sequence that could not fit in an empty cache.
var errTooLong = errors.New("the prompt and its output exceed the KV cache")

// submit queues a sequence for prompt (rendered text) generating out
// tokens, unless it could never fit in the cache; answer, when not empty,
// is the answer as the next turn's prompt will render it. The block
// hashes chain from the request's cache_salt, as vLLM's first block's
// hash includes it: only prompts under the same salt share blocks.
func (e *engine) submit(prompt, answer []byte, salt string, out int) (*seqState, error) {
	bt := e.p.BlockTokens * e.p.BytesPerToken // bytes per block
	q := &seqState{prompt: max(1, (len(prompt)+e.p.BytesPerToken-1)/e.p.BytesPerToken), out: max(out, 1),
		tok: make(chan struct{}, max(out, 1)+1), admit: make(chan struct{}), finish: make(chan struct{})}
	full := prompt
	if len(answer) > 0 {
		full = append(prompt[:len(prompt):len(prompt)], answer...)
	}
	var crc uint32
	if salt != "" {
		crc = crc32.Update(crc, castagnoli, []byte(salt))
	}
	for at := 0; at+bt <= len(full); at += bt {
		crc = crc32.Update(crc, castagnoli, full[at:at+bt])
		h := uint64(crc)<<32 | uint64(len(q.blocks)+len(q.answer)+1)
		if at+bt <= len(prompt) {
			q.blocks = append(q.blocks, h)
		} else {
			q.answer = append(q.answer, h)
		}
	}
	if len(q.blocks)+(q.out+e.p.BlockTokens-1)/e.p.BlockTokens > e.p.KVBlocks {
		return nil, fmt.Errorf("%w: %d prompt tokens and %d to generate need more than its %d blocks of %d tokens",
			errTooLong, q.prompt, q.out, e.p.KVBlocks, e.p.BlockTokens)
	}
	e.mu.Lock()
	e.waiting = append(e.waiting, q)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return q, nil
}

// leave tells the engine q's client is gone.
func (e *engine) leave(q *seqState) {
	e.mu.Lock()
	q.gone = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// unlink takes b out of the LRU list.
func (e *engine) unlink(b *kvBlock) {
	if b.prev != nil {
		b.prev.next, b.next.prev = b.next, b.prev
		b.prev, b.next = nil, nil
	}
}

// free is the number of blocks not held by a running sequence.
func (e *engine) free() int { return e.p.KVBlocks - e.private - e.inUse }

// tryAdmit admits q if its blocks fit in free, evicting unused cached
// blocks as needed, and sets what its prefill costs.
func (e *engine) tryAdmit(q *seqState, free *int) bool {
	c := 0
	for c < len(q.blocks) {
		if _, ok := e.cache[q.blocks[c]]; !ok {
			break
		}
		c++
	}
	outBlocks := (q.out + e.p.BlockTokens - 1) / e.p.BlockTokens
	// The cached blocks it would pin that are unused now count against
	// the free space too.
	need := len(q.blocks) - c + outBlocks
	for _, h := range q.blocks[:c] {
		if e.cache[h].refs == 0 {
			need++
		}
	}
	if need > *free {
		return false
	}
	*free -= need
	q.private = outBlocks
	e.private += outBlocks
	for _, h := range q.blocks {
		b := e.cache[h]
		if b == nil {
			for len(e.cache)+e.private >= e.p.KVBlocks && e.lru.next != &e.lru {
				v := e.lru.next
				e.unlink(v)
				delete(e.cache, v.hash)
			}
			b = &kvBlock{hash: h}
			e.cache[h] = b
		}
		e.pin(b)
		q.pinned = append(q.pinned, b)
	}
	// vLLM computes at least the prompt's last token.
	q.cached = min(c*e.p.BlockTokens, q.prompt-1)
	q.uncached = q.prompt - q.cached
	e.queries += int64(q.prompt)
	e.hits += int64(q.cached)
	close(q.admit)
	return true
}

// pin marks b as used by one more running sequence.
func (e *engine) pin(b *kvBlock) {
	if b.refs == 0 {
		e.unlink(b)
		e.inUse++
	}
	b.refs++
}

// release ends q: its prompt blocks become unused, most recently used,
// and, when it generated its whole answer, the answer's blocks join them.
func (e *engine) release(q *seqState) {
	for _, b := range q.pinned {
		b.refs--
		if b.refs == 0 {
			e.inUse--
			e.touch(b)
		}
	}
	q.pinned = nil
	e.private -= q.private
	if q.done >= q.out {
		for _, h := range q.answer {
			if b := e.cache[h]; b != nil {
				if b.refs == 0 {
					e.unlink(b)
					e.touch(b)
				}
				continue
			}
			if len(e.cache)+e.private >= e.p.KVBlocks {
				if e.lru.next == &e.lru {
					break // every block is in use
				}
				v := e.lru.next
				e.unlink(v)
				delete(e.cache, v.hash)
			}
			b := &kvBlock{hash: h}
			e.cache[h] = b
			e.touch(b)
		}
	}
	close(q.finish)
}

// touch puts the unused block b at the most recently used end.
func (e *engine) touch(b *kvBlock) {
	b.prev, b.next = e.lru.prev, &e.lru
	e.lru.prev.next = b
	e.lru.prev = b
}

func (e *engine) run() {
	defer close(e.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		e.mu.Lock()
		// Drop the sequences whose clients left.
		kept := e.waiting[:0]
		for _, q := range e.waiting {
			if q.gone {
				close(q.finish)
				continue
			}
			kept = append(kept, q)
		}
		clear(e.waiting[len(kept):])
		e.waiting = kept
		run := e.running[:0]
		for _, q := range e.running {
			if q.gone {
				e.release(q)
				continue
			}
			run = append(run, q)
		}
		clear(e.running[len(run):])
		e.running = run
		decoding := len(e.running)
		free := e.free()
		var admitted []*seqState
		prefill := 0
		for len(e.waiting) > 0 && len(e.running) < e.p.MaxSeqs && e.tryAdmit(e.waiting[0], &free) {
			q := e.waiting[0]
			e.waiting = e.waiting[1:]
			e.running = append(e.running, q)
			admitted = append(admitted, q)
			prefill += q.uncached
		}
		idle := len(e.running) == 0
		e.mu.Unlock()
		if idle {
			select {
			case <-e.wake:
				continue
			case <-e.stop:
				return
			}
		}
		d := time.Duration(float64(prefill) / e.p.PrefillTokensPerSecond * float64(time.Second))
		if decoding > 0 || prefill == 0 {
			d += e.p.DecodeStep + time.Duration(decoding)*e.p.DecodePerSeq
		}
		timer.Reset(d) // the GPU's work: the only wait that stands for time passing
		select {
		case <-timer.C:
		case <-e.stop:
			timer.Stop()
			return
		}
		e.mu.Lock()
		run = e.running[:0]
		for _, q := range e.running {
			if q.gone {
				e.release(q)
				continue
			}
			q.done++
			q.tok <- struct{}{}
			if q.done >= q.out {
				e.release(q)
				continue
			}
			run = append(run, q)
		}
		clear(e.running[len(run):])
		e.running = run
		e.mu.Unlock()
	}
}

// next waits for q's next token; false when ctx ended first.
func (q *seqState) next(ctx context.Context) bool {
	select {
	case <-q.tok:
		return true
	case <-q.finish:
		select { // a last token and the end may come together
		case <-q.tok:
		default:
		}
		return true
	case <-ctx.Done():
		return false
	}
}

// serveMetrics answers GET /metrics in Prometheus' text format with
// vLLM's names.
func (e *engine) serveMetrics(w http.ResponseWriter, model string) {
	e.mu.Lock()
	running, waiting := len(e.running), len(e.waiting)
	used := e.kvUsed()
	q, h := e.queries, e.hits
	e.mu.Unlock()
	labels := `{engine="0",model_name=` + strconv.Quote(model) + `}`
	var b []byte
	gauge := func(name, help string, v float64) {
		b = fmt.Appendf(b, "# HELP %s %s\n# TYPE %s gauge\n%s%s %s\n", name, help, name, name, labels, strconv.FormatFloat(v, 'g', -1, 64))
	}
	counter := func(name, help string, v int64) {
		b = fmt.Appendf(b, "# HELP %s %s\n# TYPE %s counter\n%s%s %d.0\n", name, help, name, name, labels, v)
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(running))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float64(waiting))
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", used)
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", q)
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", h)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(b)
}

// kvUsed is the fraction of blocks held by running sequences (mu
// held), as vLLM counts usage: cached blocks no sequence uses are free.
func (e *engine) kvUsed() float64 {
	return float64(e.p.KVBlocks-e.free()) / float64(e.p.KVBlocks)
}
