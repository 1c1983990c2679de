package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/router/routertest"
	"github.com/triagegw/triage/sim"
)

// replica is a sim server on a real socket.
type replica struct {
	*sim.Server
	URL string
}

func newReplica(t testing.TB, model, name string) *replica {
	t.Helper()
	s, err := sim.New(sim.Options{Model: model, Name: name, Chunks: 4})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &replica{Server: s, URL: srv.URL}
}

// harness is a gateway serving on a real socket, with its health checks running.
type harness struct {
	gw  *Gateway
	URL string
	log *testenv.Buffer
}

func poolCfg(name, model string, urls ...string) pool.Config {
	off := false
	pc := pool.Config{Name: name, Model: model, Health: pool.Health{Enabled: &off}}
	for _, u := range urls {
		pc.Replicas = append(pc.Replicas, pool.Replica{URL: u})
	}
	return pc
}

func newConfig(def string, pools ...pool.Config) *config.Config {
	c := &config.Config{DefaultPool: def, Pools: pools}
	c.SetDefaults()
	return c
}

func newHarness(t testing.TB, cfg *config.Config, opts ...pool.Option) *harness {
	t.Helper()
	return newWrappedHarness(t, cfg, nil, opts...)
}

// newWrappedHarness is newHarness with the server's handler wrapped by
// wrap (when not nil), for a test to watch requests as the gateway gets
// them.
func newWrappedHarness(t testing.TB, cfg *config.Config, wrap func(http.Handler) http.Handler, opts ...pool.Option) *harness {
	t.Helper()
	logs := &testenv.Buffer{}
	gw, err := New(cfg, nil, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)), AccessLog: logs, PoolOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{gw: gw, URL: "http://" + routertest.Serve(t, gw, routertest.Options{Wrap: wrap}), log: logs}
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (h *harness) do(t testing.TB, method, path, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, h.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1]) // a name given twice is sent twice
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// openAIError decodes an OpenAI-shaped error body, failing the test if the
// body is not one.
func openAIError(t testing.TB, body string) (msg, typ, code string) {
	t.Helper()
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("body is not an OpenAI error: %q", body)
	}
	if e.Error.Code != nil {
		code = *e.Error.Code
	}
	return e.Error.Message, e.Error.Type, code
}

func TestRoutesByModelAliasAndDefault(t *testing.T) {
	gen := newReplica(t, "llama-3.1-8b", "gen-0")
	code := newReplica(t, "qwen-coder", "code-0")
	c1 := poolCfg("general", "llama-3.1-8b", gen.URL)
	c1.Aliases = []string{"gpt-4o-mini", "my/slashed-alias"}
	h := newHarness(t, newConfig("general", c1, poolCfg("code", "qwen-coder", code.URL)))

	for _, tc := range []struct {
		model, wantReplica, wantUpstreamModel string
	}{
		{"qwen-coder", "code-0", "qwen-coder"},
		{"llama-3.1-8b", "gen-0", "llama-3.1-8b"},
		{"gpt-4o-mini", "gen-0", "llama-3.1-8b"},      // alias: spliced to the pool's model
		{"my/slashed-alias", "gen-0", "llama-3.1-8b"}, // names may carry slashes
		{"gpt-\\u0034o-mini", "gen-0", "llama-3.1-8b"},
		{"never-heard-of-it", "gen-0", "llama-3.1-8b"}, // the default pool
	} {
		body := `{"model":"` + tc.model + `","messages":[{"role":"user","content":"hi"}],"temperature":0.5}`
		r := h.do(t, "POST", "/v1/chat/completions", body)
		if r.status != 200 || r.header.Get("X-Sim-Replica") != tc.wantReplica {
			t.Fatalf("model %q: status %d replica %q, want 200 from %s (%s)", tc.model, r.status, r.header.Get("X-Sim-Replica"), tc.wantReplica, r.body)
		}
		if r.header.Get("X-Request-Id") == "" {
			t.Errorf("model %q: no X-Request-Id on the response", tc.model)
		}
		var rep *replica = gen
		if tc.wantReplica == "code-0" {
			rep = code
		}
		up := rep.LastRequest()
		want := strings.Replace(body, `"`+tc.model+`"`, `"`+tc.wantUpstreamModel+`"`, 1)
		if string(up.Body) != want {
			t.Errorf("model %q: upstream got %s, want %s (only the model may change)", tc.model, up.Body, want)
		}
	}

	// No default pool: an unknown model is a 404.
	h2 := newHarness(t, newConfig("", poolCfg("code", "qwen-coder", code.URL)))
	r := h2.do(t, "POST", "/v1/chat/completions", `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`)
	if _, _, c := openAIError(t, r.body); r.status != 404 || c != "model_not_found" {
		t.Fatalf("unknown model without a default: status %d code %q, want 404 model_not_found", r.status, c)
	}
}

