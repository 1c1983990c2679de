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
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/router"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/logsink"
	"github.com/triagegw/triage/router/tlsconf"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "triage.yaml", "config file (YAML); TRIAGE_* environment variables override it")
	listen := fs.String("listen", "", "address to serve on, overriding the config's listen")
	check := fs.Bool("check", false, "validate the config (and its rules) and exit")
	withSims := fs.Bool("sim", false, "also serve every loopback replica URL of the config with a simulated vLLM replica (triage sim), to try triage without model servers")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	// Take SIGHUP from the start: its default action would kill a gateway
	// still starting up.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cache := &tierCache{}
	load := func() (*config.Config, *routing, error) {
		c, err := config.Load(*cfgPath)
		if err != nil {
			return nil, nil, err
		}
		if *listen != "" {
			c.Listen = *listen
		}
		r, err := loadRouting(c, cache)
		if err != nil {
			return nil, nil, err
		}
		return c, r, nil
	}
	cfg, rt, err := load()
	if err != nil {
		return err
	}
	if *check {
		fmt.Fprintf(stdout, "%s: ok (%d pools", *cfgPath, len(cfg.Pools))
		if rt.set != nil {
			fmt.Fprintf(stdout, "; rules %s, version %s", cfg.RulesPath(), rt.set.Version())
		}
		fmt.Fprintln(stdout, ")")
		return nil
	}

	// Logs go through a buffer flushed in the background: the request path
	// never waits on stderr.
	sink := logsink.New(stderr, 4<<20, 200*time.Millisecond)
	var level slog.LevelVar
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	log := slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: &level}))
	slog.SetDefault(log)
	var bg sync.WaitGroup
	sinkCtx, stopSink := context.WithCancel(context.Background())
	bg.Go(func() { sink.Run(sinkCtx) })
	shadowLogs := &shadowLogs{ctx: sinkCtx, bg: &bg, log: log}
	if rt.set != nil && rt.set.NeedsTier2() && !onnx.Available() {
		log.Warn("the rules enable tier 2 but this build has no ONNX runtime: escalations fall back to tier 1's verdict (reason tier2_unavailable); build with CGO_ENABLED=1 -tags ort (make build does)")
	}
	// Last out: the sinks' final flushes, then the shadow logs' files.
	defer func() { stopSink(); bg.Wait(); shadowLogs.close() }()

	if *withSims {
		stop, err := startSims(cfg, log)
		if err != nil {
			return err
		}
		defer stop()
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "triage_log_dropped_total", Help: "Log lines dropped because the log output could not keep up."},
			func() float64 { return float64(sink.Dropped()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "triage_shadow_log_dropped_total", Help: "Shadow decision log lines dropped because the log file could not keep up."},
		func() float64 { return float64(shadowLogs.dropped()) }))
	gw, err := router.New(cfg, rt.set, router.Options{Logger: log, AccessLog: sink, Registry: reg, ShadowLog: shadowLogs.open})
	if err != nil {
		return err
	}

	// The edge's certificate is read once here and re-read on every reload;
	// server.tls's paths, like the other server settings, take a restart.
	var edgeTLS *tlsconf.Server
	if cfg.Server.TLS.Enabled() {
		if edgeTLS, err = cfg.Server.TLS.Load(); err != nil {
			return errors.New(tlsError(err))
		}
		logCertificate(log, "TLS certificate loaded", edgeTLS)
	}
	// tlsFiles are the TLS files a config depends on, watched with it.
	tlsFiles := func(c *config.Config) []string {
		var files []string
		if edgeTLS != nil {
			files = append(files, edgeTLS.Files()...)
		}
		for _, p := range c.Pools {
			for _, f := range []string{p.TLS.CAFile, p.TLS.CertFile, p.TLS.KeyFile} {
				if f != "" {
					files = append(files, f)
				}
			}
		}
		return files
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	if edgeTLS != nil {
		ln = tls.NewListener(ln, edgeTLS.Config())
	}
	if cfg.Server.DebugListen == "" {
		// Heap profiles are served only on debug_listen; without it their
		// sampling would keep ~1.5 MiB of bucket tables for nothing.
		runtime.MemProfileRate = 0
	}
	if addr := cfg.Server.DebugListen; addr != "" {
		dln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("server.debug_listen: %w", err)
		}
		dsrv := &http.Server{Handler: debugHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = dsrv.Serve(dln) }()
		defer dsrv.Close()
		log.Info("pprof listening", "addr", dln.Addr().String())
	}
	srv := gw.HTTPServer(slog.NewLogLogger(log.Handler(), slog.LevelWarn))

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	bg.Go(func() { gw.Run(runCtx) })
	bg.Go(func() { releaseWhenIdle(runCtx, gw.Served, 500*time.Millisecond) })

	// The config, its rules and their heads reload as one unit: a change to
	// any of them rebuilds all, and a problem in any rejects all.
	var watchMu sync.Mutex
	var stopWatch context.CancelFunc
	var watched []string
	var reload func(trigger string)
	watch := func(files []string) {
		watchMu.Lock()
		defer watchMu.Unlock()
		if slices.Equal(files, watched) {
			return
		}
		if stopWatch != nil {
			stopWatch()
		}
		wctx, cancel := context.WithCancel(runCtx)
		stopWatch, watched = cancel, files
		bg.Go(func() {
			if err := config.Watch(wctx, log, files, 250*time.Millisecond, func() { reload("file") }); err != nil {
				log.Error("config file watch failed; reload with SIGHUP", "error", err)
			}
		})
	}
	var reloadMu sync.Mutex
	reload = func(trigger string) {
		reloadMu.Lock()
		defer reloadMu.Unlock()
		if edgeTLS != nil {
			// Apart from the config: a certificate rotated in place takes
			// effect even when the config is rejected, and a bad pair keeps
			// the previous certificate whatever the config says.
			if changed, err := edgeTLS.Reload(); err != nil {
				log.Error("TLS certificate reload failed; the previous certificate stays in effect", "trigger", trigger, "error", tlsError(err))
			} else if changed {
				logCertificate(log, "TLS certificate reloaded", edgeTLS)
			}
		}
		c, r, err := load()
		if err == nil {
			err = gw.Apply(c, r.set)
		}
		if err != nil {
			gw.Metrics().Reload("invalid")
			log.Error("config reload rejected; the previous config stays in effect", "trigger", trigger, "error", err.Error())
			return
		}
		level.UnmarshalText([]byte(c.Log.Level))
		gw.Metrics().Reload("success")
		log.Info("config reloaded", "trigger", trigger, "version", gw.Version(), "rules_version", gw.RulesVersion())
		if c.Server.TLS != cfg.Server.TLS {
			log.Warn("server.tls changed; it takes effect at restart")
		}
		watch(append(append([]string{*cfgPath}, r.files...), tlsFiles(c)...))
	}
	watch(append(append([]string{*cfgPath}, rt.files...), tlsFiles(cfg)...))
	bg.Go(func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case <-hup:
				reload("SIGHUP")
			}
		}
	})

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("triage listening", "addr", ln.Addr().String(), "tls", edgeTLS != nil, "config", *cfgPath, "pools", len(cfg.Pools), "rules_version", gw.RulesVersion(), "version", versionString())

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Drain: readiness goes false, new connections are refused, requests
	// and streams in flight run to their end or to the deadline.
	gw.Drain()
	log.Info("shutting down: draining requests in flight", "deadline", cfg.Server.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("drain deadline reached; closing the remaining connections", "error", err.Error())
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	stopRun()
	log.Info("stopped")
	return nil
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
// stays small; Go's background scavenger alone takes minutes. It costs one
// garbage collection per busy-to-idle transition and returns when ctx is
// done.
func releaseWhenIdle(ctx context.Context, served func() uint64, period time.Duration) {
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
			// Two collections: the first moves sync.Pool contents (net/http's
			// buffers) to the victim cache, the second frees them.
			runtime.GC()
			debug.FreeOSMemory()
			busy = false
		}
	}
}

// shadowLogs are the shadow decision logs, one buffered writer per file,
// opened when a rules file first names it and kept across reloads.
type shadowLogs struct {
	ctx context.Context
	bg  *sync.WaitGroup
	log *slog.Logger

	mu    sync.Mutex
	sinks map[string]*logsink.Writer
	files []*os.File
}

func (l *shadowLogs) open(path string) (io.Writer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.sinks[path]; w != nil {
		return w, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	w := logsink.New(f, 4<<20, time.Second)
	if l.sinks == nil {
		l.sinks = map[string]*logsink.Writer{}
	}
	l.sinks[path], l.files = w, append(l.files, f)
	l.bg.Go(func() { w.Run(l.ctx) })
	l.log.Info("shadow decisions logged", "file", path)
	return w, nil
}

func (l *shadowLogs) dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, w := range l.sinks {
		n += w.Dropped()
	}
	return n
}

// close closes the files, once the sinks' Run loops have ended (with a
// final flush).
func (l *shadowLogs) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.files {
		_ = f.Close()
	}
}
