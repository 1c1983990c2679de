// Command multiturn measures how a pool's balancing policy uses vLLM's
// prefix cache: many concurrent conversations of several turns each, with
// a few shared system prompts (texts from ../shared/datasets), sent
// through the triage binary to simulated vLLM replicas with the
// performance model on (triage sim -perf, here in process).
//
// The gateway serves one pool per policy (p2c, round_robin, prefix), each
// with its own replicas, so no policy warms another's caches; the phases
// run one after another in the same invocation, with the same workload
// (same seed). Each phase reports the prefix-cache hit rate weighted by
// tokens (the replicas' cached_tokens over prompt_tokens, from each
// stream's usage), time to first token and end to end p50/p99, requests
// per second, and load imbalance: each replica's in-flight requests are
// sampled every 50 ms, averaged per second, and max/mean is taken per
// second. With -kill, each policy runs a second phase in which one
// replica is killed (its listener and connections closed) and comes back
// later with a cold cache, as a restarted vLLM would: requests that failed
// before their first byte (which the gateway could have retried) are
// counted apart from streams cut by the kill, and the time from the
// replica's return until the hit rate is back within 90% of what it was
// before the kill.
//
//	go build -trimpath -tags 'nomsgpack ort' -o bin/triage ./cmd/triage
//	go run ./bench/multiturn -d 30s -kill -out bench/results/DATE-multiturn.md
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/triagegw/triage/sim"
)

type options struct {
	triage     string
	shared     string
	dur        time.Duration
	users      int
	turns      int
	replicas   int
	think      time.Duration
	chunks     int
	kvBlocks   int
	systems    int
	systemLen  int
	seed       uint64
	kill       bool
	killAt     time.Duration
	downFor    time.Duration
	policies   string
	out        string
	loadFactor float64
}

func main() {
	var o options
	fs := flag.NewFlagSet("multiturn", flag.ExitOnError)
	fs.StringVar(&o.triage, "triage", "bin/triage", "the triage binary")
	fs.StringVar(&o.shared, "shared", cmp.Or(os.Getenv("TRIAGE_SHARED"), "../shared"), "the shared data directory (datasets/subjects/dev.jsonl)")
	fs.DurationVar(&o.dur, "d", 30*time.Second, "length of each phase")
	fs.IntVar(&o.users, "users", 64, "concurrent users, each holding one conversation at a time")
	fs.IntVar(&o.turns, "turns", 8, "turns per conversation; then the user starts a new one")
	fs.IntVar(&o.replicas, "replicas", 4, "replicas per pool")
	fs.DurationVar(&o.think, "think", 200*time.Millisecond, "mean pause between a user's turns (exponential)")
	fs.IntVar(&o.chunks, "chunks", 48, "tokens generated per answer")
	fs.IntVar(&o.kvBlocks, "kv-blocks", 4000, "each replica's KV cache in 16-token blocks (the model's default is 26000; smaller here so that the conversations' working set is about twice one replica's cache, as in production, with 64 users on a 2-core machine)")
	fs.IntVar(&o.systems, "systems", 4, "shared system prompts")
	fs.IntVar(&o.systemLen, "system-bytes", 2500, "bytes of each system prompt")
	fs.Uint64Var(&o.seed, "seed", 1, "workload seed")
	fs.BoolVar(&o.kill, "kill", false, "also run each policy with a replica killed and restored")
	fs.DurationVar(&o.killAt, "kill-at", 10*time.Second, "with -kill: when the replica dies")
	fs.DurationVar(&o.downFor, "down-for", 8*time.Second, "with -kill: how long it stays down")
	fs.StringVar(&o.policies, "policies", "p2c,round_robin,prefix", "the pools' balancing policies, in the order run")
	fs.StringVar(&o.out, "out", "", "write the report (markdown) here as well as to stdout")
	fs.Float64Var(&o.loadFactor, "load-factor", 0, "prefix.load_factor (0: the gateway's default)")
	_ = fs.Parse(os.Args[1:])
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "multiturn:", err)
		os.Exit(1)
	}
}

