package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/embedserver"
	"github.com/triagegw/triage/lifecycle"
)

const encodeUsage = `usage: triage encode serve [--config FILE | --heads DIR | --model DIR] [--listen ADDR] [flags]

Serves tier 2's encoder over the OpenAI embeddings API (POST /v1/embeddings),
so that tier 2 runs as a deployment of its own: point a gateway's rules at it
with tier2: {encoder: {url: http://ADDR, model: NAME}}, and train, calibrate,
evaluate and classify against it with --encoder-url. The encoder is the one
the heads run (--heads, or the heads the config's rules name: their model
directory, tokenizer and token cap), or the bare model directory --model; its
texts are prepared, tokenized, scheduled and batched as the gateway's local
tier 2 does, so remote and local give the same vectors.

It answers GET /health (the process serves), /ready (the encoder is loaded;
503 while loading and draining) and /metrics (Prometheus: the queue,
triage_encoder_queue_texts, for an autoscaler; texts by outcome).
`

// encodeFlags are the flags of "triage encode serve".
type encodeFlags struct {
	place                          placeFlags
	model, listen, name, apiKeyEnv string
	runs, batch, batchTokens       int
	queue, threads                 int
	maxInputs, maxTextBytes        int
	maxBody                        int64
	timeout, drain                 time.Duration
}

// register defines encode serve's flags on fs.
func (f *encodeFlags) register(fs *flag.FlagSet) {
	f.place.register(fs, "heads artifact whose tier-2 encoder to serve")
	fs.StringVar(&f.model, "model", "", "a tier-2 model directory (encoder.json) to serve instead of the heads' encoder")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:9100", "address to serve on")
	fs.StringVar(&f.name, "name", "", "the model name requests must send (default: the encoder manifest's name, which heads trained on it record and the gateway checks)")
	fs.IntVar(&f.runs, "runs", 0, "encoder Runs at once, one core each (default: GOMAXPROCS)")
	fs.IntVar(&f.threads, "threads", 1, "intra-op threads a Run")
	fs.IntVar(&f.batch, "batch", 8, "most texts a Run takes when texts queue (1: no batching; a bert encoder runs one text a Run)")
	fs.IntVar(&f.batchTokens, "batch-tokens", 256, "most padded tokens a batched Run takes")
	fs.IntVar(&f.queue, "queue", 1024, "most texts waiting; past it texts are refused with 429")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "a request's texts must be done within this (a client's X-Request-Timeout header, in seconds, lowers it); texts that cannot are refused with 429 before they run")
	fs.IntVar(&f.maxInputs, "max-inputs", 256, "most texts a request")
	fs.IntVar(&f.maxTextBytes, "max-text-bytes", 64<<10, "longest text, in bytes (at least the gateway rules' window.max_bytes, 16 KiB by default)")
	fs.Int64Var(&f.maxBody, "max-body-bytes", 16<<20, "largest request body (413 past it)")
	fs.StringVar(&f.apiKeyEnv, "api-key-env", "", "environment variable holding the API key requests must send as a bearer token (default: none needed)")
	fs.DurationVar(&f.drain, "drain", 10*time.Second, "on SIGTERM: /ready answers 503 and requests in flight get this long to finish")
}

// apiKey is the key requests must send, from the environment variable
// --api-key-env names; "" when none is needed.
func (f *encodeFlags) apiKey() (string, error) {
	if f.apiKeyEnv == "" {
		return "", nil
	}
	key := os.Getenv(f.apiKeyEnv)
	if key == "" {
		return "", badInput(fmt.Errorf("--api-key-env: $%s is empty or unset", f.apiKeyEnv))
	}
	return key, nil
}

