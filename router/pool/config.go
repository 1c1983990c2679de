package pool

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/triagegw/triage/router/tlsconf"
)

// Config describes one pool: replicas serving the same model, and how the
// gateway talks to them. Zero values take the defaults documented on each
// field; SetDefaults fills them in.
type Config struct {
	// Name identifies the pool in routes, metrics and logs. Required.
	Name string `koanf:"name"`
	// Model is the model name the replicas serve (vLLM's --served-model-name).
	// A request routed here has its model field rewritten to it when it
	// differs. Required.
	Model string `koanf:"model"`
	// Kind is the API the replicas speak:
	//   - "vllm" (the default): OpenAI's API as vLLM serves it, Responses
	//     included, with active health checks on /health;
	//   - "openai": any OpenAI-compatible server (a hosted API, say); no
	//     /health to check, so health is passive only (the breaker);
	//   - "anthropic": Anthropic's Messages API (api.anthropic.com or a
	//     compatible server). Chat completions routed here are translated
	//     to Messages and back, streams and tool calls included; health is
	//     passive only, the replicas' API keys are sent as x-api-key, and
	//     completions, embeddings and Responses are not served.
	Kind string `koanf:"kind"`
	// Aliases are further names clients may send to reach this pool.
	Aliases []string `koanf:"aliases"`
	// Replicas are the upstream servers. At least one.
	Replicas []Replica `koanf:"replicas"`
	Timeouts Timeouts  `koanf:"timeouts"`
	Retry    Retry     `koanf:"retry"`
	Health   Health    `koanf:"health"`
	Breaker  Breaker   `koanf:"breaker"`
	// DefaultMaxTokens is the max_tokens sent to a kind: anthropic pool
	// for a chat completion that sets none (Messages requires one).
	// Default 4096.
	DefaultMaxTokens int64 `koanf:"default_max_tokens"`
	// DropUnsupported lets the pool serve a translated request without
	// the settings its API has no equivalent for, instead of refusing it
	// with a 400 naming the field (the default). Toward a kind: anthropic
	// pool, a chat completion's sampling extensions (frequency, presence
	// and repetition penalties, logit_bias, min_p, min_tokens, ignore_eos,
	// stop_token_ids) are dropped; toward a vllm or openai pool, a Messages
	// request's thinking (and, for openai, top_k) is dropped, and for
	// openai a stop sequence that matched is answered as end_turn. What
	// would change the answer's shape or count (n, logprobs, a JSON
	// format, beam search, guided decoding, a prefill an openai pool
	// cannot continue) is refused even so. Default false.
	DropUnsupported bool `koanf:"drop_unsupported"`
	// MaxIdleConns caps idle keep-alive connections kept per replica
	// (each closed after 4s idle). Default 64.
	MaxIdleConns int `koanf:"max_idle_conns"`
	// TLS configures connections to the pool's https replicas. Optional:
	// without it they are verified against the system roots.
	TLS TLS `koanf:"tls"`
	// Balance is how a request's replica is chosen:
	//   - "p2c" (the default): weighted power of two choices on the
	//     gateway's in-flight requests;
	//   - "round_robin": each available replica in turn, unweighted;
	//   - "prefix": prefix-cache affinity for vLLM's automatic prefix
	//     caching: the replica that was sent the longest prefix of the
	//     request's conversation, unless its load is over the bound in
	//     Prefix; requests without a conversation (embeddings) as p2c.
	Balance string `koanf:"balance"`
	// Prefix tunes balance: prefix.
	Prefix Prefix `koanf:"prefix"`
	// Metrics configures reading each replica's own /metrics (vLLM's
	// queue and KV-cache figures), which balance: prefix weighs load by.
	Metrics Metrics `koanf:"metrics"`
	// StreamUsage asks the replicas for a stream's token usage
	// (stream_options.include_usage) when the client did not, so limits,
	// budgets, metrics and the usage log count streams too, and drops
	// that usage chunk before the client sees it. Default true; turn it
	// off for a server that refuses stream_options.
	StreamUsage *bool `koanf:"stream_usage"`
	// CacheSalt keeps tenants apart in the replicas' prefix caches when
	// access control is on (without it there are no tenants, and the
	// body goes as sent):
	//   - "tenant": each request carries its
	//     principal's cache_salt (access.cache_salt_secret), so a replica
	//     reuses cached prompt blocks only between requests of one
	//     principal, and balance: prefix keys its affinity by principal
	//     too. A cache_salt the client sent is combined with the
	//     principal's, never forwarded as sent: it can narrow what the
	//     client's requests share, never join another principal's;
	//   - "off": the body's cache_salt is left as the client sent it and
	//     tenants share the cache, so one can tell by timing whether
	//     another sent a prompt. For a server that refuses the field
	//     (vLLM's V0 engine); the only value for kinds openai and
	//     anthropic, whose APIs do not take it.
	//
	// Default: tenant for kind vllm, off for the others.
	CacheSalt string `koanf:"cache_salt"`
}

