package router

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/routertest"
	"github.com/triagegw/triage/router/tracing"
	"github.com/triagegw/triage/router/tracing/tracingtest"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/sim"
)

// newTracedHarness is newHarness with tracing on, its spans exported to
// exp (nil: to cfg.Tracing's endpoint).
func newTracedHarness(t *testing.T, cfg *config.Config, routing *rules.Set, exp *tracingtest.Exporter) *harness {
	t.Helper()
	logs := &testenv.Buffer{}
	o := Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)), AccessLog: logs}
	if exp != nil {
		o.SpanExporter = exp
	}
	gw, err := New(cfg, routing, o)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{gw: gw, URL: "http://" + routertest.Serve(t, gw, routertest.Options{
		// Some of these tests take the endpoint down: what is left unexported then is theirs to check.
		ShutdownWithin: time.Second, ShutdownErr: func(error) {}}), log: logs}
}

// tracedRules routes code to the code pool at tier 1 and law to the
// legal pool, through tier 2 when tier 1 is unsure.
func tracedRules(t *testing.T, cfg *config.Config) *rules.Set {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rules.yaml")
	body := `alias: auto
floors: {tier1: 0.6, tier2: 0.5}
routes:
  - {name: coding, when: {class: code}, pool: code}
  - {name: legal, when: {class: law}, pool: legal}
default: general
tier2: {enabled: true, budget: 5s}
`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := rules.ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	classes := []string{"code", "law", "other"}
	head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, 3), B: make([]float32, 3)}
	heads := &classifier.Heads{Format: 1, Name: "t", Version: "1", Classes: classes, Dir: "/h",
		Tier1: &classifier.Tier{Head: head}, Tier2: &classifier.Tier{Head: head}}
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "rebase", Class: "code", Score: 0.93},
		{Contains: "lease", Class: "law", Score: 0.55},
	}, Default: classifier.Scored{Class: "other", Score: 0.9}}
	tier2 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "lease", Class: "law", Score: 0.9}}}
	s, err := rules.Compile(f, rules.Env{Pools: cfg.PoolNames(), Heads: heads, Tier1: tier1,
		Tier2: func() (classifier.Classifier, error) { return tier2, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// spans returns the spans of one trace, by name (the upstream attempts
// in the order they began), once its request span has ended: the client
// may have its whole answer before the handler returns and ends it.
func spans(t *testing.T, h *harness, exp *tracingtest.Exporter, id trace.TraceID) map[string][]tracetest.SpanStub {
	t.Helper()
	var out map[string][]tracetest.SpanStub
	testenv.Wait(t, func() bool {
		if err := h.gw.tracer.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		out = map[string][]tracetest.SpanStub{}
		ended := false
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == id {
				out[s.Name] = append(out[s.Name], s)
				ended = ended || s.SpanKind == trace.SpanKindServer
			}
		}
		return ended
	}, "the request's span")
	for _, l := range out {
		for i := 1; i < len(l); i++ {
			for j := i; j > 0 && l[j].StartTime.Before(l[j-1].StartTime); j-- {
				l[j], l[j-1] = l[j-1], l[j]
			}
		}
	}
	return out
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkAttrs compares a span's attributes with want (each value as
// Value.Emit writes it); keys absent from want are not checked, and a
// want of "" means the key must be absent.
func checkAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	got := attrs(s)
	for k, w := range want {
		v, ok := got[k]
		switch {
		case w == "" && ok:
			t.Errorf("span %s: attribute %s = %s, want none", s.Name, k, v.Emit())
		case w != "" && (!ok || v.Emit() != w):
			t.Errorf("span %s: attribute %s = %q (set: %v), want %q", s.Name, k, v.Emit(), ok, w)
		}
	}
}

// noPromptText fails if text appears in any span's name, attributes,
// events or status.
func noPromptText(t *testing.T, exp *tracingtest.Exporter, text string) {
	t.Helper()
	for _, s := range exp.GetSpans() {
		all := []string{s.Name, s.Status.Description}
		for _, kv := range s.Attributes {
			all = append(all, string(kv.Key), kv.Value.Emit())
		}
		for _, e := range s.Events {
			all = append(all, e.Name)
			for _, kv := range e.Attributes {
				all = append(all, kv.Value.Emit())
			}
		}
		for _, v := range all {
			if strings.Contains(v, text) {
				t.Errorf("span %s holds the prompt's text %q: %q", s.Name, text, v)
			}
		}
	}
}

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
)

// A routed request that the first replica refuses with a 503 and the
// second answers: one server span continuing the client's trace, the
// decision with its tier-1 span, the two attempts, each attempt's
// traceparent received upstream, and no prompt text anywhere.
func TestTraceRoutedRequestWithRetry(t *testing.T) {
	busy := newSim(t, sim.Options{Model: "coder", Name: "busy", ErrorRate: 1, ErrorStatus: 503})
	code := newReplica(t, "coder", "code")
	gen := newReplica(t, "llama", "gen")
	legal := newReplica(t, "saul", "legal")
	codePool := poolCfg("code", "coder", busy.URL, code.URL)
	codePool.Replicas[0].Weight = 10000 // tried first
	codePool.Breaker.Failures = 100     // and kept in
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), codePool, poolCfg("legal", "saul", legal.URL))
	exp := tracingtest.NewExporter()
	h := newTracedHarness(t, cfg, tracedRules(t, cfg), exp)

	const prompt = "how do I rebase onto main"
	r := h.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"`+prompt+`"}]}`,
		"Traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-01", "Tracestate", "vendor=t61rcWkgMzE")
	if r.status != 200 || r.header.Get("X-Sim-Replica") != "code" {
		t.Fatalf("status %d from %q, want 200 from code: %s", r.status, r.header.Get("X-Sim-Replica"), r.body)
	}
	tid, _ := trace.TraceIDFromHex(clientTraceID)
	got := spans(t, h, exp, tid)

	// The server span continues the client's trace.
	if len(got["POST /v1/chat/completions"]) != 1 {
		t.Fatalf("spans of the client's trace: %v; want one server span POST /v1/chat/completions", names(got))
	}
	srv := got["POST /v1/chat/completions"][0]
	if srv.SpanKind != trace.SpanKindServer || srv.Parent.SpanID().String() != clientSpanID || !srv.Parent.IsRemote() || srv.SpanContext.TraceState().String() != "vendor=t61rcWkgMzE" {
		t.Errorf("server span: kind %v, parent %v (remote %v), tracestate %q; want a server span under the client's span, its tracestate kept",
			srv.SpanKind, srv.Parent.SpanID(), srv.Parent.IsRemote(), srv.SpanContext.TraceState())
	}
	checkAttrs(t, srv, map[attribute.Key]string{
		"http.request.method": "POST", "http.route": "/v1/chat/completions", "url.path": "/v1/chat/completions",
		"http.response.status_code": "200", "triage.pool": "code", "triage.model": "auto", "triage.upstream_model": "coder",
		"triage.request_id": r.header.Get("X-Request-Id"), "triage.attempts": "2", "triage.route": "coding",
	})

	// The decision, and the tier that ran for it.
	if len(got["decide"]) != 1 || len(got["tier1"]) != 1 || len(got["tier2"]) != 0 {
		t.Fatalf("spans: %v; want one decide, one tier1, no tier2", names(got))
	}
	dec, t1 := got["decide"][0], got["tier1"][0]
	if dec.Parent.SpanID() != srv.SpanContext.SpanID() || t1.Parent.SpanID() != dec.SpanContext.SpanID() {
		t.Errorf("decide's parent %v, tier1's %v; want the server span %v and decide %v", dec.Parent.SpanID(), t1.Parent.SpanID(), srv.SpanContext.SpanID(), dec.SpanContext.SpanID())
	}
	checkAttrs(t, dec, map[attribute.Key]string{
		"triage.route": "coding", "triage.pool": "code", "triage.reason": "tier1_confident", "triage.tier": "1",
		"triage.class": "code", "triage.score": fmt.Sprint(float64(float32(0.93))), "triage.mass": fmt.Sprint(float64(float32(0.93))), "triage.floor": fmt.Sprint(float64(float32(0.6))),
	})
	within := func(inner, outer tracetest.SpanStub) {
		t.Helper()
		if inner.StartTime.Before(outer.StartTime) || inner.EndTime.After(outer.EndTime) || !inner.EndTime.After(inner.StartTime) {
			t.Errorf("span %s [%v, %v] is not within %s [%v, %v]", inner.Name, inner.StartTime, inner.EndTime, outer.Name, outer.StartTime, outer.EndTime)
		}
	}
	within(t1, dec)
	within(dec, srv)

	// The two attempts, as the replicas saw them.
	ups := got["upstream"]
	if len(ups) != 2 {
		t.Fatalf("upstream spans: %d, want 2 (a 503, then the answer)", len(ups))
	}
	for i, want := range []struct {
		rep    *replica
		status string
		retry  string
		code   codes.Code
	}{{busy, "503", "status", codes.Error}, {code, "200", "", codes.Unset}} {
		s := ups[i]
		if s.SpanKind != trace.SpanKindClient || s.Parent.SpanID() != srv.SpanContext.SpanID() || s.Status.Code != want.code {
			t.Errorf("attempt %d: kind %v, parent %v, status %v; want a client span under the server span, status %v", i+1, s.SpanKind, s.Parent.SpanID(), s.Status, want.code)
		}
		checkAttrs(t, s, map[attribute.Key]string{"triage.attempt": fmt.Sprint(i + 1), "triage.replica": strings.TrimRight(want.rep.URL, "/"),
			"http.response.status_code": want.status, "triage.retry_reason": want.retry})
		within(s, srv)
		up := want.rep.LastRequest()
		wantTP := "00-" + clientTraceID + "-" + s.SpanContext.SpanID().String() + "-01"
		if tp := up.Header.Values("Traceparent"); len(tp) != 1 || tp[0] != wantTP {
			t.Errorf("attempt %d: the replica got traceparent %q, want the attempt span's %q", i+1, tp, wantTP)
		}
		if ts := up.Header.Values("Tracestate"); len(ts) != 1 || ts[0] != "vendor=t61rcWkgMzE" {
			t.Errorf("attempt %d: the replica got tracestate %q, want the client's", i+1, ts)
		}
	}
	if !ups[1].StartTime.After(ups[0].EndTime) && !ups[1].StartTime.Equal(ups[0].EndTime) {
		t.Errorf("attempt 2 began at %v, before attempt 1 ended at %v", ups[1].StartTime, ups[0].EndTime)
	}

	// Escalated to tier 2: both tiers' spans, in order, under the decision.
	r = h.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"about my lease"}]}`,
		"Traceparent", "00-"+strings.Repeat("1", 32)+"-"+clientSpanID+"-01")
	if r.status != 200 || r.header.Get("X-Sim-Replica") != "legal" {
		t.Fatalf("escalated: status %d from %q, want 200 from legal", r.status, r.header.Get("X-Sim-Replica"))
	}
	tid2, _ := trace.TraceIDFromHex(strings.Repeat("1", 32))
	got = spans(t, h, exp, tid2)
	if len(got["decide"]) != 1 || len(got["tier1"]) != 1 || len(got["tier2"]) != 1 || len(got["upstream"]) != 1 {
		t.Fatalf("escalated: spans %v; want decide, tier1, tier2, one upstream", names(got))
	}
	dec, t1, t2 := got["decide"][0], got["tier1"][0], got["tier2"][0]
	checkAttrs(t, dec, map[attribute.Key]string{"triage.route": "legal", "triage.tier": "2", "triage.reason": "below_floor", "triage.class": "law"})
	within(t1, dec)
	within(t2, dec)
	if t2.StartTime.Before(t1.EndTime) || t2.Parent.SpanID() != dec.SpanContext.SpanID() {
		t.Errorf("tier2 [%v, %v] under %v; want it after tier1 (ended %v), under decide", t2.StartTime, t2.EndTime, t2.Parent.SpanID(), t1.EndTime)
	}

	noPromptText(t, exp, "rebase")
	noPromptText(t, exp, "lease")
}

