//go:build soak

package main

// Whole-deployment faults (make faults): three gateways behind nginx,
// sharing a real redis-server, in front of simulated replicas, with access
// control (two tenants), sessions, the Responses API and tier 2 on, under
// a mixed load (chat streamed and not, Anthropic Messages, Responses
// chains, a tenant held at its requests-per-minute limit) that runs
// throughout, while each fault is made in turn: a gateway SIGKILLed with a
// stream in flight through it (and started again), Redis killed and
// started again empty, Redis stalled (SIGSTOP, then SIGCONT), a replica
// SIGKILLed (and started again), the rules rewritten to add a split.
//
// Every client call has a deadline. Each failure is classified: a request
// in flight on the process a fault killed is an allowed loss, counted;
// anything else fails the test. Every error must be in the client's
// dialect. Per fault the test reports the requests lost, the limited
// tenant's admissions against the bound the docs state, whether the
// sessions and Responses chains made before the fault continue after it
// through every gateway, and the time to recover. FAULTS_OUT=FILE.md
// writes the report.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/internal/testenv"
)

const (
	faultGateways       = 3
	faultAlphaRPM       = 60                                    // the limited tenant's requests per minute
	faultAlphaTPM       = 1200                                  // and tokens per minute: its requests' usage is about 24 tokens, so both limits bind
	faultAlphaReqTokens = 64                                    // more than one of its requests' estimate or usage
	faultCallBound      = 20 * time.Second                      // a client call past this is a hang
	faultRedisWait      = 50 * time.Millisecond                 // access.redis.timeout: the docs' fail-open bound
	faultStall          = 4 * time.Second                       // how long Redis is stopped
	faultSettle         = 14 * time.Second                      // traffic after each fault before the next
	faultBefore         = 5 * time.Second                       // traffic before each fault
	faultWarmup         = 15 * time.Second                      // the limited tenant spends its burst
	faultBucket         = time.Second                           // the recovery's resolution
	faultNormalRate     = 0.97                                  // a second with this share of successes is normal
	faultChunkDelay     = 15 * time.Millisecond                 // a replica's gap between stream chunks
	faultLatency        = 10 * time.Millisecond                 // a replica's time to its head
	faultSlowCall       = faultRedisWait + 450*time.Millisecond // a degraded admission reaching its replica: the wait, nginx and the gateway's work on a busy machine
)

var faultPrompts = []string{
	"Why does my Python list comprehension raise a TypeError?",
	"How do I rebase my branch onto main in git?", // tier 1 is unsure: tier 2 decides
	"Is it legal for my employer to fire me for being sick?",
	"Can my landlord keep my deposit without giving a reason?",
	"What is a good recipe for banana bread?",
	"Explain how photosynthesis works.",
}

// fcall is one client call as its client saw it.
type fcall struct {
	id, kind, tenant string // kind: chat, chat-stream, messages, messages-stream, responses, responses-stream, alpha, probe-*
	via              string // "lb" or the gateway's name
	start, end       time.Time
	status           int
	ok, limited      bool // limited: a 429 in the client's dialect (the limited tenant)
	degraded         bool
	replica          string // X-Sim-Replica
	symptom, detail  string
	chainPrev        string    // previous_response_id sent
	chainReplica     string    // the replica the chain lives on
	respID           string    // a Responses answer's id
	retries          int       // 503s with Retry-After asked again
	tokens           int       // usage.total_tokens of a chat answer
	sent             time.Time // the last attempt's start (start is the first's)
}

// fgw is one gateway slot behind nginx and its incarnations.
type fgw struct {
	name, addr string
	mu         sync.Mutex
	procs      []*proc
	kills      []fkill
}

func (g *fgw) live() *proc { g.mu.Lock(); defer g.mu.Unlock(); return g.procs[len(g.procs)-1] }

// fkill is one SIGKILL: sent at, the process gone at deadAt, its
// successor ready at backAt.
type fkill struct{ at, deadAt, backAt time.Time }

// fsim is one simulated replica slot and its incarnations.
type fsim struct {
	name, pool, model, addr string
	mu                      sync.Mutex
	procs                   []*proc
	kills                   []fkill
}

func (r *fsim) live() *proc { r.mu.Lock(); defer r.mu.Unlock(); return r.procs[len(r.procs)-1] }

// fphase is one fault and what it did.
type fphase struct {
	name              string
	start, at, end    time.Time // traffic window; the fault made at
	recoveredAt       time.Time // Redis answering again, the process back
	killedGW, killedR string
	note              string
	probes            []probeResult
	stall             time.Duration
	problem           string
	redisDown         time.Duration
}

type probeResult struct {
	kind, id, via string // chain or session
	ok            bool
	expectedLoss  bool // documented: a chain on a replica that was killed
	detail        string
}

type faults struct {
	t        *testing.T
	dir      string
	cfgPath  string
	rules    string
	redis    *testenv.RedisFaults
	gws      []*fgw
	sims     []*fsim
	lb       *lb
	keys     map[string]string // tenant → key
	client   *http.Client
	mu       sync.Mutex
	calls    []fcall
	phases   []*fphase
	seq      int
	headsDir string
}

