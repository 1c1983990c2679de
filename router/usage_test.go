package router

import (
	"strings"
	"testing"

	"github.com/triagegw/triage/internal/testenv"
)

// Usage is read from the tail of what the replica sends: a JSON body's
// usage object, a stream's last event. A stream whose client did not ask
// for usage is asked for it on the client's behalf (the sim, as vLLM,
// sends the chunk only when asked), and the chunk is dropped before the
// client sees it. It reaches the access log and triage_tokens_total.
func TestUsageFromTheTail(t *testing.T) {
	rep := newReplica(t, "llama", "gen-0")
	h := newHarness(t, newConfig("general", poolCfg("general", "llama", rep.URL)))
	r := h.do(t, "POST", "/v1/chat/completions", `{"model":"llama","messages":[{"role":"user","content":"hi there"}]}`)
	if r.status != 200 || !strings.Contains(r.body, `"usage"`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r = h.do(t, "POST", "/v1/chat/completions", `{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi there"}]}`)
	if r.status != 200 || !strings.Contains(r.body, `"usage":{`) {
		t.Fatalf("stream: %d %s", r.status, r.body)
	}
	r = h.do(t, "POST", "/v1/chat/completions", `{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi there"}]}`)
	if r.status != 200 || strings.Contains(r.body, `"usage"`) || !strings.HasSuffix(r.body, "data: [DONE]\n\n") ||
		strings.Count(r.body, "data: ") != 7 { // role, 4 content, finish, [DONE]
		t.Fatalf("stream without include_usage: %d %q", r.status, r.body)
	}
	testenv.Wait(t, func() bool { return strings.Count(h.log.String(), `"msg":"request"`) == 3 }, "three access lines")
	lines := strings.Split(strings.TrimSpace(h.log.String()), "\n")
	var with []string
	for _, l := range lines {
		if strings.Contains(l, `"msg":"request"`) && strings.Contains(l, `"prompt_tokens":`) {
			with = append(with, l)
		}
	}
	if len(with) != 3 || !strings.Contains(with[0], `"completion_tokens":4`) {
		t.Fatalf("access lines with usage: %d, want 3:\n%s", len(with), h.log.String())
	}
	m := scrape(t, h)
	if !strings.Contains(m, `triage_tokens_total{kind="prompt",pool="general",route="none"} 6`) ||
		!strings.Contains(m, `triage_tokens_total{kind="completion",pool="general",route="none"}`) {
		t.Fatalf("metrics:\n%s", grep(m, "triage_tokens"))
	}
}

// TestStreamUsageOptOut: a pool with stream_usage: false forwards a
// stream's body untouched, so a stream whose client did not ask ends
// without usage (and is counted at its estimate), and a client that asks
// still gets its chunk.
func TestStreamUsageOptOut(t *testing.T) {
	rep := newReplica(t, "llama", "gen-0")
	pc := poolCfg("general", "llama", rep.URL)
	off := false
	pc.StreamUsage = &off
	h := newHarness(t, newConfig("general", pc))
	r := h.do(t, "POST", "/v1/chat/completions", `{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi there"}]}`)
	if r.status != 200 || strings.Contains(r.body, `"usage"`) {
		t.Fatalf("%d %q", r.status, r.body)
	}
	r = h.do(t, "POST", "/v1/chat/completions", `{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi there"}]}`)
	if r.status != 200 || !strings.Contains(r.body, `"usage":{`) {
		t.Fatalf("%d %q", r.status, r.body)
	}
	testenv.Wait(t, func() bool { return strings.Count(h.log.String(), `"msg":"request"`) == 2 }, "two access lines")
	if n := strings.Count(h.log.String(), `"prompt_tokens":`); n != 1 {
		t.Fatalf("%d access lines with usage, want 1:\n%s", n, h.log.String())
	}
}
