package tracing

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/router/tracing/tracingtest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/triagegw/triage/internal/testenv"
)

// AppendHeaders writes what the SDK's W3C propagator would: the same
// traceparent and tracestate, which its Extract reads back.
func TestAppendHeadersAsThePropagator(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	states := []string{"", "vendor=abc", "a=1,b=2,congo=t61rcWkgMzE"}
	for i := range 200 {
		var tid trace.TraceID
		var sid trace.SpanID
		for j := range tid {
			tid[j] = byte(rng.Uint32())
		}
		for j := range sid {
			sid[j] = byte(rng.Uint32())
		}
		ts, err := trace.ParseTraceState(states[i%len(states)])
		if err != nil {
			t.Fatal(err)
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(rng.Uint32() & 0xff), TraceState: ts, Remote: true})
		want := http.Header{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.HeaderCarrier(want))
		got := parseLines(t, AppendHeaders(nil, sc))
		if got.Get("Traceparent") != want.Get("Traceparent") || got.Get("Tracestate") != want.Get("Tracestate") || len(got) != len(want) {
			t.Fatalf("AppendHeaders(%v) = %v, want %v", sc, got, want)
		}
		back := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(got)))
		if back.TraceID() != tid || back.SpanID() != sid || back.IsSampled() != sc.IsSampled() || back.TraceState().String() != ts.String() {
			t.Fatalf("Extract(AppendHeaders(%v)) = %v", sc, back)
		}
	}
	if b := AppendHeaders([]byte("x"), trace.SpanContext{}); string(b) != "x" {
		t.Fatalf("AppendHeaders(invalid) = %q, want nothing appended", b)
	}
}

func parseLines(t *testing.T, b []byte) http.Header {
	t.Helper()
	h := http.Header{}
	for _, l := range strings.Split(string(b), "\r\n") {
		if l == "" {
			continue
		}
		k, v, ok := strings.Cut(l, ": ")
		if !ok {
			t.Fatalf("malformed header line %q in %q", l, b)
		}
		h.Add(k, v)
	}
	return h
}

func TestConfigValidate(t *testing.T) {
	half, two := 0.5, 2.0
	t.Setenv("TRIAGE_TEST_OTLP_KEY", "Bearer k")
	for _, tc := range []struct {
		name string
		c    Config
		want []string // substrings of the problems, in order; none: valid
	}{
		{"off", Config{}, nil},
		{"full", Config{Endpoint: "https://otel.example:4318/v1/traces", SampleRatio: &half, HeadersEnv: map[string]string{"Authorization": "TRIAGE_TEST_OTLP_KEY"}, Timeout: time.Second, MaxQueue: 10}, nil},
		{"not a URL", Config{Endpoint: "otel:4318"}, []string{"tracing.endpoint"}},
		{"grpc scheme", Config{Endpoint: "grpc://otel:4317"}, []string{"tracing.endpoint"}},
		{"query", Config{Endpoint: "http://otel:4318/v1/traces?x=1"}, []string{"tracing.endpoint: \"http://otel:4318/v1/traces?x=1\": an OTLP endpoint takes no query"}},
		{"ratio", Config{SampleRatio: &two}, []string{"tracing.sample_ratio: must be from 0 to 1, got 2"}},
		{"negatives", Config{Timeout: -time.Second, MaxQueue: -1, BatchDelay: -time.Second}, []string{"tracing.timeout", "tracing.max_queue", "tracing.batch_delay"}},
		{"header name", Config{HeadersEnv: map[string]string{"Bad Name": "X"}}, []string{`tracing.headers_env.Bad Name: "Bad Name" is not a valid header name`}},
		{"unset variable", Config{HeadersEnv: map[string]string{"Authorization": "TRIAGE_TEST_UNSET_OTLP"}}, []string{"tracing.headers_env.Authorization: environment variable TRIAGE_TEST_UNSET_OTLP is not set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.ResolveSecrets()
			errs := tc.c.Validate("tracing")
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate(%+v) = %v, want %d problems %q", tc.c, errs, len(tc.want), tc.want)
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("Validate(%+v) problem %d = %q, want it to hold %q", tc.c, i, e, tc.want[i])
				}
			}
		})
	}
	if u, err := endpointURL("http://otel:4318"); err != nil || u != "http://otel:4318/v1/traces" {
		t.Fatalf("endpointURL without a path = %q, %v; want the traces path", u, err)
	}
	c := Config{HeadersEnv: map[string]string{"Authorization": "TRIAGE_TEST_OTLP_KEY"}}
	c.ResolveSecrets()
	if s := strings.Join([]string{toString(c)}, ""); strings.Contains(s, "Bearer k") {
		t.Fatalf("a printed config shows a header's value: %s", s)
	}
}

