package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"

	"github.com/triagegw/triage/internal/netaddr"
	"github.com/triagegw/triage/internal/suggest"
	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/router/tlsconf"
	"github.com/triagegw/triage/router/tracing"
	"github.com/triagegw/triage/tenancy"
)

// Config is the gateway's whole configuration.
type Config struct {
	// Listen is the address the gateway serves on, host:port (triage
	// serve --listen overrides it). Default 127.0.0.1:8080. Changing it
	// takes a restart.
	Listen string `koanf:"listen"`
	// Pools are the upstream pools. At least one.
	Pools []pool.Config `koanf:"pools"`
	// DefaultPool receives requests whose model no pool serves. Optional:
	// without it such requests get 404.
	DefaultPool string `koanf:"default_pool"`
	// Rules is the routing-rules file (relative to this file) that routes
	// requests naming its alias by subject. Optional: without it the model
	// name alone selects the pool.
	Rules string `koanf:"rules"`
	// ModelsDir is where setup puts model files (tables, tokenizer),
	// relative to this file. Default $TRIAGE_MODELS, else var/models under
	// the working directory. See ModelsPath.
	ModelsDir string `koanf:"models_dir"`
	Limits    Limits `koanf:"limits"`
	Server    Server `koanf:"server"`
	Log       Log    `koanf:"log"`
	// Access is who may call and how much (API keys, policies, limits);
	// off without a keys file.
	Access tenancy.Config `koanf:"access"`
	// Tracing exports OpenTelemetry spans over OTLP/HTTP; off without an
	// endpoint. Changing it takes a restart.
	Tracing tracing.Config `koanf:"tracing"`
	// Sample keeps a redacted sample of routed prompts for labelling;
	// off without a path.
	Sample Sample `koanf:"sample"`

	// Path is the file the config was loaded from (not a config key).
	Path string `koanf:"-"`
	// rulesGiven: Rules was named on the command line (UseRules), so it is
	// relative to the working directory.
	rulesGiven bool
}

// Limits bound what a client may send.
type Limits struct {
	// MaxBodyBytes caps a request body; larger ones get 413. Accepts a
	// number of bytes or a size such as "8MiB". Default 8MiB.
	MaxBodyBytes ByteSize `koanf:"max_body_bytes"`
	// MaxHeaderBytes caps the request's header lines, names and values
	// (what a replica would receive of them); larger heads get 431.
	// uvicorn, under vLLM, refuses heads over 16 KiB. Default 16KiB.
	MaxHeaderBytes ByteSize `koanf:"max_header_bytes"`
	// MaxHeaders caps the number of request header lines; more get 431.
	// Default 100.
	MaxHeaders int `koanf:"max_headers"`
}

// Server tunes the HTTP server. Changing these takes a restart.
type Server struct {
	// ReadTimeout bounds reading a request's head and body, from its first
	// byte (for a connection's first request, from the connection's
	// start; the TLS handshake too). It does not bound the response: streams run as long as the
	// upstream's timeouts allow. Default 30s.
	ReadTimeout time.Duration `koanf:"read_timeout"`
	// IdleTimeout closes client keep-alive connections idle this long.
	// Default 120s.
	IdleTimeout time.Duration `koanf:"idle_timeout"`
	// ShutdownTimeout is how long SIGTERM waits for requests and streams in
	// flight before closing them. Default 30s.
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout"`
	// SendTimeout bounds each write to a client, as nginx's send_timeout
	// does: a client that stops reading a response (a stream it no longer
	// drains) is cut after this, and its upstream request ends. Default
	// 60s.
	SendTimeout time.Duration `koanf:"send_timeout"`
	// DebugListen, when set, serves Go's /debug/pprof profiles on this
	// address. It must be a loopback address (profiles expose memory
	// contents, prompts included) unless DebugAllowRemote is set. Default
	// off.
	DebugListen string `koanf:"debug_listen"`
	// DebugAllowRemote lets DebugListen be a non-loopback address. Default
	// false.
	DebugAllowRemote bool `koanf:"debug_allow_remote"`
	// MetricsListen, when set, serves /metrics on this address instead of
	// on listen: its series name principals and their budgets, which the
	// clients who reach listen must not read. Takes effect at restart.
	// Default off (/metrics on listen).
	MetricsListen string `koanf:"metrics_listen"`
	// TLS, when set, serves HTTPS (TLS 1.2 or later, HTTP/1.1) instead of
	// plain HTTP.
	TLS ServerTLS `koanf:"tls"`
}

