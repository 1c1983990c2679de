package pool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newPool(t *testing.T, weights []int, mut func(*Config), opts ...Option) *Pool {
	t.Helper()
	cfg := Config{Name: "p", Model: "m"}
	for i, w := range weights {
		cfg.Replicas = append(cfg.Replicas, Replica{URL: fmt.Sprintf("http://10.0.0.%d:8000", i+1), Weight: w})
	}
	off := false
	cfg.Health.Enabled = &off
	if mut != nil {
		mut(&cfg)
	}
	cfg.SetDefaults()
	if errs := cfg.Validate("pools[0]"); len(errs) > 0 {
		t.Fatalf("Validate: %v", errs)
	}
	p, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPickWeighted(t *testing.T) {
	// With nothing in flight, traffic follows the weights.
	p := newPool(t, []int{1, 3}, nil)
	counts := map[string]int{}
	const n = 20000
	for range n {
		b, err := p.Pick(nil)
		if err != nil {
			t.Fatal(err)
		}
		counts[b.Name]++
		b.Release()
	}
	got := float64(counts["http://10.0.0.2:8000"]) / n
	if got < 0.72 || got > 0.78 {
		t.Fatalf("replica of weight 3 next to weight 1 got %.3f of sequential picks, want 0.75", got)
	}
}

func TestPickLeastInFlight(t *testing.T) {
	p := newPool(t, []int{1, 1}, nil)
	busy := p.Backends()[0]
	busy.inflight.Store(50)
	for range 1000 {
		b, err := p.Pick(nil)
		if err != nil {
			t.Fatal(err)
		}
		if b == busy {
			t.Fatalf("Pick chose the replica with 50 in flight over an idle one")
		}
		b.Release()
	}
	if got := p.Backends()[1].InFlight(); got != 0 {
		t.Fatalf("InFlight after Release = %d, want 0", got)
	}
}

func TestPickSpreadsLoad(t *testing.T) {
	// Requests that stay in flight spread evenly over equal replicas.
	p := newPool(t, []int{1, 1, 1, 1}, nil)
	for range 400 {
		if _, err := p.Pick(nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range p.Backends() {
		if n := b.InFlight(); n < 80 || n > 120 {
			t.Fatalf("backend %s has %d in flight of 400 over 4, want about 100", b.Name, n)
		}
	}
}

func TestPickExcludesTried(t *testing.T) {
	p := newPool(t, []int{1, 1, 1}, nil)
	bs := p.Backends()
	for range 100 {
		b, err := p.Pick([]*Backend{bs[0], bs[2]})
		if err != nil {
			t.Fatal(err)
		}
		if b != bs[1] {
			t.Fatalf("Pick(tried 0,2) = %s", b.Name)
		}
		b.Release()
	}
	if _, err := p.Pick(bs); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("Pick(all tried) err = %v, want ErrNoBackend", err)
	}
}

func TestBreakerEjectAndRecover(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	p := newPool(t, []int{1, 1}, func(c *Config) {
		c.Breaker = Breaker{Failures: 3, Cooldown: 10 * time.Second, MaxCooldown: 25 * time.Second}
	}, WithClock(clk.Now))
	bad, good := p.Backends()[0], p.Backends()[1]

	// Two failures and a success: the count resets, no ejection.
	p.Report(bad, Failure)
	p.Report(bad, Failure)
	p.Report(bad, Success)
	p.Report(bad, Failure)
	p.Report(bad, Failure)
	if s := p.State(bad); s != StateHealthy {
		t.Fatalf("State after 2 failures = %q, want healthy", s)
	}
	p.Report(bad, Failure) // third in a row
	if s := p.State(bad); s != StateEjected {
		t.Fatalf("State after 3 failures = %q, want ejected", s)
	}
	assertOnly := func(want *Backend) {
		t.Helper()
		for range 50 {
			b, err := p.Pick(nil)
			if err != nil {
				t.Fatalf("Pick: %v", err)
			}
			b.Release()
			if b != want {
				t.Fatalf("Pick = %s, want %s", b.Name, want.Name)
			}
		}
	}
	assertOnly(good)

	// Cooldown over: exactly one probe goes to the ejected replica.
	clk.Advance(10 * time.Second)
	if s := p.State(bad); s != StateHalfOpen {
		t.Fatalf("State after cooldown = %q, want half-open", s)
	}
	good.inflight.Store(1000) // make the probe the preferred choice
	probe, _ := p.Pick(nil)
	if probe != bad {
		t.Fatalf("first Pick after cooldown = %s, want the half-open replica", probe.Name)
	}
	for range 20 {
		b, _ := p.Pick(nil)
		if b == bad {
			t.Fatalf("a second request reached the half-open replica while its probe was in flight")
		}
		b.Release()
	}
	// The probe fails: ejected again for twice the cooldown.
	probe.Release()
	p.Report(bad, Failure)
	if s := p.State(bad); s != StateEjected {
		t.Fatalf("State after failed probe = %q, want ejected", s)
	}
	clk.Advance(19 * time.Second)
	if s := p.State(bad); s != StateEjected {
		t.Fatalf("State 19s into a doubled 20s cooldown = %q, want ejected", s)
	}
	clk.Advance(time.Second)
	if s := p.State(bad); s != StateHalfOpen {
		t.Fatalf("State after doubled cooldown = %q, want half-open", s)
	}
	// Fail again: the doubling is capped at MaxCooldown (25s, not 40s).
	probe, _ = p.Pick(nil)
	if probe != bad {
		t.Fatalf("probe went to %s", probe.Name)
	}
	probe.Release()
	p.Report(bad, Failure)
	clk.Advance(25 * time.Second)
	if s := p.State(bad); s != StateHalfOpen {
		t.Fatalf("State after capped cooldown = %q, want half-open", s)
	}
	// A client that leaves mid-probe proves nothing: the probe slot frees.
	probe, _ = p.Pick(nil)
	probe.Release()
	p.Report(bad, Neutral)
	probe, _ = p.Pick(nil)
	if probe != bad {
		t.Fatalf("probe slot not freed after a neutral outcome")
	}
	// This probe succeeds: closed, and the next ejection starts from 10s again.
	probe.Release()
	p.Report(bad, Success)
	if s := p.State(bad); s != StateHealthy {
		t.Fatalf("State after successful probe = %q, want healthy", s)
	}
	for range 3 {
		p.Report(bad, Failure)
	}
	clk.Advance(10 * time.Second)
	if s := p.State(bad); s != StateHalfOpen {
		t.Fatalf("cooldown did not reset after recovery: state %q", s)
	}
}

func TestNoBackendWhenAllEjected(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	p := newPool(t, []int{1}, func(c *Config) { c.Breaker.Failures = 1 }, WithClock(clk.Now))
	p.Report(p.Backends()[0], Failure)
	if _, err := p.Pick(nil); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("Pick with the only replica ejected: err = %v, want ErrNoBackend", err)
	}
	if p.Ready() {
		t.Fatalf("Ready() = true with the only replica ejected")
	}
}

type scriptedChecker struct {
	mu  sync.Mutex
	err map[string]error
}

func (c *scriptedChecker) set(name string, err error) {
	c.mu.Lock()
	c.err[name] = err
	c.mu.Unlock()
}

func (c *scriptedChecker) Check(_ context.Context, b *Backend, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err[b.Name]
}

func TestActiveHealthThresholds(t *testing.T) {
	chk := &scriptedChecker{err: map[string]error{}}
	p := newPool(t, []int{1}, func(c *Config) {
		on := true
		c.Health = Health{Enabled: &on, HealthyThreshold: 2, UnhealthyThreshold: 3}
	}, WithChecker(chk))
	b := p.Backends()[0]
	ctx := context.Background()
	var changes []Transition
	rec := func(tr Transition) { changes = append(changes, tr) }

	if s := p.State(b); s != StateUnknown || p.Ready() {
		t.Fatalf("before any check: state %q ready %v, want unknown and not ready", s, p.Ready())
	}
	if _, err := p.Pick(nil); err != nil {
		t.Fatalf("an unchecked replica must take traffic: %v", err)
	}
	p.CheckOnce(ctx, b, rec) // first verdict counts at once
	if !p.Ready() || len(changes) != 1 || !changes[0].Healthy {
		t.Fatalf("after first pass: ready %v changes %+v", p.Ready(), changes)
	}
	down := errors.New("connection refused")
	chk.set(b.Name, down)
	p.CheckOnce(ctx, b, rec)
	p.CheckOnce(ctx, b, rec)
	if !p.Healthy(b) {
		t.Fatalf("2 failures took the replica down; threshold is 3")
	}
	p.CheckOnce(ctx, b, rec)
	if p.Healthy(b) || len(changes) != 2 || changes[1].Healthy || changes[1].Err != down {
		t.Fatalf("after 3 failures: healthy %v changes %+v", p.Healthy(b), changes)
	}
	if _, err := p.Pick(nil); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("Pick with the replica failing checks: %v", err)
	}
	chk.set(b.Name, nil)
	p.CheckOnce(ctx, b, rec)
	if p.Healthy(b) {
		t.Fatalf("1 pass brought it back; threshold is 2")
	}
	p.CheckOnce(ctx, b, rec)
	if !p.Healthy(b) || len(changes) != 3 {
		t.Fatalf("after 2 passes: healthy %v changes %+v", p.Healthy(b), changes)
	}
}