// The values of Config.CacheSalt.
const (
	CacheSaltTenant = "tenant"
	CacheSaltOff    = "off"
)

// Salts reports whether requests to the pool carry their principal's
// cache_salt when access control is on.
func (c *Config) Salts() bool { return c.Kind == KindVLLM && c.CacheSalt != CacheSaltOff }

// The pool kinds (Config.Kind).
const (
	KindVLLM      = "vllm"
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
)

// ServesResponses reports whether the pool's replicas serve OpenAI's
// Responses API (/v1/responses).
func (c *Config) ServesResponses() bool { return c.Kind != KindAnthropic }

// AsksStreamUsage reports StreamUsage with its default.
func (c *Config) AsksStreamUsage() bool { return c.StreamUsage == nil || *c.StreamUsage }

// TLS configures connections to https replicas: a pool with tls has only
// https replicas. Paths are relative to the
// config file (config.Load resolves them). The files are read when the
// config is loaded; a reload that finds their content changed rebuilds the
// pool, so rotated upstream certificates take effect on reload.
type TLS struct {
	// CAFile is the PEM bundle of CAs the replicas' certificates must chain
	// to, instead of the system roots.
	CAFile string `koanf:"ca_file"`
	// CertFile and KeyFile are a client certificate and its key, presented
	// to replicas that ask for one (mutual TLS). Both or neither.
	CertFile string `koanf:"cert_file"`
	KeyFile  string `koanf:"key_file"`
	// ServerName is the name verified in the replicas' certificates (and
	// sent as SNI) instead of each replica's host.
	ServerName string `koanf:"server_name"`
	// InsecureSkipVerify accepts any certificate. For tests only.
	InsecureSkipVerify bool `koanf:"insecure_skip_verify"`
}

// Set reports whether any TLS setting is given.
func (t TLS) Set() bool { return t != TLS{} }

// Digest identifies the content of the files t names: it changes when one
// of them is rewritten. Empty without files.
func (t TLS) Digest() (string, error) { return tlsconf.Digest(t.CAFile, t.CertFile, t.KeyFile) }

// client builds the client TLS config t describes.
func (t TLS) client() (*tls.Config, error) {
	return tlsconf.NewClient(t.CAFile, t.CertFile, t.KeyFile, t.ServerName, t.InsecureSkipVerify)
}

// Replica is one upstream server.
type Replica struct {
	// URL is the base URL (http or https); request paths such as
	// /v1/chat/completions are appended to it, after its own path if it
	// has one. Required.
	URL string `koanf:"url"`
	// Weight is the replica's share of traffic relative to the others,
	// 1 to 10000. Default 1.
	Weight int `koanf:"weight"`
	// APIKeyEnv names an environment variable holding the upstream API key,
	// sent as "Authorization: Bearer <key>" (as x-api-key to a kind:
	// anthropic pool). Optional; read once, when the
	// config is loaded (ResolveSecrets).
	APIKeyEnv string `koanf:"api_key_env"`
	// APIKey is the key APIKeyEnv held when the config was loaded; it is not
	// a config key and never printed.
	APIKey Secret `koanf:"-"`
}

