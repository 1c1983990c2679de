package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/sim"

	"github.com/triagegw/triage/internal/testenv"
)

// The gateway under replica faults, each injected by the simulator (the
// replicas `triage sim` runs): what the client sees, what becomes of the
// replica, and that nothing of one answer reaches another client.

func newSim(t testing.TB, o sim.Options) *replica {
	t.Helper()
	s, err := sim.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); srv.Close() })
	return &replica{Server: s, URL: srv.URL}
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// Every wire-level fault a replica can commit, then ordinary requests on
// the same replica: the fault's request gets what the table says, the
// connection it poisoned is never reused, and no later answer holds
// another response's bytes.
func TestReplicaWireFaults(t *testing.T) {
	for _, tc := range []struct {
		fault  string
		status int  // what the faulty request gets
		broken bool // its body breaks after the head
	}{
		{sim.FaultExtraResponse, 200, false},
		{sim.FaultExtraCRLF, 200, false},
		{sim.FaultNoContentBody, 204, false},
		{sim.FaultShortLength, 200, false},
		{sim.FaultLateResponse, 200, false},
		{sim.FaultSwitchProtocols, 502, false},
		{sim.FaultInformational, 502, false},
		{sim.FaultCloseAfterRead, 502, false},
		{sim.FaultResetAfterRead, 502, false},
		{sim.FaultGarbage, 502, false},
		{sim.FaultWrongContentType, 200, false},
		{sim.FaultBadChunk, 200, true},
		{sim.FaultNULHeader, 502, false},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			rep := newSim(t, sim.Options{Model: "m", Name: "r", Chunks: 3})
			cfg := newConfig("", poolCfg("p", "m", rep.URL))
			cfg.Pools[0].Breaker.Failures = 100 // keep the one replica in
			h := newHarness(t, cfg)
			req, _ := http.NewRequest("POST", h.URL+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header.Set("X-Sim-Fault", tc.fault)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%q)", resp.StatusCode, tc.status, b)
			}
			if broken := rerr != nil; broken != tc.broken {
				t.Fatalf("body read error %v, want broken=%v", rerr, tc.broken)
			}
			if tc.status == 502 {
				if _, _, code := openAIError(t, string(b)); code != "bad_gateway" {
					t.Fatalf("502 body %q", b)
				}
			}
			if tc.fault == sim.FaultWrongContentType && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
				t.Fatalf("wrong-content-type relayed as %q; the gateway relays what the replica says", resp.Header.Get("Content-Type"))
			}
			if strings.Contains(string(b), "LEAKED") {
				t.Fatalf("the faulty request's answer holds another response: %q", b)
			}
			if tc.fault == sim.FaultLateResponse {
				// The next request comes once the replica's unsolicited
				// answer is on the idle connection, not before (which
				// would only test a busy connection).
				testenv.Wait(t, func() bool { return rep.Stats().Late == 1 }, "late-response's unsolicited answer")
			}
			for i := range 5 {
				body := chatBody
				if i%2 == 1 {
					body = streamBody
				}
				r := h.do(t, "POST", "/v1/chat/completions", body)
				if r.status != 200 || strings.Contains(r.body, "LEAKED") || !strings.Contains(r.body, "chat.completion") {
					t.Fatalf("request %d after the fault: status %d body %q", i, r.status, r.body)
				}
			}
			if n := rep.Stats().Requests; n != 6 {
				t.Fatalf("replica received %d requests, want 6: none sent twice", n)
			}
		})
	}
}

// A replica that dies mid-stream: the client's stream is cut (not ended),
// the replica's in-flight count is released, and the breaker ejects it.
func TestReplicaDiesMidStream(t *testing.T) {
	rep := newSim(t, sim.Options{Model: "m", Name: "r", Chunks: 6})
	cfg := newConfig("", poolCfg("p", "m", rep.URL))
	cfg.Pools[0].Breaker.Failures = 1
	h := newHarness(t, cfg)
	req, _ := http.NewRequest("POST", h.URL+"/v1/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("X-Sim-Fault", sim.FaultDieMidStream)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || rerr == nil || strings.Contains(string(b), "[DONE]") {
		t.Fatalf("status %d, read error %v, body %q: want a 200 whose stream breaks before [DONE]", resp.StatusCode, rerr, b)
	}
	p := h.gw.snap.Load().byName["p"].pool
	testenv.Wait(t, func() bool { return p.Backends()[0].InFlight() == 0 }, "in-flight released")
	if p.Healthy(p.Backends()[0]) {
		t.Fatal("the replica that broke a stream is still in the pool")
	}
	if r := h.do(t, "POST", "/v1/chat/completions", chatBody); r.status != 503 {
		t.Fatalf("with the only replica ejected: %d %s, want 503", r.status, r.body)
	}
}

