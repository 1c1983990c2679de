package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/logsink"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/h1"
	"github.com/triagegw/triage/router/tlsconf"
	"github.com/triagegw/triage/router/tracing"
	"github.com/triagegw/triage/tenancy"
)

// serveOptions are the flags of triage serve.
type serveOptions struct {
	config, listen string
	check, sims    bool
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o serveOptions
	fs := newFlagSet("triage serve", stderr)
	fs.StringVar(&o.config, "config", "triage.yaml", "config file (YAML); TRIAGE_* environment variables override it")
	fs.StringVar(&o.listen, "listen", "", "address to serve on, overriding the config's listen")
	fs.BoolVar(&o.check, "check", false, "validate the config (and its rules) and exit")
	fs.BoolVar(&o.sims, "sim", false, "also serve every loopback replica URL of the config with a simulated vLLM replica (triage sim), to try triage without model servers")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	// Take SIGHUP from the start: its default action would kill a gateway
	// still starting up.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tenancy.LogRedisTo(slog.Default()) // go-redis's dial errors at debug level, not on stderr (the store reports Redis's state)
	l := &gatewayLoader{path: o.config, listen: o.listen, cache: &lifecycle.Models{}}
	first, err := l.load()
	if err != nil {
		return err
	}
	envWarnings := append(first.Config.EnvWarnings(os.Environ()), first.Config.Notes()...)
	if o.check {
		// What only the whole gateway knows: alias clashes, the access
		// policies' names against the pools and rules, the keys file.
		gw, err := router.New(first.Config, first.Rules, router.Options{})
		if err != nil {
			return err
		}
		_ = gw.Shutdown(ctx) // nothing was traced
		for _, w := range envWarnings {
			fmt.Fprintf(stderr, "triage serve: warning: %s\n", w)
		}
		fmt.Fprintf(stdout, "%s: ok (%d pools", o.config, len(first.Config.Pools))
		if first.Rules != nil {
			fmt.Fprintf(stdout, "; rules %s, version %s", first.Config.RulesPath(), first.Rules.Version())
		}
		fmt.Fprintln(stdout, ")")
		return nil
	}
	return serve(ctx, o, l, first, envWarnings, hup, stderr)
}

// gatewayLoader loads the config, its rules and their tiers (kept across
// reloads in cache), and lists the files they came from.
type gatewayLoader struct {
	path, listen string
	cache        *lifecycle.Models
	edgeTLS      *tlsconf.Server // its files are watched too
}

func (l *gatewayLoader) load() (router.Loaded, error) {
	c, err := config.Load(l.path)
	if err != nil {
		return router.Loaded{}, err
	}
	if l.listen != "" {
		c.Listen = l.listen
	}
	rt, err := l.cache.Load(c)
	if err != nil {
		return router.Loaded{}, err
	}
	files := append([]string{l.path}, rt.Files...)
	if l.edgeTLS != nil {
		files = append(files, l.edgeTLS.Files()...)
	}
	if c.Access.KeysFile != "" {
		files = append(files, c.Access.KeysFile) // keys created or revoked apply without a restart
	}
	if c.Access.JWT.JWKSFile != "" {
		files = append(files, c.Access.JWT.JWKSFile) // keys rotated apply without a restart
	}
	for _, p := range c.Pools {
		for _, f := range []string{p.TLS.CAFile, p.TLS.CertFile, p.TLS.KeyFile} {
			if f != "" {
				files = append(files, f)
			}
		}
	}
	return router.Loaded{Config: c, Rules: rt.Set, Files: files}, nil
}

// warnRules logs what the rules' compiler found allowed but probably
// wrong (a route that can never fire, a split assigning by request id),
// at start and at each reload that applies them.
func warnRules(log *slog.Logger, ld router.Loaded) {
	if ld.Rules == nil {
		return
	}
	for _, w := range ld.Rules.Warnings() {
		log.Warn("rules: "+w.Msg, "file", w.File, "line", w.Line)
	}
}

