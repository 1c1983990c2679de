//go:build soak

package main

// The soak run (make soak): the gateway as a real process in front of
// simulated replicas, some paced like a model, some injecting wire-level
// faults and dropping streams, under mixed traffic from concurrent clients
// for SOAK_DURATION, while the config is rewritten every few seconds and one
// replica at a time is SIGKILLed and restarted on its port.
//
// Every request must succeed (the whole answer, from the replica its
// X-Sim-Replica names, for the pool its model or route selects) or fail for
// a reason the run injected: the fault or drop the replica logged for it
// (`triage sim --log-requests`, keyed by X-Request-Id), or the kill of the
// replica it was on. Besides, no client may ever see LEAKED- (a response
// meant for nobody) or a 1xx as the final status, a POST a replica read may
// not be sent again unless that replica answered 502/503/504, the gateway
// must reload every rewrite, and its memory and goroutines must come back
// to where they were after the warm-up once traffic stops.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// The traffic's default shape; SOAK_CLIENTS and SOAK_THINK scale it down
// for a long run.
var (
	soakClients  = 16
	soakMaxThink = 40 * time.Millisecond // a client's pause between requests, uniform in [0, this)
)

const (
	soakReloadEvery = 3 * time.Second
	soakKillEvery   = 10 * time.Second
	soakGoroutines  = 5    // goroutines the gateway may keep above its warm-up baseline
	soakRSSRatio    = 1.25 // RSS growth that fails the run, when also above soakRSSBytes
	soakRSSBytes    = 8 << 20
)

// soakPool is a pool of the soak's gateway.
type soakPool struct {
	name, model string
	aliases     []string
}

var soakPools = []soakPool{
	{name: "general", model: "m-gen", aliases: []string{"gpt-4o-mini"}},
	{name: "code", model: "m-code"},
	{name: "legal", model: "m-legal"},
}

// soakReplica is a simulated replica and its incarnations: each SIGKILL
// and restart on the same address adds one.
type soakReplica struct {
	name, pool string
	args       []string // triage sim flags besides --model, --name and --listen
	fault      string   // the fault -fault names, "" for none
	addr       string
	weight     int

	mu    sync.Mutex
	procs []*proc // every incarnation, the live one last
}

func (r *soakReplica) live() *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[len(r.procs)-1]
}

func soakReplicas() []*soakReplica {
	paced := []string{"-latency", "20ms", "-chunk-delay", "5ms"}
	faulty := func(fault string, seed int, drops bool) []string {
		a := []string{"-fault", fault, "-fault-rate", "0.02", "-seed", strconv.Itoa(seed)}
		if drops {
			a = append(a, "-drop-rate", "0.02")
		}
		return a
	}
	return []*soakReplica{
		{name: "gen-0", pool: "general", args: paced},
		{name: "gen-1", pool: "general", args: faulty("extra-response", 11, true), fault: "extra-response"},
		{name: "code-0", pool: "code", args: paced},
		{name: "code-1", pool: "code", args: faulty("close-after-read", 12, true), fault: "close-after-read"},
		{name: "legal-0", pool: "legal", args: paced},
		{name: "legal-1", pool: "legal", args: faulty("switch-protocols", 13, false), fault: "switch-protocols"},
	}
}

// soakPrompts are the user messages of requests naming "auto".
var soakPrompts = []string{
	"Why does my Python list comprehension raise a TypeError?",
	"How do I rebase my branch onto main in git?",
	"my code keeps crashing when I open the file, what am I doing wrong",
	"Is it legal for my employer to fire me for being sick?",
	"Can my landlord keep my deposit without giving a reason?",
	"What is a good recipe for banana bread?",
	"Explain how photosynthesis works.",
}

// soakRoutePool maps the rules' routes to their pools; both routes fall
// back to general while their pool has no replica available.
var soakRoutePool = map[string]string{"coding": "code", "legal": "legal", "default": "general"}

// simText is the text a simulated replica generates in n words.
func simText(replica string, n int) string {
	lorem := strings.Fields("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua")
	words := []string{"[" + replica + "]"}
	for i := 1; i < n; i++ {
		words = append(words, lorem[(i-1)%len(lorem)])
	}
	return strings.Join(words, " ")
}

// outcome is one request as its client saw it.
type outcome struct {
	id      string
	phase   string
	model   string // as sent
	stream  bool
	chunks  int
	start   time.Time
	end     time.Time
	status  int
	replica string // X-Sim-Replica
	route   string // X-Triage-Route
	ok      bool
	symptom string // what went wrong, short, for grouping ("" when ok)
	detail  string // the error, and an excerpt of the body
	leaked  bool   // the body holds LEAKED-
}

// receipt is a POST as a replica logged it (--log-requests).
type receipt struct {
	replica string
	answer  string // ok, error, invalid, drop, fault
	fault   string
	status  int
	at      time.Time
}

type kill struct {
	replica    string
	at, deadAt time.Time
}

type soak struct {
	t         *testing.T
	dir       string
	cfgPath   string
	debugAddr string // the gateway's pprof listener, for a goroutine dump
	replicas  []*soakReplica
	byName    map[string]*soakReplica
	gw        *proc
	client    *http.Client
	tr        *http.Transport

	mu       sync.Mutex
	outcomes []outcome
	kills    []kill
	writes   int // config rewrites after the first
	seq      map[int]int
}

