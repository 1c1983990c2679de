package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/pool"

	"github.com/triagegw/triage/sim"
)

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("triage sim", stderr)
	listen := fs.String("listen", "127.0.0.1:9001", "address to serve on")
	logRequests := fs.Bool("log-requests", false, "log one JSON line per POST request to stderr: its X-Request-Id, path and how it is answered (ok, error, invalid, drop, fault) (default false)")
	var o sim.Options
	o.RegisterFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	if *logRequests {
		o.RequestLog = log
	}
	s, err := sim.New(o)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	defer s.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	log.Info("sim listening", "addr", ln.Addr().String(), "model", o.Model, "api", cmp.Or(o.API, sim.APIOpenAI))
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// startSims serves each loopback replica URL of cfg with a simulated
// replica of its pool's model (paced like a real model: 150 ms to the first
// token, 25 ms between tokens; speaking the Messages API for a kind:
// anthropic pool, any key accepted), for `serve --sim`. stop shuts them
// down.
func startSims(cfg *config.Config, log *slog.Logger) (stop func(), err error) {
	var servers []*http.Server
	stop = func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
	for _, p := range cfg.Pools {
		for i, r := range p.Replicas {
			u, err := url.Parse(r.URL)
			if err != nil || u.Scheme != "http" || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost") {
				continue
			}
			o := sim.Options{Model: p.Model, Name: fmt.Sprintf("%s-%d", p.Name, i), Latency: 150 * time.Millisecond, ChunkDelay: 25 * time.Millisecond}
			if p.Kind == pool.KindAnthropic {
				o.API = sim.APIAnthropic
			}
			s, err := sim.New(o)
			if err != nil {
				stop()
				return nil, err
			}
			ln, err := net.Listen("tcp", u.Host)
			if errors.Is(err, syscall.EADDRINUSE) {
				stop()
				return nil, fmt.Errorf("--sim: the simulated replica of pool %s cannot listen on %s, its URL in the config: the address is already in use "+
					"(another triage serve --sim or make run?); stop it, or give the pool's replicas other URLs", p.Name, u.Host)
			}
			if err != nil {
				stop()
				return nil, fmt.Errorf("--sim: %s (pool %s): %w", u.Host, p.Name, err)
			}
			srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
			servers = append(servers, srv)
			go func() { _ = srv.Serve(ln) }()
			log.Info("sim replica", "pool", p.Name, "addr", u.Host, "model", p.Model, "api", cmp.Or(o.API, sim.APIOpenAI))
		}
	}
	return stop, nil
}
