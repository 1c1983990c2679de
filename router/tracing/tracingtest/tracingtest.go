// Package tracingtest has test doubles for tracing: an in-memory exporter
// that keeps its spans past Shutdown, and an OTLP/HTTP collector on a
// loopback socket that counts what it receives.
package tracingtest

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
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
	last  *coltracepb.ExportTraceServiceRequest
}

// Last is the last export received, decoded (nil before the first).
func (c *Collector) Last() *coltracepb.ExportTraceServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// decodeExport reads an export as an OTLP receiver does: protobuf, or OTLP's
// JSON, which is protobuf's JSON mapping except that trace and span ids
// are hex. The JSON is checked against the OTLP protobuf schema itself
// (protojson refuses unknown fields and wrong types), after its ids are
// turned to the base64 protojson expects.
func decodeExport(ctype string, b []byte, req *coltracepb.ExportTraceServiceRequest) error {
	if !strings.HasPrefix(ctype, "application/json") {
		return proto.Unmarshal(b, req)
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		return err
	}
	if err := hexIDs(tree); err != nil {
		return err
	}
	b, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(b, req)
}

// hexIDs rewrites every traceId, spanId and parentSpanId from hex to
// base64, failing on one that is not hex of the right length.
func hexIDs(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			n := map[string]int{"traceId": 16, "spanId": 8, "parentSpanId": 8}[k]
			if s, ok := x.(string); ok && n > 0 {
				id, err := hex.DecodeString(s)
				if err != nil || len(id) != n {
					return fmt.Errorf("%s %q is not %d bytes of hex", k, s, n)
				}
				v[k] = base64.StdEncoding.EncodeToString(id)
				continue
			}
			if err := hexIDs(x); err != nil {
				return err
			}
		}
	case []any:
		for _, x := range v {
			if err := hexIDs(x); err != nil {
				return err
			}
		}
	}
	return nil
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
		if err == nil {
			err = decodeExport(r.Header.Get("Content-Type"), b, &req)
		}
		if err != nil {
			http.Error(w, "bad export: "+err.Error(), http.StatusBadRequest)
			return
		}
		c.bytes.Add(int64(len(b)))
		c.mu.Lock()
		c.head = r.Header.Clone()
		c.last = &req
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