// ServerTLS is the gateway's own certificate, and optionally the CA that
// clients' certificates must chain to. Paths are relative to the config
// file (Load resolves them). The files are re-read on reload (a change to
// them, or SIGHUP): new connections get the new certificate, a bad pair
// keeps the previous one. Changing the paths takes a restart.
type ServerTLS struct {
	// CertFile is the certificate chain (PEM), leaf first.
	CertFile string `koanf:"cert_file"`
	// KeyFile is the certificate's private key (PEM).
	KeyFile string `koanf:"key_file"`
	// ClientCAFile, when set, is the CA bundle (PEM) that client
	// certificates are verified against.
	ClientCAFile string `koanf:"client_ca_file"`
	// ClientAuth is "require" (the default with ClientCAFile: clients
	// without a valid certificate are refused) or "verify_if_given".
	ClientAuth string `koanf:"client_auth"`
}

// Enabled reports whether any TLS setting is given.
func (t ServerTLS) Enabled() bool { return t != ServerTLS{} }

// Load reads and checks the files t names, for serving.
func (t ServerTLS) Load() (*tlsconf.Server, error) {
	var opts []tlsconf.ServerOption
	if t.ClientCAFile != "" || t.ClientAuth != "" {
		opts = append(opts, tlsconf.ClientCA(t.ClientCAFile, t.ClientAuth))
	}
	return tlsconf.NewServer(t.CertFile, t.KeyFile, opts...)
}

// Log configures logging. The access log has one JSON line per request and
// never holds prompt text.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `koanf:"level"`
	// Access turns the per-request access log on. Default true.
	Access *bool `koanf:"access"`
}

// Sample is the sample of live prompts kept for `triage label`: off
// unless Path is set. Each record holds the conversation text the
// classifier saw, redacted (e-mail addresses, phone and card-like numbers,
// API-key-like strings), the decision and the rules version; the
// principal only with Principal. Changes apply on reload; the file's
// rotation settings are those of its first open.
type Sample struct {
	// Path is the JSONL file records are appended to (mode 0600), relative
	// to the config. Default: none, sampling off.
	Path string `koanf:"path"`
	// Rate is the share of requests routed by subject that are sampled,
	// above 0 and at most 1. Default 0.01.
	Rate float64 `koanf:"rate"`
	// MaxPerHour caps the records taken in one clock hour. Default 1000.
	MaxPerHour int `koanf:"max_per_hour"`
	// MaxBytes rotates the file past this size, a number of bytes or a
	// size such as 64MiB. Default 64MiB.
	MaxBytes ByteSize `koanf:"max_bytes"`
	// Keep is how many rotated files are kept (PATH.1 ... PATH.N); the
	// sample takes at most (Keep+1)·MaxBytes on disk. Default 3.
	Keep int `koanf:"keep"`
	// Principal records the name of the principal who sent each prompt
	// (with access control), and the time to the second rather than the
	// hour. Default false.
	Principal bool `koanf:"principal"`
}

// Enabled reports whether sampling is on.
func (s *Sample) Enabled() bool { return s.Path != "" }

// ByteSize is a size in bytes that may be written as a number or with a
// unit: B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024).
type ByteSize int64

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	num, unit := strings.TrimSpace(s[:i]), strings.TrimSpace(s[i:])
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("invalid size %q: want a number of bytes or a size such as 8MiB", s)
	}
	mult := map[string]int64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	if mult == 0 {
		return fmt.Errorf("invalid size %q: unknown unit %q (B, KB, MB, GB, KiB, MiB, GiB)", s, unit)
	}
	if n > (1<<63-1)/mult { // n*mult would overflow int64
		return fmt.Errorf("invalid size %q: too large", s)
	}
	*b = ByteSize(n * mult)
	return nil
}

