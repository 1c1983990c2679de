package config

import (
	"strings"
	"testing"
	"time"
)

// The tracing: section: off by default, read from the file and the
// environment, its header values from the variables it names, and its
// problems reported under their keys.
func TestTracingSection(t *testing.T) {
	dir := t.TempDir()
	c, err := Load(write(t, dir, "triage.yaml", good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracing.Enabled() || c.Tracing.ServiceName != "triage" || *c.Tracing.SampleRatio != 1 || c.Tracing.Timeout != 10*time.Second || c.Tracing.MaxQueue != 2048 {
		t.Fatalf("tracing defaults: %+v", c.Tracing)
	}

	_, err = Load(write(t, dir, "triage.yaml", good+`
tracing:
  endpoint: otel:4318
  sample_ratio: 1.5
  headers_env: {Authorization: TRIAGE_TEST_NOT_SET}
  timeout: -1s
  max_queu: 10
`))
	for _, want := range []string{
		`tracing.endpoint: "otel:4318" is not an OTLP/HTTP URL`,
		"tracing.sample_ratio: must be from 0 to 1, got 1.5",
		"tracing.headers_env.Authorization: environment variable TRIAGE_TEST_NOT_SET is not set",
		"tracing.timeout: must not be negative",
		`tracing.max_queu: unknown field (did you mean "max_queue"?)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load: %v\nwant a problem %q", err, want)
		}
	}

	t.Setenv("TRIAGE_OTLP_AUTH", "Bearer t0k")
	t.Setenv("TRIAGE_TRACING__SAMPLE_RATIO", "0.25")
	c, err = Load(write(t, dir, "triage.yaml", good+`
tracing:
  endpoint: http://otel:4318/v1/traces
  service_name: edge
  sample_ratio: 1
  headers_env: {Authorization: TRIAGE_OTLP_AUTH}
  timeout: 3s
  max_queue: 100
`))
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Tracing
	if !tr.Enabled() || tr.Endpoint != "http://otel:4318/v1/traces" || tr.ServiceName != "edge" || *tr.SampleRatio != 0.25 ||
		tr.Timeout != 3*time.Second || tr.MaxQueue != 100 || tr.Headers["Authorization"] != "Bearer t0k" {
		t.Fatalf("tracing = %+v", tr)
	}
	if w := c.EnvWarnings([]string{"TRIAGE_OTLP_AUTH=x", "TRIAGE_TRACING__ENDPOINT=y", "TRIAGE_TRACING__ENDPONT=z"}); len(w) != 1 || !strings.Contains(w[0], "TRIAGE_TRACING__ENDPONT") {
		t.Fatalf("EnvWarnings = %q, want the misspelt key alone (the header's variable and the key are used)", w)
	}

}