func names(m map[string][]tracetest.SpanStub) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

// A request without a traceparent starts a trace of its own, and the
// replica receives the attempt's; with tracing off the client's
// traceparent passes through untouched.
func TestTraceparentUpstream(t *testing.T) {
	rep := newReplica(t, "m", "r")
	const clientTP = "00-" + clientTraceID + "-" + clientSpanID + "-01"
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

	off := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	if r := off.do(t, "POST", "/v1/chat/completions", body, "Traceparent", clientTP, "Tracestate", "v=1"); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	if h := rep.LastRequest().Header; h.Get("Traceparent") != clientTP || h.Get("Tracestate") != "v=1" {
		t.Fatalf("tracing off: the replica got traceparent %q tracestate %q, want the client's", h.Get("Traceparent"), h.Get("Tracestate"))
	}

	exp := tracingtest.NewExporter()
	on := newTracedHarness(t, newConfig("", poolCfg("p", "m", rep.URL)), nil, exp)
	if r := on.do(t, "POST", "/v1/chat/completions", body); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	var up tracetest.SpanStub
	testenv.Wait(t, func() bool {
		if err := on.gw.tracer.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		ended := false
		for _, s := range exp.GetSpans() {
			switch s.SpanKind {
			case trace.SpanKindClient:
				up = s
			case trace.SpanKindServer:
				ended = true
			}
		}
		return ended && up.SpanContext.IsValid()
	}, "the request's spans")
	want := "00-" + up.SpanContext.TraceID().String() + "-" + up.SpanContext.SpanID().String() + "-01"
	if !up.SpanContext.IsValid() || up.Parent.IsRemote() {
		t.Fatalf("upstream span %+v: want one, in a trace the gateway began", up.SpanContext)
	}
	if h := rep.LastRequest().Header; h.Get("Traceparent") != want || h.Get("Tracestate") != "" {
		t.Fatalf("tracing on: the replica got traceparent %q tracestate %q, want %q and none", h.Get("Traceparent"), h.Get("Tracestate"), want)
	}

	// An unsampled client trace stays unsampled, and is still continued.
	exp.Reset()
	unsampled := "00-" + clientTraceID + "-" + clientSpanID + "-00"
	if r := on.do(t, "POST", "/v1/chat/completions", body, "Traceparent", unsampled); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	tp := rep.LastRequest().Header.Get("Traceparent")
	// A sampled request after it, on the same connection: once its span
	// is out, the unsampled one's handler has returned.
	if r := on.do(t, "POST", "/v1/chat/completions", body, "Traceparent", "00-"+strings.Repeat("2", 32)+"-"+clientSpanID+"-01"); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	tid2, _ := trace.TraceIDFromHex(strings.Repeat("2", 32))
	spans(t, on, exp, tid2)
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == clientTraceID {
			t.Fatalf("span %s recorded for a trace the client did not sample", s.Name)
		}
	}
	if !strings.HasPrefix(tp, "00-"+clientTraceID+"-") || !strings.HasSuffix(tp, "-00") || tp == unsampled {
		t.Fatalf("unsampled: the replica got traceparent %q, want the client's trace, unsampled, under a span of the gateway's", tp)
	}
}