func TestHTTPCheckerAndRun(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/prefix/healthz" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	on := true
	cfg := Config{Name: "p", Model: "m", Replicas: []Replica{{URL: srv.URL + "/prefix/"}},
		Health: Health{Enabled: &on, Path: "/healthz", Interval: 10 * time.Millisecond, UnhealthyThreshold: 1}}
	cfg.SetDefaults()
	if errs := cfg.Validate("p"); errs != nil {
		t.Fatal(errs)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	changes := make(chan Transition, 10)
	go func() { p.Run(ctx, func(tr Transition) { changes <- tr }); close(done) }()
	if tr := <-changes; !tr.Healthy {
		t.Fatalf("first transition %+v, want healthy", tr)
	}
	healthy.Store(false)
	tr := <-changes
	var se *StatusError
	if tr.Healthy || !errors.As(tr.Err, &se) || se.Code != 503 {
		t.Fatalf("transition %+v, want unhealthy with status 503", tr)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if hits.Load() < 2 {
		t.Fatalf("health endpoint hit %d times", hits.Load())
	}
}

// A pool's checks leave no kept-alive connection behind when Run ends (a
// reload retires the pool): each would hold two net/http goroutines for
// the idle timeout.
func TestRunClosesCheckConnections(t *testing.T) {
	var open atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	on := true
	cfg := Config{Name: "p", Model: "m", Replicas: []Replica{{URL: srv.URL}},
		Health: Health{Enabled: &on, Interval: 10 * time.Millisecond}}
	cfg.SetDefaults()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, nil); close(done) }()
	testenv.Wait(t, func() bool { return open.Load() > 0 }, "a health check's connection")
	cancel()
	<-done
	testenv.WaitWithin(t, testenv.WaitTimeout, "the health checks' connections closed after Run returned", func() (bool, string) {
		n := open.Load()
		return n == 0, fmt.Sprintf("%d still open", n)
	})
}

