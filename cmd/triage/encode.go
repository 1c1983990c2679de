package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/embedserver"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/tlsconf"
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

With --tls-cert and --tls-key it serves https (re-reading the files when
they change, and on SIGHUP), and with --client-ca it requires client
certificates signed by that CA. An API key (--api-key-env) is refused on a
plain-HTTP listener other than loopback, where it and the texts would cross
the network in clear, unless --insecure-plain-http says the network is
protected otherwise.
`

// encodeFlags are the flags of "triage encode serve".
type encodeFlags struct {
	place                          placeFlags
	model, listen, name, apiKeyEnv string
	tlsCert, tlsKey, clientCA      string
	insecurePlainHTTP              bool
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
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve https with this PEM certificate chain (with --tls-key; re-read when it changes and on SIGHUP)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	fs.StringVar(&f.clientCA, "client-ca", "", "with --tls-cert: require client certificates signed by a CA of this PEM bundle (mTLS)")
	fs.BoolVar(&f.insecurePlainHTTP, "insecure-plain-http", false, "allow --api-key-env on a plain-HTTP listener that is not loopback (the key and the texts cross the network in clear: only where the network is protected otherwise, a NetworkPolicy or a mesh with mTLS)")
}

// tls loads the listener's certificate (nil without --tls-cert and
// --tls-key), with errors naming the flags.
func (f *encodeFlags) tls() (*tlsconf.Server, error) {
	if f.tlsCert == "" && f.tlsKey == "" {
		if f.clientCA != "" {
			return nil, badInput(errors.New("--client-ca needs --tls-cert and --tls-key: client certificates are asked for in the TLS handshake"))
		}
		return nil, nil
	}
	var opts []tlsconf.ServerOption
	if f.clientCA != "" {
		opts = append(opts, tlsconf.ClientCA(f.clientCA, tlsconf.RequireClientCert))
	}
	s, err := tlsconf.NewServer(f.tlsCert, f.tlsKey, opts...)
	if err != nil {
		return nil, badInput(encodeTLSError(err))
	}
	return s, nil
}

// encodeTLSError is a tlsconf error with the flags for its config keys.
func encodeTLSError(err error) error {
	flags := map[string]string{"cert_file": "--tls-cert", "key_file": "--tls-key", "client_ca_file": "--client-ca"}
	var msgs []string
	for _, p := range tlsconf.Problems("", err) {
		msg := strings.TrimPrefix(p.Error(), ".")
		field, rest, _ := strings.Cut(msg, ": ")
		if fl, ok := flags[field]; ok {
			for k, f := range flags { // "required with cert_file"
				rest = strings.ReplaceAll(rest, k, f)
			}
			msg = fl + " " + rest
		}
		msgs = append(msgs, msg)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// plainKeyRefused refuses an API key on a plain-HTTP listener that is
// not loopback: the key, and the texts, would cross the network in clear.
func (f *encodeFlags) plainKeyRefused(addr net.Addr) error {
	if f.apiKeyEnv == "" || f.insecurePlainHTTP {
		return nil
	}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsLoopback() {
		return nil
	}
	return badInput(fmt.Errorf("--api-key-env on plain HTTP at %s, which is not loopback: the key and the texts would cross the network in clear. "+
		"Serve https (--tls-cert and --tls-key), listen on loopback, or, where the network is protected otherwise (a NetworkPolicy, a mesh with mTLS), say so with --insecure-plain-http", addr))
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
	ln, stopTLS, err := f.open(ctx, log)
	if err != nil {
		return err
	}
	defer stopTLS()
	hs := encodeHTTPServer(srv, log)
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
	log.Info("encoder ready", "addr", ln.Addr().String(), "tls", f.tlsCert != "", "model", name, "dims", man.Dims, "max_tokens", man.MaxTokens,
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

// encodeHTTPServer serves h. ReadTimeout bounds a body sent slowly (a
// request holds a connection and, once read, its texts' goroutines): a
// minute for the largest body at a slow 300 KB/s. The server's own errors
// (a refused TLS handshake, say) are log lines like the others.
func encodeHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// open opens the listener: https when --tls-cert is given, with its
// files re-read until stop is called (which waits for that to end);
// plain HTTP otherwise, refused with an API key off loopback.
func (f *encodeFlags) open(ctx context.Context, log *slog.Logger) (ln net.Listener, stop func(), err error) {
	edge, err := f.tls()
	if err != nil {
		return nil, nil, err
	}
	if ln, err = net.Listen("tcp", f.listen); err != nil {
		return nil, nil, err
	}
	if edge == nil {
		if err := f.plainKeyRefused(ln.Addr()); err != nil {
			_ = ln.Close()
			return nil, nil, err
		}
		return ln, func() {}, nil
	}
	logCertificate(log, "TLS certificate loaded", edge)
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	wg.Go(func() { reloadEncodeTLS(wctx, edge, log) })
	return tls.NewListener(ln, edge.Config()), func() { cancel(); wg.Wait() }, nil
}

// reloadEncodeTLS re-reads the listener's certificate (and client CA)
// when its files change and on SIGHUP; a bad pair is logged and the
// certificate in effect stays. It returns when ctx ends.
func reloadEncodeTLS(ctx context.Context, edge *tlsconf.Server, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	changes := make(chan string, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		// A Secret's files change by a swap of its ..data symlink, which
		// Watch sees.
		err := config.Watch(ctx, log, edge.Files(), 250*time.Millisecond, func() {
			select {
			case changes <- "file":
			default: // a reload is due already
			}
		})
		if err != nil {
			log.Error("TLS files not watched; SIGHUP reloads them", "error", err.Error())
		}
	})
	for {
		var trigger string
		select {
		case <-ctx.Done():
			return
		case <-hup:
			trigger = "SIGHUP"
		case trigger = <-changes:
		}
		if changed, err := edge.Reload(); err != nil {
			log.Error("TLS certificate reload failed; the previous certificate stays in effect", "trigger", trigger, "error", encodeTLSError(err).Error())
		} else if changed {
			logCertificate(log, "TLS certificate reloaded", edge)
		}
	}
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
