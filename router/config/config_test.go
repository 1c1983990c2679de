package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const good = `
listen: 127.0.0.1:9090
default_pool: general
limits: {max_body_bytes: 1MiB}
pools:
  - name: general
    model: llama-3.1-8b-instruct
    aliases: [gpt-4o-mini]
    replicas:
      - {url: "http://127.0.0.1:9001"}
      - {url: "http://127.0.0.1:9002", weight: 3}
    timeouts: {connect: 500ms}
    health: {interval: 1s}
  - name: code
    model: qwen2.5-coder
    replicas: [{url: "http://127.0.0.1:9003"}]
`

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	c, err := Load(write(t, dir, "triage.yaml", good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9090" || c.DefaultPool != "general" || c.Limits.MaxBodyBytes != 1<<20 {
		t.Fatalf("Load = %+v", c)
	}
	g := c.Pools[0]
	if g.Replicas[1].Weight != 3 || g.Replicas[0].Weight != 1 || g.Timeouts.Connect != 500*time.Millisecond ||
		g.Health.Interval != time.Second || g.Timeouts.FirstByte != 300*time.Second || g.Retry.Attempts != 3 {
		t.Fatalf("pool defaults not applied: %+v", g)
	}
	if c.Server.ShutdownTimeout != 30*time.Second || !c.Log.AccessLog() || c.Log.Level != "info" {
		t.Fatalf("server defaults not applied: %+v %+v", c.Server, c.Log)
	}
}

