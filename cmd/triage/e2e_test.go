package main

// End-to-end tests of the real binary: TestMain builds triage once, and the
// tests run "triage sim" replicas and "triage serve" gateways as child
// processes on free loopback ports, talking to them over HTTP and signals.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// triageBin is the binary built by TestMain.
var triageBin string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	// A run of the benchmarks alone (-test.run '^$') needs no binary: none
	// of them starts one. bench/icount.sh counts them under valgrind, where
	// the build's exit signal can abort the count (a callgrind assertion).
	flag.Parse()
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "^$" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "triage-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "triage")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		// Under "go test -race" the children run with the race detector
		// too, so the gateway's concurrency is checked end to end.
		args = append(args, "-race")
	}
	if tags := buildSetting("-tags"); tags != "" {
		args = append(args, "-tags", tags) // "-tags ort": the children have tier 2 too
	}
	build := exec.CommandContext(ctx, "go", append(args, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %s . failed: %v\n%s", strings.Join(args, " "), err, out)
		return 1
	}
	triageBin = bin
	return m.Run()
}

// buildSetting is one of this test binary's build settings ("" if unset).
func buildSetting(key string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// skipHeavyUnderRace skips a test that runs a command in this process over
// a whole dataset when the race detector is on: minutes there, where it
// takes seconds without. make test runs every test whose name holds CLI
// again without the race detector (beside the README's commands), so each
// still runs on make test's path; TestHeavyTestsRunWithoutRace holds the
// names to that. The commands' concurrency is checked under -race by the
// evaluation package's own tests.
func skipHeavyUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled() {
		t.Skip("a whole-dataset run: make test runs the TestXxxCLI tests without -race")
	}
}

// raceEnabled reports whether this test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// ---- child processes ----

// childEnv is the test's environment without TRIAGE_* variables, which
// would override the configs the tests write. Race-enabled children sleep
// 1s at exit by default; that would blur the exit timings measured here.
func childEnv() []string {
	var env []string
	gorace := false
	for _, kv := range os.Environ() {
		gorace = gorace || strings.HasPrefix(kv, "GORACE=")
		if !strings.HasPrefix(kv, "TRIAGE_") {
			env = append(env, kv)
		}
	}
	if !gorace {
		env = append(env, "GORACE=atexit_sleep_ms=50")
	}
	return env
}

// proc is a running triage child process.
type proc struct {
	name   string
	addr   string // host:port it listens on
	cmd    *exec.Cmd
	stdout testenv.Buffer
	stderr testenv.Buffer
	done   chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result, set before done is closed
}

// start runs triage with args. The process is killed in t.Cleanup if still
// running, and its stderr is printed if the test failed.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startIn(t, "", name, args...)
}

// startIn is start in the working directory dir ("": the test's).
func startIn(t *testing.T, dir, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(triageBin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = childEnv()
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s (triage %s): %v", name, strings.Join(args, " "), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				t.Errorf("%s (pid %d) did not exit within 5s of SIGKILL", name, p.cmd.Process.Pid)
			}
		}
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector reported a data race (see its stderr below)", name)
		}
		if t.Failed() {
			t.Logf("---- %s (triage %s) stderr ----\n%s", name, strings.Join(args, " "), p.stderr.String())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to d for the process to exit and returns its exit code
// (-1 when killed by a signal).
func (p *proc) waitExit(t *testing.T, d time.Duration) int {
	t.Helper()
	t0 := time.Now()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(max(d, 0)):
		if p.exited() {
			return p.cmd.ProcessState.ExitCode()
		}
		t.Fatalf("%s did not exit within %v", p.name, time.Since(t0).Round(time.Millisecond))
		return 0
	}
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("sending %v to %s: %v", sig, p.name, err)
	}
}

func (p *proc) url(path string) string { return "http://" + p.addr + path }

// freeAddr returns a loopback address with testenv.FreePort's port.
func freeAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
}

// errPortTaken reports that a child lost the race for its free port.
var errPortTaken = errors.New("port taken")

// waitReady polls GET path on p until it answers 200, p exits, or timeout.
func (p *proc) waitReady(path string, timeout time.Duration) error {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return p.waitOK(c, p.url(path), timeout)
}

