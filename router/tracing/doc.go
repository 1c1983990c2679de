// Package tracing owns the gateway's OpenTelemetry tracing: its config
// (the tracing: section), the SDK's tracer provider with an OTLP/HTTP
// exporter of its own (OTLP's JSON encoding, otlpjson.go) behind a batch
// processor of its own, and the W3C trace context
// written into upstream requests. The spans themselves are built by the router,
// which knows the request.
//
// Tracing is off unless an endpoint (or, in tests, an exporter) is given:
// the router then never calls into this package, and the request path
// allocates nothing for it.
//
// A request never waits on the exporter: an ended span is queued without
// blocking, and past Config.MaxQueue spans waiting it is dropped and
// counted (Tracer.Dropped); a batch whose export fails is counted too.
//
// A Tracer is safe for concurrent use. Its export goroutine runs from New
// until Shutdown, which exports what is queued first.
package tracing
