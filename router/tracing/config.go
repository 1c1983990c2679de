package tracing

import (
	"fmt"
	"net/url"
	"os"
	"sort"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/net/http/httpguts"
)

// Config is the tracing: section of the gateway's config. Changing it
// takes a restart.
type Config struct {
	// Endpoint is the OTLP/HTTP traces URL spans are exported to, such as
	// http://otel-collector:4318/v1/traces (a URL without a path gets
	// /v1/traces; https uses TLS). Empty, the default: tracing is off.
	Endpoint string `koanf:"endpoint"`
	// ServiceName is the service.name of the spans. Default "triage".
	ServiceName string `koanf:"service_name"`
	// SampleRatio is the fraction of traces started here that are
	// recorded, 0 to 1; a request whose traceparent the client sent
	// follows the client's sampled flag. Default 1.
	SampleRatio *float64 `koanf:"sample_ratio"`
	// HeadersEnv names, for each header sent with every export, the
	// environment variable holding its value, such as
	// {Authorization: OTLP_AUTH}: credentials stay out of the file. Read
	// when the config is loaded (ResolveSecrets).
	HeadersEnv map[string]string `koanf:"headers_env"`
	// Timeout bounds one export of a batch, retries included. Default 10s.
	Timeout time.Duration `koanf:"timeout"`
	// MaxQueue is the most ended spans waiting for export; past it spans
	// are dropped (triage_trace_spans_dropped_total{reason="queue_full"})
	// rather than wait. Default 2048.
	MaxQueue int `koanf:"max_queue"`
	// BatchDelay is the longest an ended span waits for its batch to
	// fill before the batch is exported anyway. Default 5s.
	BatchDelay time.Duration `koanf:"batch_delay"`

	// Headers are HeadersEnv's values when the config was loaded
	// (ResolveSecrets); not a config key, and never printed.
	Headers map[string]Secret `koanf:"-"`
}

// Defaults of Config.
const (
	DefaultServiceName = "triage"
	DefaultTimeout     = 10 * time.Second
	DefaultMaxQueue    = 2048
	DefaultBatchDelay  = sdktrace.DefaultScheduleDelay * time.Millisecond
	tracesPath         = "/v1/traces"
)

// Secret is a header's value: printed as [redacted].
type Secret string

func (Secret) String() string   { return "[redacted]" }
func (Secret) GoString() string { return `"[redacted]"` }

// Enabled reports whether tracing is on.
func (c *Config) Enabled() bool { return c.Endpoint != "" }

// SetDefaults fills zero fields with their defaults.
func (c *Config) SetDefaults() {
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	if c.SampleRatio == nil {
		one := 1.0
		c.SampleRatio = &one
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.BatchDelay == 0 {
		c.BatchDelay = DefaultBatchDelay
	}
}

// ResolveSecrets reads the headers' values from their environment
// variables. Call it once, when the config is loaded.
func (c *Config) ResolveSecrets() {
	c.Headers = nil
	for name, env := range c.HeadersEnv {
		if c.Headers == nil {
			c.Headers = map[string]Secret{}
		}
		c.Headers[name] = Secret(os.Getenv(env))
	}
}

// Validate reports every problem in c, each under path (the section's
// key, "tracing").
func (c *Config) Validate(path string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, field, fmt.Sprintf(format, args...)))
	}
	if c.Endpoint != "" {
		if _, err := endpointURL(c.Endpoint); err != nil {
			bad("endpoint", "%v", err)
		}
	}
	if r := c.SampleRatio; r != nil && !(*r >= 0 && *r <= 1) {
		bad("sample_ratio", "must be from 0 to 1, got %v", *r)
	}
	if c.Timeout < 0 {
		bad("timeout", "must not be negative, got %s", c.Timeout)
	}
	if c.MaxQueue < 0 {
		bad("max_queue", "must not be negative, got %d", c.MaxQueue)
	}
	if c.BatchDelay < 0 {
		bad("batch_delay", "must not be negative, got %s", c.BatchDelay)
	}
	names := make([]string, 0, len(c.HeadersEnv))
	for name := range c.HeadersEnv {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		env := c.HeadersEnv[name]
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			bad("headers_env."+name, "%q is not a valid header name", name)
		case env == "":
			bad("headers_env."+name, "names no environment variable")
		case c.Headers != nil && c.Headers[name] == "":
			bad("headers_env."+name, "environment variable %s is not set", env)
		case c.Headers != nil && !httpguts.ValidHeaderFieldValue(string(c.Headers[name])):
			bad("headers_env."+name, "environment variable %s holds a value a header cannot carry", env)
		}
	}
	return errs
}

// endpointURL checks an endpoint and returns it with the traces path
// when it has none.
func endpointURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an OTLP/HTTP URL: want http://host:4318/v1/traces or https://...", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: an OTLP endpoint takes no query or fragment", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = tracesPath
	}
	return u.String(), nil
}