// waitOK polls GET url until it answers 200, within timeout; it stops
// early when p exits (errPortTaken when its port was taken).
func (p *proc) waitOK(c *http.Client, url string, timeout time.Duration) error {
	var exited error
	last, ok := testenv.Poll(timeout, func() (bool, string) {
		if p.exited() {
			if strings.Contains(p.stderr.String(), "address already in use") {
				exited = errPortTaken
			} else {
				exited = fmt.Errorf("%s exited (%v) before GET %s answered 200", p.name, p.err, url)
			}
			return true, ""
		}
		resp, err := c.Get(url)
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, b)
	})
	switch {
	case exited != nil:
		return exited
	case !ok:
		return fmt.Errorf("%s: GET %s did not answer 200 within %v; last: %s", p.name, url, timeout, last)
	}
	return nil
}

// startReady starts triage with args plus "--listen ADDR" on a free port
// and waits for GET readyPath to answer 200, retrying on a new port if the
// one picked was taken meanwhile.
func startReady(t *testing.T, name, readyPath string, args ...string) *proc {
	t.Helper()
	for range 3 {
		addr := freeAddr(t)
		p := start(t, name, append(slices.Clone(args), "--listen", addr)...)
		p.addr = addr
		err := p.waitReady(readyPath, 10*time.Second)
		if err == nil {
			return p
		}
		if !errors.Is(err, errPortTaken) {
			t.Fatalf("%v\nstderr:\n%s", err, p.stderr.String())
		}
	}
	t.Fatalf("%s: could not get a free port in 3 tries", name)
	return nil
}

// startSim runs a simulated replica serving model, named name (its
// X-Sim-Replica header), and waits for its /health.
func startSim(t *testing.T, model, name string, extra ...string) *proc {
	t.Helper()
	return startReady(t, "sim "+name, "/health", append([]string{"sim", "--model", model, "--name", name}, extra...)...)
}

// startGateway runs "triage serve --config cfgPath" and waits for /readyz.
func startGateway(t *testing.T, cfgPath string) *proc {
	t.Helper()
	return startReady(t, "gateway", "/readyz", "serve", "--config", cfgPath)
}

// ---- configs ----

type poolSpec struct {
	name, model string
	aliases     []string
	replicas    []*proc
}

// gatewayConfig renders a config with the given pools, fast health checks
// and the given shutdown timeout (empty: the default).
func gatewayConfig(shutdown string, pools ...poolSpec) string {
	var b strings.Builder
	if shutdown != "" {
		fmt.Fprintf(&b, "server:\n  shutdown_timeout: %s\n", shutdown)
	}
	b.WriteString("pools:\n")
	for _, p := range pools {
		fmt.Fprintf(&b, "  - name: %s\n    model: %s\n    health: {interval: 200ms}\n", p.name, p.model)
		if len(p.aliases) > 0 {
			fmt.Fprintf(&b, "    aliases: [%s]\n", strings.Join(p.aliases, ", "))
		}
		if len(p.replicas) == 0 {
			b.WriteString("    replicas: []\n")
			continue
		}
		b.WriteString("    replicas:\n")
		for _, r := range p.replicas {
			fmt.Fprintf(&b, "      - url: http://%s\n", r.addr)
		}
	}
	return b.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}

// replaceFile writes content to a temp file next to path and renames it
// over path, as config management tools do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("renaming %s over %s: %v", tmp, path, err)
	}
}

// ---- HTTP helpers ----