func TestSoak(t *testing.T) {
	duration := 3 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 15*time.Second {
			t.Fatalf("SOAK_DURATION=%q: want a Go duration of at least 15s (a replica is killed every %v)", v, soakKillEvery)
		}
		duration = d
	}
	if v := os.Getenv("SOAK_CLIENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SOAK_CLIENTS=%q: want a positive number of clients", v)
		}
		soakClients = n
	}
	if v := os.Getenv("SOAK_THINK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SOAK_THINK=%q: want a positive Go duration", v)
		}
		soakMaxThink = d
	}
	// RSS is sampled under traffic about 30 times a run, at least every
	// minute, for the curve in the report.
	sampleEvery := min(max(duration/30, 5*time.Second), time.Minute)
	root := repoRoot()
	models := filepath.Join(root, "var", "models")
	if _, err := os.Stat(filepath.Join(models, "tables", "subjects-tier1.tbl")); err != nil {
		t.Fatalf("default heads' table not built (make setup builds it): %v", err)
	}
	warmup := min(max(duration/6, 5*time.Second), 30*time.Second)

	// The Go client logs bytes a server sends on an idle connection
	// ("Unsolicited response received on idle HTTP channel"): from the
	// gateway, that is a response meant for nobody.
	var clientLog testenv.Buffer
	log.SetOutput(io.MultiWriter(os.Stderr, &clientLog))
	t.Cleanup(func() { log.SetOutput(os.Stderr) })

	s := &soak{t: t, dir: t.TempDir(), replicas: soakReplicas(), byName: map[string]*soakReplica{}, seq: map[int]int{}}
	s.cfgPath = filepath.Join(s.dir, "triage.yaml")
	s.debugAddr = freeAddr(t)
	for _, r := range s.replicas {
		s.byName[r.name] = r
		r.weight = 1
		s.startReplica(r)
	}
	writeFile(t, filepath.Join(s.dir, "rules.yaml"), "alias: auto\n"+
		"heads: "+filepath.Join(root, "models", "heads", "subjects")+"\n"+
		"floors: {tier1: 0.6}\n"+
		"routes:\n"+
		"  - {name: coding, when: {class: computer science}, pool: code, fallback: general}\n"+
		"  - {name: legal, when: {class: law}, pool: legal, fallback: general}\n"+
		"default: general\n"+
		"tier2: {enabled: false}\n"+
		"window: {user_turns: 3}\n"+
		"session: {header: x-session-id, turns: 5}\n")
	writeFile(t, s.cfgPath, s.config(models))
	s.gw = s.startGateway()
	s.tr = &http.Transport{MaxIdleConns: 2 * soakClients, MaxIdleConnsPerHost: 2 * soakClients}
	t.Cleanup(s.tr.CloseIdleConnections)
	s.client = &http.Client{Transport: s.tr, Timeout: 30 * time.Second}

	// Warm-up: traffic only, then the baseline with no request in flight.
	t.Logf("warm-up: %v of traffic", warmup)
	s.traffic("warm-up", warmup, nil)
	rss0, gor0, heap0, prof0 := s.quiesce(time.Now(), 0)

	// The soak: traffic, reloads and kills.
	t.Logf("soak: %v of traffic, a config rewrite every %v, a replica killed every %v", duration, soakReloadEvery, soakKillEvery)
	var curve []memSample
	var profMid []byte
	soakStart := time.Now()
	s.traffic("soak", duration, func(ctx context.Context, wg *sync.WaitGroup) {
		wg.Go(func() { s.reloads(ctx, models) })
		wg.Go(func() { s.killer(ctx) })
		wg.Go(func() { curve, profMid = s.sampleMemory(ctx, soakStart, sampleEvery, duration/2) })
	})
	rss1, gor1, heap1, prof1 := s.quiesce(time.Now(), gor0+soakGoroutines)

	// Every reload applied.
	var reloads, invalid float64
	testenv.WaitWithin(t, 5*time.Second, "the gateway reloads every config rewrite", func() (bool, string) {
		m := scrape(t, &http.Client{Timeout: 5 * time.Second}, s.gw)
		reloads, _ = metricValue(m, "triage_config_reloads_total", map[string]string{"result": "success"})
		invalid, _ = metricValue(m, "triage_config_reloads_total", map[string]string{"result": "invalid"})
		return int(reloads) >= s.writes, fmt.Sprintf("%v reloads for %d rewrites", reloads, s.writes)
	})
	s.flushLogs()

	r := s.classify()
	r.duration, r.warmup = duration, warmup
	r.writes, r.reloads, r.invalid = s.writes, int(reloads), int(invalid)
	r.rss0, r.rss1, r.gor0, r.gor1, r.heap0, r.heap1 = rss0, rss1, gor0, gor1, heap0, heap1
	r.curve = curve
	if os.Getenv("SOAK_OUT") != "" {
		// The heap after the warm-up, halfway and at the end, for
		// go tool pprof -diff_base, beside SOAK_OUT and named after it
		// (X.md: X-heap-warmup.pb.gz, …).
		if dir, err := s.keepDir(root); err == nil {
			base := strings.TrimSuffix(filepath.Base(os.Getenv("SOAK_OUT")), ".md")
			for name, prof := range map[string][]byte{"warmup": prof0, "mid": profMid, "end": prof1} {
				if len(prof) > 0 {
					if err := os.WriteFile(filepath.Join(dir, base+"-heap-"+name+".pb.gz"), prof, 0o644); err != nil {
						t.Errorf("writing the %s heap profile: %v", name, err)
					}
				}
			}
		}
	}
	if strings.Contains(clientLog.String(), "Unsolicited response") {
		r.problems = append(r.problems, "the gateway sent bytes on an idle client connection (Go's client logged: "+
			firstLine(clientLog.String(), "Unsolicited response")+")")
	}
	if out := s.gw.stderr.String(); strings.Contains(out, "panic") || strings.Contains(out, "DATA RACE") || strings.Contains(out, "fatal error") {
		r.problems = append(r.problems, "the gateway's log has a panic, fatal error or data race: "+firstLine(out, "panic", "DATA RACE", "fatal error"))
	}
	if s.gw.exited() {
		r.problems = append(r.problems, fmt.Sprintf("the gateway exited during the soak: %v", s.gw.err))
	}
	if r.invalid > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d config reloads rejected; every rewrite was valid", r.invalid))
	}
	if r.reloads < r.writes {
		r.problems = append(r.problems, fmt.Sprintf("%d reloads for %d config rewrites", r.reloads, r.writes))
	}
	if r.kills == 0 {
		r.problems = append(r.problems, "no replica was killed: the soak did not run long enough")
	}
	for _, rep := range s.replicas {
		if rep.fault != "" && r.faultInjected[rep.fault] == 0 {
			r.problems = append(r.problems, fmt.Sprintf("%s never injected its fault %s: the soak did not exercise it", rep.name, rep.fault))
		}
	}
	if float64(rss1) > soakRSSRatio*float64(rss0) && rss1-rss0 > soakRSSBytes {
		msg := fmt.Sprintf("gateway RSS grew from %s to %s (more than %.0f%% and %s)",
			mib(rss0), mib(rss1), (soakRSSRatio-1)*100, mib(soakRSSBytes))
		if dir, err := s.keepDir(root); err == nil && len(prof0) > 0 && len(prof1) > 0 {
			p0, p1 := filepath.Join(dir, "soak-heap-warmup.pb.gz"), filepath.Join(dir, "soak-heap-end.pb.gz")
			if os.WriteFile(p0, prof0, 0o644) == nil && os.WriteFile(p1, prof1, 0o644) == nil {
				msg += fmt.Sprintf("; heap profiles: go tool pprof -top -diff_base %s %s", p0, p1)
			}
		}
		r.problems = append(r.problems, msg)
	}
	if gor1 > gor0+soakGoroutines {
		r.problems = append(r.problems, fmt.Sprintf("gateway goroutines %d after the soak, baseline %d (+%d allowed); their stacks are in the test log", gor1, gor0, soakGoroutines))
		c := &http.Client{Timeout: 5 * time.Second}
		if resp, err := c.Get("http://" + s.debugAddr + "/debug/pprof/goroutine?debug=1"); err == nil {
			dump, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("gateway goroutines after the soak:\n%s", dump)
		}
	}

	md := r.markdown()
	t.Log("\n" + md)
	if out := os.Getenv("SOAK_OUT"); out != "" {
		if !filepath.IsAbs(out) {
			out = filepath.Join(root, out)
		}
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			t.Errorf("writing SOAK_OUT: %v", err)
		} else {
			t.Logf("summary written to %s", out)
		}
	}
	for _, p := range r.problems {
		t.Error(p)
	}
}