// Timeouts bound each upstream attempt.
type Timeouts struct {
	// Connect bounds dialing (and the TLS handshake). Default 2s.
	Connect time.Duration `koanf:"connect"`
	// FirstByte bounds the wait for the response headers once the request is
	// sent. A non-streamed completion answers only when generation is done,
	// so keep it above the longest generation. Default 300s.
	FirstByte time.Duration `koanf:"first_byte"`
	// Idle bounds the gap between two reads of the response body (between
	// streamed tokens). Default 120s.
	Idle time.Duration `koanf:"idle"`
	// Total bounds the whole request, retries included. Default 600s.
	Total time.Duration `koanf:"total"`
}

// Retry says when a failed attempt is tried again on another replica, only
// while no byte has reached the client: after a failure to deliver the
// request (a connect error, or a write that failed, so the replica cannot
// have acted on it), after a 502/503/504 answer, and, with
// FirstByteTimeout, after a streamed request's head is late. A request a
// replica may have received and not answered is not sent again: it may be
// generating.
type Retry struct {
	// Attempts is the total number of attempts, the first included; 1
	// disables retries. Default 3.
	Attempts int `koanf:"attempts"`
	// Budget is the time since the request began after which no new attempt
	// starts. Default 10s.
	Budget time.Duration `koanf:"budget"`
	// FirstByteTimeout, when set, abandons a streamed request whose
	// response head has not arrived after this long and tries another
	// replica. A replica streaming a completion sends its head at once
	// (vLLM does), so a late head means a stuck or overloaded replica;
	// the abandoned attempt's connection is closed, which vLLM takes as
	// an abort, so its prefill is spent but nothing is generated twice.
	// Leave it off for servers that do not stop on a closed connection.
	// Non-streamed requests are never abandoned: their head comes when
	// generation ends. Default 0 (off).
	FirstByteTimeout time.Duration `koanf:"first_byte_timeout"`
}

// Health configures active checks: GET Path on every replica each Interval.
type Health struct {
	// Enabled turns active checks on. Default true. With checks off, a
	// replica is healthy until the breaker ejects it.
	Enabled *bool `koanf:"enabled"`
	// Path is requested on the replica's base URL; 200 is healthy.
	// Default /health (vLLM's).
	Path string `koanf:"path"`
	// Interval between checks (plus up to 10% jitter). Default 5s.
	Interval time.Duration `koanf:"interval"`
	// Timeout of one check. Default 2s.
	Timeout time.Duration `koanf:"timeout"`
	// HealthyThreshold is the number of consecutive passes that bring an
	// unhealthy replica back. Default 1.
	HealthyThreshold int `koanf:"healthy_threshold"`
	// UnhealthyThreshold is the number of consecutive failures that take a
	// healthy replica out. Default 2.
	UnhealthyThreshold int `koanf:"unhealthy_threshold"`
}

// Breaker configures passive ejection from live traffic.
type Breaker struct {
	// Failures is the number of consecutive connect errors or 5xx answers
	// that eject a replica. Default 5.
	Failures int `koanf:"failures"`
	// Cooldown is how long an ejected replica gets no traffic before one
	// probe request is let through (half-open). It doubles with each
	// ejection in a row, up to MaxCooldown. Default 10s.
	Cooldown time.Duration `koanf:"cooldown"`
	// MaxCooldown caps the doubling. Default 5m.
	MaxCooldown time.Duration `koanf:"max_cooldown"`
}