func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// chatRequest builds a POST /v1/chat/completions for model with headers.
func chatRequest(t *testing.T, ctx context.Context, base, model string, stream bool, header map[string]string) *http.Request {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"model":    model,
		"stream":   stream,
		"messages": []map[string]string{{"role": "user", "content": "say something"}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("building request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return req
}

// reply is a response read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// chat sends a non-streamed chat completion and reads the whole answer.
func chat(t *testing.T, c *http.Client, base, model string, header map[string]string) (reply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Do(chatRequest(t, ctx, base, model, false, header))
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// mustChat is chat that fails the test on a transport error or a status
// other than want.
func mustChat(t *testing.T, c *http.Client, base, model string, want int) reply {
	t.Helper()
	r, err := chat(t, c, base, model, nil)
	if err != nil {
		t.Fatalf("POST /v1/chat/completions model %q: %v", model, err)
	}
	if r.status != want {
		t.Fatalf("POST /v1/chat/completions model %q: status %d, want %d; body: %s", model, r.status, want, r.body)
	}
	return r
}

func get(t *testing.T, c *http.Client, url string) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// configVersion reads config_version from the gateway's /readyz.
func configVersion(t *testing.T, c *http.Client, gw *proc) uint64 {
	t.Helper()
	r := get(t, c, gw.url("/readyz"))
	var v struct {
		Status        string  `json:"status"`
		ConfigVersion *uint64 `json:"config_version"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil || v.ConfigVersion == nil {
		t.Fatalf("GET /readyz: want JSON with config_version, got %d %s (%v)", r.status, r.body, err)
	}
	return *v.ConfigVersion
}

// metricValue finds the sample of name whose labels include all of labels
// in a Prometheus text exposition (with no labels, an unlabelled sample
// too).
func metricValue(exposition, name string, labels map[string]string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(exposition))
	for sc.Scan() {
		line := sc.Text()
		if len(labels) == 0 && strings.HasPrefix(line, name+" ") {
			line = name + "{}" + line[len(name):]
		}
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		end := strings.LastIndex(line, "}")
		if end < 0 {
			continue
		}
		set := line[len(name)+1 : end]
		ok := true
		for k, v := range labels {
			if !strings.Contains(set, k+"="+strconv.Quote(v)) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		fields := strings.Fields(line[end+1:])
		if len(fields) == 0 {
			continue
		}
		f, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		return f, true
	}
	return 0, false
}

func scrape(t *testing.T, c *http.Client, gw *proc) string {
	t.Helper()
	r := get(t, c, gw.url("/metrics"))
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, want 200", r.status)
	}
	return string(r.body)
}

// sseStream reads an event stream line by line.
type sseStream struct {
	r *bufio.Reader
}

// next returns the payload of the next "data: " line.
func (s *sseStream) next() (string, error) {
	for {
		line, err := s.r.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok && err == nil {
			return data, nil
		}
		if err != nil {
			return "", err
		}
	}
}

// rest reads the remaining events: the content deltas, whether
// "data: [DONE]" was seen, and the error that ended the body (nil at a
// clean end).
func (s *sseStream) rest() (content []string, done bool, err error) {
	for {
		data, err := s.next()
		if err == io.EOF {
			return content, done, nil
		}
		if err != nil {
			return content, done, err
		}
		if done {
			return content, done, fmt.Errorf("event after [DONE]: %s", data)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return content, done, fmt.Errorf("event is not JSON: %q: %v", data, err)
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				content = append(content, *ch.Delta.Content)
			}
		}
	}
}

// openStream sends a streamed chat completion and checks the head.
func openStream(t *testing.T, ctx context.Context, c *http.Client, base, model string, header map[string]string) (*http.Response, *sseStream) {
	t.Helper()
	resp, err := c.Do(chatRequest(t, ctx, base, model, true, header))
	if err != nil {
		t.Fatalf("streamed POST /v1/chat/completions model %q: %v", model, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("streamed POST model %q: status %d, want 200; body: %s", model, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("streamed POST model %q: Content-Type %q, want text/event-stream", model, ct)
	}
	return resp, &sseStream{r: bufio.NewReader(resp.Body)}
}

// ---- tests ----

func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	simA := startSim(t, "m-a", "replica-a")
	simB := startSim(t, "m-b", "replica-b")
	cfg := filepath.Join(t.TempDir(), "triage.yaml")
	writeFile(t, cfg, gatewayConfig("",
		poolSpec{name: "pool-a", model: "m-a", aliases: []string{"alias-a"}, replicas: []*proc{simA}},
		poolSpec{name: "pool-b", model: "m-b", replicas: []*proc{simB}}))
	gw := startGateway(t, cfg)
	c := newClient(t)
	base := gw.url("")

	t.Run("json", func(t *testing.T) {
		for _, tc := range []struct{ model, replica, upstreamModel string }{
			{"m-a", "replica-a", "m-a"},
			{"alias-a", "replica-a", "m-a"},
			{"m-b", "replica-b", "m-b"},
		} {
			r := mustChat(t, c, base, tc.model, http.StatusOK)
			if got := r.header.Get("X-Sim-Replica"); got != tc.replica {
				t.Fatalf("model %q: X-Sim-Replica %q, want %q (wrong pool)", tc.model, got, tc.replica)
			}
			if r.header.Get("X-Request-Id") == "" {
				t.Fatalf("model %q: response has no X-Request-Id header; headers: %v", tc.model, r.header)
			}
			var body struct {
				Object  string `json:"object"`
				Model   string `json:"model"`
				Choices []struct {
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(r.body, &body); err != nil {
				t.Fatalf("model %q: body is not JSON: %v: %s", tc.model, err, r.body)
			}
			if body.Object != "chat.completion" || body.Model != tc.upstreamModel || len(body.Choices) != 1 ||
				!strings.HasPrefix(body.Choices[0].Message.Content, "["+tc.replica+"]") {
				t.Fatalf("model %q: want a chat.completion of model %q from %s, got %s", tc.model, tc.upstreamModel, tc.replica, r.body)
			}
		}
	})

	t.Run("request id", func(t *testing.T) {
		ids := map[string]bool{}
		for range 2 {
			r := mustChat(t, c, base, "m-a", http.StatusOK)
			id := r.header.Get("X-Request-Id")
			if id == "" || ids[id] {
				t.Fatalf("X-Request-Id %q: want a fresh non-empty id per request (seen %v)", id, ids)
			}
			ids[id] = true
		}
		r, err := chat(t, c, base, "m-a", map[string]string{"X-Request-Id": "e2e-client-id.1"})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.header.Get("X-Request-Id"); got != "e2e-client-id.1" {
			t.Fatalf("client X-Request-Id e2e-client-id.1: response has %q, want it kept", got)
		}
	})

	t.Run("stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, s := openStream(t, ctx, c, base, "m-b", map[string]string{"X-Sim-Chunks": "4"})
		if got := resp.Header.Get("X-Sim-Replica"); got != "replica-b" {
			t.Fatalf("stream for m-b: X-Sim-Replica %q, want replica-b", got)
		}
		if resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("stream: no X-Request-Id header; headers: %v", resp.Header)
		}
		content, done, err := s.rest()
		if err != nil || !done {
			t.Fatalf("stream: want a clean end after data: [DONE], got done=%v err=%v", done, err)
		}
		if got, want := strings.Join(content, ""), "[replica-b] lorem ipsum dolor"; got != want {
			t.Fatalf("stream content %q, want %q", got, want)
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		r := mustChat(t, c, base, "no-such-model", http.StatusNotFound)
		checkModelNotFound(t, r)
	})

	t.Run("models", func(t *testing.T) {
		r := get(t, c, gw.url("/v1/models"))
		var list struct {
			Object string `json:"object"`
			Data   []struct {
				ID     string `json:"id"`
				Object string `json:"object"`
				Root   string `json:"root"`
			} `json:"data"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil || list.Object != "list" {
			t.Fatalf("GET /v1/models: want 200 and a list, got %d %s", r.status, r.body)
		}
		got := map[string]string{}
		for _, m := range list.Data {
			got[m.ID] = m.Root
		}
		want := map[string]string{"m-a": "m-a", "alias-a": "m-a", "m-b": "m-b"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("GET /v1/models: id→root %v, want %v; body %s", got, want, r.body)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		// The request counter is bumped after the response ends, so the
		// last stream may land a moment after its [DONE].
		testenv.WaitWithin(t, 5*time.Second, "triage_requests_total counts the requests by pool", func() (bool, string) {
			m := scrape(t, c, gw)
			a, okA := metricValue(m, "triage_requests_total", map[string]string{"pool": "pool-a", "code": "200"})
			b, okB := metricValue(m, "triage_requests_total", map[string]string{"pool": "pool-b", "code": "200"})
			nf, okN := metricValue(m, "triage_requests_total", map[string]string{"pool": "none", "code": "404"})
			return okA && okB && okN && a >= 5 && b >= 2 && nf >= 1,
				fmt.Sprintf("pool-a/200=%v(%v) pool-b/200=%v(%v) none/404=%v(%v), want >=5, >=2, >=1", a, okA, b, okB, nf, okN)
		})
	})

	t.Run("memory released once idle", func(t *testing.T) {
		// Idle after a request, the gateway returns memory to the OS, and
		// says when: what a measurement of its idle RSS waits for.
		sent := time.Now()
		mustChat(t, c, base, "m-a", http.StatusOK)
		testenv.WaitWithin(t, 5*time.Second, "triage_memory_released_timestamp_seconds past the last request", func() (bool, string) {
			v, ok := metricValue(scrape(t, c, gw), "triage_memory_released_timestamp_seconds", nil)
			at := time.Unix(0, int64(v*1e9))
			return ok && at.After(sent), fmt.Sprintf("released at %v (%v), the request sent at %v", at, ok, sent)
		})
	})
}

// checkModelNotFound checks an OpenAI-shaped model_not_found error.
func checkModelNotFound(t *testing.T, r reply) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("404 Content-Type %q, want application/json", ct)
	}
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error == nil {
		t.Fatalf(`404 body: want {"error":{...}}, got %s (%v)`, r.body, err)
	}
	if e.Error.Code != "model_not_found" || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
		t.Fatalf(`404 body: want code "model_not_found", type "invalid_request_error" and a message, got %s`, r.body)
	}
}