// A replica that hangs before its head: a streamed request goes to another
// replica after retry.first_byte_timeout, and the hung one sees its
// request cancelled.
func TestSlowReplicaRetriedElsewhere(t *testing.T) {
	slow := newSim(t, sim.Options{Model: "m", Name: "slow", Fault: sim.FaultHang, FaultRate: 1})
	fast := newSim(t, sim.Options{Model: "m", Name: "fast", Chunks: 2})
	pc := poolCfg("p", "m", slow.URL, fast.URL)
	pc.Retry.FirstByteTimeout = 150 * time.Millisecond
	// The slow replica is tried first: with equal weights the balancer
	// could pass it by six times in a row (one run in 64), and the test
	// would prove nothing.
	pc.Replicas[0].Weight = 10000
	pc.Breaker.Failures = 100 // and kept in after its timeouts
	h := newHarness(t, newConfig("", pc))
	for i := range 6 {
		r := h.do(t, "POST", "/v1/chat/completions", streamBody)
		if r.status != 200 || r.header.Get("X-Sim-Replica") != "fast" || !strings.Contains(r.body, "[DONE]") {
			t.Fatalf("request %d: %d from %q", i, r.status, r.header.Get("X-Sim-Replica"))
		}
	}
	if n := slow.Stats().Requests; n < 3 {
		t.Fatalf("%d of 6 requests tried the slow replica first; the test proves little", n)
	}
	testenv.Wait(t, func() bool { return slow.Stats().Active == 0 }, "the hung requests to end")
}

// Connection refused: the request goes to a live replica, and the dead one
// is ejected.
func TestConnectionRefusedRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	live := newSim(t, sim.Options{Model: "m", Name: "live"})
	h := newHarness(t, newConfig("", poolCfg("p", "m", dead, live.URL)))
	for i := range 20 {
		if r := h.do(t, "POST", "/v1/chat/completions", chatBody); r.status != 200 || r.header.Get("X-Sim-Replica") != "live" {
			t.Fatalf("request %d: %d %q", i, r.status, r.body)
		}
	}
	p := h.gw.snap.Load().byName["p"].pool
	if p.Healthy(p.Backends()[0]) {
		t.Fatal("the refusing replica is still in the pool")
	}
}

// A replica whose health flaps: requests keep succeeding on the pool.
func TestFlappingHealth(t *testing.T) {
	flappy := newSim(t, sim.Options{Model: "m", Name: "flappy"})
	steady := newSim(t, sim.Options{Model: "m", Name: "steady"})
	on := true
	pc := poolCfg("p", "m", flappy.URL, steady.URL)
	pc.Health = pool.Health{Enabled: &on, Interval: 10 * time.Millisecond, UnhealthyThreshold: 1}
	h := newHarness(t, newConfig("", pc))
	p := h.gw.snap.Load().byName["p"].pool
	b := p.Backends()[0] // flappy
	// Each flip waits until the pool's checks have seen the last one:
	// flappy goes down and up as fast as the checks follow, and every
	// flip is one the pool acted on.
	const flips = 20
	var flipped atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		defer stop()
		for ok := false; flipped.Load() < flips; ok = !ok {
			flappy.SetHealthy(ok)
			want := map[bool]pool.State{true: pool.StateHealthy, false: pool.StateUnhealthy}[ok]
			if last, seen := testenv.Poll(testenv.WaitTimeout, func() (bool, string) {
				st := p.State(b)
				return st == want, st.String()
			}); !seen {
				t.Errorf("flip %d: flappy %s in the pool, want %s", flipped.Load()+1, last, want)
				return
			}
			flipped.Add(1)
		}
	})
	defer func() { stop(); wg.Wait() }()
	n := 0
	for ; ctx.Err() == nil; n++ {
		if r := h.do(t, "POST", "/v1/chat/completions", chatBody); r.status != 200 {
			t.Fatalf("request %d: %d %s\n%s", n, r.status, r.body, h.log.String())
		}
	}
	wg.Wait()
	if flappy.Stats().Requests == 0 || steady.Stats().Requests == 0 {
		t.Fatalf("flappy %d, steady %d of %d requests over %d flips: traffic should reach both while flappy is up",
			flappy.Stats().Requests, steady.Stats().Requests, n, flipped.Load())
	}
}