// Prefix tunes prefix-cache affinity (Balance "prefix").
type Prefix struct {
	// BlockBytes is the size of the blocks a prompt is hashed in, in
	// bytes of the request's messages array: a match is counted in whole
	// blocks. Default 512 (about 128 tokens, eight of vLLM's 16-token KV
	// blocks). 64..65536.
	BlockBytes int `koanf:"block_bytes"`
	// IndexBlocks bounds each replica's index of the blocks sent to it
	// recently, in blocks; the least recently sent are forgotten first.
	// Each costs 8 bytes of memory. Default 16384 (8 MiB of prompt text,
	// about 2M tokens: several times what a replica such as
	// Llama-3.1-8B on one 80 GB H100 keeps in its KV cache, so the index
	// forgets after the replica does).
	IndexBlocks int `koanf:"index_blocks"`
	// LoadFactor bounds a replica's load (requests in flight, or as its
	// /metrics reports them) to this multiple of the pool's mean, per unit
	// of weight, rounded up (consistent hashing with bounded loads): a
	// conversation whose replica is over it goes to the next in its
	// rendezvous order that is not. Default 1.25. Above 1.
	LoadFactor float64 `koanf:"load_factor"`
}

// Metrics configures the scraping of each replica's Prometheus /metrics,
// off the request path: one goroutine per replica, each Interval. A
// replica whose metrics cannot be read is balanced on the gateway's own
// in-flight count until they can.
type Metrics struct {
	// Enabled turns scraping on. Default true for a kind: vllm pool with
	// balance: prefix, false otherwise.
	Enabled *bool `koanf:"enabled"`
	// Path is requested on the replica's base URL. Default /metrics
	// (vLLM's).
	Path string `koanf:"path"`
	// Interval between scrapes of one replica (plus up to 10% jitter);
	// figures older than three intervals are not used. Default 250ms.
	Interval time.Duration `koanf:"interval"`
	// Timeout of one scrape. Default 1s.
	Timeout time.Duration `koanf:"timeout"`
	// MaxBytes caps the body read; a longer one is a failed scrape.
	// Default 4 MiB (vLLM's is tens of KiB).
	MaxBytes int64 `koanf:"max_bytes"`
}

// ScrapesMetrics reports whether the replicas' /metrics are scraped.
func (c *Config) ScrapesMetrics() bool { return c.Metrics.Enabled != nil && *c.Metrics.Enabled }

// Notes are remarks on a valid config that is likely not what was meant,
// each prefixed with path.
func (c *Config) Notes(path string) []string {
	var notes []string
	if c.Balance == BalancePrefix && len(c.Replicas) == 1 {
		notes = append(notes, path+".balance: prefix with a single replica: every request goes to it; affinity starts to matter with a second replica")
	}
	return notes
}

// Secret is a credential: printed as [redacted], so a config can be
// logged whole.
type Secret string

func (Secret) String() string   { return "[redacted]" }
func (Secret) GoString() string { return `"[redacted]"` }

// ResolveSecrets reads each replica's API key from its environment
// variable. Call it once, when the config is loaded: the key in effect is
// the one read then, and a reload reads it again.
func (c *Config) ResolveSecrets() {
	for i := range c.Replicas {
		if r := &c.Replicas[i]; r.APIKeyEnv != "" {
			r.APIKey = Secret(os.Getenv(r.APIKeyEnv))
		}
	}
}

