package router

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveReal runs the gateway under its own HTTPServer (with ReadTimeout),
// the way `triage serve` does.
func serveReal(t *testing.T, h *harness, readTimeout time.Duration) string {
	t.Helper()
	h.gw.snap.Load().cfg.Server.ReadTimeout = readTimeout
	srv := h.gw.HTTPServer(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestSlowBodyGets408(t *testing.T) {
	rep := newReplica(t, "m", "r")
	addr := serveReal(t, newHarness(t, newConfig("", poolCfg("p", "m", rep.URL))), 300*time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":")
	// ... and the rest of the body never comes.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if _, _, code := openAIError(t, string(b)); resp.StatusCode != http.StatusRequestTimeout || code != "request_timeout" {
		t.Fatalf("stalled body: %d %s, want 408 request_timeout", resp.StatusCode, b)
	}
	if rep.Stats().Requests != 0 {
		t.Fatal("a request whose body never arrived reached the upstream")
	}
}

func TestStreamOutlivesReadTimeout(t *testing.T) {
	rep := newReplica(t, "m", "r")
	addr := serveReal(t, newHarness(t, newConfig("", poolCfg("p", "m", rep.URL))), 200*time.Millisecond)
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Sim-Chunks", "12")
	req.Header.Set("X-Sim-Chunk-Delay", "50ms") // 600ms: three read timeouts long
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("a stream longer than the read timeout was cut: err %v, tail %q", err, b[max(0, len(b)-80):])
	}
	// And the connection is reused for a second request.
	resp, err = http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("second request: %v", err)
	}
	resp.Body.Close()
}
