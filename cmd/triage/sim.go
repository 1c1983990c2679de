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
	"time"

	"github.com/triagegw/triage/sim"
)

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage sim", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9001", "address to serve on")
	var o sim.Options
	o.RegisterFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	s, err := sim.New(o)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	log.Info("sim listening", "addr", ln.Addr().String(), "model", o.Model)
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