func TestDeploymentFaults(t *testing.T) {
	root := repoRoot()
	heads, err := classifier.LoadHeads(filepath.Join(root, "models", "heads", "subjects"))
	if err != nil {
		t.Fatal(err)
	}
	models := testenv.Models(t, "tables/subjects-tier1.tbl", heads.Tier2.Encoder.Model+"/model.onnx", "ort/libonnxruntime.so.1")
	f := &faults{t: t, dir: t.TempDir(), keys: map[string]string{}, headsDir: filepath.Join(root, "models", "heads", "subjects")}
	f.redis = testenv.RedisWithFaults(t)
	for _, s := range []struct{ name, pool, model string }{
		{"gen-0", "general", "m-gen"}, {"gen-1", "general", "m-gen"},
		{"code-0", "code", "m-code"}, {"code-1", "code", "m-code"},
		{"legal-0", "legal", "m-legal"},
	} {
		r := &fsim{name: s.name, pool: s.pool, model: s.model}
		f.startSim(r)
		f.sims = append(f.sims, r)
	}
	f.cfgPath = filepath.Join(f.dir, "triage.yaml")
	f.rules = filepath.Join(f.dir, "rules.yaml")
	writeFile(t, filepath.Join(f.dir, "keys.jsonl"), "# no keys\n")
	writeFile(t, f.rules, f.rulesText(""))
	writeFile(t, f.cfgPath, f.config(models))
	for _, tenant := range []string{"alpha", "bravo"} {
		code, stdout, stderr := runIn(t, f.dir, nil, "keys", "create", "--config", f.cfgPath, "--principal", tenant, "--groups", tenant)
		if code != 0 || !strings.HasPrefix(stdout, "sk-triage-") {
			t.Fatalf("keys create %s: exit %d\n%s\n%s", tenant, code, stdout, stderr)
		}
		f.keys[tenant] = strings.TrimSpace(stdout)
	}
	var addrs []string
	for i := range faultGateways {
		g := &fgw{name: fmt.Sprintf("gw-%d", i), addr: freeAddr(t)}
		f.gws = append(f.gws, g)
		f.startGateway(g)
		addrs = append(addrs, g.addr)
	}
	f.lb = startNginx(t, addrs)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	f.client = &http.Client{Transport: tr, Timeout: faultCallBound}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	f.load(ctx, &wg)
	defer func() { stop(); wg.Wait() }()

	// The limited tenant spends its minute's burst before the first fault.
	warm := &fphase{name: "warm-up", start: time.Now()}
	testenv.WaitWithin(t, 2*time.Minute, "the limited tenant refused at its limit", func() (bool, string) {
		n := 0
		f.mu.Lock()
		for _, c := range f.calls {
			if c.kind == "alpha" && c.limited {
				n++
			}
		}
		f.mu.Unlock()
		return n >= 5, fmt.Sprintf("%d refusals", n)
	})
	f.waitFor(faultWarmup - time.Since(warm.start))
	warm.at, warm.end = time.Now(), time.Now()
	f.phases = append(f.phases, warm)

	f.phase("kill a gateway mid-stream", f.killGateway)
	f.phase("restart Redis (empty)", f.restartRedis)
	f.phase("stall Redis (SIGSTOP 4 s)", f.stallRedis)
	f.phase("kill a replica", f.killReplica)
	f.phase("reload rules with a split", f.reloadSplit)
	stop()
	wg.Wait()

	rep := f.report()
	t.Log("\n" + rep.md)
	if out := os.Getenv("FAULTS_OUT"); out != "" {
		if !filepath.IsAbs(out) {
			out = filepath.Join(root, out)
		}
		if err := os.WriteFile(out, []byte(rep.md), 0o644); err != nil {
			t.Errorf("writing FAULTS_OUT: %v", err)
		}
	}
	for _, p := range rep.problems {
		t.Error(p)
	}
}

// waitFor lets traffic run for d: the load is the event waited on, and
// nothing else can end it sooner.
func (f *faults) waitFor(d time.Duration) {
	if d > 0 {
		<-time.After(d)
	}
}

// ---- configuration and processes ----

func (f *faults) rulesText(split string) string {
	return "alias: auto\nheads: " + f.headsDir + "\n" +
		"routes:\n" +
		"  - {name: coding, when: {keywords: [HTTP server]}, pool: code, fallback: general}\n" +
		"  - {name: code-class, when: {class: computer science}, pool: code, fallback: general}\n" +
		"  - {name: legal, when: {class: law}, pool: legal, fallback: general}\n" +
		"default: general\n" +
		"tier2: {enabled: true, budget: 2s, warmup: true}\n" +
		"window: {user_turns: 1}\n" +
		"session: {header: x-session-id, turns: 100}\n" + split
}

func (f *faults) config(models string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "models_dir: %s\nrules: rules.yaml\ndefault_pool: general\nserver: {shutdown_timeout: 5s}\npools:\n", models)
	for _, pool := range []struct{ name, model, alias string }{{"general", "m-gen", "gpt-4o-mini"}, {"code", "m-code", ""}, {"legal", "m-legal", ""}} {
		fmt.Fprintf(&b, "  - name: %s\n    model: %s\n", pool.name, pool.model)
		if pool.alias != "" {
			fmt.Fprintf(&b, "    aliases: [%s]\n", pool.alias)
		}
		b.WriteString("    health: {interval: 250ms}\n    timeouts: {first_byte: 5s, idle: 5s, total: 15s}\n    replicas:\n")
		for _, r := range f.sims {
			if r.pool == pool.name {
				fmt.Fprintf(&b, "      - url: http://%s\n", r.addr)
			}
		}
	}
	fmt.Fprintf(&b, `access:
  keys_file: keys.jsonl
  policies:
    - group: alpha
      models: [gpt-4o-mini]
      limits: {requests_per_minute: %d, tokens_per_minute: %d}
    - group: bravo
      limits: {requests_per_minute: 100000, tokens_per_minute: 100000000, concurrent: 256, per_replica: true}
      budget: {tokens_per_day: 10000000000}
  redis: {addr: %q, timeout: %s}
`, faultAlphaRPM, faultAlphaTPM, f.redis.Addr, faultRedisWait)
	return b.String()
}