// Clients leaving at random points of their requests and streams: every
// replica's in-flight count and every hold on the gateway returns to zero,
// and the gateway goes on answering.
func TestClientsLeavingAtRandomPoints(t *testing.T) {
	rep := newSim(t, sim.Options{Model: "m", Name: "r", Latency: 5 * time.Millisecond, Chunks: 20, ChunkDelay: 2 * time.Millisecond})
	h := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	baseline := runtime.NumGoroutine()
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	for i := range 80 {
		after := time.Duration(rng.IntN(60)) * time.Millisecond
		body := chatBody
		if i%2 == 0 {
			body = streamBody
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), after)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", h.URL+"/v1/chat/completions", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	p := h.gw.snap.Load().byName["p"].pool
	testenv.Wait(t, func() bool { return p.Backends()[0].InFlight() == 0 && rep.Stats().Active == 0 }, "in-flight and replica work to drain")
	if r := h.do(t, "POST", "/v1/chat/completions", chatBody); r.status != 200 {
		t.Fatalf("after the departures: %d", r.status)
	}
	// Kept-alive connections are not leaks: close them, then count.
	http.DefaultClient.CloseIdleConnections()
	h.gw.tr.CloseIdle()
	testenv.Wait(t, func() bool { return runtime.NumGoroutine() <= baseline+5 }, fmt.Sprintf("goroutines back near %d", baseline))
	if rep.Stats().Cancelled == 0 {
		t.Fatal("no request was cancelled at the replica: departures did not reach it")
	}
}

// Tier 2 failing or past its budget never fails a request: it is routed
// by tier 1 or the default, and says why.
func TestTier2FaultsNeverFailARequest(t *testing.T) {
	gen := newSim(t, sim.Options{Model: "llama", Name: "gen"})
	legal := newSim(t, sim.Options{Model: "saul", Name: "legal"})
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("legal", "saul", legal.URL))
	tier1 := &classifiertest.Fixed{Default: classifier.Scored{Class: "law", Score: 0.7}} // below law's floor: escalates
	rulesBody := `alias: auto
floors: {tier1: 0.8, tier2: 0.5}
routes:
  - {name: legal, when: {class: law}, pool: legal}
default: general
tier2: {enabled: true, budget: 30ms}
`
	release := make(chan struct{}) // the stuck Runs end with the test
	defer close(release)
	for _, tc := range []struct {
		name   string
		tier2  func() (classifier.Classifier, error)
		reason string
	}{
		{"failing run", func() (classifier.Classifier, error) { return failing{}, nil }, rules.ReasonTier2Error},
		{"failed load", func() (classifier.Classifier, error) { return nil, errors.New("model.onnx: sha256 mismatch") }, rules.ReasonTier2Unavailable},
		{"past the budget", func() (classifier.Classifier, error) { return stuck{release}, nil }, rules.ReasonTier2Timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(p, []byte(rulesBody), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := rules.ParseFile(p)
			if err != nil {
				t.Fatal(err)
			}
			classes := []string{"law", "other"}
			head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, 2), B: make([]float32, 2)}
			heads := &classifier.Heads{Format: 1, Name: "t", Version: "1", Classes: classes, Dir: "/h",
				Tier1: &classifier.Tier{Head: head}, Tier2: &classifier.Tier{Head: head}}
			set, err := rules.Compile(f, rules.Env{Pools: cfg.PoolNames(), Heads: heads, Tier1: tier1, Tier2: tc.tier2})
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, cfg)
			if err := h.gw.Apply(cfg, set); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				r := h.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"my lease"}]}`)
				if r.status != 200 || r.header.Get("X-Triage-Reason") != tc.reason {
					t.Fatalf("status %d reason %q, want 200 and %q", r.status, r.header.Get("X-Triage-Reason"), tc.reason)
				}
			}
		})
	}
}

type failing struct{}

func (failing) Classify(context.Context, string, *classifier.Result) error {
	return errors.New("onnx: run failed")
}

// stuck is a Run that ends when released, whatever its context says (a
// Run cannot be interrupted): past any budget. Should the budget not hold,
// the request still ends, later, and the test fails on its reason.
type stuck struct{ release <-chan struct{} }

func (s stuck) Classify(context.Context, string, *classifier.Result) error {
	select {
	case <-s.release:
	case <-time.After(testenv.WaitTimeout):
	}
	return nil
}
