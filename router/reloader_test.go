package router

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/router/config"

	"github.com/triagegw/triage/internal/testenv"
)

// The Reloader applies a config when its file changes or a signal comes,
// rejects an invalid one whole (the config in effect stays), and counts
// both.
func TestReloader(t *testing.T) {
	rep := newReplica(t, "m", "r")
	dir := t.TempDir()
	path := filepath.Join(dir, "triage.yaml")
	write := func(body string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // as editors and ConfigMaps do
			t.Fatal(err)
		}
	}
	cfgFor := func(alias string) string {
		return "pools:\n  - name: p\n    model: m\n    aliases: [" + alias + "]\n    health: {enabled: false}\n    replicas: [{url: \"" + rep.URL + "\"}]\n"
	}
	write(cfgFor("a1"))
	load := func() (Loaded, error) {
		c, err := config.Load(path)
		if err != nil {
			return Loaded{}, err
		}
		return Loaded{Config: c, Files: []string{path}}, nil
	}
	first, err := load()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, first.Config)
	var mu sync.Mutex
	var applied, before []string
	watching := make(chan struct{}, 1)
	rl := &Reloader{Gateway: h.gw, Load: load, Settle: 20 * time.Millisecond,
		Watching: func([]string) {
			select {
			case watching <- struct{}{}:
			default:
			}
		},
		Before:  func(trigger string) { mu.Lock(); before = append(before, trigger); mu.Unlock() },
		Applied: func(l Loaded) { mu.Lock(); applied = append(applied, l.Config.Pools[0].Aliases[0]); mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { rl.Run(ctx, sig, first.Files); close(done) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	}()
	testenv.Receive(t, watching, "the watch of the config's directory")

	// A change to the file.
	write(cfgFor("a2"))
	testenv.Wait(t, func() bool { return h.gw.Version() == 2 }, "the edited file to apply")
	if r := h.do(t, "POST", "/v1/chat/completions", `{"model":"a2","messages":[{"role":"user","content":"hi"}]}`); r.status != 200 {
		t.Fatalf("after the reload: %d %s", r.status, r.body)
	}
	// An invalid file: rejected whole, the config in effect stays.
	write("pools: [{name: p}]\n")
	testenv.Wait(t, func() bool { return strings.Contains(scrape(t, h), `triage_config_reloads_total{result="invalid"} 1`) }, "the invalid file to be counted")
	if h.gw.Version() != 2 {
		t.Fatalf("an invalid file changed the version to %d", h.gw.Version())
	}
	// A signal, once the file is good again.
	write(cfgFor("a3"))
	testenv.Wait(t, func() bool { return h.gw.Version() == 3 }, "the fixed file to apply")
	sig <- syscall.SIGHUP
	testenv.Wait(t, func() bool { return h.gw.Version() == 4 }, "SIGHUP to reload")
	// Applied runs once the new version is in effect: wait for it too.
	testenv.Wait(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(applied) == 3 }, "Applied after SIGHUP")
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(applied, ","); got != "a2,a3,a3" {
		t.Fatalf("Applied saw %s", got)
	}
	if before[len(before)-1] != "SIGHUP" {
		t.Fatalf("triggers %v, want the last to be the signal", before)
	}
}