func (f *faults) startSim(r *fsim) {
	t := f.t
	t.Helper()
	args := []string{"sim", "--model", r.model, "--name", r.name, "--log-requests",
		"--latency", faultLatency.String(), "--chunk-delay", faultChunkDelay.String()}
	for try := 0; ; try++ {
		addr := r.addr
		if addr == "" {
			addr = freeAddr(t)
		}
		p := start(t, "sim "+r.name, append(slices.Clone(args), "--listen", addr)...)
		p.addr = addr
		err := p.waitReady("/health", 10*time.Second)
		if err == nil {
			r.mu.Lock()
			r.procs = append(r.procs, p)
			r.mu.Unlock()
			r.addr = addr
			return
		}
		if !errors.Is(err, errPortTaken) || try == 20 {
			t.Fatalf("%s: %v", r.name, err)
		}
		if r.addr != "" {
			// The same port, once the killed process's sockets let go of
			// it: bounded by the tries.
			<-time.After(100 * time.Millisecond)
		}
	}
}

func (f *faults) startGateway(g *fgw) {
	f.t.Helper()
	p := startGatewayAt(f.t, g.name, f.cfgPath, g.addr)
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
}

// ---- the load ----

func (f *faults) nextID(kind string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	return fmt.Sprintf("flt-%s-%d", kind, f.seq)
}

func (f *faults) record(c fcall) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

// load starts the clients: two of chat (streamed and not, some with a
// session), one of Anthropic Messages, one of Responses chains of three
// turns, all as the bravo tenant; and one of the alpha tenant, sending
// twice its limit's rate.
func (f *faults) load(ctx context.Context, wg *sync.WaitGroup) {
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; ctx.Err() == nil; i++ {
				hdr := map[string]string{}
				if i%3 == 0 {
					hdr["X-Session-Id"] = fmt.Sprintf("load-%d-%d", w, i/6)
				}
				f.record(f.chat(f.lb.url, "bravo", faultPrompts[rng.IntN(len(faultPrompts))], (w+i)%2 == 0, hdr))
				f.think(ctx, 40*time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			f.record(f.messages(f.lb.url, faultPrompts[i%len(faultPrompts)], i%2 == 0))
			f.think(ctx, 60*time.Millisecond)
		}
	})
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			c := f.respond(f.lb.url, "", "", i%2 == 0, "responses")
			f.record(c)
			for turn := 1; turn < 3 && c.ok && ctx.Err() == nil; turn++ {
				f.think(ctx, 40*time.Millisecond)
				c = f.respond(f.lb.url, c.respID, c.replica, false, "responses")
				f.record(c)
			}
			f.think(ctx, 40*time.Millisecond)
		}
	})
	wg.Go(func() {
		refused := false
		for ctx.Err() == nil {
			c := f.alpha()
			f.record(c)
			refused = refused || c.limited
			if refused {
				f.think(ctx, 30*time.Second/faultAlphaRPM) // twice the limit's rate
			} else {
				f.think(ctx, 6*time.Second/faultAlphaRPM) // ten times: the minute's burst goes in seconds
			}
		}
	})
}

func (f *faults) think(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// post sends one request with a deadline and reads the whole answer.
func (f *faults) post(base, path, tenant string, body any, hdr map[string]string, c *fcall) (*http.Response, []byte, bool) {
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), faultCallBound)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", c.id)
	if path == "/v1/messages" {
		req.Header.Set("x-api-key", f.keys[tenant])
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		req.Header.Set("Authorization", "Bearer "+f.keys[tenant])
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c.tenant = tenant
	c.start = time.Now()
	c.sent = c.start
	resp, err := f.client.Do(req)
	if err != nil {
		c.end = time.Now()
		c.symptom, c.detail = "transport error: "+errClass(err), err.Error()
		return nil, nil, false
	}
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	c.end = time.Now()
	c.status = resp.StatusCode
	c.replica = resp.Header.Get("X-Sim-Replica")
	c.degraded = resp.Header.Get("X-Triage-Degraded") == "true"
	if got := resp.Header.Get("X-Request-Id"); got != "" && got != c.id {
		c.symptom, c.detail = "another request's answer", fmt.Sprintf("X-Request-Id %q, sent %q", got, c.id)
		return resp, raw, false
	}
	if rerr != nil {
		c.symptom, c.detail = "body cut: "+errClass(rerr), fmt.Sprintf("status %d: %v", resp.StatusCode, rerr)
		return resp, raw, false
	}
	if resp.StatusCode != http.StatusOK {
		c.symptom = fmt.Sprintf("status %d", resp.StatusCode)
		c.detail = fmt.Sprintf("%s: %s", c.symptom, excerpt(raw))
		if d := dialectProblem(path, resp, raw); d != "" {
			c.symptom += " not in the client's dialect"
			c.detail += " (" + d + ")"
		}
		return resp, raw, false
	}
	return resp, raw, true
}

// dialectProblem says how an error answer departs from the shape of the
// API it was asked on ("" when it does not): Anthropic's
// {"type":"error","error":{"type","message"}} on /v1/messages, OpenAI's
// {"error":{"message","type"}} elsewhere.
func dialectProblem(path string, resp *http.Response, raw []byte) string {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return "Content-Type " + resp.Header.Get("Content-Type")
	}
	var e struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return "not JSON"
	}
	var flat struct{ Object, Message, Type string }
	if path != "/v1/messages" && json.Unmarshal(raw, &flat) == nil && flat.Object == "error" && flat.Message != "" && flat.Type != "" {
		return "" // vLLM's OpenAI-compatible error, a replica's answer relayed as sent
	}
	switch {
	case e.Error == nil || e.Error.Message == "" || e.Error.Type == "":
		return "no error object with a type and a message"
	case path == "/v1/messages" && e.Type != "error":
		return `not Anthropic's shape: no "type":"error"`
	case path != "/v1/messages" && e.Type != "":
		return "not OpenAI's shape"
	}
	return ""
}