func TestModelsEndpoints(t *testing.T) {
	rep := newReplica(t, "llama", "r")
	pc := poolCfg("general", "llama", rep.URL)
	pc.Aliases = []string{"gpt-4o-mini"}
	h := newHarness(t, newConfig("", pc))
	r := h.do(t, "GET", "/v1/models", "")
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, Root string
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || list.Object != "list" || len(list.Data) != 2 {
		t.Fatalf("/v1/models = %d %s", r.status, r.body)
	}
	if list.Data[0].ID != "gpt-4o-mini" || list.Data[0].Root != "llama" || list.Data[1].ID != "llama" || list.Data[0].Object != "model" {
		t.Fatalf("/v1/models data = %+v", list.Data)
	}
	if r := h.do(t, "GET", "/v1/models/gpt-4o-mini", ""); r.status != 200 || !strings.Contains(r.body, `"id":"gpt-4o-mini"`) {
		t.Fatalf("/v1/models/gpt-4o-mini = %d %s", r.status, r.body)
	}
	if r := h.do(t, "GET", "/v1/models/nope", ""); r.status != 404 {
		t.Fatalf("/v1/models/nope = %d %s", r.status, r.body)
	}
}

func TestBadInputGetsOpenAIErrorAndNeverReachesUpstream(t *testing.T) {
	rep := newReplica(t, "m", "r")
	cfg := newConfig("", poolCfg("p", "m", rep.URL))
	cfg.Limits.MaxBodyBytes = 1024
	h := newHarness(t, cfg)
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		chunked                  bool
		status                   int
		code                     string
	}{
		{"malformed", "POST", "/v1/chat/completions", `{"model":"m",`, false, 400, "invalid_json"},
		{"not an object", "POST", "/v1/chat/completions", `["m"]`, false, 400, "invalid_request"},
		{"empty body", "POST", "/v1/chat/completions", ``, false, 400, "invalid_request"},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, false, 400, "missing_model"},
		{"model not a string", "POST", "/v1/completions", `{"model":["m"]}`, false, 400, "invalid_type"},
		{"stream not a bool", "POST", "/v1/chat/completions", `{"model":"m","stream":1}`, false, 400, "invalid_type"},
		{"messages not an array", "POST", "/v1/chat/completions", `{"model":"m","messages":"hi"}`, false, 400, "invalid_type"},
		{"too large", "POST", "/v1/chat/completions", big, false, 413, "request_too_large"},
		{"too large, chunked", "POST", "/v1/chat/completions", big, true, 413, "request_too_large"},
		{"unknown path", "POST", "/v1/nothing", `{}`, false, 404, "unknown_url"},
		{"wrong method", "GET", "/v1/chat/completions", ``, false, 405, "method_not_allowed"},
		{"unknown model, no default", "POST", "/v1/embeddings", `{"model":"x","input":"a"}`, false, 404, "model_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rd io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				rd = io.MultiReader(rd) // unknown length: sent chunked
			}
			req, _ := http.NewRequest(tc.method, h.URL+tc.path, rd)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, b)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if _, _, code := openAIError(t, string(b)); code != tc.code {
				t.Fatalf("code %q, want %q (%s)", code, tc.code, b)
			}
		})
	}
	if n := rep.Stats().Requests; n != 0 {
		t.Fatalf("bad input reached the upstream %d times", n)
	}
	// And the gateway still serves good requests afterwards.
	if r := h.do(t, "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`); r.status != 200 {
		t.Fatalf("good request after bad ones: %d %s", r.status, r.body)
	}
}