func TestEnvOverrides(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TRIAGE_LISTEN", "0.0.0.0:8000")
	t.Setenv("TRIAGE_LIMITS__MAX_BODY_BYTES", "2MiB")
	t.Setenv("TRIAGE_SERVER__SHUTDOWN_TIMEOUT", "5s")
	t.Setenv("TRIAGE_LOG__ACCESS", "false")
	t.Setenv("TRIAGE_SHARED", "/somewhere") // not a config key: ignored
	c, err := Load(write(t, dir, "triage.yaml", good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "0.0.0.0:8000" || c.Limits.MaxBodyBytes != 2<<20 || c.Server.ShutdownTimeout != 5*time.Second || c.Log.AccessLog() {
		t.Fatalf("env overrides not applied: listen %s body %d shutdown %s access %v", c.Listen, c.Limits.MaxBodyBytes, c.Server.ShutdownTimeout, c.Log.AccessLog())
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(write(t, dir, "bad.yaml", `
listen: 127.0.0.1:9090
defualt_pool: general
pools:
  - name: general
    model: m1
    replicas: [{url: "http://a:1", wieght: 2}]
    timeouts: {connect: soon}
  - name: general
    model: m1
    replicas: []
`))
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Load error = %v, want *Error", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`pools[1].name: duplicate pool name "general" (also pools[0])`, // validation runs despite the typos
		`defualt_pool: unknown field (did you mean "default_pool"?)`,
		`pools[0].replicas[0].wieght: unknown field (did you mean "weight"?)`,
		`pools[0].timeouts.connect: invalid duration`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}

	// With the decoding problems fixed, validation reports the rest at once.
	_, err = Load(write(t, dir, "bad2.yaml", `
default_pool: nope
limits: {max_body_bytes: 12 parsecs}
pools:
  - name: general
    model: m1
    replicas: [{url: "http://a:1"}]
  - name: general
    model: m1
    replicas: []
log: {level: loud}
`))
	if err == nil {
		t.Fatal("Load accepted an invalid config")
	}
	msg = err.Error()
	if !strings.Contains(msg, "max_body_bytes") || !strings.Contains(msg, "unknown unit") {
		t.Errorf("bad size not reported:\n%s", msg)
	}
	if strings.Contains(msg, "limits.max_body_bytes: must be positive") {
		t.Errorf("a field that failed to decode is reported twice:\n%s", msg)
	}
	_, err = Load(write(t, dir, "bad3.yaml", `
default_pool: nope
pools:
  - name: general
    model: m1
    replicas: [{url: "http://a:1"}]
  - name: general
    model: m1
    replicas: []
log: {level: loud}
`))
	msg = err.Error()
	for _, want := range []string{
		`default_pool: no pool named "nope"`,
		`pools[1].name: duplicate pool name "general" (also pools[0])`,
		`pools[1].model: model name "m1" is already served by pools[0].model`,
		`pools[1].replicas: at least one replica is required`,
		`log.level: must be debug, info, warn or error, got "loud"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{"123": 123, "8MiB": 8 << 20, "1 KB": 1000, "2GiB": 2 << 30, "0": 0} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || int64(b) != want {
			t.Errorf("ByteSize(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1TiB", "1.5MB"} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("ByteSize(%q) accepted as %d", in, b)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "nope.yaml")); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("Load(missing) = %v", err)
	}
}

// TestWatch drives Watch's settle timer by hand and follows the events it
// gets. A marker file written after the writes under test is the sign that
// the watch has handled them: a directory's events arrive in order.
func TestWatch(t *testing.T) {
	const settle = 20 * time.Millisecond
	dir := t.TempDir()
	path := write(t, dir, "triage.yaml", good)
	ready := make(chan struct{})
	events := make(chan fsnotify.Event, 1000)
	timers := make(chan chan time.Time, 1000)
	changed := make(chan struct{}, 10)
	hooks := watchHooks{
		ready: func() { close(ready) },
		event: func(ev fsnotify.Event) { events <- ev },
		after: func(d time.Duration) <-chan time.Time {
			if d != settle {
				t.Errorf("settle timer of %v, want %v", d, settle)
			}
			c := make(chan time.Time, 1)
			timers <- c
			return c
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- watch(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), []string{path}, settle, func() { changed <- struct{}{} }, hooks)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Watch returned before it was ready: %v", err)
	}
	const patience = 10 * time.Second // a failure, not a delay: every wait ends on an event
	markers := 0
	// handled writes a marker and waits for the watch to see it; it
	// returns the settle timers started meanwhile, the latest last.
	handled := func(what string) []chan time.Time {
		t.Helper()
		markers++
		m := write(t, dir, fmt.Sprintf(".marker-%d", markers), "")
		for {
			select {
			case ev := <-events:
				if ev.Name != m {
					continue
				}
				var started []chan time.Time
				for {
					select {
					case c := <-timers:
						started = append(started, c)
					default:
						return started
					}
				}
			case <-time.After(patience):
				t.Fatalf("the watch did not get the events of %s", what)
			}
		}
	}
	noChange := func(what string) {
		t.Helper()
		select {
		case <-changed:
			t.Fatalf("a change was reported %s", what)
		default:
		}
	}
	// fire ends the settle time of the latest timer and waits for the change.
	fire := func(started []chan time.Time, what string) {
		t.Helper()
		if len(started) == 0 {
			t.Fatalf("%s started no settle timer", what)
		}
		started[len(started)-1] <- time.Now()
		select {
		case <-changed:
		case <-time.After(patience):
			t.Fatalf("no change reported after %s", what)
		}
	}

	// A burst of writes is one change: each write starts the settle time
	// again, and only the latest timer counts.
	for range 5 {
		write(t, dir, "triage.yaml", good)
	}
	started := handled("in-place writes")
	noChange("before the settle time ended")
	for _, c := range started[:max(len(started)-1, 0)] {
		c <- time.Now()
	}
	if len(handled("the earlier timers")) != 0 {
		t.Fatal("a settle timer was started with nothing written")
	}
	noChange("when a settle time the burst restarted ended")
	fire(started, "in-place writes")
	handled("the change")
	noChange("twice for one burst")

	// An atomic replace (write elsewhere, rename over) is seen.
	tmp := write(t, dir, ".triage.yaml.tmp", good+"\n# edited\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	fire(handled("rename over the file"), "rename over the file")

	// Other files in the directory, and a change of mode, are ignored.
	write(t, dir, "unrelated.txt", "x")
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if started := handled("another file and a chmod"); len(started) != 0 {
		t.Fatalf("another file or a chmod started %d settle timers", len(started))
	}
	noChange("for another file or a chmod")

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(patience):
		t.Fatal("Watch did not return after cancel")
	}
}

// Profiles expose the process's memory: debug_listen is refused off
// loopback unless debug_allow_remote says so.
func TestDebugListenLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:6060", false, true},
		{"[::1]:6060", false, true},
		{"localhost:6060", false, true},
		{":6060", false, false},
		{"0.0.0.0:6060", false, false},
		{"10.1.2.3:6060", false, false},
		{"0.0.0.0:6060", true, true},
		{"garbage", false, false},
	} {
		body := good + "server: {debug_listen: \"" + tc.addr + "\""
		if tc.remote {
			body += ", debug_allow_remote: true"
		}
		body += "}\n"
		_, err := Load(write(t, t.TempDir(), "triage.yaml", body))
		if ok := err == nil; ok != tc.ok {
			t.Errorf("debug_listen %q (allow remote %v): error %v, want ok=%v", tc.addr, tc.remote, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "server.debug_listen") {
			t.Errorf("debug_listen %q: error %v does not name the key", tc.addr, err)
		}
	}
}

func TestLimitsAndSendTimeoutDefaults(t *testing.T) {
	c, err := Load(write(t, t.TempDir(), "triage.yaml", good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.MaxHeaderBytes != 16<<10 || c.Limits.MaxHeaders != 100 || c.Server.SendTimeout != time.Minute {
		t.Fatalf("defaults: %+v %+v", c.Limits, c.Server)
	}
	_, err = Load(write(t, t.TempDir(), "triage.yaml", good+"server: {send_timeout: -1s}\n"))
	if err == nil || !strings.Contains(err.Error(), "server.send_timeout") {
		t.Fatalf("negative send_timeout: %v", err)
	}
}