func (f *faults) chat(base, tenant, prompt string, stream bool, hdr map[string]string) fcall {
	c := fcall{id: f.nextID("chat"), kind: "chat", via: f.via(base)}
	if stream {
		c.kind = "chat-stream"
	}
	_, raw, ok := f.post(base, "/v1/chat/completions", tenant, map[string]any{"model": "auto", "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}}}, hdr, &c)
	if !ok {
		return c
	}
	if stream {
		if !bytes.Contains(raw, []byte(`"chat.completion.chunk"`)) || !bytes.HasSuffix(raw, []byte("data: [DONE]\n\n")) {
			c.symptom, c.detail = "not a whole stream", excerpt(raw)
			return c
		}
	} else if !bytes.Contains(raw, []byte(`"chat.completion"`)) {
		c.symptom, c.detail = "not a chat.completion", excerpt(raw)
		return c
	}
	c.ok = true
	return c
}

func (f *faults) messages(base, prompt string, stream bool) fcall {
	c := fcall{id: f.nextID("msg"), kind: "messages", via: f.via(base)}
	if stream {
		c.kind = "messages-stream"
	}
	_, raw, ok := f.post(base, "/v1/messages", "bravo", map[string]any{"model": "auto", "max_tokens": 64, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}}}, nil, &c)
	if !ok {
		return c
	}
	want := `"type":"message"`
	if stream {
		want = "event: message_stop"
	}
	if !bytes.Contains(raw, []byte(want)) {
		c.symptom, c.detail = "not a whole Anthropic message", excerpt(raw)
		return c
	}
	c.ok = true
	return c
}

var respIDRe = regexp.MustCompile(`"id":\s*"(resp_[^"]+)"`)

// respond sends one Responses turn: a new chain without prev, else its
// next turn; via base.
func (f *faults) respond(base, prev, prevReplica string, stream bool, kind string) fcall {
	c := fcall{id: f.nextID("resp"), kind: kind, via: f.via(base), chainPrev: prev, chainReplica: prevReplica}
	if stream {
		c.kind += "-stream"
	}
	body := map[string]any{"model": "auto", "stream": stream, "input": "Write a Go HTTP server, part " + c.id}
	if prev != "" {
		body["previous_response_id"] = prev
		body["input"] = "and tests?"
	}
	// As the OpenAI clients do, a 503 with Retry-After is asked again,
	// twice at most, after the pause it names.
	var raw []byte
	var ok bool
	first := time.Time{}
	for try := 0; ; try++ {
		var resp *http.Response
		resp, raw, ok = f.post(base, "/v1/responses", "bravo", body, nil, &c)
		if try == 0 {
			first = c.start
		}
		c.start = first
		if ok || try == 2 || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(c.symptom, "dialect") {
			break
		}
		after, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil {
			break
		}
		c.retries++
		c.symptom, c.detail = "", ""
		<-time.After(min(time.Duration(after)*time.Second, 2*time.Second)) // the client's pause, as it names it
	}
	if !ok {
		return c
	}
	m := respIDRe.FindSubmatch(raw)
	if m == nil || (stream && !bytes.Contains(raw, []byte("response.completed"))) || (!stream && !bytes.Contains(raw, []byte(`"completed"`))) {
		c.symptom, c.detail = "not a whole response", excerpt(raw)
		return c
	}
	if prev != "" && c.replica != prevReplica {
		c.symptom, c.detail = "chain left its replica", fmt.Sprintf("continued on %s, made on %s", c.replica, prevReplica)
		return c
	}
	c.respID = string(m[1])
	c.ok = true
	return c
}

func (f *faults) alpha() fcall {
	c := fcall{id: f.nextID("alpha"), kind: "alpha", via: "lb"}
	resp, raw, ok := f.post(f.lb.url, "/v1/chat/completions", "alpha", map[string]any{"model": "gpt-4o-mini", "max_tokens": 16,
		"messages": []map[string]string{{"role": "user", "content": "hello"}}}, nil, &c)
	if ok {
		var cc struct {
			Object string `json:"object"`
			Usage  struct {
				Total int `json:"total_tokens"`
			} `json:"usage"`
		}
		c.ok = json.Unmarshal(raw, &cc) == nil && cc.Object == "chat.completion" && cc.Usage.Total > 0
		c.tokens = cc.Usage.Total
		if !c.ok {
			c.symptom, c.detail = "not a chat.completion with its usage", excerpt(raw)
		}
		return c
	}
	if resp != nil && resp.StatusCode == http.StatusTooManyRequests && !strings.Contains(c.symptom, "dialect") &&
		bytes.Contains(raw, []byte("rate_limit_exceeded")) && resp.Header.Get("Retry-After") != "" {
		c.limited, c.symptom, c.detail = true, "", ""
	}
	return c
}

func (f *faults) via(base string) string {
	if base == f.lb.url {
		return "lb"
	}
	for _, g := range f.gws {
		if strings.HasSuffix(base, g.addr) {
			return g.name
		}
	}
	return base
}

// ---- faults ----