// keepDir is where files that outlive the run go: beside SOAK_OUT, or a
// new temporary directory.
func (s *soak) keepDir(root string) (string, error) {
	if out := os.Getenv("SOAK_OUT"); out != "" {
		if !filepath.IsAbs(out) {
			out = filepath.Join(root, out)
		}
		return filepath.Dir(out), nil
	}
	return os.MkdirTemp("", "triage-soak-")
}

// ---- processes ----

// launch runs triage with args plus --listen addr and waits for GET ready.
// Unlike start, it prints only the tail of the process's log (without the
// per-request lines) if the test fails: the logs of a soak are long.
func (s *soak) launch(name, addr, ready string, args ...string) (*proc, error) {
	t := s.t
	p := &proc{name: name, addr: addr, done: make(chan struct{})}
	p.cmd = exec.Command(triageBin, append(slices.Clone(args), "--listen", addr)...)
	p.cmd.Env = childEnv()
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("---- %s (triage %s) log, without per-request lines, last 40 ----\n%s", name, strings.Join(args, " "), logTail(p.stderr.String(), 40))
		}
	})
	if err := p.waitReady(ready, 10*time.Second); err != nil {
		return p, err
	}
	return p, nil
}

func (s *soak) startReplica(r *soakReplica) {
	s.t.Helper()
	args := append([]string{"sim", "--model", s.poolModel(r.pool), "--name", r.name, "--log-requests"}, r.args...)
	for try := 0; ; try++ {
		addr := r.addr
		if addr == "" {
			addr = freeAddr(s.t)
		}
		p, err := s.launch("sim "+r.name, addr, "/health", args...)
		if err == nil {
			r.mu.Lock()
			r.procs = append(r.procs, p)
			r.mu.Unlock()
			r.addr = addr // set once, before the config names it
			return
		}
		if !errors.Is(err, errPortTaken) || try == 5 {
			s.t.Errorf("%s: %v\n%s", r.name, err, logTail(p.stderr.String(), 20))
			return
		}
		if r.addr != "" { // the same port, once the old sockets let go of it
			testenv.Poll(5*time.Second, func() (bool, string) {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					return false, err.Error()
				}
				ln.Close()
				return true, ""
			})
		}
	}
}

func (s *soak) startGateway() *proc {
	s.t.Helper()
	for range 3 {
		p, err := s.launch("gateway", freeAddr(s.t), "/readyz", "serve", "--config", s.cfgPath)
		if err == nil {
			return p
		}
		if !errors.Is(err, errPortTaken) {
			s.t.Fatalf("gateway: %v\n%s", err, logTail(p.stderr.String(), 40))
		}
	}
	s.t.Fatal("gateway: no free port in 3 tries")
	return nil
}