func TestConfigValidate(t *testing.T) {
	t.Setenv("TRIAGE_TEST_KEY", "sk-1")
	cfg := Config{
		Replicas: []Replica{
			{URL: "ftp://x"}, {URL: "http://a:1", Weight: -2}, {URL: "http://a:1"},
			{URL: "http://b:1", APIKeyEnv: "TRIAGE_TEST_MISSING"}, {URL: "http://c:1", APIKeyEnv: "TRIAGE_TEST_KEY"},
		},
		Retry: Retry{Attempts: 99},
	}
	cfg.ResolveSecrets()
	cfg.SetDefaults()
	errs := cfg.Validate("pools[3]")
	want := []string{
		"pools[3].name: required",
		"pools[3].model: required: the model name the replicas serve",
		`pools[3].replicas[0].url: URL "ftp://x" must be http:// or https://`,
		"pools[3].replicas[1].weight: must be between 1 and 10000, got -2",
		"pools[3].replicas[2].url: duplicate of replicas[1]",
		"pools[3].replicas[3].api_key_env: environment variable TRIAGE_TEST_MISSING is not set",
		"pools[3].retry.attempts: must be between 1 and 10, got 99",
	}
	if len(errs) != len(want) {
		t.Fatalf("Validate gave %d problems, want %d: %v", len(errs), len(want), errs)
	}
	for i := range want {
		if errs[i].Error() != want[i] {
			t.Errorf("problem %d = %q, want %q", i, errs[i], want[i])
		}
	}
}

func BenchmarkPick(b *testing.B) {
	p := newPoolB(b, 4)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			be, err := p.Pick(nil)
			if err != nil {
				b.Fatal(err)
			}
			p.Report(be, Success)
			be.Release()
		}
	})
}

func newPoolB(b *testing.B, n int) *Pool {
	cfg := Config{Name: "p", Model: "m"}
	for i := range n {
		cfg.Replicas = append(cfg.Replicas, Replica{URL: fmt.Sprintf("http://10.0.0.%d:8000", i+1)})
	}
	cfg.SetDefaults()
	p, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// A replica's key is read once, when the config is resolved, and never
// printed with the config.
func TestSecretsResolvedOnceAndRedacted(t *testing.T) {
	t.Setenv("TRIAGE_TEST_KEY", "sk-secret-1")
	cfg := Config{Name: "p", Model: "m", Replicas: []Replica{{URL: "http://a:1", APIKeyEnv: "TRIAGE_TEST_KEY"}}}
	cfg.ResolveSecrets()
	cfg.SetDefaults()
	t.Setenv("TRIAGE_TEST_KEY", "sk-secret-2")
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Backends()[0].APIKey; got != "sk-secret-1" {
		t.Fatalf("backend key %q, want the one read at resolve time", got)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, cfg); strings.Contains(out, "sk-secret") {
			t.Fatalf("%s of the config prints the key: %s", f, out)
		}
	}
}

// State is a small value that prints, marshals and logs as its name.
func TestStateNames(t *testing.T) {
	for s, want := range map[State]string{StateUnknown: "unknown", StateHealthy: "healthy", StateUnhealthy: "unhealthy",
		StateEjected: "ejected", StateHalfOpen: "half-open", State(9): "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(s), got, want)
		}
		if b, err := json.Marshal(s); err != nil || string(b) != `"`+want+`"` {
			t.Errorf("json.Marshal(State(%d)) = %s, %v, want %q", uint8(s), b, err, want)
		}
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "state", s)
		if !strings.Contains(buf.String(), `"state":"`+want+`"`) {
			t.Errorf("State(%d) logs as %s, want %q", uint8(s), buf.String(), want)
		}
	}
}
