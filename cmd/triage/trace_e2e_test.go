package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/router/tracing/tracingtest"
)

// SIGTERM exports the spans still queued before the gateway exits. Their
// batch (512 spans) would go out only after tracing.batch_delay, set to
// an hour here: no span can reach the collector before SIGTERM, so every
// span it has after the exit was flushed by the shutdown.
func TestSIGTERMExportsSpans(t *testing.T) {
	t.Parallel()
	col := tracingtest.NewCollector()
	defer col.Close()
	sim := startSim(t, "m-a", "replica-a")
	cfg := filepath.Join(t.TempDir(), "triage.yaml")
	writeFile(t, cfg, gatewayConfig("", poolSpec{name: "a", model: "m-a", replicas: []*proc{sim}})+
		"tracing:\n  endpoint: "+col.URL+"\n  service_name: triage-e2e\n  batch_delay: 1h\n")
	gw := startGateway(t, cfg)
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range 3 {
		resp, err := c.Post(gw.url("/v1/chat/completions"), "application/json", strings.NewReader(`{"model":"m-a","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	if n := col.Spans(); n != 0 {
		t.Fatalf("%d spans exported before SIGTERM, with an hour's batch delay and a batch of 512", n)
	}
	gw.signal(t, syscall.SIGTERM)
	if code := gw.waitExit(t, 10*time.Second); code != 0 {
		t.Fatalf("gateway exit status %d after SIGTERM, want 0", code)
	}
	if n := col.Spans(); n != 6 {
		t.Fatalf("the collector received %d spans by the gateway's exit, want 6 (a server and an upstream span per request)", n)
	}
}
