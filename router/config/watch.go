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
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			// A ConfigMap swaps a "..data" symlink; any event on it, or on a
			// watched file, counts.
			if !names[ev.Name] && filepath.Base(ev.Name) != "..data" {
				continue
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(settle)
			} else {
				timer.Reset(settle)
			}
			fire = timer.C
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