// texts reads the dataset's prompts.
func texts(shared string) ([]string, error) {
	f, err := os.Open(filepath.Join(shared, "datasets", "subjects", "dev.jsonl"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var row struct{ Text string }
		if json.Unmarshal(sc.Bytes(), &row) == nil && len(row.Text) >= 80 {
			out = append(out, row.Text)
		}
	}
	if len(out) < 100 {
		return nil, fmt.Errorf("%s: too few texts (%d)", f.Name(), len(out))
	}
	return out, sc.Err()
}

// replica is one simulated vLLM replica on a fixed loopback address.
type replica struct {
	addr string
	opt  sim.Options
	mu   sync.Mutex
	s    *sim.Server
	srv  *http.Server
}

func (r *replica) start() error {
	s, err := sim.New(r.opt)
	if err != nil {
		return err
	}
	var ln net.Listener
	for range 50 { // the port of a replica just killed may take a moment to free
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s}
	go func() { _ = srv.Serve(ln) }()
	r.mu.Lock()
	r.s, r.srv = s, srv
	r.mu.Unlock()
	return nil
}

// kill closes the listener and every connection, as a crashed replica.
func (r *replica) kill() {
	r.mu.Lock()
	s, srv := r.s, r.srv
	r.s, r.srv = nil, nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
		_ = s.Close()
	}
}

func (r *replica) active() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s == nil {
		return 0
	}
	return r.s.Stats().Active
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func run(o options) error {
	corpus, err := texts(o.shared)
	if err != nil {
		return err
	}
	policies := strings.Split(o.policies, ",")
	pools := map[string][]*replica{}
	var yaml strings.Builder
	gw, err := freeAddr()
	if err != nil {
		return err
	}
	fmt.Fprintf(&yaml, "listen: %s\nlog: {level: warn}\npools:\n", gw)
	for _, pol := range policies {
		fmt.Fprintf(&yaml, "  - name: %s\n    model: mt-%s\n    balance: %s\n    max_idle_conns: 256\n", pol, pol, pol)
		fmt.Fprintf(&yaml, "    health: {interval: 1s, timeout: 500ms}\n    breaker: {failures: 3, cooldown: 2s, max_cooldown: 4s}\n")
		if o.loadFactor > 0 {
			fmt.Fprintf(&yaml, "    prefix: {load_factor: %g}\n", o.loadFactor)
		}
		yaml.WriteString("    replicas:\n")
		for i := range o.replicas {
			addr, err := freeAddr()
			if err != nil {
				return err
			}
			r := &replica{addr: addr, opt: sim.Options{Model: "mt-" + pol, Name: fmt.Sprintf("%s-%d", pol, i), Chunks: o.chunks,
				Perf: sim.Perf{Enabled: true, KVBlocks: o.kvBlocks}}}
			if err := r.start(); err != nil {
				return err
			}
			defer r.kill()
			pools[pol] = append(pools[pol], r)
			fmt.Fprintf(&yaml, "      - url: http://%s\n", addr)
		}
	}
	dir, err := os.MkdirTemp("", "multiturn")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(yaml.String()), 0o644); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "gateway.log")) // its access log: a line per request
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(o.triage, "serve", "-config", cfg)
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := waitReady("http://" + gw + "/readyz"); err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * o.users, MaxConnsPerHost: 0}}

	var report strings.Builder
	fmt.Fprintf(&report, "# Multi-turn prefix-cache benchmark\n\n`go run ./bench/multiturn %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&report, "%d users, %d turns per conversation, think time %s (mean), %d shared system prompts of %d bytes, %d tokens per answer; "+
		"%d replicas per pool, each `triage sim -perf -perf-kv-blocks %d` (other parameters the model's defaults); phases of %s, run one after another.\n\n",
		o.users, o.turns, o.think, o.systems, o.systemLen, o.chunks, o.replicas, o.kvBlocks, o.dur)
	var results []*phase
	for _, kill := range []bool{false, true} {
		if kill && !o.kill {
			break
		}
		for _, pol := range policies {
			ph := runPhase(o, client, "http://"+gw, pol, pools[pol], corpus, kill)
			results = append(results, ph)
			fmt.Fprintf(os.Stderr, "%s kill=%v: %s\n", pol, kill, ph.line())
		}
	}
	report.WriteString(table(results))
	report.WriteString(targets(results))
	for _, ph := range results {
		report.WriteString(ph.series())
	}
	fmt.Print(report.String())
	if o.out != "" {
		return os.WriteFile(o.out, []byte(report.String()), 0o644)
	}
	return nil
}

func waitReady(url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond) // polling a process we do not control
	}
	return errors.New("the gateway did not become ready in 30s")
}

