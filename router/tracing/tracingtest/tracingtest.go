// Package tracingtest has test doubles for tracing: an in-memory exporter
// that keeps its spans past Shutdown, and an OTLP/HTTP collector on a
// loopback socket that counts what it receives.
package tracingtest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Exporter keeps the spans exported to it in memory, through Shutdown
// (which tracetest.InMemoryExporter clears).
type Exporter struct{ *tracetest.InMemoryExporter }

// NewExporter returns an empty Exporter.
func NewExporter() *Exporter { return &Exporter{tracetest.NewInMemoryExporter()} }

// Shutdown keeps the spans.
func (*Exporter) Shutdown(context.Context) error { return nil }

// Collector is an OTLP/HTTP traces endpoint that decodes each export and
// counts its spans, or (a Sink) counts the bytes it receives without
// decoding them. Safe for concurrent use.
type Collector struct {
	// URL is the endpoint, http://127.0.0.1:PORT/v1/traces.
	URL   string
	srv   *httptest.Server
	spans atomic.Int64
	bytes atomic.Int64
	mu    sync.Mutex
	head  http.Header // the last export's
}

// NewCollector starts a Collector that decodes what it receives; Close
// stops it.
func NewCollector() *Collector { return newCollector(true) }

// NewSink starts a Collector that only reads what it receives (Bytes):
// in a benchmark, the cost measured is then the sender's alone.
func NewSink() *Collector { return newCollector(false) }

func newCollector(decode bool) *Collector {
	c := &Collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !decode {
			n, _ := io.Copy(io.Discard, r.Body)
			c.bytes.Add(n)
			w.WriteHeader(http.StatusOK)
			return
		}
		b, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err != nil || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.bytes.Add(int64(len(b)))
		c.mu.Lock()
		c.head = r.Header.Clone()
		c.mu.Unlock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				c.spans.Add(int64(len(ss.Spans)))
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	c.URL = c.srv.URL + "/v1/traces"
	return c
}

// Spans is the number of spans received (0 for a Sink).
func (c *Collector) Spans() int64 { return c.spans.Load() }

// Bytes is the number of bytes of exports received.
func (c *Collector) Bytes() int64 { return c.bytes.Load() }

// Header is the last export's request header (nil before the first).
func (c *Collector) Header() http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.head
}

// Close stops the collector.
func (c *Collector) Close() { c.srv.Close() }
