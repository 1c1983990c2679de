package router

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/router/tracing"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/tenancy"
)

// A traced request is one server span with children:
//
//	POST /v1/chat/completions  (server)  method, route, path, status, pool, models, request id
//	├─ admit                             the limits' and budgets' check, with access control on
//	├─ decide                            route, pool, reason, tier, class, score, floor, mass
//	│  ├─ tier1                          when tier 1 ran
//	│  └─ tier2                          when tier 2 ran (its failure as the span's error)
//	└─ upstream  (client), per attempt   replica, attempt, status, retry reason
//
// Each upstream attempt sends its own span's traceparent (and the trace's
// tracestate), continuing the client's trace when it sent a traceparent.
// No attribute holds prompt text. With tracing off (Gateway.tracer nil)
// none of this runs, and serve allocates nothing for it.

// Attribute keys: OpenTelemetry's semantic conventions, and triage's own
// under triage.*, named as the access log's fields are.
const (
	attrMethod        = attribute.Key("http.request.method")
	attrRoute         = attribute.Key("http.route")
	attrPath          = attribute.Key("url.path")
	attrStatus        = attribute.Key("http.response.status_code")
	attrServerAddress = attribute.Key("server.address")
	attrRequestID     = attribute.Key("triage.request_id")
	attrModel         = attribute.Key("triage.model")          // the model the client named
	attrUpstreamModel = attribute.Key("triage.upstream_model") // the pool's model, sent upstream
	attrPool          = attribute.Key("triage.pool")
	attrRoute2        = attribute.Key("triage.route")
	attrReason        = attribute.Key("triage.reason")
	attrTier          = attribute.Key("triage.tier")
	attrClass         = attribute.Key("triage.class")
	attrScore         = attribute.Key("triage.score")
	attrFloor         = attribute.Key("triage.floor")
	attrMass          = attribute.Key("triage.mass")
	attrBlocked       = attribute.Key("triage.blocked")
	attrAttempts      = attribute.Key("triage.attempts")
	attrReplica       = attribute.Key("triage.replica")
	attrAttempt       = attribute.Key("triage.attempt")
	attrRetryReason   = attribute.Key("triage.retry_reason")
	attrDenied        = attribute.Key("triage.denied") // the access error code
	attrDegraded      = attribute.Key("triage.limits_degraded")
	attrArm           = attribute.Key("triage.arm") // the live split's arm the request is on
)

// reqTrace is one request's spans while tracing is on. It is the
// request's proxy.Tracer, and like the request, used by one goroutine.
type reqTrace struct {
	t       *tracing.Tracer
	span    trace.Span // the request's
	attempt trace.Span // the upstream attempt in progress
	tc      []byte     // its trace context header lines, in tcBuf while they fit
	tcBuf   [128]byte
	timing  rules.Timing
}

// Span start options made once: each made per span is an allocation.
var (
	serverKind = trace.WithSpanKind(trace.SpanKindServer)
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
)

// traceHeaders reads the W3C trace context headers by their canonical
// names, as the h1 server and net/http store them: propagation's
// HeaderCarrier would canonicalize "traceparent" on every request.
type traceHeaders http.Header