// AccessLog reports whether the access log is on.
func (l Log) AccessLog() bool { return l.Access == nil || *l.Access }

// SetDefaults fills zero fields with their defaults.
func (c *Config) SetDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Limits.MaxBodyBytes == 0 {
		c.Limits.MaxBodyBytes = 8 << 20
	}
	if c.Limits.MaxHeaderBytes == 0 {
		c.Limits.MaxHeaderBytes = 16 << 10
	}
	if c.Limits.MaxHeaders == 0 {
		c.Limits.MaxHeaders = 100
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Server.ReadTimeout, 30*time.Second)
	def(&c.Server.IdleTimeout, 120*time.Second)
	def(&c.Server.ShutdownTimeout, 30*time.Second)
	def(&c.Server.SendTimeout, 60*time.Second)
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	c.Tracing.SetDefaults()
	if c.Sample.Rate == 0 {
		c.Sample.Rate = 0.01
	}
	if c.Sample.MaxPerHour == 0 {
		c.Sample.MaxPerHour = 1000
	}
	if c.Sample.MaxBytes == 0 {
		c.Sample.MaxBytes = 64 << 20
	}
	if c.Sample.Keep == 0 {
		c.Sample.Keep = 3
	}
	for i := range c.Pools {
		c.Pools[i].SetDefaults()
	}
}

// Notes lists remarks on a valid config that may not be what was meant
// (balance: prefix on a pool of one replica, say), each with its path.
func (c *Config) Notes() []string {
	var notes []string
	for i := range c.Pools {
		notes = append(notes, c.Pools[i].Notes(fmt.Sprintf("pools[%d]", i))...)
	}
	return notes
}