// phase runs traffic, makes probes (sessions and chains through the
// balancer), makes the fault, lets traffic run, and checks the probes
// through every gateway.
func (f *faults) phase(name string, fault func(*fphase)) {
	t := f.t
	p := &fphase{name: name, start: time.Now()}
	f.waitFor(faultBefore / 2)
	type chain struct{ id, replica string }
	var chains []chain
	var sessions []string
	for i := range 6 {
		c := f.respond(f.lb.url, "", "", i%2 == 1, "probe-create")
		f.record(c)
		if !c.ok {
			t.Errorf("%s: a probe chain could not be made before the fault: %s", name, c.detail)
			continue
		}
		chains = append(chains, chain{c.respID, c.replica})
	}
	for i := range 3 {
		sid := fmt.Sprintf("probe-%d-%d", len(f.phases), i)
		c := f.chat(f.lb.url, "bravo", "Write a Go HTTP server", false, map[string]string{"X-Session-Id": sid})
		c.kind = "probe-create"
		f.record(c)
		if !c.ok || c.replica == "" || !strings.HasPrefix(c.replica, "code") {
			t.Errorf("%s: a probe session did not start on code: %+v", name, c)
			continue
		}
		sessions = append(sessions, sid)
	}
	f.waitFor(faultBefore / 2)
	p.at = time.Now()
	fault(p)
	f.waitFor(faultSettle - time.Since(p.at))
	// Every chain and session made before the fault continues through
	// every gateway: a Redis round trip has long passed.
	for _, ch := range chains {
		lostWithReplica := p.killedR != "" && ch.replica == p.killedR
		for _, g := range f.gws {
			c := f.respond("http://"+g.addr, ch.id, ch.replica, false, "probe-chain")
			f.record(c)
			pr := probeResult{kind: "chain", id: ch.id, via: g.name, ok: c.ok, detail: c.detail}
			if lostWithReplica && !c.ok {
				// vLLM keeps a stored response in the replica's memory:
				// the chain dies with it, and the client is told so.
				pr.expectedLoss = c.status == 404 && !strings.Contains(c.symptom, "dialect")
			}
			p.probes = append(p.probes, pr)
		}
	}
	for _, sid := range sessions {
		for _, g := range f.gws {
			c := f.chat("http://"+g.addr, "bravo", "and tests?", false, map[string]string{"X-Session-Id": sid})
			c.kind = "probe-session"
			f.record(c)
			ok := c.ok && strings.HasPrefix(c.replica, "code")
			p.probes = append(p.probes, probeResult{kind: "session", id: sid, via: g.name, ok: ok,
				detail: fmt.Sprintf("status %d, replica %q %s", c.status, c.replica, c.detail)})
		}
	}
	p.end = time.Now()
	f.phases = append(f.phases, p)
	t.Logf("%s: done at %s", name, p.end.Format("15:04:05.000"))
}

// killGateway opens a stream straight to gw-1, reads its first event,
// then SIGKILLs gw-1 with it (and whatever the balancer sent it) in
// flight, and starts it again on its address.
func (f *faults) killGateway(p *fphase) {
	t := f.t
	g := f.gws[1]
	p.killedGW = g.name
	c := fcall{id: f.nextID("midstream"), kind: "chat-stream", via: g.name, tenant: "bravo"}
	ctx, cancel := context.WithTimeout(context.Background(), faultCallBound)
	defer cancel()
	b, _ := json.Marshal(map[string]any{"model": "auto", "stream": true, "messages": []map[string]string{{"role": "user", "content": "Explain how photosynthesis works."}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.addr+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+f.keys["bravo"])
	req.Header.Set("X-Request-Id", c.id)
	req.Header.Set("X-Sim-Chunks", "400") // 6 s of stream: it is still running when the gateway dies
	c.start = time.Now()
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatalf("the stream to be cut: %v", err)
	}
	first := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, first, 1); err != nil {
		t.Fatalf("the stream to be cut sent nothing: %v", err)
	}
	live := g.live()
	k := fkill{at: time.Now()}
	live.signal(t, syscall.SIGKILL)
	<-live.done
	k.deadAt = time.Now()
	g.mu.Lock()
	g.kills = append(g.kills, k)
	g.mu.Unlock()
	_, rerr := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.end, c.status = time.Now(), resp.StatusCode
	if rerr == nil {
		// A client must not take a stream cut by a dying gateway for a
		// whole one.
		p.problem = "the stream in flight on the killed gateway ended as if whole"
	} else {
		c.symptom, c.detail = "stream cut: "+errClass(rerr), rerr.Error()
	}
	f.record(c)
	f.startGateway(g)
	p.recoveredAt = time.Now()
	p.note = fmt.Sprintf("SIGKILL pid %d with a stream in flight; the client saw %q %v after the kill; back (ready) after %v",
		live.cmd.Process.Pid, c.symptom, c.end.Sub(k.at).Round(time.Millisecond), p.recoveredAt.Sub(k.at).Round(time.Millisecond))
}

func (f *faults) restartRedis(p *fphase) {
	pid := f.redis.Pid()
	f.redis.Kill()
	f.redis.Start()
	p.recoveredAt = time.Now()
	p.redisDown = p.recoveredAt.Sub(p.at)
	p.note = fmt.Sprintf("SIGKILL redis-server pid %d, started again empty (pid %d) after %v", pid, f.redis.Pid(), p.redisDown.Round(time.Millisecond))
}

func (f *faults) stallRedis(p *fphase) {
	f.redis.Pause()
	f.waitFor(faultStall)
	f.redis.Resume()
	p.recoveredAt = time.Now()
	p.stall = p.recoveredAt.Sub(p.at)
	p.note = fmt.Sprintf("SIGSTOP redis-server pid %d for %v, then SIGCONT", f.redis.Pid(), p.stall.Round(time.Millisecond))
}

// killReplica SIGKILLs the replica that holds the most of the load's
// recent chains, and starts it again on its port.
func (f *faults) killReplica(p *fphase) {
	count := map[string]int{}
	f.mu.Lock()
	for _, c := range f.calls[max(len(f.calls)-200, 0):] {
		if c.respID != "" && c.replica != "" {
			count[c.replica]++
		}
	}
	f.mu.Unlock()
	var r *fsim
	for _, s := range f.sims {
		if s.pool == "code" && (r == nil || count[s.name] > count[r.name]) {
			r = s
		}
	}
	p.killedR = r.name
	live := r.live()
	k := fkill{at: time.Now()}
	live.signal(f.t, syscall.SIGKILL)
	<-live.done
	k.deadAt = time.Now()
	f.startSim(r)
	p.recoveredAt = time.Now()
	k.backAt = p.recoveredAt
	r.mu.Lock()
	r.kills = append(r.kills, k)
	r.mu.Unlock()
	p.note = fmt.Sprintf("SIGKILL %s (pid %d), back on its port after %v", r.name, live.cmd.Process.Pid, p.recoveredAt.Sub(k.at).Round(time.Millisecond))
}