func (s *soak) poolModel(pool string) string {
	for _, p := range soakPools {
		if p.name == pool {
			return p.model
		}
	}
	return ""
}

// config renders the gateway config with the replicas' current weights.
func (s *soak) config(models string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "models_dir: %s\nrules: rules.yaml\ndefault_pool: general\nserver: {debug_listen: %s}\npools:\n", models, s.debugAddr)
	for _, p := range soakPools {
		fmt.Fprintf(&b, "  - name: %s\n    model: %s\n", p.name, p.model)
		if len(p.aliases) > 0 {
			fmt.Fprintf(&b, "    aliases: [%s]\n", strings.Join(p.aliases, ", "))
		}
		// Bounded timeouts: a request stuck upstream surfaces as a 504
		// within the soak instead of after five minutes.
		b.WriteString("    health: {interval: 250ms}\n    timeouts: {first_byte: 10s, idle: 10s, total: 30s}\n    replicas:\n")
		for _, r := range s.replicas {
			if r.pool == p.name {
				fmt.Fprintf(&b, "      - url: http://%s\n        weight: %d\n", r.addr, r.weight)
			}
		}
	}
	return b.String()
}

// reloads rewrites the config every soakReloadEvery, toggling one
// replica's weight between 1 and 3.
func (s *soak) reloads(ctx context.Context, models string) {
	tick := time.NewTicker(soakReloadEvery)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r := s.replicas[i%len(s.replicas)]
		r.weight = 4 - r.weight
		replaceFile(s.t, s.cfgPath, s.config(models))
		s.mu.Lock()
		s.writes++
		s.mu.Unlock()
	}
}

// killer SIGKILLs one replica every soakKillEvery, in turn, and restarts it
// on its address.
func (s *soak) killer(ctx context.Context) {
	tick := time.NewTicker(soakKillEvery)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r := s.replicas[i%len(s.replicas)]
		p := r.live()
		k := kill{replica: r.name, at: time.Now()}
		_ = p.cmd.Process.Kill()
		<-p.done
		k.deadAt = time.Now()
		s.mu.Lock()
		s.kills = append(s.kills, k)
		s.mu.Unlock()
		s.startReplica(r)
		s.t.Logf("killed %s at %s, back on %s after %v", r.name, k.at.Format("15:04:05.000"), r.addr, time.Since(k.at).Round(time.Millisecond))
	}
}

// traffic runs soakClients clients for d (and chaos, if given, for as
// long), then waits for the requests in flight to end.
func (s *soak) traffic(phase string, d time.Duration, chaos func(context.Context, *sync.WaitGroup)) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	if chaos != nil {
		chaos(ctx, &wg)
	}
	for w := range soakClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(len(phase))))
			for ctx.Err() == nil && !s.gw.exited() {
				o := s.request(rng, w, phase)
				s.mu.Lock()
				s.outcomes = append(s.outcomes, o)
				s.mu.Unlock()
				time.Sleep(time.Duration(rng.Int64N(int64(soakMaxThink)))) // the client's think time: the traffic's shape
			}
		})
	}
	wg.Wait()
}