// Validate reports every problem in c, each with its path.
func (c *Config) Validate() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if len(c.Pools) == 0 {
		bad("pools", "at least one pool is required")
	}
	names := map[string]int{}
	models := map[string]string{} // client-visible name -> where it is defined
	for i := range c.Pools {
		p := &c.Pools[i]
		path := fmt.Sprintf("pools[%d]", i)
		errs = append(errs, p.Validate(path)...)
		if p.Name != "" {
			if j, dup := names[p.Name]; dup {
				bad(path+".name", "duplicate pool name %q (also pools[%d])", p.Name, j)
			}
			names[p.Name] = i
		}
		claim := func(field, name string) {
			if name == "" {
				return
			}
			if other, dup := models[name]; dup {
				bad(path+"."+field, "model name %q is already served by %s", name, other)
				return
			}
			models[name] = path + "." + field
		}
		claim("model", p.Model)
		for j, a := range p.Aliases {
			claim(fmt.Sprintf("aliases[%d]", j), a)
		}
	}
	if c.DefaultPool != "" {
		if _, ok := names[c.DefaultPool]; !ok {
			bad("default_pool", "no pool named %q", c.DefaultPool)
		}
	}
	if c.Limits.MaxBodyBytes < 1 {
		bad("limits.max_body_bytes", "must be positive")
	}
	if c.Limits.MaxHeaderBytes < 1 {
		bad("limits.max_header_bytes", "must be positive")
	}
	if c.Limits.MaxHeaders < 1 {
		bad("limits.max_headers", "must be positive")
	}
	if err := checkAddr(c.Listen); err != nil {
		bad("listen", "%v", err)
	}
	if a := c.Server.MetricsListen; a != "" {
		if err := checkAddr(a); err != nil {
			bad("server.metrics_listen", "%v", err)
		} else if a == c.Listen {
			bad("server.metrics_listen", "%s is listen's address: metrics apart must be on another", a)
		}
	}
	if a := c.Server.DebugListen; a != "" {
		if err := checkAddr(a); err != nil {
			bad("server.debug_listen", "%v", err)
		} else if !c.Server.DebugAllowRemote && !netaddr.LoopbackAddr(a) {
			bad("server.debug_listen", "%q is not a loopback address: profiles expose the process's memory, prompts included; use 127.0.0.1:PORT, or set server.debug_allow_remote: true to serve them on %q anyway", a, a)
		}
	}
	for path, d := range map[string]time.Duration{
		"server.read_timeout": c.Server.ReadTimeout, "server.send_timeout": c.Server.SendTimeout,
		"server.idle_timeout": c.Server.IdleTimeout, "server.shutdown_timeout": c.Server.ShutdownTimeout,
	} {
		if d < 0 {
			bad(path, "must not be negative, got %s", d)
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	// Names the policies use, and the keys file, are checked where the
	// rules are known and the keys are read (the gateway's Apply, which
	// serve --check runs); here, their shape.
	errs = append(errs, c.Access.Validate(tenancy.Known{})...)
	errs = append(errs, c.Tracing.Validate("tracing")...)
	if r := c.Sample.Rate; !(r > 0 && r <= 1) {
		bad("sample.rate", "must be above 0 and at most 1, got %v (to turn sampling off, remove sample.path)", r)
	}
	if c.Sample.MaxPerHour < 0 {
		bad("sample.max_per_hour", "must not be negative, got %d", c.Sample.MaxPerHour)
	}
	if c.Sample.MaxBytes < 1 {
		bad("sample.max_bytes", "must be positive")
	}
	if c.Sample.Keep < 1 {
		bad("sample.keep", "must be at least 1, got %d", c.Sample.Keep)
	}
	if c.Server.TLS.Enabled() {
		if _, err := c.Server.TLS.Load(); err != nil {
			errs = append(errs, tlsconf.Problems("server.tls", err)...)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return &Error{Path: c.Path, Problems: errs}
}

// checkAddr checks an address to listen on: host:port, the host an IP
// address, a host name or empty (every interface), the port a number.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not an address to listen on: want host:port, such as 127.0.0.1:8080 (this machine only) or 0.0.0.0:8080 (every interface)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: the port %q is not a number from 0 to 65535", addr, port)
	}
	if host != "" && net.ParseIP(host) == nil && !hostName(host) {
		return fmt.Errorf("%q: the host %q is neither an IP address nor a host name", addr, host)
	}
	return nil
}

// hostName reports whether s is a syntactically valid DNS host name.
func hostName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// RulesPath is the rules file's path, resolved against the config file's
// directory (or, after UseRules, the working directory); empty when there
// is none.
func (c *Config) RulesPath() string {
	if c.Rules == "" || filepath.IsAbs(c.Rules) || c.rulesGiven {
		return c.Rules
	}
	return filepath.Join(filepath.Dir(c.Path), c.Rules)
}

// UseRules replaces the config's rules with path, a file named on the
// command line: relative to the working directory, not to the config.
// Everything else the config names (models_dir, TLS files) stays relative
// to the config file.
func (c *Config) UseRules(path string) {
	c.Rules, c.rulesGiven = path, path != ""
}

// resolveFiles makes the TLS file paths relative to the config file's
// directory, as the rules path is.
func (c *Config) resolveFiles() {
	dir := filepath.Dir(c.Path)
	rel := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	rel(&c.Access.KeysFile)
	rel(&c.Access.JWT.JWKSFile)
	rel(&c.Access.StateFile)
	rel(&c.Access.UsageLog)
	rel(&c.Sample.Path)
	rel(&c.Server.TLS.CertFile)
	rel(&c.Server.TLS.KeyFile)
	rel(&c.Server.TLS.ClientCAFile)
	for i := range c.Pools {
		t := &c.Pools[i].TLS
		rel(&t.CAFile)
		rel(&t.CertFile)
		rel(&t.KeyFile)
	}
}

// ModelsPath is the models directory: models_dir resolved against the
// config file's directory, else $TRIAGE_MODELS, else var/models.
func (c *Config) ModelsPath() string {
	p, _ := c.models()
	return p
}

// ModelsOrigin says where ModelsPath comes from, for a message about a
// file missing from it: "models_dir: ../../var/models in
// examples/subjects/triage.yaml, relative to that file", "$TRIAGE_MODELS
// (...)", "the default, under the working directory (...)".
func (c *Config) ModelsOrigin() string {
	_, why := c.models()
	return why
}

func (c *Config) models() (path, why string) {
	name := c.Path
	if name == "" {
		name = "the config"
	}
	switch {
	case c.ModelsDir != "" && filepath.IsAbs(c.ModelsDir):
		return c.ModelsDir, fmt.Sprintf("models_dir: %s in %s", c.ModelsDir, name)
	case c.ModelsDir != "":
		return filepath.Join(filepath.Dir(c.Path), c.ModelsDir), fmt.Sprintf("models_dir: %s in %s, relative to that file", c.ModelsDir, name)
	case os.Getenv(ModelsEnv) != "":
		return os.Getenv(ModelsEnv), fmt.Sprintf("$%s (%s sets no models_dir)", ModelsEnv, name)
	}
	return DefaultModelsDir, fmt.Sprintf("the default, under the working directory (%s sets no models_dir, and %s is not set)", name, ModelsEnv)
}

// ModelsEnv names the models directory when a config does not, and
// DefaultModelsDir is the one used when neither does: where setup puts
// model files, relative to the working directory.
const (
	ModelsEnv        = "TRIAGE_MODELS"
	DefaultModelsDir = "var/models"
)

// PoolNames lists the pools by name.
func (c *Config) PoolNames() map[string]bool {
	m := map[string]bool{}
	for _, p := range c.Pools {
		m[p.Name] = true
	}
	return m
}

// Error lists every problem found in a config file.
type Error struct {
	Path     string
	Problems []error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config %s: %d problem(s):", e.Path, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap returns the problems, so errors.Is and errors.As see each one.
func (e *Error) Unwrap() []error { return e.Problems }

// EnvPrefix starts every environment override. TRIAGE_LISTEN sets listen;
// a double underscore descends a level: TRIAGE_LIMITS__MAX_BODY_BYTES sets
// limits.max_body_bytes. Only scalar keys outside lists can be overridden;
// variables that name no such key are ignored, and EnvWarnings lists the
// ones that are not the project's other variables (OtherEnv).
const EnvPrefix = "TRIAGE_"

// OtherEnv are the variables with EnvPrefix that triage, its scripts and
// its tests use for other things than config keys; an entry ending in "_"
// stands for every variable it starts.
var OtherEnv = []string{
	ModelsEnv,           // the models directory (setup, the commands, the tests)
	"TRIAGE_SHARED",     // the shared datasets (setup, the tests)
	"TRIAGE_ORT_LIB",    // the ONNX Runtime library
	"TRIAGE_HUB_CACHE",  // models pull, datasets fetch
	"TRIAGE_REQUIRE_",   // the tests: fail instead of skipping
	"TRIAGE_BENCH_BERT", // benchmarks
	"TRIAGE_QUANT_DEV",
	"TRIAGE_STUDY_",
	"TRIAGE_TEST_",
}

// EnvWarnings lists, one message each, the variables of environ (as
// os.Environ gives them) that start with EnvPrefix but set no config key
// and are neither one of OtherEnv nor a replica's api_key_env: they are
// ignored, and a typo such as TRIAGE_LISTN would otherwise go unnoticed.
func (c *Config) EnvWarnings(environ []string) []string {
	keys := scalarKeys(reflect.TypeOf(Config{}), "")
	names := make([]string, 0, len(keys)+len(OtherEnv))
	for k := range keys {
		names = append(names, envName(k))
	}
	used := map[string]bool{}
	for _, p := range c.Pools {
		for _, r := range p.Replicas {
			used[r.APIKeyEnv] = true
		}
	}
	for _, env := range c.Tracing.HeadersEnv {
		used[env] = true
	}
	for _, o := range OtherEnv {
		if !strings.HasSuffix(o, "_") {
			names = append(names, o)
		}
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || used[name] || keys[envKey(name)] || otherEnv(name) {
			continue
		}
		msg := fmt.Sprintf("%s is set but sets no config key, so it is ignored", name)
		if s := suggest.Closest(name, names); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		} else if top, _, _ := strings.Cut(envKey(name), "."); top == "pools" {
			msg += " (keys inside pools, a list, can only be set in the file)"
		} else {
			msg += " (an override is TRIAGE_ and the key in capitals, __ between levels: TRIAGE_LISTEN, TRIAGE_LOG__LEVEL)"
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

func otherEnv(name string) bool {
	for _, o := range OtherEnv {
		if name == o || strings.HasSuffix(o, "_") && strings.HasPrefix(name, o) {
			return true
		}
	}
	return false
}

// envKey is the config key a variable names: TRIAGE_LOG__LEVEL is
// log.level.
func envKey(name string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, EnvPrefix), "__", "."))
}

// envName is the variable that sets key: log.level is TRIAGE_LOG__LEVEL.
func envName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

// Load reads path, applies environment overrides, fills defaults and
// validates. The error, when not nil, lists every problem found.
func Load(path string) (*Config, error) {
	k := koanf.New(".")
	if err := k.Load(file.Provider(path), bounded(yaml.Parser())); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	var problems []error
	problems = append(problems, unknownKeys(k.Raw(), reflect.TypeOf(Config{}), "")...)

	known := scalarKeys(reflect.TypeOf(Config{}), "")
	err := k.Load(env.Provider(".", env.Opt{
		Prefix: EnvPrefix,
		TransformFunc: func(key, v string) (string, any) {
			key = envKey(key)
			if !known[key] {
				return "", nil // not ours: ignored
			}
			return key, v
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("config %s: environment: %w", path, err)
	}

	var c Config
	dec := &mapstructure.DecoderConfig{
		TagName:          "koanf",
		WeaklyTypedInput: true,
		Result:           &c,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			durationHook,
			wholeNumberHook,
			mapstructure.TextUnmarshallerHookFunc(),
		),
	}
	if err := k.UnmarshalWithConf("", &c, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: dec}); err != nil {
		problems = append(problems, decodeProblems(err)...)
	}
	c.Path = path
	c.resolveFiles()
	for i := range c.Pools {
		c.Pools[i].ResolveSecrets()
	}
	c.Tracing.ResolveSecrets()
	c.SetDefaults()
	// Validate what decoded, so one typo does not hide the other problems;
	// a field that failed to decode is reported once, by the decoder.
	if err := c.Validate(); err != nil {
		var ve *Error
		if errors.As(err, &ve) {
			for _, p := range ve.Problems {
				if !coveredBy(p.Error(), problems) {
					problems = append(problems, p)
				}
			}
		}
	}
	if len(problems) > 0 {
		return nil, &Error{Path: path, Problems: problems}
	}
	return &c, nil
}

// coveredBy reports whether a validation problem is about a field a
// decoding problem already names.
func coveredBy(problem string, decoding []error) bool {
	field, _, _ := strings.Cut(problem, ": ")
	for _, d := range decoding {
		p, _, _ := strings.Cut(d.Error(), ": ")
		if p == field || strings.HasPrefix(field, p+".") || strings.HasPrefix(field, p+"[") {
			return true
		}
	}
	return false
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	byteSizeType = reflect.TypeOf(ByteSize(0))
)

// durationHook decodes a duration written with its unit ("500ms", "2s",
// "5m"). A bare number other than 0 is refused: YAML reads "connect: 5" as
// the integer 5, which would otherwise be 5 nanoseconds.
func durationHook(_, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	if s, ok := data.(string); ok {
		s = strings.TrimSpace(s)
		if d, err := time.ParseDuration(s); err == nil {
			return d, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			if f == 0 {
				return time.Duration(0), nil
			}
			return nil, bareDuration(s)
		}
		return nil, fmt.Errorf("invalid duration %q: use a number with a unit, such as 500ms, 2s or 5m", s)
	}
	v := reflect.ValueOf(data)
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		if v.IsZero() {
			return time.Duration(0), nil
		}
		return nil, bareDuration(fmt.Sprint(data))
	}
	return data, nil
}

func bareDuration(n string) error {
	return fmt.Errorf("%s has no unit: write %ss for %s seconds (or %sms, %sm)", n, n, n, n, n)
}

// wholeNumberHook refuses a number with a fraction where a whole one is
// wanted: decoding would truncate "attempts: 2.9" to 2 without a word.
func wholeNumberHook(_, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	var f float64
	switch x := data.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	default:
		return data, nil
	}
	what := "a whole number"
	if to == byteSizeType {
		what = "a whole number of bytes, or a size with a unit such as 8MiB"
	}
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f):
		return nil, fmt.Errorf("%v is not %s", f, what)
	case f >= 1<<63 || f < -(1<<63):
		return nil, fmt.Errorf("%v is too large", f)
	}
	return data, nil
}