// reloadSplit rewrites the rules to add a split whose candidate routes
// as they do (a new version, the same routes), and waits until every
// gateway serves it.
func (f *faults) reloadSplit(p *fphase) {
	t := f.t
	c := &http.Client{Timeout: 5 * time.Second}
	before := map[string]string{}
	for _, g := range f.gws {
		before[g.name] = readyz(t, c, g.live()).RulesVersion
	}
	cand := strings.Replace(f.rulesText(""), "turns: 100", "turns: 99", 1)
	writeFile(t, filepath.Join(f.dir, "candidate.yaml"), cand)
	replaceFile(t, f.rules, f.rulesText("split: {rules: candidate.yaml, weight: 0.5, names: [control, next]}\n"))
	for _, g := range f.gws {
		testenv.WaitWithin(t, 20*time.Second, g.name+" to load the split", func() (bool, string) {
			v := readyz(t, c, g.live()).RulesVersion
			return v != before[g.name], v
		})
	}
	p.recoveredAt = time.Now()
	p.note = fmt.Sprintf("rules rewritten with a 50%% split; every gateway serving it after %v", p.recoveredAt.Sub(p.at).Round(time.Millisecond))
}

// ---- the report ----

type faultReport struct {
	md       string
	problems []string
}

// loss is why a failed call is allowed, "" when it is not.
func (f *faults) loss(c fcall, logged map[string]string, sims map[string]string) string {
	if c.status == http.StatusServiceUnavailable && strings.Contains(c.detail, "responses_index_unavailable") {
		for _, p := range f.phases {
			if (p.stall > 0 || p.redisDown > 0) && !c.start.Before(p.at) && c.start.Before(p.recoveredAt.Add(2*time.Second)) {
				// A chain this gateway did not know, refused with a 503 to
				// retry while Redis did not answer (documented).
				return "a chain's next turn told to retry (503) while Redis did not answer, after its client's retries"
			}
		}
	}
	for _, g := range f.gws {
		for _, k := range g.kills {
			if !c.start.After(k.deadAt) && !c.end.Before(k.at) && logged[c.id] == "" && (c.via == "lb" || c.via == g.name) {
				return "in flight on " + g.name + " when it was killed"
			}
		}
	}
	for _, r := range f.sims {
		for _, k := range r.kills {
			if !c.start.After(k.deadAt) && !c.end.Before(k.at) && sims[c.id] == r.name {
				return "in flight on " + r.name + " when it was killed"
			}
			// A chain on the killed replica: vLLM keeps stored responses
			// in its memory, and the client is told it is gone (404).
			if c.chainReplica == r.name && c.start.After(k.at) && c.status == 404 && !strings.Contains(c.symptom, "dialect") {
				return "a chain on " + r.name + ", killed: the replica held it (documented)"
			}
			// Sent to it while it was down: the one replica that can
			// continue the chain cannot be reached.
			if c.chainReplica == r.name && c.start.After(k.at) && c.start.Before(k.backAt) && c.status == http.StatusBadGateway &&
				!strings.Contains(c.symptom, "dialect") && strings.Contains(c.detail, "bad_gateway") {
				return "a chain on " + r.name + ", sent while it was down: 502 (its replica holds it)"
			}
		}
	}
	return ""
}