func (h traceHeaders) Get(key string) string {
	switch key {
	case "traceparent":
		key = "Traceparent"
	case "tracestate":
		key = "Tracestate"
	}
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (traceHeaders) Set(string, string) {}
func (traceHeaders) Keys() []string     { return nil }

// startTrace starts r's server span at start, continuing the client's
// trace when it sent a traceparent.
func (g *Gateway) startTrace(r *http.Request, route string, start time.Time, id string) *reqTrace {
	parent := propagation.TraceContext{}.Extract(context.Background(), traceHeaders(r.Header))
	_, span := g.tracer.Start(parent, r.Method+" "+route, serverKind, trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(attrMethod.String(r.Method), attrRoute.String(route), attrPath.String(r.URL.Path), attrRequestID.String(id))
	}
	rt := &reqTrace{t: g.tracer, span: span}
	rt.tc = rt.tcBuf[:0]
	return rt
}

// child starts a span under the request's.
func (rt *reqTrace) child(name string, opts ...trace.SpanStartOption) trace.Span {
	_, s := rt.t.Start(trace.ContextWithSpan(context.Background(), rt.span), name, opts...)
	return s
}

// admitted records the limits' check, which began at start.
func (rt *reqTrace) admitted(start time.Time, a *tenancy.Admission, d *tenancy.Denial) {
	if !rt.span.IsRecording() {
		return
	}
	s := rt.child("admit", trace.WithTimestamp(start))
	if a.Degraded {
		s.SetAttributes(attrDegraded.Bool(true))
	}
	if d != nil {
		s.SetAttributes(attrDenied.String(d.Code))
	}
	s.End()
}

// denied marks the request refused by access control.
func (rt *reqTrace) denied(d *tenancy.Denial) {
	if rt.span.IsRecording() {
		rt.span.SetAttributes(attrDenied.String(d.Code))
	}
}

// decided records the decision, which began at start and took took, and
// the tiers that ran for it (rt.timing, filled by Set.DecideTimed).
func (rt *reqTrace) decided(start time.Time, took time.Duration, dec *rules.Decision) {
	if !rt.span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 9)
	attrs = append(attrs, attrRoute2.String(orDefault(dec.Route)), attrReason.String(dec.Reason), attrTier.Int(dec.Tier))
	if dec.Pool != "" {
		attrs = append(attrs, attrPool.String(dec.Pool))
	}
	if dec.Tier > 0 {
		attrs = append(attrs, attrClass.String(dec.Class), attrScore.Float64(float64(dec.Score)))
	}
	if dec.Floor > 0 || dec.Mass > 0 {
		attrs = append(attrs, attrMass.Float64(float64(dec.Mass)), attrFloor.Float64(float64(dec.Floor)))
	}
	if dec.Block {
		attrs = append(attrs, attrBlocked.Bool(true))
	}
	ctx, ds := rt.t.Start(trace.ContextWithSpan(context.Background(), rt.span), "decide", trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	tm := &rt.timing
	if !tm.Tier1Start.IsZero() {
		_, s := rt.t.Start(ctx, "tier1", trace.WithTimestamp(tm.Tier1Start), trace.WithAttributes(attrTier.Int(1)))
		s.End(trace.WithTimestamp(tm.Tier1Start.Add(tm.Tier1)))
	}
	if !tm.Tier2Start.IsZero() {
		_, s := rt.t.Start(ctx, "tier2", trace.WithTimestamp(tm.Tier2Start), trace.WithAttributes(attrTier.Int(2)))
		switch dec.Reason {
		case rules.ReasonTier2Timeout, rules.ReasonTier2Shed, rules.ReasonTier2EncoderDown, rules.ReasonTier2Unavailable, rules.ReasonTier2Error, rules.ReasonClientGone:
			s.SetStatus(codes.Error, dec.Reason)
		}
		s.End(trace.WithTimestamp(tm.Tier2Start.Add(tm.Tier2)))
	}
	ds.End(trace.WithTimestamp(start.Add(took)))
}

// Attempt starts an upstream attempt's span (proxy.Tracer).
func (rt *reqTrace) Attempt(n int, b *pool.Backend) []byte {
	s := rt.child("upstream", clientKind)
	if s.IsRecording() {
		s.SetAttributes(attrReplica.String(b.Name), attrAttempt.Int(n), attrServerAddress.String(b.Host))
	}
	rt.attempt = s
	rt.tc = tracing.AppendHeaders(rt.tc[:0], s.SpanContext())
	return rt.tc
}

// AttemptDone ends the attempt's span (proxy.Tracer).
func (rt *reqTrace) AttemptDone(status int, retry string, err error) {
	s := rt.attempt
	if s == nil {
		return
	}
	rt.attempt = nil
	if s.IsRecording() {
		if status > 0 {
			s.SetAttributes(attrStatus.Int(status))
		}
		if retry != "" {
			s.SetAttributes(attrRetryReason.String(retry))
		}
		switch {
		case err != nil:
			s.SetStatus(codes.Error, err.Error())
		case status >= 500:
			s.SetStatus(codes.Error, "")
		}
	}
	s.End()
}

// end ends the request's span at end, with what became of it.
func (rt *reqTrace) end(al *accessLine, end time.Time, poolName string) {
	s := rt.span
	if s.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 6)
		attrs = append(attrs, attrStatus.Int(al.status), attrPool.String(poolName))
		if len(al.model) > 0 {
			attrs = append(attrs, attrModel.String(string(al.model)))
		}
		if al.pool != nil {
			attrs = append(attrs, attrUpstreamModel.String(al.pool.model), attrAttempts.Int(al.res.Attempts))
		}
		if al.semantic {
			attrs = append(attrs, attrRoute2.String(orDefault(al.dec.Route)))
		}
		s.SetAttributes(attrs...)
		if al.res.TTFB > 0 && al.pool != nil {
			// When the upstream's first byte reached the client: a
			// stream's wait, apart from its length.
			s.AddEvent("first_byte", trace.WithTimestamp(al.start.Add(al.res.TTFB)))
		}
		switch {
		case al.res.Aborted:
			s.SetStatus(codes.Error, "response aborted mid-stream")
		case al.status >= 500:
			s.SetStatus(codes.Error, "")
		}
	}
	s.End(trace.WithTimestamp(end))
}