// quiesce closes the clients' idle connections and lets the gateway settle
// (idle, it collects garbage and returns memory to the OS, and says when:
// triage_memory_released_timestamp_seconds), then samples its RSS, heap
// and goroutines in the scrape that shows a release after the traffic
// ended (at stopped), the same way after the warm-up and after the soak
// (scrapes allocate, and do not count as traffic that would make it
// collect again). With want > 0 it then polls the goroutines for up to 10s
// until they come down to want.
func (s *soak) quiesce(stopped time.Time, want int) (rss, goroutines, heap int, heapProfile []byte) {
	s.tr.CloseIdleConnections()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	scrape := func() string { return string(get(s.t, c, s.gw.url("/metrics")).body) }
	var m string
	testenv.WaitWithin(s.t, 10*time.Second, "the gateway to return memory to the OS after the traffic", func() (bool, string) {
		m = scrape()
		at := time.Unix(0, int64(plainMetric(m, "triage_memory_released_timestamp_seconds")*1e9))
		return at.After(stopped), fmt.Sprintf("last released at %s, the traffic ended at %s", at.Format(time.StampMilli), stopped.Format(time.StampMilli))
	})
	rss = int(plainMetric(m, "process_resident_memory_bytes"))
	heap = int(plainMetric(m, "go_memstats_heap_inuse_bytes"))
	goroutines = int(plainMetric(m, "go_goroutines"))
	if want > 0 {
		testenv.Poll(10*time.Second, func() (bool, string) {
			if goroutines <= want {
				return true, ""
			}
			goroutines = int(plainMetric(scrape(), "go_goroutines"))
			return goroutines <= want, ""
		})
	}
	if resp, err := c.Get("http://" + s.debugAddr + "/debug/pprof/heap"); err == nil {
		heapProfile, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	return rss, goroutines, heap, heapProfile
}

// flushLogs returns once every log line the run made the gateway and the
// live replicas write has been read into their procs' buffers, by a marker
// request to each: a replica logs a POST before answering it, the gateway
// when it has answered, each in order, and their logs are read in order.
// (The incarnations killed are read to their end: a kill waits for Wait.)
func (s *soak) flushLogs() {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	mark := func(p *proc, hdr ...string) {
		id := "soak-flush-" + strings.ReplaceAll(p.name, " ", "-")
		req, _ := http.NewRequest(http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(`{"model":"soak-flush","messages":[{"role":"user","content":"x"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
		testenv.WaitWithin(s.t, 5*time.Second, p.name+"'s log to hold "+id, func() (bool, string) {
			return strings.Contains(p.stderr.String(), `"request_id":"`+id+`"`), ""
		})
	}
	mark(s.gw) // answered 404 (no such model), and logged
	for _, r := range s.replicas {
		if p := r.live(); !p.exited() {
			mark(p, "X-Sim-Status", "503") // logged, answered with that error, never a fault
		}
	}
}

// memSample is the gateway's memory at one time under traffic.
type memSample struct {
	at              time.Duration // since the soak began
	rss, heap, sys  int
	goroutines, req int
}

// sampleMemory scrapes the gateway's RSS, heap in use, memory obtained
// from the OS and goroutines every interval until ctx ends, under traffic
// (so with requests in flight: the quiesced figures are the endpoints), and
// takes a heap profile at the first sample past mid. It returns when ctx
// ends.
func (s *soak) sampleMemory(ctx context.Context, start time.Time, every, mid time.Duration) (curve []memSample, midProfile []byte) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return curve, midProfile
		case <-tick.C:
		}
		resp, err := c.Get(s.gw.url("/metrics"))
		if err != nil {
			continue // counted by the requests' own outcomes; a gap in the curve
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := string(body)
		s.mu.Lock()
		n := len(s.outcomes)
		s.mu.Unlock()
		smp := memSample{
			at:         time.Since(start).Round(time.Second),
			rss:        int(plainMetric(m, "process_resident_memory_bytes")),
			heap:       int(plainMetric(m, "go_memstats_heap_inuse_bytes")),
			sys:        int(plainMetric(m, "go_memstats_sys_bytes")),
			goroutines: int(plainMetric(m, "go_goroutines")),
			req:        n,
		}
		curve = append(curve, smp)
		if midProfile == nil && smp.at >= mid {
			if resp, err := c.Get("http://" + s.debugAddr + "/debug/pprof/heap"); err == nil {
				midProfile, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
		}
	}
}

// plainMetric is the value of an unlabelled sample, 0 if absent.
func plainMetric(exposition, name string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// ---- one request ----

func (s *soak) request(rng *rand.Rand, w int, phase string) outcome {
	s.mu.Lock()
	s.seq[w]++
	n := s.seq[w]
	s.mu.Unlock()
	o := outcome{id: fmt.Sprintf("soak-%d-%d", w, n), phase: phase, stream: rng.IntN(2) == 0, chunks: 1 + rng.IntN(24)}
	prompt := "say something"
	switch k := rng.IntN(10); {
	case k < 4:
		o.model, prompt = "auto", soakPrompts[rng.IntN(len(soakPrompts))]
	case k < 5:
		o.model = "gpt-4o-mini"
	default:
		o.model = soakPools[rng.IntN(len(soakPools))].model
	}
	body, _ := json.Marshal(map[string]any{
		"model": o.model, "stream": o.stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	req, _ := http.NewRequest(http.MethodPost, s.gw.url("/v1/chat/completions"), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", o.id)
	req.Header.Set("X-Sim-Chunks", strconv.Itoa(o.chunks))

	o.start = time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		o.end = time.Now()
		o.symptom, o.detail = "transport error: "+errClass(err), err.Error()
		return o
	}
	o.status = resp.StatusCode
	o.replica = resp.Header.Get("X-Sim-Replica")
	o.route = resp.Header.Get("X-Triage-Route")
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	o.end = time.Now()
	o.leaked = bytes.Contains(raw, []byte("LEAKED-"))
	fail := func(symptom, detail string) outcome {
		o.symptom = symptom
		o.detail = fmt.Sprintf("%s; status %d, X-Sim-Replica %q, Content-Type %q, body %q", detail, o.status, o.replica, resp.Header.Get("Content-Type"), excerpt(raw))
		return o
	}
	switch {
	case o.status != http.StatusOK:
		if rerr != nil {
			return fail(fmt.Sprintf("status %d", o.status), "reading the body: "+rerr.Error())
		}
		return fail(fmt.Sprintf("status %d", o.status), "")
	case o.stream && rerr != nil:
		return fail("stream cut: "+errClass(rerr), rerr.Error())
	case rerr != nil:
		return fail("body cut: "+errClass(rerr), rerr.Error())
	}
	rep := s.byName[o.replica]
	if rep == nil {
		return fail("no X-Sim-Replica", "")
	}
	// The answer comes from the pool the model or the route selects.
	switch {
	case o.model == "auto":
		want, ok := soakRoutePool[o.route]
		if !ok || (rep.pool != want && rep.pool != "general") {
			return fail("wrong pool", fmt.Sprintf("route %q answered by %s of pool %s", o.route, rep.name, rep.pool))
		}
	case o.model == "gpt-4o-mini":
		if rep.pool != "general" {
			return fail("wrong pool", "alias of general answered by "+rep.name)
		}
	default:
		if s.poolModel(rep.pool) != o.model {
			return fail("wrong pool", fmt.Sprintf("model %s answered by %s of pool %s", o.model, rep.name, rep.pool))
		}
	}
	wantText, wantModel := simText(rep.name, o.chunks), s.poolModel(rep.pool)
	ct := resp.Header.Get("Content-Type")
	if !o.stream {
		if !strings.HasPrefix(ct, "application/json") {
			return fail("content-type "+ct, "")
		}
		var cc struct {
			Object  string `json:"object"`
			Model   string `json:"model"`
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &cc); err != nil {
			return fail("body not JSON", err.Error())
		}
		if cc.Object != "chat.completion" || cc.Model != wantModel || len(cc.Choices) != 1 || cc.Choices[0].Message.Content != wantText {
			return fail("wrong answer", fmt.Sprintf("want a chat.completion of %s saying %q", wantModel, wantText))
		}
		o.ok = true
		return o
	}
	if !strings.HasPrefix(ct, "text/event-stream") {
		return fail("content-type "+ct, "")
	}
	text, err := parseSSE(raw, wantModel)
	if err != nil {
		return fail("bad stream", err.Error())
	}
	if text != wantText {
		return fail("wrong answer", fmt.Sprintf("streamed %q, want %q", text, wantText))
	}
	o.ok = true
	return o
}

// parseSSE checks a whole event stream: "data: " lines each followed by a
// blank line, JSON chunks of model, "data: [DONE]" last. It returns the
// content.
func parseSSE(raw []byte, model string) (string, error) {
	var text strings.Builder
	done := false
	rest := string(raw)
	for rest != "" {
		ev, after, ok := strings.Cut(rest, "\n\n")
		if !ok {
			return "", fmt.Errorf("unterminated event %q", excerpt([]byte(rest)))
		}
		rest = after
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			return "", fmt.Errorf("event %q is not one data line", excerpt([]byte(ev)))
		}
		if done {
			return "", fmt.Errorf("event after [DONE]: %q", excerpt([]byte(ev)))
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Object  string `json:"object"`
			Model   string `json:"model"`
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return "", fmt.Errorf("event not JSON: %q: %v", excerpt([]byte(data)), err)
		}
		if c.Object != "chat.completion.chunk" || c.Model != model {
			return "", fmt.Errorf("event %q: want a chat.completion.chunk of %s", excerpt([]byte(data)), model)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
		}
	}
	if !done {
		return "", errors.New("the stream ended without data: [DONE]")
	}
	return text.String(), nil
}

// errClass names an error for grouping.
func errClass(err error) string {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout"):
		return "timeout"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

func excerpt(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// ---- classification ----

type soakReport struct {
	duration, warmup   time.Duration
	requests, ok       int
	streams, auto      int
	okWithFault        int
	failures           map[string]int // "reason — symptom"
	unattributed       []string
	leaks, forbidden   []string
	resent             []string
	faultInjected      map[string]int
	faultOutcome       map[string]map[string]int // fault → client outcome → count
	kills              int
	writes, reloads    int
	invalid            int
	rss0, rss1         int
	gor0, gor1         int
	heap0, heap1       int
	curve              []memSample
	latJSON, latStream []time.Duration
	problems           []string
	phaseCount         map[string]int
}

func (s *soak) classify() *soakReport {
	r := &soakReport{failures: map[string]int{}, faultInjected: map[string]int{}, faultOutcome: map[string]map[string]int{}, phaseCount: map[string]int{}}
	receipts := map[string][]receipt{}
	faultsBy := map[string][]receipt{} // replica → its faults and drops, in time order
	for _, rep := range s.replicas {
		rep.mu.Lock()
		procs := slices.Clone(rep.procs)
		rep.mu.Unlock()
		for _, p := range procs {
			sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				var l struct {
					Time      time.Time `json:"time"`
					Msg       string    `json:"msg"`
					RequestID string    `json:"request_id"`
					Answer    string    `json:"answer"`
					Fault     string    `json:"fault"`
					Status    int       `json:"status"`
				}
				if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "post" {
					continue
				}
				rc := receipt{replica: rep.name, answer: l.Answer, fault: l.Fault, status: l.Status, at: l.Time}
				receipts[l.RequestID] = append(receipts[l.RequestID], rc)
				if rc.answer == "fault" {
					r.faultInjected[rc.fault]++
				}
				if rc.answer == "fault" || rc.answer == "drop" {
					faultsBy[rep.name] = append(faultsBy[rep.name], rc)
				}
			}
		}
	}
	for _, rs := range receipts {
		sort.Slice(rs, func(i, j int) bool { return rs[i].at.Before(rs[j].at) })
	}
	for _, fs := range faultsBy {
		sort.Slice(fs, func(i, j int) bool { return fs[i].at.Before(fs[j].at) })
	}
	access := map[string]string{}
	for _, line := range strings.Split(s.gw.stderr.String(), "\n") {
		if i := strings.Index(line, `"request_id":"soak-`); i >= 0 {
			id := line[i+len(`"request_id":"`):]
			if j := strings.IndexByte(id, '"'); j >= 0 {
				access[id[:j]] = line
			}
		}
	}

	s.mu.Lock()
	outcomes := s.outcomes
	kills := s.kills
	s.mu.Unlock()
	r.kills = len(kills)
	killedIn := func(replica string, o outcome) bool {
		for _, k := range kills {
			if k.replica == replica && !o.start.After(k.deadAt) && !o.end.Before(k.at) {
				return true
			}
		}
		return false
	}
	// recentFaults lists a replica's faults and drops in the 5s before o
	// (an idle upstream connection lives up to 4s): hints for a failure
	// nothing injected into o itself.
	recentFaults := func(replica string, o outcome) string {
		var out []string
		for _, f := range faultsBy[replica] {
			if f.at.After(o.start.Add(-5*time.Second)) && !f.at.After(o.end) {
				what := f.answer
				if f.fault != "" {
					what = f.fault
				}
				out = append(out, fmt.Sprintf("%s %s before", what, o.start.Sub(f.at).Round(time.Millisecond)))
			}
		}
		if len(out) == 0 {
			return ""
		}
		return "; recent on " + replica + ": " + strings.Join(out, ", ")
	}

	for _, o := range outcomes {
		r.requests++
		r.phaseCount[o.phase]++
		if o.stream {
			r.streams++
		}
		if o.model == "auto" {
			r.auto++
		}
		rs := receipts[o.id]
		var last *receipt
		if len(rs) > 0 {
			last = &rs[len(rs)-1]
		}
		desc := func() string {
			var b strings.Builder
			kind := "json"
			if o.stream {
				kind = "stream"
			}
			fmt.Fprintf(&b, "%s (%s, model %s, %d chunks, %s–%s): %s", o.id, kind, o.model, o.chunks,
				o.start.Format("15:04:05.000"), o.end.Format("15:04:05.000"), o.symptom)
			if o.detail != "" {
				b.WriteString(" — " + o.detail)
			}
			var seen []string
			for _, rc := range rs {
				what := rc.answer
				if rc.fault != "" {
					what += " " + rc.fault
				}
				if rc.status != 0 {
					what += " " + strconv.Itoa(rc.status)
				}
				seen = append(seen, rc.replica+": "+what+" at "+rc.at.Format("15:04:05.000"))
			}
			fmt.Fprintf(&b, "; replicas that read it: [%s]", strings.Join(seen, "; "))
			if line, ok := access[o.id]; ok {
				b.WriteString("; gateway: " + line)
			}
			return b.String()
		}

		// Checks that hold whatever was injected.
		if o.leaked {
			r.leaks = append(r.leaks, desc())
		}
		if o.status >= 100 && o.status < 200 {
			r.forbidden = append(r.forbidden, "1xx relayed as the final status: "+desc())
		}
		retried := 0
		for _, rc := range rs[:max(len(rs)-1, 0)] {
			if rc.answer == "error" && (rc.status == 502 || rc.status == 503 || rc.status == 504) {
				retried++
			}
		}
		if len(rs) > 1 && retried < len(rs)-1 {
			r.resent = append(r.resent, fmt.Sprintf("read by replicas %d times: %s", len(rs), desc()))
		}
		if last != nil && last.answer == "fault" {
			if r.faultOutcome[last.fault] == nil {
				r.faultOutcome[last.fault] = map[string]int{}
			}
			key := "success"
			if !o.ok {
				key = o.symptom
			}
			r.faultOutcome[last.fault][key]++
		}

		if o.ok {
			switch {
			case last == nil:
				r.unattributed = append(r.unattributed, "answered, but no replica logged reading it: "+desc())
				continue
			case last.replica != o.replica:
				r.unattributed = append(r.unattributed, fmt.Sprintf("answered by %s, but %s read it last: %s", o.replica, last.replica, desc()))
				continue
			}
			r.ok++
			if last.answer == "fault" {
				r.okWithFault++
			}
			if o.stream {
				r.latStream = append(r.latStream, o.end.Sub(o.start))
			} else {
				r.latJSON = append(r.latJSON, o.end.Sub(o.start))
			}
			continue
		}

		// A failure: name what the run injected into it, if anything.
		reason := ""
		switch {
		case last != nil && last.answer == "fault":
			reason = "fault " + last.fault
		case last != nil && last.answer == "drop":
			reason = "drop"
		case last != nil && last.answer == "error":
			reason = "injected error"
		case last != nil && killedIn(last.replica, o):
			reason = "replica killed in flight"
		case last == nil:
			// Killed before it logged the request, or unreachable: a kill
			// in the pool the request was for.
			pools := map[string]bool{}
			if p, ok := soakRoutePool[o.route]; ok && o.model == "auto" {
				pools[p], pools["general"] = true, true
			}
			for _, p := range soakPools {
				if p.model == o.model || slices.Contains(p.aliases, o.model) || (o.model == "auto" && o.route == "") {
					pools[p.name] = true
				}
			}
			for _, rep := range s.replicas {
				if pools[rep.pool] && killedIn(rep.name, o) {
					reason = "replica killed (before it logged the request)"
				}
			}
		}
		if reason == "" || !injectedSymptom(reason, last, o) {
			hint := ""
			if last != nil {
				hint = recentFaults(last.replica, o)
			}
			key := "unattributed — " + o.symptom
			if reason != "" {
				key += " (" + reason + " cannot cause that)"
			}
			r.unattributed = append(r.unattributed, key+": "+desc()+hint)
			r.failures[key]++
			continue
		}
		r.failures[reason+" — "+o.symptom]++
	}
	if len(r.leaks) > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d responses carried LEAKED- (a response meant for nobody reached a client)", len(r.leaks)))
	}
	if len(r.forbidden) > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d responses reached the client with a 1xx final status", len(r.forbidden)))
	}
	if len(r.resent) > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d POSTs were sent again after a replica had read them (and not answered 502/503/504)", len(r.resent)))
	}
	if len(r.unattributed) > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d requests failed (or were answered wrongly) with nothing injected to explain it", len(r.unattributed)))
	}
	return r
}