// sample is one request's outcome.
type sample struct {
	at              time.Duration // since the phase began, when it ended
	ttft, e2e       time.Duration
	prompt, cached  int
	ok              bool
	failedBeforeTTF bool // failed with no byte of content: retryable
}

type phase struct {
	policy   string
	kill     bool
	dur      time.Duration
	killAt   time.Duration
	backAt   time.Duration
	mu       sync.Mutex
	samples  []sample
	inflight [][]float64 // per second, per replica: mean in-flight
}

func runPhase(o options, client *http.Client, gw, pol string, reps []*replica, corpus []string, kill bool) *phase {
	ph := &phase{policy: pol, kill: kill, dur: o.dur}
	rng := rand.New(rand.NewPCG(o.seed, 7))
	systems := make([]string, o.systems)
	for i := range systems {
		var b strings.Builder
		fmt.Fprintf(&b, "You are assistant %d of a firm's help desk. Answer from the reference material below; say when it does not cover the question.\n\n", i)
		for b.Len() < o.systemLen {
			b.WriteString(corpus[rng.IntN(len(corpus))])
			b.WriteString("\n")
		}
		systems[i] = b.String()[:o.systemLen]
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.dur)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	// Load sampling: each replica's active requests every 50 ms.
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		sec := make([]float64, len(reps))
		n := 0
		next := time.Second
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for i, r := range reps {
				sec[i] += float64(r.active())
			}
			n++
			if time.Since(start) >= next {
				row := make([]float64, len(reps))
				for i := range sec {
					row[i], sec[i] = sec[i]/float64(n), 0
				}
				n = 0
				next += time.Second
				ph.mu.Lock()
				ph.inflight = append(ph.inflight, row)
				ph.mu.Unlock()
			}
		}
	})
	if kill {
		ph.killAt, ph.backAt = o.killAt, o.killAt+o.downFor
		wg.Go(func() {
			victim := reps[1]
			select {
			case <-ctx.Done():
				return
			case <-time.After(o.killAt):
			}
			victim.kill()
			select {
			case <-ctx.Done():
				return
			case <-time.After(o.downFor):
			}
			if err := victim.start(); err != nil {
				fmt.Fprintln(os.Stderr, "restart:", err)
			}
		})
	}
	for u := range o.users {
		seed := o.seed*1000 + uint64(u)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, 11))
			for conv := 0; ctx.Err() == nil; conv++ {
				msgs := []map[string]string{{"role": "system", "content": systems[rng.IntN(len(systems))]}}
				for range o.turns {
					if o.think > 0 {
						t := time.NewTimer(time.Duration(rng.ExpFloat64() * float64(o.think)))
						select {
						case <-ctx.Done():
							t.Stop()
							return
						case <-t.C:
						}
					}
					msgs = append(msgs, map[string]string{"role": "user", "content": corpus[rng.IntN(len(corpus))]})
					s, answer := turn(ctx, client, gw, "mt-"+pol, msgs)
					if ctx.Err() != nil {
						return // cut by the end of the phase: not counted
					}
					s.at = time.Since(start)
					ph.mu.Lock()
					ph.samples = append(ph.samples, s)
					ph.mu.Unlock()
					if !s.ok {
						break // the conversation is abandoned, as a user would
					}
					msgs = append(msgs, map[string]string{"role": "assistant", "content": answer})
				}
			}
		})
	}
	wg.Wait()
	return ph
}

// turn sends one streamed chat request and reads the answer.
func turn(ctx context.Context, client *http.Client, gw, model string, msgs []map[string]string) (sample, string) {
	body, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	t0 := time.Now()
	var s sample
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		s.failedBeforeTTF = true
		return s, ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		_, _ = io.Copy(io.Discard, resp.Body)
		s.failedBeforeTTF = true
		return s, ""
	}
	var answer strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	done := false
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if string(line) == "[DONE]" {
			done = true
			break
		}
		var ev struct {
			Choices []struct {
				Delta struct{ Content string }
			}
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			}
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		for _, c := range ev.Choices {
			if c.Delta.Content != "" && s.ttft == 0 {
				s.ttft = time.Since(t0)
			}
			answer.WriteString(c.Delta.Content)
		}
		if ev.Usage != nil {
			s.prompt = ev.Usage.PromptTokens
			if ev.Usage.PromptTokensDetails != nil {
				s.cached = ev.Usage.PromptTokensDetails.CachedTokens
			}
		}
	}
	s.e2e = time.Since(t0)
	s.ok = done && s.prompt > 0
	s.failedBeforeTTF = !s.ok && s.ttft == 0
	return s, answer.String()
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(math.Ceil(p*float64(len(d))))-1)]
}