// SetDefaults fills zero fields with their defaults.
func (c *Config) SetDefaults() {
	for i := range c.Replicas {
		if c.Replicas[i].Weight == 0 {
			c.Replicas[i].Weight = 1
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	def(&c.Timeouts.Connect, 2*time.Second)
	def(&c.Timeouts.FirstByte, 300*time.Second)
	def(&c.Timeouts.Idle, 120*time.Second)
	def(&c.Timeouts.Total, 600*time.Second)
	defInt(&c.Retry.Attempts, 3)
	def(&c.Retry.Budget, 10*time.Second)
	if c.Kind == "" {
		c.Kind = KindVLLM
	}
	if c.Health.Enabled == nil {
		// Cloud APIs have no health endpoint: the breaker alone judges them.
		t := c.Kind == KindVLLM
		c.Health.Enabled = &t
	}
	if c.Health.Path == "" {
		c.Health.Path = "/health"
	}
	def(&c.Health.Interval, 5*time.Second)
	def(&c.Health.Timeout, 2*time.Second)
	defInt(&c.Health.HealthyThreshold, 1)
	defInt(&c.Health.UnhealthyThreshold, 2)
	defInt(&c.Breaker.Failures, 5)
	def(&c.Breaker.Cooldown, 10*time.Second)
	def(&c.Breaker.MaxCooldown, 5*time.Minute)
	defInt(&c.MaxIdleConns, 64)
	if c.Balance == "" {
		c.Balance = BalanceP2C
	}
	defInt(&c.Prefix.BlockBytes, 512)
	defInt(&c.Prefix.IndexBlocks, 16384)
	if c.Prefix.LoadFactor == 0 {
		c.Prefix.LoadFactor = 1.25
	}
	if c.Metrics.Enabled == nil {
		t := c.Kind == KindVLLM && c.Balance == BalancePrefix
		c.Metrics.Enabled = &t
	}
	if c.Metrics.Path == "" {
		c.Metrics.Path = "/metrics"
	}
	def(&c.Metrics.Interval, 250*time.Millisecond)
	def(&c.Metrics.Timeout, time.Second)
	if c.Metrics.MaxBytes == 0 {
		c.Metrics.MaxBytes = 4 << 20
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = 4096
	}
	if c.CacheSalt == "" {
		c.CacheSalt = CacheSaltOff
		if c.Kind == KindVLLM {
			c.CacheSalt = CacheSaltTenant
		}
	}
}

// Validate reports every problem in c, each prefixed with path (such as
// "pools[2]"). Call it after SetDefaults.
func (c *Config) Validate(path string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, field, fmt.Sprintf(format, args...)))
	}
	if c.Name == "" {
		bad("name", "required")
	}
	if c.Model == "" {
		bad("model", "required: the model name the replicas serve")
	}
	for i, a := range c.Aliases {
		if strings.TrimSpace(a) == "" {
			bad(fmt.Sprintf("aliases[%d]", i), "empty alias")
		}
	}
	switch c.Kind {
	case KindVLLM, KindOpenAI, KindAnthropic:
	default:
		bad("kind", "must be vllm, openai or anthropic, got %q", c.Kind)
	}
	switch {
	case c.CacheSalt != CacheSaltTenant && c.CacheSalt != CacheSaltOff:
		bad("cache_salt", "must be tenant or off, got %q", c.CacheSalt)
	case c.CacheSalt == CacheSaltTenant && c.Kind != KindVLLM:
		bad("cache_salt", "tenant is for kind vllm; a kind %s pool's API has no cache_salt", c.Kind)
	}
	if len(c.Replicas) == 0 {
		bad("replicas", "at least one replica is required")
	}
	seen := map[string]int{}
	for i, r := range c.Replicas {
		f := fmt.Sprintf("replicas[%d]", i)
		if _, err := parseBase(r.URL); err != nil {
			bad(f+".url", "%v", err)
		} else if j, dup := seen[r.URL]; dup {
			bad(f+".url", "duplicate of replicas[%d]", j)
		} else {
			seen[r.URL] = i
		}
		if r.Weight < 1 || r.Weight > 10000 {
			bad(f+".weight", "must be between 1 and 10000, got %d", r.Weight)
		}
		if r.APIKeyEnv != "" && r.APIKey == "" {
			bad(f+".api_key_env", "environment variable %s is not set", r.APIKeyEnv)
		}
	}
	pos := func(field string, d time.Duration) {
		if d < 0 {
			bad(field, "must not be negative, got %s", d)
		}
	}
	pos("timeouts.connect", c.Timeouts.Connect)
	pos("timeouts.first_byte", c.Timeouts.FirstByte)
	pos("timeouts.idle", c.Timeouts.Idle)
	pos("timeouts.total", c.Timeouts.Total)
	pos("retry.budget", c.Retry.Budget)
	pos("retry.first_byte_timeout", c.Retry.FirstByteTimeout)
	pos("health.interval", c.Health.Interval)
	pos("health.timeout", c.Health.Timeout)
	pos("breaker.cooldown", c.Breaker.Cooldown)
	pos("breaker.max_cooldown", c.Breaker.MaxCooldown)
	if c.Retry.Attempts < 1 || c.Retry.Attempts > 10 {
		bad("retry.attempts", "must be between 1 and 10, got %d", c.Retry.Attempts)
	}
	if !strings.HasPrefix(c.Health.Path, "/") {
		bad("health.path", "must start with '/', got %q", c.Health.Path)
	}
	if c.Health.HealthyThreshold < 1 {
		bad("health.healthy_threshold", "must be at least 1")
	}
	if c.Health.UnhealthyThreshold < 1 {
		bad("health.unhealthy_threshold", "must be at least 1")
	}
	if c.Breaker.Failures < 1 {
		bad("breaker.failures", "must be at least 1")
	}
	if c.Breaker.MaxCooldown < c.Breaker.Cooldown {
		bad("breaker.max_cooldown", "must not be below breaker.cooldown (%s)", c.Breaker.Cooldown)
	}
	if !slices.Contains(Balances, c.Balance) {
		bad("balance", "must be one of %s, got %q", strings.Join(Balances, ", "), c.Balance)
	}
	if c.Prefix.BlockBytes < 64 || c.Prefix.BlockBytes > 65536 {
		bad("prefix.block_bytes", "must be between 64 and 65536, got %d", c.Prefix.BlockBytes)
	}
	if c.Prefix.IndexBlocks < 64 || c.Prefix.IndexBlocks > 1<<24 {
		bad("prefix.index_blocks", "must be between 64 and 16777216, got %d", c.Prefix.IndexBlocks)
	}
	if !(c.Prefix.LoadFactor > 1 && c.Prefix.LoadFactor <= 100) {
		bad("prefix.load_factor", "must be above 1 and at most 100, got %v", c.Prefix.LoadFactor)
	}
	if !strings.HasPrefix(c.Metrics.Path, "/") {
		bad("metrics.path", "must start with '/', got %q", c.Metrics.Path)
	}
	if c.Metrics.Interval < 10*time.Millisecond {
		bad("metrics.interval", "must be at least 10ms, got %s", c.Metrics.Interval)
	}
	if c.Metrics.Timeout <= 0 {
		bad("metrics.timeout", "must be positive, got %s", c.Metrics.Timeout)
	}
	if c.Metrics.MaxBytes < 1024 {
		bad("metrics.max_bytes", "must be at least 1024, got %d", c.Metrics.MaxBytes)
	}
	if c.MaxIdleConns < 0 {
		bad("max_idle_conns", "must not be negative")
	}
	if c.TLS.Set() {
		errs = append(errs, c.validateTLS(path)...)
	}
	return errs
}

// validateTLS checks that the pool's tls settings apply (its replicas are
// https) and that its files hold what they should.
func (c *Config) validateTLS(path string) []error {
	var errs []error
	var plain []string
	for i, r := range c.Replicas {
		if u, err := parseBase(r.URL); err == nil && u.Scheme == "http" {
			plain = append(plain, fmt.Sprintf("replicas[%d]", i))
		}
	}
	if len(plain) > 0 {
		verb := "is"
		if len(plain) > 1 {
			verb = "are"
		}
		errs = append(errs, fmt.Errorf("%s.tls: applies to https replicas only, and %s %s http://", path, strings.Join(plain, ", "), verb))
	}
	if _, err := c.TLS.client(); err != nil {
		errs = append(errs, tlsconf.Problems(path+".tls", err)...)
	}
	return errs
}

func parseBase(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid URL %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("URL %q must be http:// or https://", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("URL %q has no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("URL %q must not carry a query, fragment or user info", raw)
	}
	return u, nil
}