// injectedSymptom reports whether a client may see o's symptom when
// cause was injected into its request and the gateway works: a replica
// that breaks before its answer's head makes a 502 (or 503/504), one that
// breaks after it a cut body; a fault whose bytes hold a valid answer makes
// no failure at all, unless the gateway refuses the answer.
func injectedSymptom(cause string, last *receipt, o outcome) bool {
	s := o.symptom
	gatewayError := s == "status 502" || s == "status 503" || s == "status 504"
	cut := strings.HasPrefix(s, "stream cut: ") || strings.HasPrefix(s, "body cut: ")
	switch cause {
	case "drop", "fault die-mid-stream", "replica killed in flight", "replica killed (before it logged the request)",
		"fault close-after-read", "fault reset-after-read", "fault garbage", "fault bad-chunk":
		return gatewayError || cut
	case "injected error":
		return gatewayError || s == "status "+strconv.Itoa(last.status)
	case "fault wrong-content-type":
		return gatewayError || strings.HasPrefix(s, "content-type text/html")
	case "fault no-content-body":
		return gatewayError || s == "status 204"
	case "fault short-length":
		return gatewayError || cut || s == "body not JSON" || (o.stream && s == "content-type application/json")
	case "fault hang":
		return s == "status 504" || s == "transport error: timeout"
	}
	// extra-response, extra-crlf, late-response, switch-protocols,
	// informational, nul-header: the answer itself is whole.
	return gatewayError
}