func toString(c Config) string { return strings.TrimSpace(strings.ReplaceAll(fmtV(c), "\n", " ")) }

// The exporter's spans arrive, and Shutdown exports what is queued.
func TestShutdownExportsQueued(t *testing.T) {
	exp := tracingtest.NewExporter()
	tr, err := New(Config{}, exp)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans exported before the batch was due, want 0 (is the processor batching?)", n)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 10 {
		t.Fatalf("%d spans exported at shutdown, want 10", n)
	}
	if q, f := tr.Dropped(); q != 0 || f != 0 {
		t.Fatalf("Dropped() = %d, %d; want none", q, f)
	}
}

// A full batch goes out at once, without waiting for the batch delay;
// spans ended from many goroutines are all exported.
func TestFullBatchExportsAtOnce(t *testing.T) {
	exp := tracingtest.NewExporter()
	tr, err := New(Config{}, exp)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range batchSize / 4 {
				_, s := tr.Start(context.Background(), "s")
				s.End()
			}
		})
	}
	wg.Wait()
	// Half the batch delay: a full batch goes out at once, not after it.
	testenv.WaitWithin(t, DefaultBatchDelay/2, "a full batch exported before its delay", func() (bool, string) {
		n := len(exp.GetSpans())
		return n >= batchSize, fmt.Sprintf("%d of %d spans exported", n, batchSize)
	})
	_, s := tr.Start(context.Background(), "after")
	s.End()
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != batchSize+1 {
		t.Fatalf("%d spans exported after Flush, want %d", n, batchSize+1)
	}
}

// Spans reach an OTLP/HTTP endpoint, with the headers headers_env names.
func TestExportsOverOTLP(t *testing.T) {
	col := tracingtest.NewCollector()
	defer col.Close()
	t.Setenv("TRIAGE_TEST_OTLP_KEY", "Bearer sekret")
	c := Config{Endpoint: col.URL, HeadersEnv: map[string]string{"Authorization": "TRIAGE_TEST_OTLP_KEY"}}
	c.ResolveSecrets()
	tr, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 25 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := col.Spans(); n != 25 {
		t.Fatalf("the collector received %d spans, want 25", n)
	}
	if got := col.Header().Get("Authorization"); got != "Bearer sekret" {
		t.Fatalf("the export's Authorization = %q, want the variable's value", got)
	}
}

// An endpoint that is down never makes a span's end wait: one that
// refuses connections fails its exports (counted), one that accepts and
// never answers holds its export until the timeout while the queue fills
// and the spans past it are dropped (counted).
func TestEndpointDownNeverBlocks(t *testing.T) {
	// Each endpoint also returns how to tell that the first export is
	// out: failed (counted), or hanging on a connection the endpoint took.
	refused := func(t *testing.T) (string, func(*Tracer) bool) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr + "/v1/traces", func(tr *Tracer) bool { _, f := tr.Dropped(); return f > 0 }
	}
	hangs := func(t *testing.T) (string, func(*Tracer) bool) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		var conns []net.Conn
		var accepted atomic.Int64
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					close(done)
					return
				}
				conns = append(conns, c) // read nothing, answer nothing
				accepted.Add(1)
			}
		}()
		t.Cleanup(func() {
			ln.Close()
			<-done
			for _, c := range conns {
				c.Close()
			}
		})
		return "http://" + ln.Addr().String() + "/v1/traces", func(*Tracer) bool { return accepted.Load() > 0 }
	}
	for _, tc := range []struct {
		name     string
		endpoint func(*testing.T) (string, func(*Tracer) bool)
	}{
		{"refused", refused},
		{"hangs", hangs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 20 * time.Second // far above what the spans' ends may take
			endpoint, exportOut := tc.endpoint(t)
			tr, err := New(Config{Endpoint: endpoint, Timeout: timeout, MaxQueue: 64}, nil)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for round := range 5 {
				for range 100 {
					_, s := tr.Start(context.Background(), "request")
					s.End()
				}
				// Let the batch go out (and fail, or hang).
				fctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_ = tr.Flush(fctx)
				cancel()
				if round == 0 {
					// The later rounds end their spans with the first
					// export already failed, or hanging.
					testenv.Wait(t, func() bool { return exportOut(tr) }, "the first export to fail or hang")
				}
			}
			if took := time.Since(start); took > timeout/4 {
				t.Fatalf("500 spans took %v to end with the endpoint down: ends waited on the export (timeout %v)", took, timeout)
			}
			q, f := tr.Dropped()
			t.Logf("%s: dropped %d (queue full), %d (export failed)", tc.name, q, f)
			if q+f == 0 {
				t.Fatalf("Dropped() = %d, %d with the endpoint down: nothing counted", q, f)
			}
			if tc.name == "hangs" && q == 0 {
				t.Fatalf("Dropped() = %d queue full with an export hanging and 500 spans through a queue of 64", q)
			}
			sctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_ = tr.Shutdown(sctx) // bounded by its context, whatever the endpoint does
			if time.Since(start) > timeout/2 {
				t.Fatalf("Shutdown did not return within its context")
			}
		})
	}
}

