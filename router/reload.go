package router

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// Loaded is one load of the configuration: the config, its rules compiled
// (nil without a rules file), and every file they were read from.
type Loaded struct {
	Config *config.Config
	Rules  *rules.Set
	Files  []string
}

// Reloader applies configurations to a Gateway as they change: on a
// change to any file the last load read (the config, its rules, their
// heads, TLS files), on a signal, or when asked. The config, its rules and
// their heads are one unit: a problem in any part rejects the whole, which
// is logged with every problem and counted, and the configuration in
// effect stays.
//
// Run's goroutines (one file watch, replaced when the set of files
// changes) exit when its context ends; Reload may be called from any
// goroutine, and reloads run one at a time.
type Reloader struct {
	Gateway *Gateway
	// Load reads the configuration and everything it names.
	Load func() (Loaded, error)
	// Log receives the outcome of each reload; nil discards.
	Log *slog.Logger
	// Before runs before each load, with what triggered it (the edge's TLS
	// certificate is re-read there: it takes effect even when the config
	// itself is rejected).
	Before func(trigger string)
	// Applied runs after a load was applied (the log level, say).
	Applied func(Loaded)
	// Settle debounces a burst of file events into one reload. Default
	// 250ms.
	Settle time.Duration
	// Watching, when set, runs each time a watch of the files is up: a
	// change to them from then on reloads.
	Watching func(files []string)

	mu      sync.Mutex // one reload at a time
	watchMu sync.Mutex
	ctx     context.Context
	closed  bool // Run has ended: no new watch starts
	watched []string
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

func (r *Reloader) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Run watches files (those of the load in effect) and listens on signals
// (SIGHUP, for one), reloading on either, until ctx ends.
func (r *Reloader) Run(ctx context.Context, signals <-chan os.Signal, files []string) {
	r.watchMu.Lock()
	r.ctx = ctx
	r.watchMu.Unlock()
	r.watch(files)
	defer func() {
		r.watchMu.Lock()
		r.closed = true
		if r.stop != nil {
			r.stop()
		}
		r.watchMu.Unlock()
		r.wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-signals:
			trigger := s.String()
			if s == syscall.SIGHUP {
				trigger = "SIGHUP"
			}
			_ = r.Reload(trigger)
		}
	}
}

// Reload loads the configuration and applies it, reporting why it was
// rejected (the configuration in effect stays then).
func (r *Reloader) Reload(trigger string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Before != nil {
		r.Before(trigger)
	}
	ld, err := r.Load()
	if err == nil {
		err = r.Gateway.Apply(ld.Config, ld.Rules)
	}
	if err != nil {
		r.Gateway.Metrics().Reload("invalid")
		r.log().Error("config reload rejected; the previous config stays in effect", "trigger", trigger, "error", err.Error())
		return err
	}
	r.Gateway.Metrics().Reload("success")
	r.log().Info("config reloaded", "trigger", trigger, "version", r.Gateway.Version(), "rules_version", r.Gateway.RulesVersion())
	if r.Applied != nil {
		r.Applied(ld)
	}
	r.watch(ld.Files)
	return nil
}

// watch makes files the watched set, restarting the watch when it changed.
func (r *Reloader) watch(files []string) {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	if r.ctx == nil || r.closed || slices.Equal(files, r.watched) {
		return
	}
	if r.stop != nil {
		r.stop()
	}
	wctx, cancel := context.WithCancel(r.ctx)
	r.stop, r.watched = cancel, slices.Clone(files)
	settle := r.Settle
	if settle <= 0 {
		settle = 250 * time.Millisecond
	}
	r.wg.Go(func() {
		var ready func()
		if r.Watching != nil {
			watched := slices.Clone(files)
			ready = func() { r.Watching(watched) }
		}
		if err := config.WatchReady(wctx, r.log(), files, settle, func() { _ = r.Reload("file") }, ready); err != nil {
			r.log().Error("config file watch failed; reload with SIGHUP", "error", err)
		}
	})
}