func (f *faults) report() faultReport {
	var r faultReport
	// Which gateway logged each request (the access log's request_id),
	// and which replica read it last (sim --log-requests).
	logged := map[string]string{}
	reqRe := regexp.MustCompile(`"request_id":"(flt-[^"]+)"`)
	for _, g := range f.gws {
		g.mu.Lock()
		for _, p := range g.procs {
			for _, m := range reqRe.FindAllStringSubmatch(p.stderr.String(), -1) {
				logged[m[1]] = g.name
			}
			if out := p.stderr.String(); strings.Contains(out, "panic") || strings.Contains(out, "fatal error") || strings.Contains(out, "DATA RACE") {
				r.problems = append(r.problems, fmt.Sprintf("%s (pid %d) logged a panic, fatal error or data race: %s", g.name, p.cmd.Process.Pid, firstLine(out, "panic", "fatal error", "DATA RACE")))
			}
		}
		g.mu.Unlock()
	}
	sims := map[string]string{}
	simRe := regexp.MustCompile(`"time":"([^"]+)","level":"INFO","msg":"post","request_id":"(flt-[^"]+)"`)
	received := map[string]time.Time{} // when the replica read it
	for _, s := range f.sims {
		s.mu.Lock()
		for _, p := range s.procs {
			for _, m := range simRe.FindAllStringSubmatch(p.stderr.String(), -1) {
				sims[m[2]] = s.name
				if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
					received[m[2]] = at
				}
			}
		}
		s.mu.Unlock()
	}
	f.mu.Lock()
	calls := slices.Clone(f.calls)
	f.mu.Unlock()

	var b strings.Builder
	verdictAt := b.Len()
	fmt.Fprintf(&b, "%d gateways (`triage serve`, tier 2 on, access control with two tenants, sessions, the Responses API) behind nginx, sharing one redis-server, in front of %d `triage sim` replicas (%v to the head, %v between stream chunks). "+
		"Load throughout: two chat clients (streamed and not, a third with a session id), one Anthropic Messages client (streamed and not), one client of Responses chains (three turns, `previous_response_id`), all as tenant bravo; "+
		"and tenant alpha at twice its %d requests-a-minute limit. Every call has a %v deadline. Before each fault, 6 chains and 3 sessions are made through nginx; %v after it each is continued through every gateway directly.\n\n",
		faultGateways, len(f.sims), faultLatency, faultChunkDelay, faultAlphaRPM, faultCallBound, faultSettle)

	b.WriteString("| fault | what was done | requests | lost: in flight on a killed process | other failures | answers not in the client's dialect | slowest call | alpha admitted in the phase (the rate alone) | alpha admitted since the warm-up / stated bound | alpha tokens since the warm-up / stated bound | degraded answers | chain turns told to retry (503): then answered | chains kept | sessions kept | recovered after |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var details, timelines []string
	var allowance, tokAllowance float64
	cumAdmitted, cumTokens := 0, 0
	for i, p := range f.phases {
		if i == 0 {
			continue
		}
		var n, lost, other, dialect, alphaAdmitted, alphaTokens, degraded, retried, retriedOK int
		degradedAt := map[int]int{} // second after the fault → degraded answers
		var slowest time.Duration
		lossWhy := map[string]int{}
		buckets := map[int][2]int{} // second after the fault → bravo load successes, calls
		for _, c := range calls {
			if c.start.Before(p.start) || !c.start.Before(p.end) {
				continue
			}
			n++
			if d := c.end.Sub(c.start); d > slowest {
				slowest = d
			}
			if c.degraded {
				degraded++
				degradedAt[int(math.Floor(c.start.Sub(p.at).Seconds()))]++
			}
			if c.kind == "alpha" && c.ok {
				alphaTokens += c.tokens
			}
			if c.kind == "alpha" && !c.limited {
				alphaAdmitted++
			}
			if c.retries > 0 {
				retried++
				if c.ok {
					retriedOK++
				}
			}
			if !strings.HasPrefix(c.kind, "probe") && c.kind != "alpha" && c.via == "lb" {
				k := int(math.Floor(c.start.Sub(p.at).Seconds() / faultBucket.Seconds()))
				bk := buckets[k]
				bk[1]++
				if c.ok {
					bk[0]++
				}
				buckets[k] = bk
			}
			if c.ok || c.limited || strings.HasPrefix(c.kind, "probe-chain") || c.kind == "probe-session" {
				continue // probes are judged below
			}
			if why := f.loss(c, logged, sims); why != "" {
				if strings.Contains(c.symptom, "dialect") {
					why += ", answered by nginx" // the balancer's own 502 for a gateway that died under it
				}
				lost++
				lossWhy[why]++
				continue
			}
			if strings.Contains(c.symptom, "dialect") {
				dialect++
			}
			other++
			gw := logged[c.id]
			if gw == "" {
				gw = "no gateway logged it"
			}
			details = append(details, fmt.Sprintf("%s: %s %s via %s (%s), %s–%s, replica %q: %s — %s", p.name, c.kind, c.id, c.via, gw,
				c.start.Format("15:04:05.000"), c.end.Format("15:04:05.000"), cmpOr(sims[c.id], c.replica), c.symptom, c.detail))
		}
		// The limited tenant against the docs' bound, from the end of the
		// warm-up (its burst spent) to the end of this phase: the rate
		// over that time, plus one unused lease per replica (one more
		// for each restarted gateway), plus a new minute's worth for a
		// Redis restarted empty, plus each replica's own counts (a
		// minute's burst and the rate) while Redis did not answer; one
		// request of slack for the window's edges. A Redis restarted
		// empty gives a burst that the tenant spends over the phases
		// after it, so the bound is cumulative.
		win := p.end.Sub(p.start)
		rate := float64(faultAlphaRPM) * win.Minutes()
		lease := float64(max(2, faultAlphaRPM/600))
		switch {
		case p.killedGW != "":
			allowance += lease
		case p.redisDown > 0:
			allowance += faultAlphaRPM + faultGateways*(faultAlphaRPM+float64(faultAlphaRPM)*p.redisDown.Minutes())
		case p.stall > 0:
			allowance += faultGateways * (faultAlphaRPM + float64(faultAlphaRPM)*p.stall.Minutes())
		}
		// Its tokens against the same: the tokens-per-minute rate over
		// the time since the warm-up; what the other replicas admitted in
		// one sync round before each heard of it (a request each: the
		// tenant sends one at a time); while Redis did not answer, each
		// replica's own counts at the rate (its own GCRA, charged with
		// the others' spending, starts spent); a Redis restarted empty
		// gets the replicas' spending back, so nothing more.
		switch {
		case p.redisDown > 0:
			tokAllowance += faultGateways * faultAlphaTPM * p.redisDown.Minutes()
		case p.stall > 0:
			tokAllowance += faultGateways * faultAlphaTPM * p.stall.Minutes()
		}
		cumTokens += alphaTokens
		tokBound := faultAlphaTPM*p.end.Sub(f.phases[0].end).Minutes() + faultGateways*faultAlphaReqTokens + tokAllowance
		if float64(cumTokens) > tokBound {
			r.problems = append(r.problems, fmt.Sprintf("%s: tenant alpha spent %d tokens since the warm-up (%v), over the stated bound %.0f", p.name, cumTokens, p.end.Sub(f.phases[0].end).Round(time.Second), tokBound))
		}
		cumAdmitted += alphaAdmitted
		bound := float64(faultAlphaRPM)*p.end.Sub(f.phases[0].end).Minutes() + lease*faultGateways + 1 + allowance
		if float64(cumAdmitted) > bound {
			r.problems = append(r.problems, fmt.Sprintf("%s: tenant alpha admitted %d requests since the warm-up (%v), over the stated bound %.0f", p.name, cumAdmitted, p.end.Sub(f.phases[0].end).Round(time.Second), bound))
		}
		// Recovery: the first second from which every second of the
		// balancer's load has a normal share of successes; for Redis,
		// and the last degraded answer.
		rec := time.Duration(0)
		last := int(p.end.Sub(p.at).Seconds())
		for k := last; k >= 0; k-- {
			bk := buckets[k]
			if bk[1] > 0 && float64(bk[0]) < faultNormalRate*float64(bk[1]) {
				rec = time.Duration(k+1) * faultBucket
				break
			}
		}
		recovered := "at once (no second below normal)"
		if rec > 0 {
			recovered = fmt.Sprintf("%v (successes)", rec)
		}
		if degraded > 0 {
			var at []string
			for _, k := range slices.Sorted(maps.Keys(degradedAt)) {
				at = append(at, fmt.Sprintf("%+ds: %d", k, degradedAt[k]))
			}
			timelines = append(timelines, fmt.Sprintf("%s: %s", p.name, strings.Join(at, ", ")))
		}
		if p.stall > 0 || p.redisDown > 0 {
			// Enforced again after the last second of the run of
			// degraded answers the fault began (a lone one later is a
			// Redis call past its timeout on this busy machine, listed
			// below).
			k := 0
			for degradedAt[k] > 0 || degradedAt[k+1] > 0 {
				k++
			}
			if k == 0 {
				recovered += "; no answer degraded at the fault"
			} else {
				recovered += fmt.Sprintf("; limits counted in Redis again within %ds of the fault", k)
			}
		}
		if p.name == "reload rules with a split" {
			recovered += "; " + p.note[strings.LastIndex(p.note, "every gateway"):]
		}
		var chainsOK, chainsN, chainsDoc, sessOK, sessN int
		for _, pr := range p.probes {
			switch pr.kind {
			case "chain":
				chainsN++
				switch {
				case pr.ok:
					chainsOK++
				case pr.expectedLoss:
					chainsDoc++
				default:
					r.problems = append(r.problems, fmt.Sprintf("%s: chain %s made before the fault was not kept through %s: %s", p.name, pr.id, pr.via, pr.detail))
				}
			case "session":
				sessN++
				if pr.ok {
					sessOK++
				} else {
					r.problems = append(r.problems, fmt.Sprintf("%s: session %s made before the fault was not kept through %s: %s", p.name, pr.id, pr.via, pr.detail))
				}
			}
		}
		chains := fmt.Sprintf("%d/%d", chainsOK, chainsN)
		if chainsDoc > 0 {
			chains += fmt.Sprintf(" (%d on the killed replica: 404, as documented)", chainsDoc)
		}
		var whys []string
		for _, k := range sortedKeys(lossWhy) {
			whys = append(whys, fmt.Sprintf("%d %s", lossWhy[k], k))
		}
		lostText := strconv.Itoa(lost)
		if len(whys) > 0 {
			lostText += " (" + strings.Join(whys, "; ") + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %d | %v | %d (%.0f) | %d / %.0f | %d / %.0f | %d | %d: %d | %s | %d/%d | %s |\n", p.name, p.note, n, lostText, other, dialect,
			slowest.Round(time.Millisecond), alphaAdmitted, rate, cumAdmitted, bound, cumTokens, tokBound, degraded, retried, retriedOK, chains, sessOK, sessN, recovered)
		if p.problem != "" {
			r.problems = append(r.problems, p.name+": "+p.problem)
		}
		if other > 0 {
			r.problems = append(r.problems, fmt.Sprintf("%s: %d requests failed that were not in flight on a killed process", p.name, other))
		}
		if dialect > 0 {
			r.problems = append(r.problems, fmt.Sprintf("%s: %d error answers not in the client's dialect", p.name, dialect))
		}
		if slowest > faultCallBound {
			r.problems = append(r.problems, fmt.Sprintf("%s: a call took %v", p.name, slowest))
		}
	}
	// While Redis does not answer, a request is admitted within
	// access.redis.timeout: a degraded answer's request reached its
	// replica within that bound plus nginx's and the gateway's own work
	// (the replica's answer after that is no wait of the gateway's).
	var maxAdmit time.Duration
	nDegraded := 0
	for _, c := range calls {
		at, ok := received[c.id]
		if !c.degraded || !ok {
			continue
		}
		nDegraded++
		maxAdmit = max(maxAdmit, at.Sub(c.sent))
		if d := at.Sub(c.sent); d > faultSlowCall {
			r.problems = append(r.problems, fmt.Sprintf("degraded request %s reached its replica %v after it was sent, past access.redis.timeout (%v) and %v of the balancer's and the gateway's work", c.id, d.Round(time.Millisecond), faultRedisWait, faultSlowCall-faultRedisWait))
		}
	}
	total, okN := 0, 0
	for _, c := range calls {
		total++
		if c.ok || c.limited {
			okN++
		}
	}
	fmt.Fprintf(&b, "\nThe %d degraded requests reached their replica at most %v after they were sent (the bound checked: access.redis.timeout, %v, plus %v for nginx and the gateway on this busy machine).\n",
		nDegraded, maxAdmit.Round(time.Millisecond), faultRedisWait, faultSlowCall-faultRedisWait)
	fmt.Fprintf(&b, "\n%d calls in all, %d answered as they should (a success, or tenant alpha's 429 `rate_limit_exceeded` in OpenAI's shape with `Retry-After`).\n", total, okN)
	if len(timelines) > 0 {
		b.WriteString("\nAnswers marked `x-triage-degraded` (admitted on a gateway's own counts), by second from the fault:\n\n")
		for _, tl := range timelines {
			b.WriteString("- " + tl + "\n")
		}
	}
	if len(r.problems) > 0 {
		b.WriteString("\n## Problems\n\n")
		for _, p := range r.problems {
			b.WriteString("- " + p + "\n")
		}
	}
	if len(details) > 0 {
		fmt.Fprintf(&b, "\n## Failures not in flight on a killed process (%d; the first 30)\n\n", len(details))
		for _, d := range details[:min(len(details), 30)] {
			b.WriteString("- " + strings.ReplaceAll(d, "\n", " ") + "\n")
		}
	}
	verdict := "PASS"
	if len(r.problems) > 0 {
		verdict = "FAIL"
	}
	md := b.String()
	cmd := "make faults"
	if out := os.Getenv("FAULTS_OUT"); out != "" {
		cmd = "FAULTS_OUT=" + out + " make faults"
	}
	r.md = "# triage whole-deployment faults: " + verdict + "\n\n" +
		fmt.Sprintf("`%s`, %s, on the shared 2-core development machine.\n\n", cmd, f.phases[0].start.UTC().Format("2006-01-02 15:04 MST")) + md[verdictAt:]
	return r
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