// decodeProblems splits mapstructure's combined error into one problem per
// field.
func decodeProblems(err error) []error {
	var out []error
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		if line == "" || strings.HasPrefix(line, "decoding failed") || strings.HasSuffix(line, "error(s) decoding:") {
			continue
		}
		// mapstructure writes "'path' problem"; say "path: problem".
		if strings.HasPrefix(line, "'") {
			if i := strings.Index(line[1:], "' "); i >= 0 {
				line = line[1:i+1] + ": " + line[i+3:]
			}
		}
		out = append(out, errors.New(line))
	}
	if len(out) == 0 {
		out = append(out, err)
	}
	return out
}

// unknownKeys walks the raw YAML against the Config type and reports keys
// that name no field, with a suggestion when a field is one typo away.
func unknownKeys(raw any, t reflect.Type, path string) []error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var errs []error
	switch t.Kind() {
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			return nil // a type mismatch; decoding reports it
		}
		fields := map[string]reflect.StructField{}
		for i := range t.NumField() {
			f := t.Field(i)
			if tag := f.Tag.Get("koanf"); tag != "" && tag != "-" {
				fields[tag] = f
			}
		}
		if t == reflect.TypeOf(ByteSize(0)) || t == reflect.TypeOf(time.Duration(0)) {
			return nil
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := join(path, k)
			f, ok := fields[k]
			if !ok {
				msg := "unknown field"
				if s := suggest.Closest(k, slices.Collect(maps.Keys(fields))); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				errs = append(errs, fmt.Errorf("%s: %s", p, msg))
				continue
			}
			errs = append(errs, unknownKeys(m[k], f.Type, p)...)
		}
	case reflect.Slice:
		l, ok := raw.([]any)
		if !ok {
			return nil
		}
		for i, v := range l {
			errs = append(errs, unknownKeys(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return errs
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// scalarKeys lists the dotted keys of scalar fields reachable without
// crossing a list: the keys an environment variable may set.
func scalarKeys(t reflect.Type, path string) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("koanf")
		if tag == "" || tag == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			for k := range scalarKeys(ft, join(path, tag)) {
				out[k] = true
			}
		case ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map:
		default:
			out[join(path, tag)] = true
		}
	}
	return out
}

// Exists reports whether path names a readable file, for a clear message
// before koanf's.
func Exists(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	return nil
}

// KeysFile is the access.keys_file the config at path names, resolved
// against its directory ("" when it names none). Only that key is read,
// so `triage keys create` can name a file the config will load once it
// exists.
func KeysFile(path string) (string, error) {
	k := koanf.New(".")
	if err := k.Load(file.Provider(path), bounded(yaml.Parser())); err != nil {
		return "", fmt.Errorf("config %s: %w", path, err)
	}
	p := k.String("access.keys_file")
	if p != "" && !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(path), p)
	}
	return p, nil
}
