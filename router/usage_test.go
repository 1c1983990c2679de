package router

import (
	"strings"
	"testing"
)

// Usage is read from the tail of what the replica sends: a JSON body's
// usage object, a stream's last event (the sim sends one whether or not
// the client asked, as vLLM does with --enable-force-include-usage). It
// reaches the access log and triage_tokens_total.
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
	if r.status != 200 {
		t.Fatal(r.status)
	}
	waitFor(t, func() bool { return strings.Count(h.log.String(), `"msg":"request"`) == 3 }, "three access lines")
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