func fmtV(c Config) string { return fmt.Sprintf("%+v %#v", c, c) }

// What the exporter sends is OTLP as a collector reads it: the OTLP
// protobuf schema accepts it (tracingtest checks it with protojson), ids
// are the spans' own, parents link, kinds, statuses and typed attributes
// come through, and a failing endpoint's batch is counted as dropped.
func TestOTLPJSONContent(t *testing.T) {
	col := tracingtest.NewCollector()
	defer col.Close()
	tr, err := New(Config{Endpoint: col.URL, ServiceName: "gw-test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := tr.Start(context.Background(), "POST /v1/chat/completions", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("triage.route", "coding"), attribute.Int("http.response.status_code", 200),
			attribute.Float64("triage.score", 0.93), attribute.Bool("triage.stream", true), attribute.StringSlice("triage.classes", []string{"a", "b"})))
	_, child := tr.Start(ctx, "upstream", trace.WithSpanKind(trace.SpanKindClient))
	child.AddEvent("retry", trace.WithAttributes(attribute.Int("attempt", 2)))
	child.SetStatus(codes.Error, "upstream answered 502")
	child.End()
	root.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := col.Last()
	if req == nil || len(req.ResourceSpans) != 1 || len(req.ResourceSpans[0].ScopeSpans) != 1 {
		t.Fatalf("export %v", req)
	}
	rs := req.ResourceSpans[0]
	if a := rs.Resource.Attributes; len(a) != 1 || a[0].Key != "service.name" || a[0].Value.GetStringValue() != "gw-test" {
		t.Fatalf("resource %v", rs.Resource)
	}
	spans := rs.ScopeSpans[0].Spans
	byName := map[string]int{}
	for i, s := range spans {
		byName[s.Name] = i
	}
	r, c := spans[byName["POST /v1/chat/completions"]], spans[byName["upstream"]]
	rsc, csc := root.SpanContext(), child.SpanContext()
	rtid, rsid, csid := rsc.TraceID(), rsc.SpanID(), csc.SpanID()
	if len(spans) != 2 || !bytes.Equal(r.TraceId, rtid[:]) || !bytes.Equal(r.SpanId, rsid[:]) || len(r.ParentSpanId) != 0 ||
		!bytes.Equal(c.TraceId, rtid[:]) || !bytes.Equal(c.SpanId, csid[:]) || !bytes.Equal(c.ParentSpanId, rsid[:]) {
		t.Fatalf("ids: %v", spans)
	}
	if r.Kind.String() != "SPAN_KIND_SERVER" || c.Kind.String() != "SPAN_KIND_CLIENT" {
		t.Fatalf("kinds %v %v", r.Kind, c.Kind)
	}
	if c.Status.Code.String() != "STATUS_CODE_ERROR" || c.Status.Message != "upstream answered 502" || r.Status.Code.String() != "STATUS_CODE_UNSET" {
		t.Fatalf("statuses %v %v", r.Status, c.Status)
	}
	if r.EndTimeUnixNano <= r.StartTimeUnixNano || r.StartTimeUnixNano == 0 {
		t.Fatalf("times %d %d", r.StartTimeUnixNano, r.EndTimeUnixNano)
	}
	attrs := map[string]string{}
	for _, kv := range r.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	for k, want := range map[string]string{
		"triage.route": `string_value:"coding"`, "http.response.status_code": `int_value:200`, "triage.score": `double_value:0.93`,
		"triage.stream": `bool_value:true`, "triage.classes": `array_value:{values:{string_value:"a"} values:{string_value:"b"}}`,
	} {
		if got := strings.Join(strings.Fields(attrs[k]), ""); got != strings.Join(strings.Fields(want), "") {
			t.Errorf("%s = %s, want %s", k, attrs[k], want)
		}
	}
	if len(c.Events) != 1 || c.Events[0].Name != "retry" || c.Events[0].Attributes[0].Value.GetIntValue() != 2 {
		t.Fatalf("events %v", c.Events)
	}

	// An endpoint that refuses the export: the batch is counted, not retried forever.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) }))
	defer bad.Close()
	tr2, err := New(Config{Endpoint: bad.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, s := tr2.Start(context.Background(), "x")
	s.End()
	_ = tr2.Shutdown(context.Background())
	if _, failed := tr2.Dropped(); failed != 1 {
		t.Fatalf("export failures counted %d, want 1", failed)
	}
}
