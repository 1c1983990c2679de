package config

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch calls onChange after any of files is written, created, renamed or
// replaced, debounced by settle so an editor's burst of writes is one
// change. It watches the files' directories, not the files, so atomic
// replacements (rename over, Kubernetes ConfigMap symlink swaps) are seen.
// It returns when ctx is done, or at once with an error if the watch cannot
// be set up.
func Watch(ctx context.Context, log *slog.Logger, files []string, settle time.Duration, onChange func()) error {
	return watch(ctx, log, files, settle, onChange, watchHooks{})
}

// WatchReady is Watch, calling ready once the files' directories are
// watched: a change from then on is seen.
func WatchReady(ctx context.Context, log *slog.Logger, files []string, settle time.Duration, onChange, ready func()) error {
	return watch(ctx, log, files, settle, onChange, watchHooks{ready: ready})
}

// watchHooks let a test follow and drive watch; the zero value is Watch.
type watchHooks struct {
	ready func()                               // the directories are watched
	event func(fsnotify.Event)                 // an event arrived (before it is filtered)
	after func(time.Duration) <-chan time.Time // the settle timer (default time.After)
}

func watch(ctx context.Context, log *slog.Logger, files []string, settle time.Duration, onChange func(), h watchHooks) error {
	if h.after == nil {
		h.after = time.After
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watch: %w", err)
	}
	defer w.Close()
	names := map[string]bool{}
	dirs := map[string]bool{}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return fmt.Errorf("config: watch %s: %w", f, err)
		}
		names[abs] = true
		dirs[filepath.Dir(abs)] = true
	}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			return fmt.Errorf("config: watch %s: %w", d, err)
		}
	}
	if h.ready != nil {
		h.ready()
	}
	// fire is the settle timer of the latest relevant event: each one
	// starts it again, so only a quiet settle ends a burst.
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if h.event != nil {
				h.event(ev)
			}
			// A ConfigMap swaps a "..data" symlink; any event on it, or on a
			// watched file, counts.
			if !names[ev.Name] && filepath.Base(ev.Name) != "..data" {
				continue
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			fire = h.after(settle)
		case <-fire:
			fire = nil
			onChange()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("config watch error", "error", err)
		}
	}
}