func runEncode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprint(stderr, encodeUsage)
		return errUsage
	}
	var f encodeFlags
	fs := newFlagSet("triage encode serve", stderr)
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, encodeUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args[1:], stderr); err != nil {
		return err
	}
	f.place.parsed(fs)
	key, err := f.apiKey()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))

	// The model's manifest first (a second at most), then the listener,
	// then the session: /health answers while it loads.
	opts := onnx.Options{Schedule: true, MaxConcurrent: f.runs, Threads: f.threads, MaxBatch: f.batch, BatchTokens: f.batchTokens, QueueLen: f.queue}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = runtime.GOMAXPROCS(0)
	}
	load, man, err := f.loader(opts)
	if err != nil {
		return err
	}
	name := f.name
	if name == "" {
		name = man.Name
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	enc := &lateEncoder{dims: man.Dims}
	srv, err := embedserver.New(enc, embedserver.Options{Model: name, Timeout: f.timeout, MaxInputs: f.maxInputs, MaxTextBytes: f.maxTextBytes,
		MaxBodyBytes: f.maxBody, APIKey: key, Registry: reg, Log: log, Stats: enc.stats})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	// ReadTimeout bounds a body sent slowly (a request holds a connection
	// and, once read, its texts' goroutines): a minute for the largest
	// body at a slow 300 KB/s.
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	start := time.Now()
	model, err := load()
	if err != nil {
		_ = hs.Close()
		return err
	}
	defer model.Close()
	enc.m.Store(model)
	srv.SetReady(true)
	log.Info("encoder ready", "addr", ln.Addr().String(), "model", name, "dims", man.Dims, "max_tokens", man.MaxTokens,
		"runs", opts.MaxConcurrent, "batch", f.batch, "queue", f.queue, "load_ms", time.Since(start).Milliseconds())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	srv.SetReady(false)
	sctx, cancel := context.WithTimeout(context.Background(), f.drain)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	log.Info("encoder stopped")
	return nil
}

// loader returns what loads the encoder to serve, and its manifest (with
// the heads' token cap): the --model directory's, or the tier-2 encoder
// of the heads --heads or the config's rules name.
func (f *encodeFlags) loader(opts onnx.Options) (func() (*onnx.Model, error), onnx.Manifest, error) {
	if !onnx.Available() {
		return nil, onnx.Manifest{}, fmt.Errorf("encode serve runs tier 2's encoder in its own process, and tier 2 (ONNX Runtime) is not in this build: rebuild with -tags ort and CGO_ENABLED=1 (make build): %w", classifier.ErrUnavailable)
	}
	if f.model != "" {
		m, err := onnx.ReadManifest(f.model)
		if err != nil {
			return nil, onnx.Manifest{}, err
		}
		mdir := f.place.place(nil).Dir
		return func() (*onnx.Model, error) { return onnx.Open(f.model, mdir, opts) }, *m, nil
	}
	cfg, err := f.place.loadConfig()
	if err != nil {
		return nil, onnx.Manifest{}, err
	}
	dir, err := f.place.headsDir(cfg)
	if err != nil {
		return nil, onnx.Manifest{}, err
	}
	h, err := classifier.LoadHeads(dir)
	if err != nil {
		return nil, onnx.Manifest{}, err
	}
	if h.Tier2 == nil {
		return nil, onnx.Manifest{}, fmt.Errorf("heads %s have no tier 2: give heads with a tier-2 head, or --model DIR", dir)
	}
	place := f.place.place(cfg)
	if err := lifecycle.NeedFiles(h, 2, place); err != nil {
		return nil, onnx.Manifest{}, err
	}
	mdir, err := h.Resolve(h.Tier2.Encoder.Model, place.Dir)
	if err != nil {
		return nil, onnx.Manifest{}, err
	}
	m, err := onnx.ReadManifest(mdir)
	if err != nil {
		return nil, onnx.Manifest{}, err
	}
	man := *m
	if mt := h.Tier2.Encoder.MaxTokens; mt > 0 && mt < man.MaxTokens {
		man.MaxTokens = mt
	}
	return func() (*onnx.Model, error) {
		c, err := onnx.Load(h, place.Dir, opts)
		if err != nil {
			return nil, err
		}
		return c.Model, nil
	}, man, nil
}

// lateEncoder is the encoder once it has loaded (the server answers 503
// until then, so Encode is never called before).
type lateEncoder struct {
	m    atomic.Pointer[onnx.Model]
	dims int
}

func (e *lateEncoder) Dims() int { return e.dims }

func (e *lateEncoder) Encode(ctx context.Context, text string, dst []float32) ([]float32, int, error) {
	m := e.m.Load()
	if m == nil {
		return dst, 0, fmt.Errorf("the encoder is loading: %w", classifier.ErrUnavailable)
	}
	return m.Encode(ctx, text, dst)
}

func (e *lateEncoder) stats() (classifier.RunStats, bool) {
	if m := e.m.Load(); m != nil {
		return m.RunStats()
	}
	return classifier.RunStats{}, false
}