// serve runs the gateway on first until ctx ends, then drains it.
func serve(ctx context.Context, o serveOptions, l *gatewayLoader, first router.Loaded, envWarnings []string, hup <-chan os.Signal, stderr io.Writer) error {
	cfg := first.Config
	lg := newLogging(stderr, cfg.Log.Level)
	log := lg.log
	defer lg.close()
	for _, w := range envWarnings {
		log.Warn(w)
	}
	warnRules(log, first)
	setGCPercent()
	if first.Rules != nil && first.Rules.NeedsTier2() && first.Rules.File().Tier2.Encoder == nil && !onnx.Available() {
		log.Warn("the rules enable tier 2 but this build has no ONNX runtime: escalations fall back to tier 1's verdict (reason tier2_unavailable); build with CGO_ENABLED=1 -tags ort (make build does)")
	}
	if o.sims {
		stop, err := startSims(cfg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	gw, err := router.New(cfg, first.Rules, router.Options{Logger: log, AccessLog: lg.sink, Registry: lg.registry(), ShadowLog: lg.files.Open, UsageLog: lg.files.OpenRotating, SampleLog: lg.files.OpenPrivate})
	if err != nil {
		return err
	}
	defer func() {
		// Once the requests have drained: their spans still queued are
		// exported, within the export timeout.
		tctx, cancel := context.WithTimeout(context.Background(), cfg.Tracing.Timeout)
		defer cancel()
		if err := gw.Shutdown(tctx); err != nil {
			log.Warn("spans still queued at shutdown were not exported", "error", err.Error())
		}
	}()
	ln, err := l.openListener(cfg, log)
	if err != nil {
		return listenError(err, cfg.Listen, listenOrigin(o, cfg))
	}
	stopDebug, err := serveDebug(cfg.Server.DebugListen, log)
	if err != nil {
		return err
	}
	defer stopDebug()
	stopMetrics, err := serveMetrics(cfg, gw, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	srv := gw.HTTPServer(slog.NewLogLogger(log.Handler(), slog.LevelWarn))

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	var bg sync.WaitGroup
	defer bg.Wait()
	runBackground(runCtx, &bg, gw, l, first, lg, hup)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("triage listening", "addr", ln.Addr().String(), "tls", l.edgeTLS != nil, "config", o.config, "pools", len(cfg.Pools), "rules_version", gw.RulesVersion(), "version", versionString())
	if o.sims { // after the log line, in order: the quickstart's banner
		model := cfg.Pools[0].Model
		if first.Rules != nil {
			model = first.Rules.Aliases()[0]
		}
		_, _ = lg.sink.Write([]byte(tryBanner(ln.Addr(), l.edgeTLS != nil, o.config, model)))
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if err := drain(gw, srv, errc, cfg.Server.ShutdownTimeout, log); err != nil {
		return err
	}
	stopRun()
	log.Info("stopped")
	return nil
}

// runBackground starts the gateway's loops, which end with ctx: its own
// (health checks, scrapes, shared state), the release of idle model pages,
// and the reloader, which watches the config's files and SIGHUP.
func runBackground(ctx context.Context, bg *sync.WaitGroup, gw *router.Gateway, l *gatewayLoader, first router.Loaded, lg *logging, hup <-chan os.Signal) {
	log, tls, metricsAt := lg.log, first.Config.Server.TLS, first.Config.Server.MetricsListen
	bg.Go(func() { gw.Run(ctx) })
	bg.Go(func() {
		releaseWhenIdle(ctx, gw.Served, 500*time.Millisecond, l.cache.ReleasePages, func() { lg.released.Store(time.Now().UnixNano()) })
	})
	rl := &router.Reloader{Gateway: gw, Load: l.load, Log: log, Before: l.reloadTLS(log),
		Applied: func(ld router.Loaded) {
			_ = lg.level.UnmarshalText([]byte(ld.Config.Log.Level))
			warnRules(log, ld)
			if ld.Config.Server.TLS != tls {
				log.Warn("server.tls changed; it takes effect at restart")
			}
			if ld.Config.Server.MetricsListen != metricsAt {
				log.Warn("server.metrics_listen changed; it takes effect at restart")
			}
		}}
	files := first.Files
	if l.edgeTLS != nil { // known only now: watched from the start too
		files = append(files, l.edgeTLS.Files()...)
	}
	bg.Go(func() { rl.Run(ctx, hup, files) })
}

// drain stops serving: readiness goes false, new connections are refused,
// requests and streams in flight run to their end or to the deadline, and
// what is left then is closed.
func drain(gw *router.Gateway, srv *h1.Server, errc <-chan error, deadline time.Duration, log *slog.Logger) error {
	gw.Drain()
	log.Info("shutting down: draining requests in flight", "deadline", deadline.String())
	sctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("drain deadline reached; closing the remaining connections", "error", err.Error())
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenOrigin says where the address the gateway listens on was set.
func listenOrigin(o serveOptions, cfg *config.Config) string {
	switch {
	case o.listen != "":
		return "--listen"
	case os.Getenv(config.EnvPrefix+"LISTEN") != "":
		return "$" + config.EnvPrefix + "LISTEN"
	}
	return "listen: in " + o.config + " (or its default)"
}

// listenError explains a listener that cannot open; an address in use says
// how to choose another.
func listenError(err error, addr, origin string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen on %s (set by %s): %w", addr, origin, err)
	}
	other := "127.0.0.1:8081"
	if host, port, e := net.SplitHostPort(addr); e == nil {
		if n, e := strconv.Atoi(port); e == nil && n > 0 && n < 65535 {
			other = net.JoinHostPort(host, strconv.Itoa(n+1))
		}
	}
	_, port, _ := net.SplitHostPort(other)
	return fmt.Errorf("listen on %s (set by %s): the address is already in use: another triage, or another server, listens there.\n"+
		"  Stop it, or pick another address: --listen %s, TRIAGE_LISTEN=%s, or listen: in the config (with make run: PORT=%s make run)",
		addr, origin, other, other, port)
}

// tryBanner is what serve --sim (make run) says once the gateway listens:
// where, and a request to try.
func tryBanner(addr net.Addr, tls bool, config, model string) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() || ip.IsLoopback() {
		host = "localhost"
	}
	base := scheme + "://" + net.JoinHostPort(host, port)
	return fmt.Sprintf("triage: gateway on %s (config %s, replicas simulated); try:\n"+
		"  curl -si %s/v1/chat/completions -H 'content-type: application/json' \\\n"+
		"    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Why does my Python list comprehension raise a TypeError?\"}]}'\n",
		base, config, base, model)
}

// listen opens the gateway's listener, with TLS when server.tls is set.
// The edge's certificate is re-read on every reload; server.tls's paths,
// like the other server settings, take a restart.
func (l *gatewayLoader) openListener(cfg *config.Config, log *slog.Logger) (net.Listener, error) {
	if cfg.Server.TLS.Enabled() {
		t, err := cfg.Server.TLS.Load()
		if err != nil {
			return nil, errors.New(tlsError(err))
		}
		l.edgeTLS = t
		logCertificate(log, "TLS certificate loaded", t)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	if l.edgeTLS != nil {
		ln = h1.NewTLSListener(ln, l.edgeTLS.Config())
	}
	return ln, nil
}

// reloadTLS re-reads the edge's certificate before each reload, apart from
// the config: a certificate rotated in place takes effect even when the
// config is rejected, and a bad pair keeps the certificate in effect.
func (l *gatewayLoader) reloadTLS(log *slog.Logger) func(trigger string) {
	return func(trigger string) {
		if l.edgeTLS == nil {
			return
		}
		if changed, err := l.edgeTLS.Reload(); err != nil {
			log.Error("TLS certificate reload failed; the previous certificate stays in effect", "trigger", trigger, "error", tlsError(err))
		} else if changed {
			logCertificate(log, "TLS certificate reloaded", l.edgeTLS)
		}
	}
}

// serveDebug serves profiles on addr (loopback, which config validation
// holds); off when addr is empty.
// gatewayGCPercent is the gateway's GOGC unless the environment sets one.
// The live heap under load is 2-3 MB, so at Go's default (100) the
// collector runs about 14 times a second at 30,000 requests a second, and
// each cycle stops the world twice: on a loaded machine a stop took up to
// 2.2 ms (gctrace), in the tail of every request in flight then. At 400 it
// runs about a quarter as often for some 10 MB more heap under load, and
// the same run's p99 fell 15% and p99.9 19% (bench/README.md).
const gatewayGCPercent = 400

func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gatewayGCPercent)
	}
}

// serveMetrics serves /metrics on server.metrics_listen, when set. With
// access control on and /metrics on the clients' address, it warns: the
// series name principals and their budgets.
func serveMetrics(cfg *config.Config, gw *router.Gateway, log *slog.Logger) (stop func(), err error) {
	addr := cfg.Server.MetricsListen
	if addr == "" {
		if cfg.Access.Enabled() {
			log.Warn("/metrics is served on listen, where clients reach it, and its series name principals and their budgets: set server.metrics_listen to serve it apart")
		}
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", gw.MetricsHandler())
	return serveAside(addr, "server.metrics_listen", "metrics listening", mux, log)
}

// serveAside serves h on addr (the config key key names it), apart from
// the gateway's listener, until stop.
func serveAside(addr, key, msg string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info(msg, "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

func serveDebug(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		// Heap profiles are served only on debug_listen; without it their
		// sampling would keep ~1.5 MiB of bucket tables for nothing.
		runtime.MemProfileRate = 0
		return func() {}, nil
	}
	return serveAside(addr, "server.debug_listen", "pprof listening", debugHandler(), log)
}

// logging is the process's logs: JSON lines through a buffer flushed in
// the background (the request path never waits on stderr), and the shadow
// decision logs.
type logging struct {
	sink  *logsink.Writer
	level *slog.LevelVar
	log   *slog.Logger
	files *logsink.Files // the shadow decision logs and the usage logs
	stop  context.CancelFunc
	wg    sync.WaitGroup

	// released is when releaseWhenIdle last returned memory to the OS, in
	// Unix nanoseconds (0: not yet), for triage_memory_released_timestamp_seconds.
	released atomic.Int64
}

func newLogging(stderr io.Writer, level string) *logging {
	ctx, stop := context.WithCancel(context.Background())
	lg := &logging{sink: logsink.New(stderr, 4<<20, 200*time.Millisecond), level: new(slog.LevelVar), stop: stop}
	_ = lg.level.UnmarshalText([]byte(level))
	lg.log = slog.New(slog.NewJSONHandler(lg.sink, &slog.HandlerOptions{Level: lg.level}))
	slog.SetDefault(lg.log)
	tenancy.LogRedisTo(lg.log)
	tracing.LogErrorsTo(lg.log) // a failed export: a warning in the log, not a line on stderr
	lg.files = logsink.NewFiles(ctx)
	lg.files.Opened = func(path string) { lg.log.Info("logging to a file", "file", path) }
	lg.wg.Go(func() { lg.sink.Run(ctx) })
	return lg
}

// close flushes the logs a last time and closes the shadow logs' files.
func (lg *logging) close() {
	lg.stop()
	lg.wg.Wait()
	_ = lg.files.Close()
}

// registry is the gateway's metrics registry: Go and process collectors,
// the counts of log lines dropped, and when memory was last returned to
// the OS (which a test or a dashboard reads to know the gateway has
// settled after traffic).
func (lg *logging) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "triage_log_dropped_total", Help: "Log lines dropped because the log output could not keep up."},
			func() float64 { return float64(lg.sink.Dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "triage_shadow_log_dropped_total", Help: "Shadow decision and usage log lines dropped because their file could not keep up."},
			func() float64 { return float64(lg.files.Dropped()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "triage_memory_released_timestamp_seconds", Help: "When the gateway last returned memory to the OS once its traffic stopped (Unix time; 0 before the first time)."},
			func() float64 { return float64(lg.released.Load()) / 1e9 }))
	return reg
}

// tlsError is an error of the edge's TLS files on one line, each problem
// under its config key: "server.tls.cert_file: /x.pem: no certificate found".
func tlsError(err error) string {
	var msgs []string
	for _, p := range tlsconf.Problems("server.tls", err) {
		msgs = append(msgs, p.Error())
	}
	return strings.Join(msgs, "; ")
}

// logCertificate logs the edge certificate in effect, and warns when it is
// outside its validity period: clients refuse it then.
func logCertificate(log *slog.Logger, msg string, s *tlsconf.Server) {
	leaf := s.Leaf()
	attrs := []any{"subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339)}
	switch now := time.Now(); {
	case now.After(leaf.NotAfter):
		log.Warn(msg+": the certificate has expired", attrs...)
	case now.Before(leaf.NotBefore):
		log.Warn(msg+": the certificate is not valid yet", append(attrs, "not_before", leaf.NotBefore.UTC().Format(time.RFC3339))...)
	default:
		log.Info(msg, attrs...)
	}
}

// releaseWhenIdle returns the memory a burst of traffic used to the OS once
// the traffic stops (no request for a whole period), so an idle replica
// stays small; Go's background scavenger alone takes minutes. release
// gives back what else can be had again (tier 1's mapped table pages: the
// first request after costs about 60 µs more), and released is called
// once the memory is back with the OS. It costs one garbage collection
// per busy-to-idle transition and returns when ctx is done.
func releaseWhenIdle(ctx context.Context, served func() uint64, period time.Duration, release, released func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	last, busy := served(), false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch n := served(); {
		case n != last:
			last, busy = n, true
		case busy:
			release() // tier 1's table pages: the next request maps back what it reads
			// Two collections: the first moves sync.Pool contents (net/http's
			// buffers) to the victim cache, the second frees them.
			runtime.GC()
			debug.FreeOSMemory()
			released()
			busy = false
		}
	}
}