func TestSIGTERMDrainsStreams(t *testing.T) {
	t.Parallel()

	t.Run("stream completes", func(t *testing.T) {
		t.Parallel()
		const shutdown = 5 * time.Second
		sim := startSim(t, "m-a", "replica-a")
		cfg := filepath.Join(t.TempDir(), "triage.yaml")
		writeFile(t, cfg, gatewayConfig(shutdown.String(), poolSpec{name: "a", model: "m-a", replicas: []*proc{sim}}))
		gw := startGateway(t, cfg)
		c := newClient(t)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, s := openStream(t, ctx, c, gw.url(""), "m-a", map[string]string{"X-Sim-Chunks": "10", "X-Sim-Chunk-Delay": "100ms"})
		if _, err := s.next(); err != nil {
			t.Fatalf("reading the first event: %v", err)
		}
		sigAt := time.Now()
		gw.signal(t, syscall.SIGTERM)

		// The gateway stops being ready, logs "shutting down", then closes
		// its listener: wait for the line, then for the listener to close
		// while the stream is still in flight.
		testenv.WaitWithin(t, 10*time.Second, "the draining gateway refuses new connections", func() (bool, string) {
			if gw.exited() {
				t.Fatal("the gateway exited before it was seen refusing new connections")
			}
			if !strings.Contains(gw.stderr.String(), "shutting down") {
				return false, "no shutting down line yet"
			}
			conn, err := net.DialTimeout("tcp", gw.addr, time.Second)
			if err == nil {
				conn.Close()
				return false, "the listener is still open"
			}
			return errors.Is(err, syscall.ECONNREFUSED), err.Error()
		})
		checkNotAccepting(t, gw)

		content, done, err := s.rest()
		if err != nil || !done {
			t.Fatalf("in-flight stream during drain: want it to end cleanly after data: [DONE], got done=%v err=%v after %d chunks",
				done, err, len(content))
		}
		if len(content) != 10 {
			t.Fatalf("in-flight stream during drain: %d content chunks, want 10", len(content))
		}
		streamEnd := time.Now()
		if d := streamEnd.Sub(sigAt); d < 500*time.Millisecond {
			t.Fatalf("stream ended %v after SIGTERM, want about 900ms: it was not in flight during the drain (test setup broken?)", d)
		}
		// With nothing left in flight the drain ends: the gateway exits well
		// before its shutdown_timeout.
		if code := gw.waitExit(t, 2*time.Second); code != 0 {
			t.Fatalf("gateway exit status %d after SIGTERM, want 0", code)
		}
		t.Logf("stream ended %v after SIGTERM; gateway exited %v after the stream", streamEnd.Sub(sigAt).Round(time.Millisecond), time.Since(streamEnd).Round(time.Millisecond))
		if log := gw.stderr.String(); !strings.Contains(log, "shutting down") {
			t.Fatalf("gateway log does not mention shutting down")
		}
	})

	t.Run("stream cut at deadline", func(t *testing.T) {
		t.Parallel()
		const shutdown = 300 * time.Millisecond
		sim := startSim(t, "m-a", "replica-a")
		cfg := filepath.Join(t.TempDir(), "triage.yaml")
		writeFile(t, cfg, gatewayConfig(shutdown.String(), poolSpec{name: "a", model: "m-a", replicas: []*proc{sim}}))
		gw := startGateway(t, cfg)
		c := newClient(t)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// 30 chunks 100ms apart: about 3s, ten times the drain deadline.
		_, s := openStream(t, ctx, c, gw.url(""), "m-a", map[string]string{"X-Sim-Chunks": "30", "X-Sim-Chunk-Delay": "100ms"})
		if _, err := s.next(); err != nil {
			t.Fatalf("reading the first event: %v", err)
		}
		sigAt := time.Now()
		gw.signal(t, syscall.SIGTERM)

		content, done, err := s.rest()
		ended := time.Since(sigAt)
		if done {
			t.Fatalf("stream longer than shutdown_timeout: it ended with data: [DONE] (%d chunks, after %v), want it cut", len(content), ended)
		}
		if err == nil {
			t.Fatalf("stream cut at the drain deadline ended like a complete body (clean EOF without [DONE], %d chunks); want a read error so the client sees it broke", len(content))
		}
		if ended > shutdown+1500*time.Millisecond {
			t.Fatalf("stream ended %v after SIGTERM, want about shutdown_timeout %v", ended, shutdown)
		}
		if code := gw.waitExit(t, shutdown+2*time.Second-time.Since(sigAt)); code != 0 {
			t.Fatalf("gateway exit status %d after SIGTERM, want 0", code)
		}
		t.Logf("stream cut after %v with %d chunks: %v", ended, len(content), err)
	})
}