func TestStreamingRelayedUntouched(t *testing.T) {
	rep := newReplica(t, "m", "r")
	h := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	// The same stream straight from the replica and through the gateway.
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	direct, err := http.Post(rep.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := io.ReadAll(direct.Body)
	direct.Body.Close()
	r := h.do(t, "POST", "/v1/chat/completions", body)
	// ids and timestamps differ per response; the framing and events must not.
	norm := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if i := strings.Index(l, `"created":`); i >= 0 {
				l = l[:i]
			}
			out = append(out, strings.Replace(l, "chatcmpl-2", "chatcmpl-1", 1))
		}
		return strings.Join(out, "\n")
	}
	if r.status != 200 || norm(r.body) != norm(string(want)) {
		t.Fatalf("stream through the gateway differs from the replica's:\n%s\nvs\n%s", r.body, want)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q", ct)
	}
}

func TestMidStreamFailureLooksFailed(t *testing.T) {
	rep := newReplica(t, "m", "r")
	h := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	req, _ := http.NewRequest("POST", h.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Sim-Drop-After", "2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || strings.Contains(string(b), "[DONE]") {
		t.Fatalf("a stream cut by the upstream ended cleanly for the client (err %v): %q", err, b)
	}
	if !strings.Contains(string(b), "data: ") {
		t.Fatalf("the events before the cut were not relayed: %q", b)
	}
	testenv.Wait(t, func() bool { return strings.Contains(h.log.String(), "response aborted mid-stream") }, "the abort to be logged")
	if m := scrape(t, h); !strings.Contains(m, `triage_responses_aborted_total{pool="p"} 1`) {
		t.Fatalf("abort not counted:\n%s", grep(m, "aborted"))
	}
}

func TestClientCancelReachesUpstream(t *testing.T) {
	rep := newReplica(t, "m", "r")
	h := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", h.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Sim-Chunks", "100")
	req.Header.Set("X-Sim-Chunk-Delay", "50ms")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	testenv.Wait(t, func() bool { return rep.Stats().Cancelled == 1 }, "the replica to see the client leave")
	testenv.Wait(t, func() bool { return strings.Contains(h.log.String(), `"status":499`) }, "a 499 in the access log")
}