type summary struct {
	n, failedBefore, failedAfter int
	hit                          float64
	ttft50, ttft99, e2e50, e2e99 time.Duration
	rps                          float64
	imbMax, imbMean              float64
	recovery                     time.Duration // -1: never; 0: not a kill phase
}

func (ph *phase) summary() summary {
	var s summary
	var ttft, e2e []time.Duration
	var prompt, cached int
	for _, x := range ph.samples {
		switch {
		case x.ok:
			s.n++
			ttft, e2e = append(ttft, x.ttft), append(e2e, x.e2e)
			prompt += x.prompt
			cached += x.cached
		case x.failedBeforeTTF:
			s.failedBefore++
		default:
			s.failedAfter++
		}
	}
	if prompt > 0 {
		s.hit = float64(cached) / float64(prompt)
	}
	s.ttft50, s.ttft99, s.e2e50, s.e2e99 = pct(ttft, .5), pct(ttft, .99), pct(e2e, .5), pct(e2e, .99)
	s.rps = float64(s.n) / ph.dur.Seconds()
	imb := ph.imbalance()
	for _, v := range imb {
		s.imbMax = max(s.imbMax, v)
		s.imbMean += v / float64(len(imb))
	}
	if ph.kill {
		s.recovery = ph.recovery()
	}
	return s
}

// imbalance is max/mean of the replicas' mean in-flight, per second;
// seconds with almost nothing in flight (under one request per replica on
// average) are left out, as are those with the killed replica down.
func (ph *phase) imbalance() []float64 {
	var out []float64
	for sec, row := range ph.inflight {
		t := time.Duration(sec) * time.Second
		if ph.kill && t+time.Second > ph.killAt && t < ph.backAt {
			continue
		}
		sum, mx := 0.0, 0.0
		for _, v := range row {
			sum += v
			mx = max(mx, v)
		}
		mean := sum / float64(len(row))
		if mean < 1 {
			continue
		}
		out = append(out, mx/mean)
	}
	return out
}

// hitBySecond is the token-weighted hit rate of the requests that ended
// in each second.
func (ph *phase) hitBySecond() []float64 {
	n := int(ph.dur/time.Second) + 1
	p, c := make([]float64, n), make([]float64, n)
	for _, x := range ph.samples {
		if i := int(x.at / time.Second); x.ok && i < n {
			p[i] += float64(x.prompt)
			c[i] += float64(x.cached)
		}
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = math.NaN()
		if p[i] > 0 {
			out[i] = c[i] / p[i]
		}
	}
	return out
}

// recovery is the time from the replica's return to the first second
// from which the hit rate over three seconds is within 90% of its mean
// over the seconds from 5 s to the kill.
func (ph *phase) recovery() time.Duration {
	h := ph.hitBySecond()
	base, n := 0.0, 0
	for i := 5; i < int(ph.killAt/time.Second) && i < len(h); i++ {
		if !math.IsNaN(h[i]) {
			base += h[i]
			n++
		}
	}
	if n == 0 {
		return -1
	}
	base /= float64(n)
	for i := int(ph.backAt / time.Second); i+3 <= len(h); i++ {
		s, k := 0.0, 0
		for _, v := range h[i : i+3] {
			if !math.IsNaN(v) {
				s += v
				k++
			}
		}
		if k > 0 && s/float64(k) >= 0.9*base {
			return max(0, time.Duration(i)*time.Second-ph.backAt)
		}
	}
	return -1
}

func (ph *phase) name() string {
	if ph.kill {
		return ph.policy + " (replica killed)"
	}
	return ph.policy
}

func (ph *phase) line() string {
	s := ph.summary()
	return fmt.Sprintf("hit %.3f ttft p50 %s p99 %s e2e p50 %s p99 %s rps %.1f imbalance max %.2f failed %d+%d",
		s.hit, ms(s.ttft50), ms(s.ttft99), ms(s.e2e50), ms(s.e2e99), s.rps, s.imbMax, s.failedBefore, s.failedAfter)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }

func table(ps []*phase) string {
	var b strings.Builder
	b.WriteString("| policy | requests | hit rate (tokens) | TTFT p50 | TTFT p99 | e2e p50 | e2e p99 | rps | imbalance max | imbalance mean | failed before first byte | streams cut | hit rate back after |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, ph := range ps {
		s := ph.summary()
		rec := "—"
		switch {
		case s.recovery > 0 || (ph.kill && s.recovery == 0):
			rec = s.recovery.String()
		case s.recovery < 0:
			rec = "not within the run"
		}
		fmt.Fprintf(&b, "| %s | %d | %.3f | %s | %s | %s | %s | %.1f | %.2f | %.2f | %d | %d | %s |\n", ph.name(), s.n, s.hit,
			ms(s.ttft50), ms(s.ttft99), ms(s.e2e50), ms(s.e2e99), s.rps, s.imbMax, s.imbMean, s.failedBefore, s.failedAfter, rec)
	}
	b.WriteString("\n")
	return b.String()
}

// targets checks the prefix policy against p2c in the same run.
func targets(ps []*phase) string {
	find := func(pol string, kill bool) *phase {
		for _, ph := range ps {
			if ph.policy == pol && ph.kill == kill {
				return ph
			}
		}
		return nil
	}
	pre, p2c := find("prefix", false), find("p2c", false)
	if pre == nil || p2c == nil {
		return ""
	}
	a, b := pre.summary(), p2c.summary()
	var out strings.Builder
	out.WriteString("## Targets (prefix against p2c, same run)\n\n| target | measured | met |\n|---|---|---|\n")
	check := func(name, got string, ok bool) {
		fmt.Fprintf(&out, "| %s | %s | %s |\n", name, got, map[bool]string{true: "yes", false: "**no**"}[ok])
	}
	check("hit rate ≥ 2× p2c's", fmt.Sprintf("%.3f vs %.3f (%.2f×)", a.hit, b.hit, a.hit/b.hit), a.hit >= 2*b.hit)
	check("TTFT p50 ≤ 0.5× p2c's", fmt.Sprintf("%s vs %s (%.2f×)", ms(a.ttft50), ms(b.ttft50), float64(a.ttft50)/float64(b.ttft50)), a.ttft50*2 <= b.ttft50)
	fmt.Fprintf(&out, "| (not a target) prompt tokens prefilled, p2c ÷ prefix | %.3f ÷ %.3f = %.2f× | |\n", 1-b.hit, 1-a.hit, (1-b.hit)/(1-a.hit))
	check("rps not lower", fmt.Sprintf("%.1f vs %.1f", a.rps, b.rps), a.rps >= b.rps)
	check("imbalance ≤ 1.3 every second", fmt.Sprintf("max %.2f", a.imbMax), a.imbMax <= 1.3)
	if k := find("prefix", true); k != nil {
		s := k.summary()
		check("replica killed: nothing retryable fails", fmt.Sprintf("%d failed before their first byte (%d streams cut by the kill)", s.failedBefore, s.failedAfter), s.failedBefore == 0)
		check("hit rate back within 10 s of the return", s.recovery.String(), s.recovery >= 0 && s.recovery <= 10*time.Second)
	}
	out.WriteString("\n")
	return out.String()
}

func (ph *phase) series() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s: per second\n\n| s | hit rate | imbalance | in flight per replica |\n|--:|--:|--:|---|\n", ph.name())
	h := ph.hitBySecond()
	for i, row := range ph.inflight {
		sum, mx := 0.0, 0.0
		cells := make([]string, len(row))
		for j, v := range row {
			sum += v
			mx = max(mx, v)
			cells[j] = fmt.Sprintf("%.1f", v)
		}
		imb := "—"
		if sum > 0 {
			imb = fmt.Sprintf("%.2f", mx/(sum/float64(len(row))))
		}
		hit := "—"
		if i < len(h) && !math.IsNaN(h[i]) {
			hit = fmt.Sprintf("%.3f", h[i])
		}
		note := ""
		if ph.kill && time.Duration(i)*time.Second == ph.killAt {
			note = " (killed)"
		}
		if ph.kill && time.Duration(i)*time.Second == ph.backAt {
			note = " (back)"
		}
		fmt.Fprintf(&b, "| %d%s | %s | %s | %s |\n", i+1, note, hit, imb, strings.Join(cells, " "))
	}
	b.WriteString("\n")
	return b.String()
}