// checkNotAccepting checks that the draining gateway takes no new work: a
// new connection is refused (http.Server.Shutdown closes the listener), or
// if one gets through, /readyz says 503.
func checkNotAccepting(t *testing.T, gw *proc) {
	t.Helper()
	fresh := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := fresh.Get(gw.url("/readyz"))
	if err != nil {
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("new connection to the draining gateway: want connection refused, got %v", err)
		}
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz on a new connection while draining: %d %s, want connection refused or 503", resp.StatusCode, b)
	}
}

func TestHotReload(t *testing.T) {
	t.Parallel()
	simA := startSim(t, "m-a", "replica-a")
	simB := startSim(t, "m-b", "replica-b")
	poolA := poolSpec{name: "a", model: "m-a", replicas: []*proc{simA}}
	poolB := poolSpec{name: "b", model: "m-b", replicas: []*proc{simB}}
	cfg := filepath.Join(t.TempDir(), "triage.yaml")
	writeFile(t, cfg, gatewayConfig("", poolA))
	gw := startGateway(t, cfg)
	c := newClient(t)
	base := gw.url("")

	r := mustChat(t, c, base, "m-b", http.StatusNotFound)
	checkModelNotFound(t, r)
	v1 := configVersion(t, c, gw)

	// Add pool B by replacing the file: the watch picks it up.
	replaceFile(t, cfg, gatewayConfig("", poolA, poolB))
	testenv.WaitWithin(t, 5*time.Second, "after adding pool b to the file, a request for m-b reaches replica-b", func() (bool, string) {
		r, err := chat(t, c, base, "m-b", nil)
		if err != nil {
			return false, err.Error()
		}
		return r.status == http.StatusOK && r.header.Get("X-Sim-Replica") == "replica-b",
			fmt.Sprintf("%d X-Sim-Replica=%q %s", r.status, r.header.Get("X-Sim-Replica"), r.body)
	})
	v2 := configVersion(t, c, gw)
	if v2 <= v1 {
		t.Fatalf("config_version %d after a reload, want above %d", v2, v1)
	}
	if got := mustChat(t, c, base, "m-a", http.StatusOK).header.Get("X-Sim-Replica"); got != "replica-a" {
		t.Fatalf("m-a after reload: X-Sim-Replica %q, want replica-a", got)
	}

	// An invalid config (pool c has no replicas) is rejected whole.
	replaceFile(t, cfg, gatewayConfig("", poolA, poolB, poolSpec{name: "c", model: "m-c"}))
	testenv.WaitWithin(t, 5*time.Second, `triage_config_reloads_total{result="invalid"} >= 1 after writing an invalid config`, func() (bool, string) {
		v, ok := metricValue(scrape(t, c, gw), "triage_config_reloads_total", map[string]string{"result": "invalid"})
		return ok && v >= 1, fmt.Sprintf("value %v (found %v)", v, ok)
	})
	testenv.WaitWithin(t, 5*time.Second, `gateway log says "config reload rejected" naming pools[2].replicas`, func() (bool, string) {
		for _, line := range strings.Split(gw.stderr.String(), "\n") {
			if strings.Contains(line, "config reload rejected") && strings.Contains(line, "pools[2].replicas") {
				return true, ""
			}
		}
		return false, "not logged yet"
	})
	if v := configVersion(t, c, gw); v != v2 {
		t.Fatalf("config_version %d after an invalid config, want it unchanged at %d", v, v2)
	}
	for model, replica := range map[string]string{"m-a": "replica-a", "m-b": "replica-b"} {
		if got := mustChat(t, c, base, model, http.StatusOK).header.Get("X-Sim-Replica"); got != replica {
			t.Fatalf("%s after a rejected reload: X-Sim-Replica %q, want %s", model, got, replica)
		}
	}
	mustChat(t, c, base, "m-c", http.StatusNotFound)

	// Back to pool A only, and SIGHUP as well.
	replaceFile(t, cfg, gatewayConfig("", poolA))
	gw.signal(t, syscall.SIGHUP)
	testenv.WaitWithin(t, 5*time.Second, "after removing pool b, m-b gets 404", func() (bool, string) {
		r, err := chat(t, c, base, "m-b", nil)
		if err != nil {
			return false, err.Error()
		}
		return r.status == http.StatusNotFound, fmt.Sprintf("%d %s", r.status, r.body)
	})
	checkModelNotFound(t, mustChat(t, c, base, "m-b", http.StatusNotFound))
	if got := mustChat(t, c, base, "m-a", http.StatusOK).header.Get("X-Sim-Replica"); got != "replica-a" {
		t.Fatalf("m-a after removing pool b: X-Sim-Replica %q, want replica-a", got)
	}
	sighup := regexp.MustCompile(`"msg":"config reloaded".*"trigger":"SIGHUP"`)
	testenv.WaitWithin(t, 5*time.Second, "gateway log has a SIGHUP-triggered \"config reloaded\"", func() (bool, string) {
		return sighup.MatchString(gw.stderr.String()), "not logged yet"
	})
	if v := configVersion(t, c, gw); v <= v2 {
		t.Fatalf("config_version %d after SIGHUP reload, want above %d", v, v2)
	}
	if gw.exited() {
		t.Fatalf("gateway exited after SIGHUP (%v), want it to reload and keep running", gw.err)
	}
}

func TestServeCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		config   string
		wantCode int
		stdout   []string // substrings stdout must hold
		stderr   []string // substrings stderr must hold
	}{
		{
			name: "good",
			config: "pools:\n  - name: a\n    model: m-a\n    replicas:\n      - url: http://127.0.0.1:9\n" +
				"        weight: 2\n",
			wantCode: 0,
			stdout:   []string{"ok"},
		},
		{
			name:     "unknown field",
			config:   "pools:\n  - name: a\n    model: m-a\n    replicas:\n      - url: http://127.0.0.1:9\n        wieght: 2\n",
			wantCode: 1,
			stderr:   []string{"pools[0].replicas[0].wieght"},
		},
		{
			name:     "missing model",
			config:   "pools:\n  - name: a\n    replicas:\n      - url: http://127.0.0.1:9\n",
			wantCode: 1,
			stderr:   []string{"pools[0].model"},
		},
		{
			// Values that decode but mean something else than written.
			name: "an address, a duration without a unit, a fraction",
			config: "listen: garbage\npools:\n  - name: a\n    model: m-a\n    replicas:\n      - url: http://127.0.0.1:9\n" +
				"    timeouts: {connect: 5}\n    retry: {attempts: 2.9}\n",
			wantCode: 1,
			stderr: []string{`listen: "garbage" is not an address to listen on: want host:port`, "pools[0].timeouts.connect: 5 has no unit: write 5s",
				"pools[0].retry.attempts: 2.9 is not a whole number"},
		},
		{
			// A syntax error is reported where it is, with the line quoted.
			name:     "an entry not indented",
			config:   "# pools\npools:\n  - name: a\n    model: m-a\n    replicas: [{url: 'http://127.0.0.1:9'}]\n- name: b\n    model: m-b\n",
			wantCode: 1,
			stderr:   []string{"line 6, column 1: did not find expected key", "6 | - name: b"},
		},
		{
			name:     "balance prefix on one replica: accepted with a note",
			config:   "pools:\n  - name: a\n    model: m-a\n    balance: prefix\n    replicas:\n      - url: http://127.0.0.1:9\n",
			wantCode: 0,
			stdout:   []string{"ok"},
			stderr:   []string{"warning: pools[0].balance: prefix with a single replica"},
		},
		{
			name:     "an unknown balancing policy",
			config:   "pools:\n  - name: a\n    model: m-a\n    balance: least_conn\n    replicas:\n      - url: http://127.0.0.1:9\n",
			wantCode: 1,
			stderr:   []string{`pools[0].balance: must be one of p2c, round_robin, prefix, got "least_conn"`},
		},
		{
			// Every problem is reported at once, not just the first kind.
			name:     "unknown field and missing model",
			config:   "pools:\n  - name: a\n    replicas:\n      - url: http://127.0.0.1:9\n        wieght: 2\n",
			wantCode: 1,
			stderr:   []string{"pools[0].replicas[0].wieght", "pools[0].model"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := filepath.Join(t.TempDir(), "triage.yaml")
			writeFile(t, cfg, tc.config)
			code, stdout, stderr := runTriage(t, "serve", "--config", cfg, "--check")
			if code != tc.wantCode {
				t.Fatalf("triage serve --check: exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, stdout, stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(stdout, s) {
					t.Fatalf("triage serve --check: stdout %q does not contain %q", stdout, s)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Fatalf("triage serve --check: stderr does not name %q; stderr:\n%s", s, stderr)
				}
			}
		})
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		wantCode int
		stdout   string
		stderr   string
	}{
		{args: nil, wantCode: 2, stderr: "usage: triage"},
		{args: []string{"nope"}, wantCode: 2, stderr: `unknown command "nope"`},
		{args: []string{"version"}, wantCode: 0, stdout: "\n"}, // a version line, "devel" or a VCS-stamped version
		{args: []string{"serve", "--no-such-flag"}, wantCode: 2, stderr: "no-such-flag"},
	} {
		t.Run(strings.Join(append([]string{"triage"}, tc.args...), " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runTriage(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, stdout, stderr)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Fatalf("stdout %q does not contain %q", stdout, tc.stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("stderr %q does not contain %q", stderr, tc.stderr)
			}
		})
	}
}

