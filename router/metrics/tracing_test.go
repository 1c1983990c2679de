package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRegisterTracing(t *testing.T) {
	reg := prometheus.NewRegistry()
	q, f := uint64(3), uint64(7)
	RegisterTracing(reg, func() (uint64, uint64) { return q, f })
	want := `
# HELP triage_trace_spans_dropped_total Spans not exported: the export queue was full (tracing.max_queue spans waiting: the endpoint is slow or down), or the export of their batch failed.
# TYPE triage_trace_spans_dropped_total counter
triage_trace_spans_dropped_total{reason="export_failed"} 7
triage_trace_spans_dropped_total{reason="queue_full"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "triage_trace_spans_dropped_total"); err != nil {
		t.Fatal(err)
	}
	q = 4 // read at each scrape
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(want, "} 3", "} 4", 1)), "triage_trace_spans_dropped_total"); err != nil {
		t.Fatal(err)
	}
}