// An OTLP endpoint that refuses connections, or accepts and never
// answers, slows no request: spans past the queue are dropped and
// counted, and so are those whose export failed.
func TestTraceEndpointDownSlowsNoRequest(t *testing.T) {
	refused := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr + "/v1/traces"
	}
	hangs := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held := make(chan net.Conn, 100)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				held <- c // read nothing, answer nothing
			}
		}()
		t.Cleanup(func() {
			ln.Close()
			for {
				select {
				case c := <-held:
					c.Close()
				default:
					return
				}
			}
		})
		return "http://" + ln.Addr().String() + "/v1/traces"
	}
	for _, tc := range []struct {
		name     string
		endpoint func(*testing.T) string
		reason   string // the drops that must be counted
	}{
		{"refused", refused, "export_failed"},
		{"hangs", hangs, "queue_full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := newReplica(t, "m", "r")
			cfg := newConfig("", poolCfg("p", "m", rep.URL))
			const timeout = 30 * time.Second // an export may hang this long
			cfg.Tracing = tracing.Config{Endpoint: tc.endpoint(t), Timeout: timeout, MaxQueue: 8}
			cfg.Tracing.SetDefaults()
			h := newTracedHarness(t, cfg, nil, nil)
			start := time.Now()
			for i := range 50 {
				if r := h.do(t, "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`); r.status != 200 {
					t.Fatalf("request %d: status %d", i, r.status)
				}
			}
			if took := time.Since(start); took > timeout/3 {
				t.Fatalf("50 requests took %v with the OTLP endpoint %s: requests waited on the export (its timeout is %v)", took, tc.name, timeout)
			}
			testenv.Wait(t, func() bool {
				return !strings.Contains(grep(scrape(t, h), "triage_trace_spans_dropped_total"), `reason="`+tc.reason+`"} 0`)
			}, "spans counted as dropped ("+tc.reason+")")
			t.Logf("%s: 50 requests in %v; %s", tc.name, time.Since(start), strings.ReplaceAll(grep(scrape(t, h), "triage_trace_spans_dropped_total{"), "\n", "; "))
		})
	}
}