func TestAccessLogHasDecisionFieldsAndNoPrompt(t *testing.T) {
	rep := newReplica(t, "m", "r")
	h := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	secret := "my landlord kept the deposit SECRET-PROMPT-TEXT"
	r := h.do(t, "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"`+secret+`"}]}`, "X-Request-Id", "client-id-42")
	if r.status != 200 || r.header.Get("X-Request-Id") != "client-id-42" {
		t.Fatalf("status %d, X-Request-Id %q", r.status, r.header.Get("X-Request-Id"))
	}
	if got := rep.LastRequest().Header.Get("X-Request-Id"); got != "client-id-42" {
		t.Fatalf("upstream X-Request-Id = %q", got)
	}
	var line map[string]any
	testenv.Wait(t, func() bool {
		for _, l := range strings.Split(h.log.String(), "\n") {
			if strings.Contains(l, `"msg":"request"`) && json.Unmarshal([]byte(l), &line) == nil {
				return true
			}
		}
		return false
	}, "an access log line")
	for _, k := range []string{"request_id", "model", "pool", "backend", "status", "ttfb_ms", "duration_ms", "bytes_out"} {
		if _, ok := line[k]; !ok {
			t.Errorf("access log lacks %q: %v", k, line)
		}
	}
	if line["request_id"] != "client-id-42" || line["pool"] != "p" || line["backend"] != rep.URL || line["status"] != float64(200) || line["reason"] != "explicit_model" {
		t.Errorf("access log = %v", line)
	}
	if strings.Contains(h.log.String(), "SECRET-PROMPT-TEXT") {
		t.Fatal("prompt text reached the log")
	}
}

func TestMetrics(t *testing.T) {
	rep := newReplica(t, "m", "r")
	h := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	h.do(t, "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	h.do(t, "POST", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	h.do(t, "POST", "/v1/chat/completions", `{"model":`)
	m := scrape(t, h)
	for _, want := range []string{
		`triage_requests_total{code="200",pool="p"} 2`,
		`triage_requests_total{code="400",pool="none"} 1`,
		`triage_request_duration_seconds_count{pool="p"} 2`,
		`triage_ttfb_seconds_count{pool="p"} 2`,
		`triage_upstream_inflight{backend="` + rep.URL + `",pool="p"} 0`,
		`triage_backend_healthy{backend="` + rep.URL + `",pool="p"} 1`,
		`triage_config_reloads_total{result="invalid"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func scrape(t testing.TB, h *harness) string {
	t.Helper()
	r := h.do(t, "GET", "/metrics", "")
	if r.status != 200 {
		t.Fatalf("/metrics: %d", r.status)
	}
	return r.body
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestReadyz(t *testing.T) {
	def := newReplica(t, "m", "def")
	other := newReplica(t, "o", "other")
	on := true
	pc := poolCfg("p", "m", def.URL)
	pc.Health = pool.Health{Enabled: &on, Interval: 20 * time.Millisecond, UnhealthyThreshold: 1}
	pc2 := poolCfg("o", "o", other.URL)
	h := newHarness(t, newConfig("p", pc, pc2))
	ready := func() (int, string) {
		r := h.do(t, "GET", "/readyz", "")
		return r.status, r.body
	}
	testenv.Wait(t, func() bool { s, _ := ready(); return s == 200 }, "readyz 200")
	if _, body := ready(); !strings.Contains(body, `"config_version":1`) {
		t.Fatalf("readyz body %s lacks the config version", body)
	}
	def.SetHealthy(false) // the default pool's only replica fails its checks
	testenv.Wait(t, func() bool { s, _ := ready(); return s == 503 }, "readyz 503 with the default pool down")
	r := h.do(t, "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if _, _, c := openAIError(t, r.body); r.status != 503 || c != "no_healthy_upstream" {
		t.Fatalf("request to a pool with no healthy replica: %d %s", r.status, r.body)
	}
	// A balancer that keeps gateways whose replicas are down asks so.
	if r := h.do(t, "GET", "/readyz?upstreams=ignore", ""); r.status != 200 {
		t.Fatalf("readyz?upstreams=ignore with the default pool down = %d %s", r.status, r.body)
	}
	def.SetHealthy(true)
	testenv.Wait(t, func() bool { s, _ := ready(); return s == 200 }, "readyz 200 after recovery")
	h.gw.Drain()
	if s, body := ready(); s != 503 || !strings.Contains(body, "draining") {
		t.Fatalf("readyz while draining = %d %s", s, body)
	}
	if r := h.do(t, "GET", "/readyz?upstreams=ignore", ""); r.status != 503 {
		t.Fatalf("readyz?upstreams=ignore while draining = %d", r.status)
	}
	if r := h.do(t, "GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("healthz = %d", r.status)
	}
}

// flaky is an upstream whose failures a test switches on and off.
type flaky struct {
	mu   sync.Mutex
	fail bool
	hits int
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	f.hits++
	fail := f.fail
	f.mu.Unlock()
	if fail {
		w.WriteHeader(500)
		fmt.Fprint(w, `{"error":{"message":"boom","type":"server_error"}}`)
		return
	}
	w.Header().Set("X-Replica", "flaky")
	fmt.Fprint(w, `{"ok":true}`)
}

func (f *flaky) set(fail bool) { f.mu.Lock(); f.fail = fail; f.mu.Unlock() }
func (f *flaky) count() int    { f.mu.Lock(); defer f.mu.Unlock(); return f.hits }

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestPassiveEjectionAndRecovery(t *testing.T) {
	f := &flaky{fail: true}
	bad := httptest.NewServer(f)
	defer bad.Close()
	good := newReplica(t, "m", "good")
	clk := &fakeClock{t: time.Unix(1000, 0)}
	pc := poolCfg("p", "m", bad.URL, good.URL)
	pc.Replicas[0].Weight = 1000 // the flaky replica is preferred while available
	pc.Retry.Attempts = 1        // so its 500s reach the client and count
	pc.Breaker = pool.Breaker{Failures: 3, Cooldown: 30 * time.Second}
	h := newHarness(t, newConfig("", pc), pool.WithClock(clk.Now))
	send := func() reply {
		return h.do(t, "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	}

	// The weighted draw sends nearly everything (1000:1) to the flaky
	// replica; its third 500 in a row ejects it, and from then on the good
	// replica serves everything.
	fails := 0
	for i := 0; fails < 3; i++ {
		if i == 20 {
			t.Fatalf("20 requests and only %d failures: the flaky replica is not preferred", fails)
		}
		if r := send(); r.status == 500 {
			fails++
		} else if r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
	}
	for range 10 {
		if r := send(); r.status != 200 || r.header.Get("X-Sim-Replica") != "good" {
			t.Fatalf("after ejection: %d from %q, want every request on the good replica", r.status, r.header.Get("X-Sim-Replica"))
		}
	}
	if f.count() != 3 {
		t.Fatalf("the flaky replica took %d requests; ejection after 3 failures should stop it there", f.count())
	}
	m := scrape(t, h)
	if !strings.Contains(m, `triage_backend_healthy{backend="`+bad.URL+`",pool="p"} 0`) {
		t.Fatalf("ejected replica not reported unhealthy:\n%s", grep(m, "healthy"))
	}
	// Cooldown over, the replica has recovered: a probe reaches it, succeeds,
	// and it takes its share again.
	f.set(false)
	clk.Advance(30 * time.Second)
	probed := false
	for range 10 {
		if r := send(); r.status != 200 {
			t.Fatalf("after the cooldown: status %d", r.status)
		} else if r.header.Get("X-Replica") == "flaky" {
			probed = true
			break
		}
	}
	if !probed {
		t.Fatal("no request probed the replica after its cooldown")
	}
	back := 0
	for range 20 {
		if r := send(); r.header.Get("X-Replica") == "flaky" {
			back++
		}
	}
	if back < 15 {
		t.Fatalf("recovered replica took %d of 20 requests, want nearly all (weight 1000:1)", back)
	}
}

func TestRetryGoesToAnotherReplica(t *testing.T) {
	var busyHits atomic.Int64
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		busyHits.Add(1)
		w.WriteHeader(503)
	}))
	defer bad.Close()
	good := newReplica(t, "m", "good")
	pc := poolCfg("p", "m", bad.URL, good.URL)
	pc.Replicas[0].Weight = 1000 // the busy replica is nearly always tried first
	pc.Breaker.Failures = 1000
	h := newHarness(t, newConfig("", pc))
	for range 5 {
		r := h.do(t, "POST", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		if r.status != 200 || r.header.Get("X-Sim-Replica") != "good" || !strings.HasSuffix(r.body, "data: [DONE]\n\n") {
			t.Fatalf("status %d from %q: a 503 before any byte must be retried elsewhere", r.status, r.header.Get("X-Sim-Replica"))
		}
	}
	// Every 503 was retried once: as many retries as busy answers.
	want := fmt.Sprintf(`triage_upstream_retries_total{pool="p"} %d`, busyHits.Load())
	if m := scrape(t, h); busyHits.Load() == 0 || !strings.Contains(m, want) {
		t.Fatalf("%d busy answers; retries not counted as such (want %s):\n%s", busyHits.Load(), want, grep(m, "retries"))
	}
}

func TestGatedStreamThroughGateway(t *testing.T) {
	gate := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select { // chunk 2 waits until the client has seen chunk 1
		case <-gate:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	h := newHarness(t, newConfig("", poolCfg("p", "m", up.URL)))
	req, _ := http.NewRequest("POST", h.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() { l, _ := br.ReadString('\n'); got <- l }()
	select {
	case l := <-got:
		if l != "data: {\"n\":1}\n" {
			t.Fatalf("first line %q", l)
		}
	case <-time.After(5 * time.Second):
		close(gate)
		t.Fatal("chunk 1 did not reach the client while the upstream held chunk 2")
	}
	close(gate)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest %q err %v", rest, err)
	}
}

// A client that leaves while the replica has not answered yet (a long
// non-streamed generation) has its upstream request cut: the h1 server's
// context moves the upstream connection's deadline, no AfterFunc needed.
func TestClientCancelBeforeTheHeadReachesUpstream(t *testing.T) {
	rep := newReplica(t, "m", "r")
	h := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", h.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Sim-Latency", "3s")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testenv.Wait(t, func() bool { return rep.Stats().Active == 1 }, "the replica to start")
	start := time.Now()
	cancel()
	<-errc
	testenv.Wait(t, func() bool { return strings.Contains(h.log.String(), `"status":499`) }, "a 499 in the access log")
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the gateway waited %v for a replica whose client left", d)
	}
	testenv.Wait(t, func() bool { return rep.Stats().Cancelled == 1 }, "the replica to see the request cut")
}