// ---- report ----

func (r *soakReport) markdown() string {
	var b strings.Builder
	verdict := "PASS"
	if len(r.problems) > 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "# triage soak: %s\n\n", verdict)
	fmt.Fprintf(&b, "%v of traffic after a %v warm-up, %d clients, %d replicas in %d pools; a config rewrite every %v, a replica SIGKILLed and restarted every %v.\n\n",
		r.duration, r.warmup, soakClients, len(soakReplicas()), len(soakPools), soakReloadEvery, soakKillEvery)
	b.WriteString("| | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	row("requests", fmt.Sprintf("%d (warm-up %d, soak %d; %d streamed, %d naming auto)", r.requests, r.phaseCount["warm-up"], r.phaseCount["soak"], r.streams, r.auto))
	row("successes", fmt.Sprintf("%d (%d of them with a fault injected)", r.ok, r.okWithFault))
	nf := 0
	for _, n := range r.failures {
		nf += n
	}
	row("failures", fmt.Sprintf("%d, %d of them unattributed", nf, len(r.unattributed)))
	row("responses with LEAKED-", strconv.Itoa(len(r.leaks)))
	row("1xx final statuses", strconv.Itoa(len(r.forbidden)))
	row("POSTs sent again", strconv.Itoa(len(r.resent)))
	row("config rewrites / reloads (rejected)", fmt.Sprintf("%d / %d (%d)", r.writes, r.reloads, r.invalid))
	row("replicas killed", strconv.Itoa(r.kills))
	row("gateway RSS after warm-up → end", fmt.Sprintf("%s → %s", mib(r.rss0), mib(r.rss1)))
	row("gateway heap in use after warm-up → end", fmt.Sprintf("%s → %s", mib(r.heap0), mib(r.heap1)))
	row("gateway goroutines after warm-up → end", fmt.Sprintf("%d → %d", r.gor0, r.gor1))
	row("latency of successes, JSON p50 / p99", fmt.Sprintf("%v / %v", pct(r.latJSON, 50), pct(r.latJSON, 99)))
	row("latency of successes, stream p50 / p99", fmt.Sprintf("%v / %v", pct(r.latStream, 50), pct(r.latStream, 99)))
	all := append(slices.Clone(r.latJSON), r.latStream...)
	row("latency of successes, all p50 / p99", fmt.Sprintf("%v / %v", pct(all, 50), pct(all, 99)))

	if len(r.curve) > 0 {
		fmt.Fprintf(&b, "\n## Gateway memory under traffic, sampled from /metrics\n\n"+
			"Client think time uniform in [0, %v). RSS is process_resident_memory_bytes; heap, go_memstats_heap_inuse_bytes; from the OS, go_memstats_sys_bytes.\n\n"+
			"| time | requests so far | RSS | heap in use | from the OS | goroutines |\n|---|---|---|---|---|---|\n", soakMaxThink)
		for _, c := range r.curve {
			fmt.Fprintf(&b, "| %v | %d | %s | %s | %s | %d |\n", c.at, c.req, mib(c.rss), mib(c.heap), mib(c.sys), c.goroutines)
		}
	}

	if len(r.failures) > 0 {
		b.WriteString("\n## Failures by reason — what the client saw\n\n| reason — symptom | requests |\n|---|---|\n")
		for _, k := range sortedKeys(r.failures) {
			fmt.Fprintf(&b, "| %s | %d |\n", k, r.failures[k])
		}
	}
	if len(r.faultInjected) > 0 {
		b.WriteString("\n## Faults injected and what the client saw\n\n| fault | injected | client outcomes |\n|---|---|---|\n")
		for _, f := range sortedKeys(r.faultInjected) {
			var outs []string
			for _, k := range sortedKeys(r.faultOutcome[f]) {
				outs = append(outs, fmt.Sprintf("%s: %d", k, r.faultOutcome[f][k]))
			}
			fmt.Fprintf(&b, "| %s | %d | %s |\n", f, r.faultInjected[f], strings.Join(outs, ", "))
		}
	}
	if len(r.problems) > 0 {
		b.WriteString("\n## Problems\n\n")
		for _, p := range r.problems {
			b.WriteString("- " + p + "\n")
		}
	}
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s (%d; the first 20)\n\n", title, len(items))
		for _, it := range items[:min(len(items), 20)] {
			b.WriteString("- " + strings.ReplaceAll(it, "\n", " ") + "\n")
		}
	}
	list("Responses with LEAKED-", r.leaks)
	list("1xx final statuses", r.forbidden)
	list("POSTs sent again", r.resent)
	list("Unattributed failures", r.unattributed)
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(100 * time.Microsecond)
}

func mib(n int) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// logTail is the last n lines of a child's log, without the per-request
// lines of the sim and the gateway's access log.
func logTail(out string, n int) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.Contains(l, `"msg":"post"`) || strings.Contains(l, `"msg":"request"`) {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep[max(len(keep)-n, 0):], "\n")
}

// firstLine is the first line of out holding any of subs.
func firstLine(out string, subs ...string) string {
	for _, l := range strings.Split(out, "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				return strings.TrimSpace(l)
			}
		}
	}
	return ""
}