// A request on a live split says its arm on the server span, and a
// request that reached an upstream says when its first byte reached the
// client.
func TestTraceSplitArmAndFirstByte(t *testing.T) {
	cfg, set, _ := splitFixture(t, "split: {rules: candidate.yaml, weight: 0.5, names: [control, next]}\n")
	exp := tracingtest.NewExporter()
	h := newTracedHarness(t, cfg, set, exp)

	r := h.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"how do I rebase onto main"}]}`,
		"Traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-01")
	// Without a principal or a session the arm follows the request id:
	// either, and the pool says which.
	arm := map[string]string{"code": "control", "legal": "next"}[r.header.Get("X-Sim-Replica")]
	if r.status != 200 || arm == "" {
		t.Fatalf("status %d from %q, want 200 from code (control) or legal (next): %s", r.status, r.header.Get("X-Sim-Replica"), r.body)
	}
	tid, _ := trace.TraceIDFromHex(clientTraceID)
	srv := spans(t, h, exp, tid)["POST /v1/chat/completions"]
	if len(srv) != 1 {
		t.Fatalf("%d server spans, want 1", len(srv))
	}
	checkAttrs(t, srv[0], map[attribute.Key]string{"triage.arm": arm, "triage.pool": r.header.Get("X-Sim-Replica")})
	var first []time.Time
	for _, e := range srv[0].Events {
		if e.Name == "first_byte" {
			first = append(first, e.Time)
		}
	}
	if len(first) != 1 || first[0].Before(srv[0].StartTime) || first[0].After(srv[0].EndTime) {
		t.Errorf("first_byte events %v, want one within the server span [%v, %v]", first, srv[0].StartTime, srv[0].EndTime)
	}
}