// runTriage runs a short-lived triage command and returns its exit code
// and output.
func runTriage(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, triageBin, args...)
	cmd.Env = childEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running triage %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("triage %s did not exit within 10s", strings.Join(args, " "))
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestHeavyTestsRunWithoutRace: every test that calls skipHeavyUnderRace
// has CLI in its name, and the Makefile's run without the race detector
// selects CLI, so none is skipped on every run of make test.
func TestHeavyTestsRunWithoutRace(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\t.*\$\(GO\) test -count=1 [^\n]*-run '[^']*\bCLI\b[^']*' \./cmd/triage`).Match(mk) {
		t.Error("no line of the Makefile runs ./cmd/triage's CLI tests without -race")
	}
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := 0
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || fn.Name.Name == "skipHeavyUnderRace" {
				continue
			}
			calls := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "skipHeavyUnderRace" {
						calls = true
					}
				}
				return !calls
			})
			if !calls {
				continue
			}
			found++
			if !strings.Contains(fn.Name.Name, "CLI") {
				t.Errorf("%s: %s skips under -race, and make test runs only tests named *CLI* without it: rename it", fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
	if found == 0 {
		t.Fatal("no test calls skipHeavyUnderRace: is this test still needed?")
	}
}

// With server.metrics_listen, /metrics is served there and not on listen,
// where clients reach the gateway (its series name principals and their
// budgets); a metrics address equal to listen is refused at load.
func TestMetricsApart(t *testing.T) {
	dir := t.TempDir()
	sim := startSim(t, "m", "r1")
	metricsAddr := freeAddr(t)
	cfg := filepath.Join(dir, "triage.yaml")
	writeFile(t, cfg, "server: {metrics_listen: \""+metricsAddr+"\"}\n"+gatewayConfig("", poolSpec{name: "p", model: "m", replicas: []*proc{sim}}))
	gw := startGateway(t, cfg)
	c := &http.Client{Timeout: 10 * time.Second}
	if r := get(t, c, gw.url("/metrics")); r.status != http.StatusNotFound {
		t.Fatalf("GET /metrics on listen: %d, want 404", r.status)
	}
	r := get(t, c, "http://"+metricsAddr+"/metrics")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "triage_") {
		t.Fatalf("GET /metrics on metrics_listen: %d %.200s", r.status, r.body)
	}

	same := filepath.Join(dir, "same.yaml")
	addr := freeAddr(t)
	writeFile(t, same, "listen: \""+addr+"\"\nserver: {metrics_listen: \""+addr+"\"}\n"+gatewayConfig("", poolSpec{name: "p", model: "m", replicas: []*proc{sim}}))
	code, _, stderr := runIn(t, "", nil, "serve", "--config", same, "--check")
	if code == 0 || !strings.Contains(stderr, "server.metrics_listen") {
		t.Fatalf("metrics_listen equal to listen: exit %d, %s", code, stderr)
	}
}
