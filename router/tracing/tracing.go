package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer is the gateway's tracer: spans started from it are exported in
// batches, off the request path.
type Tracer struct {
	trace.Tracer
	tp *sdktrace.TracerProvider
	b  *batcher
}

// Spans per export (the SDK's default); Config.BatchDelay is the longest
// a span waits for its batch to fill.
const batchSize = sdktrace.DefaultMaxExportBatchSize

// New starts a Tracer exporting to c.Endpoint over OTLP/HTTP, or to exp
// when it is not nil (tests and benchmarks). c's zero fields take their
// defaults. Call Shutdown to stop it.
func New(c Config, exp sdktrace.SpanExporter) (*Tracer, error) {
	c.SetDefaults()
	if errs := c.Validate("tracing"); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if exp == nil {
		if c.Endpoint == "" {
			return nil, errors.New("tracing: no endpoint")
		}
		u, _ := endpointURL(c.Endpoint)
		if c.Headers == nil {
			c.ResolveSecrets()
		}
		h := make(map[string]string, len(c.Headers))
		for k, v := range c.Headers {
			h[k] = string(v)
		}
		exp = newJSONExporter(u, h, c.Timeout)
	}
	t := &Tracer{b: newBatcher(exp, c.MaxQueue, batchSize, c.BatchDelay, c.Timeout)}
	t.tp = sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*c.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", c.ServiceName))),
		sdktrace.WithSpanProcessor(t.b))
	t.Tracer = t.tp.Tracer("github.com/triagegw/triage/router")
	return t, nil
}

// Dropped reports the spans lost so far: turned away because MaxQueue
// spans were waiting, and in batches whose export failed.
func (t *Tracer) Dropped() (queueFull, exportFailed uint64) {
	return t.b.queueFull.Load(), t.b.exportFailed.Load()
}

// Flush exports the spans ended so far, within ctx.
func (t *Tracer) Flush(ctx context.Context) error { return t.tp.ForceFlush(ctx) }

// Shutdown exports the spans still queued, within ctx, and stops the
// export goroutine. Spans ended after it are not exported.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.tp.Shutdown(ctx) }

// AppendHeaders appends the W3C trace context of sc as HTTP/1.1 header
// lines: "Traceparent: 00-{trace id}-{span id}-{flags}\r\n", and
// "Tracestate: ...\r\n" when sc carries one. An invalid sc appends
// nothing.
func AppendHeaders(dst []byte, sc trace.SpanContext) []byte {
	if !sc.IsValid() {
		return dst
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	dst = append(dst, "Traceparent: 00-"...)
	dst = hex.AppendEncode(dst, tid[:])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, sid[:])
	dst = append(dst, '-')
	// The flags W3C trace context defines: sampled and random.
	const digits = "0123456789abcdef"
	f := sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom)
	dst = append(dst, digits[f>>4], digits[f&0xf], '\r', '\n')
	if ts := sc.TraceState(); ts.Len() > 0 {
		dst = append(dst, "Tracestate: "...)
		dst = append(dst, ts.String()...)
		dst = append(dst, "\r\n"...)
	}
	return dst
}

// otelHandle reports an error to OpenTelemetry's handler (LogErrorsTo).
var otelHandle = otel.Handle

// LogErrorsTo sends the errors OpenTelemetry reports (a failed export) to
// log, as warnings; they go to stderr otherwise. It sets a process-wide
// handler: call it from main.
func LogErrorsTo(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: "+err.Error(), "component", "tracing")
	}))
}
