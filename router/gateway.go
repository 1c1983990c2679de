package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/h1"
	"github.com/triagegw/triage/router/metrics"
	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/router/proxy"
	"github.com/triagegw/triage/router/tracing"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/sample"
	"github.com/triagegw/triage/shadow"
	"github.com/triagegw/triage/tenancy"
)

// gin is this package's business, and its debug mode prints to stdout.
func init() { gin.SetMode(gin.ReleaseMode) }

// Options wires a Gateway.
type Options struct {
	// Logger receives events (health changes, reloads, panics); nil
	// discards.
	Logger *slog.Logger
	// AccessLog receives one JSON line per request, in one Write each; nil
	// discards. Give it a writer that does not block (logsink.Writer).
	AccessLog io.Writer
	// Registry is where metrics register and what /metrics serves; nil
	// means a new registry.
	Registry *prometheus.Registry
	// Transport forwards requests; nil means a new one.
	Transport *proxy.Transport
	// PoolOptions are passed to every pool built (a clock or a health
	// checker in tests).
	PoolOptions []pool.Option
	// ShadowLog returns the writer of the shadow decision log at path (the
	// rules' shadow.log), called when a snapshot is built; nil, or a nil
	// writer, logs nothing (agreement is still counted). Give writers that
	// do not block (logsink.Writer).
	ShadowLog func(path string) (io.Writer, error)
	// UsageLog returns the writer of the usage log at path (access.usage_log),
	// rotated past maxBytes keeping keep old files; nil: no usage log. Give
	// writers that do not block (logsink.Files).
	UsageLog func(path string, maxBytes int64, keep int) (io.Writer, error)
	// SampleLog returns the writer of the prompt sample at path
	// (sample.path), mode 0600, rotated past maxBytes keeping keep old
	// files; nil: no sampling. Give writers that do not block
	// (logsink.Files.OpenPrivate).
	SampleLog func(path string, maxBytes int64, keep int) (io.Writer, error)
	// SampleQueue bounds the sampled requests waiting for the sampler's
	// worker; default sample.DefaultQueue.
	SampleQueue int
	// ShadowQueue bounds the requests waiting for a shadow decision;
	// default shadow.DefaultQueue.
	ShadowQueue int
	// SpanExporter, when not nil, receives the spans in place of the
	// OTLP endpoint (tests, benchmarks); tracing is on then, whatever
	// tracing.endpoint says.
	SpanExporter sdktrace.SpanExporter
}

// Gateway is the running gateway: handlers over the current snapshot.
type Gateway struct {
	// metricsApart: /metrics is served on server.metrics_listen (by
	// MetricsHandler's caller), not on the gateway's own listener.
	metricsApart bool

	log       *slog.Logger
	access    io.Writer
	reg       *prometheus.Registry
	metrics   *metrics.Metrics
	tr        *proxy.Transport
	poolOpts  []pool.Option
	engine    *gin.Engine
	shadow    *shadow.Runner
	split     *splitter
	shadowLog func(string) (io.Writer, error)
	usageLog  func(string, int64, int) (io.Writer, error)
	sampleLog func(string, int64, int) (io.Writer, error)
	sampler   *sample.Sampler
	// tracer is nil with tracing off; tracing.* changes take a restart.
	tracer *tracing.Tracer

	limiter  *tenancy.Limiter // limit counts, kept across snapshots
	stopJWT  func()           // stops the JWKS refresh of the snapshot in effect (under applyMu)
	redis    tenancy.Store    // the state replicas share (limits, budgets, sessions, Responses index); nil: this replica's alone
	share    *sessionShare    // sessions shared through redis; nil without it
	snap     atomic.Pointer[snapshot]
	applyMu  sync.Mutex
	changed  chan struct{} // kicks Run to start or stop health checks
	draining atomic.Bool
	served   atomic.Uint64 // requests answered on the OpenAI endpoints
	// responses maps each Responses answer's id to where it was made.
	responses *responseIndex
	// sessions keeps conversations on their route, for the gateway's
	// life: a snapshot whose rules keep sessions borrows it, and Apply
	// puts the rules' session settings in effect on it (the defaults
	// until then). The other replicas' sessions are learned into it
	// whatever the snapshot in effect.
	sessions *rules.Sessions
}

// snapshot is one immutable configuration in effect.
type snapshot struct {
	version  uint64
	loadedAt time.Time
	cfg      *config.Config
	pools    []*poolEntry
	byName   map[string]*poolEntry
	models   map[string]*poolEntry // model names and aliases
	def      *poolEntry
	table    *modelTable
	rules    *rules.Set // nil without a rules file
	// conv is the rules' conversation window, as the wire format applies it.
	conv openai.Conversation
	// sessions is the gateway's, borrowed while the rules keep sessions;
	// nil: they keep none.
	sessions      *rules.Sessions
	sessionHeader string        // canonical
	shadowOut     io.Writer     // the shadow decision log; nil: none
	modelList     []byte        // the /v1/models body without access control
	listed        []listedModel // what /v1/models lists, for access control to filter
	// split is the rules' live split; nil: none.
	split *splitState
	// access is who may call and how much; nil: everyone, without limit.
	access *tenancy.Snapshot
	// usageOut is the usage log (access.usage_log); nil: none.
	usageOut io.Writer
	// sampleOut is the prompt sample (sample.path); nil: sampling off.
	sampleOut  io.Writer
	sampleOpts sample.Options
}

// poolEntry is a pool and what the request path needs of it, resolved once.
type poolEntry struct {
	pool   *pool.Pool
	policy proxy.Policy // how its requests are forwarded
	model  string
	tok    []byte // model as a JSON string token, for the splice
	// askUsage: ask for a stream's usage when the client did not
	// (pool.Config.StreamUsage).
	askUsage  bool
	kind      string // pool.Config.Kind
	maxTokens int64  // pool.Config.DefaultMaxTokens
	drop      bool   // pool.Config.DropUnsupported
	salts     bool   // pool.Config.Salts: with access control, requests carry their tenant's cache_salt
	m         *metrics.Pool
}

// New builds a Gateway serving cfg, routing by routing (nil: by model name
// alone).
func New(cfg *config.Config, routing *rules.Set, o Options) (*Gateway, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AccessLog == nil {
		o.AccessLog = io.Discard
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Transport == nil {
		o.Transport = &proxy.Transport{}
	}
	g := &Gateway{
		log:          o.Logger,
		access:       o.AccessLog,
		reg:          o.Registry,
		metrics:      metrics.New(o.Registry),
		tr:           o.Transport,
		poolOpts:     o.PoolOptions,
		changed:      make(chan struct{}, 1),
		shadowLog:    o.ShadowLog,
		usageLog:     o.UsageLog,
		sampleLog:    o.SampleLog,
		sampler:      sample.New(o.SampleQueue),
		limiter:      tenancy.NewLimiter(),
		responses:    newResponseIndex(responseIndexSize),
		sessions:     rules.NewSessions(rules.Session{Turns: rules.DefaultSessionTurns, Size: rules.DefaultSessionSize}),
		metricsApart: cfg.Server.MetricsListen != "",
	}
	if rc := cfg.Access.Redis; rc.Enabled() {
		store, err := tenancy.NewRedisStore(rc, g.log)
		if err != nil {
			return nil, fmt.Errorf("access.redis: %w", err)
		}
		g.limiter.Share(store, rc.FailClosed)
		g.redis = store
		g.share = newSessionShare(store)
		g.sessions.Recorded = g.share.offer
	}
	if p := cfg.Access.StateFile; p != "" {
		// What the budgets had spent before a restart (a reload keeps the
		// limiter, so only New reads it).
		if err := g.limiter.Load(p); err != nil {
			return nil, fmt.Errorf("access.state_file: %w", err)
		}
	}
	if cfg.Tracing.Enabled() || o.SpanExporter != nil {
		t, err := tracing.New(cfg.Tracing, o.SpanExporter)
		if err != nil {
			return nil, err
		}
		g.tracer = t
		metrics.RegisterTracing(o.Registry, t.Dropped)
	}
	g.shadow = shadow.NewRunner(o.ShadowQueue, g.metrics)
	g.split = newSplitter(o.Registry)
	metrics.RegisterBackends(o.Registry, g.backendStates, g.choiceCounts)
	metrics.RegisterBudgets(o.Registry, g.budgetStates)
	metrics.RegisterShared(o.Registry, g.limiter.Degraded)
	metrics.RegisterTier2(o.Registry, g.tier2State)
	metrics.RegisterSampling(o.Registry, g.sampleCounts)
	if err := g.Apply(cfg, routing); err != nil {
		_ = g.Shutdown(context.Background())
		return nil, err
	}
	g.engine = g.newEngine()
	return g, nil
}

// Shutdown ends what outlives the requests: it exports the spans still
// queued, within ctx, and stops the exporter. Call it once the server has
// drained; spans of requests served after it are not exported.
func (g *Gateway) Shutdown(ctx context.Context) error {
	if g.tracer == nil {
		return nil
	}
	if err := g.tracer.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	return nil
}

// HTTPServer returns the server to run Handler with: h1's, which serves
// plain HTTP/1.1 requests itself and hands anything else to net/http. Its
// ReadTimeout bounds a request's head and body, and only those, so streams
// are not cut by it (TestStreamOutlivesReadTimeout holds this). Changes to
// server.* take effect at restart.
func (g *Gateway) HTTPServer(errLog *log.Logger) *h1.Server {
	c := g.snap.Load().cfg
	return &h1.Server{
		Handler:     g.engine,
		ReadTimeout: c.Server.ReadTimeout,
		IdleTimeout: c.Server.IdleTimeout,
		SendTimeout: c.Server.SendTimeout,
		// limits.max_header_bytes is enforced by the handler, which
		// answers in OpenAI's shape; net/http's own bound stays above it
		// and only stops heads too large to be worth reading.
		MaxHeaderBytes: max(1<<20, 2*int(c.Limits.MaxHeaderBytes)),
		ErrorLog:       errLog,
	}
}

// Handler is the gateway's HTTP handler.
func (g *Gateway) Handler() http.Handler { return g.engine }

// Metrics exposes the collectors, for the reload counter.
func (g *Gateway) Metrics() *metrics.Metrics { return g.metrics }

// RulesVersion is the version of the rules in effect ("" without rules).
func (g *Gateway) RulesVersion() string {
	if r := g.snap.Load().rules; r != nil {
		return r.Version()
	}
	return ""
}

// Version is the number of the snapshot in effect: 1 after New, plus one
// per successful Apply.
func (g *Gateway) Version() uint64 { return g.snap.Load().version }

// Apply validates cfg's pools and swaps in a snapshot built from it and the
// rules (config, rules, heads and floors are one unit). Pools whose
// configuration did not change keep their state (health, breaker, in-flight
// counts). Requests in flight finish on the snapshot they began with. On
// error the current snapshot stays.
func (g *Gateway) Apply(cfg *config.Config, routing *rules.Set) error {
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	if err := cfg.Validate(); err != nil {
		return err
	}
	old := g.snap.Load()
	s := &snapshot{cfg: cfg, loadedAt: time.Now(), byName: map[string]*poolEntry{}, models: map[string]*poolEntry{}}
	if old != nil {
		s.version = old.version
		if old.cfg.Listen != cfg.Listen {
			g.log.Warn("listen address changed; it takes effect at restart", "old", old.cfg.Listen, "new", cfg.Listen)
		}
		if old.cfg.Access.Redis != cfg.Access.Redis {
			g.log.Warn("access.redis changed; it takes effect at restart")
		}
		if !reflect.DeepEqual(old.cfg.Tracing, cfg.Tracing) {
			g.log.Warn("tracing changed; it takes effect at restart")
		}
	}
	s.version++
	for i := range cfg.Pools {
		pc := cfg.Pools[i]
		var e *poolEntry
		if old != nil {
			if prev, ok := old.byName[pc.Name]; ok && samePool(prev.pool, pc) {
				e = prev
			}
		}
		if e == nil {
			p, err := pool.New(pc, g.poolOpts...)
			if err != nil {
				return fmt.Errorf("pools[%d]: %w", i, err)
			}
			e = &poolEntry{pool: p, policy: proxy.PolicyOf(&pc), model: pc.Model, tok: openai.Quote(pc.Model), askUsage: pc.AsksStreamUsage(), kind: pc.Kind, maxTokens: pc.DefaultMaxTokens, drop: pc.DropUnsupported, salts: pc.Salts(), m: g.metrics.Pool(pc.Name)}
		}
		s.pools = append(s.pools, e)
		s.byName[pc.Name] = e
		s.models[pc.Model] = e
		for _, a := range pc.Aliases {
			s.models[a] = e
		}
	}
	if cfg.DefaultPool != "" {
		s.def = s.byName[cfg.DefaultPool]
	}
	s.table = &modelTable{models: s.models, def: s.def}
	if routing != nil {
		for _, a := range routing.Aliases() {
			if e, taken := s.models[a]; taken {
				return fmt.Errorf("rules alias %q is also a model name of pool %q: one name cannot mean both", a, e.pool.Name())
			}
		}
		s.rules = routing
		w := routing.Window()
		s.conv = openai.Conversation{UserTurns: w.UserTurns, System: w.System, MaxBytes: w.MaxBytes}
		if cfg := routing.Sessions(); cfg.Enabled {
			if cfg.Header != "" {
				s.sessionHeader = http.CanonicalHeaderKey(cfg.Header)
			}
			s.sessions = g.sessions // configured once the snapshot is sure to be applied
		}
		if p := routing.ShadowLog(); p != "" && g.shadowLog != nil {
			w, err := g.shadowLog(p)
			if err != nil {
				return fmt.Errorf("shadow.log: %w", err)
			}
			s.shadowOut = w
		}
		if err := g.applySplit(s, routing); err != nil {
			return err
		}
		if sc := cfg.Sample; sc.Enabled() && g.sampleLog != nil {
			w, err := g.sampleLog(sc.Path, int64(sc.MaxBytes), sc.Keep)
			if err != nil {
				return fmt.Errorf("sample.path: %w", err)
			}
			s.sampleOut = w
			s.sampleOpts = sample.Options{Rate: sc.Rate, PerHour: int64(sc.MaxPerHour), Principal: sc.Principal}
		}
	}
	var jwt *tenancy.JWT
	if cfg.Access.Enabled() {
		as, j, err := g.compileAccess(cfg, s)
		if err != nil {
			return err
		}
		s.access, jwt = as, j
		g.checkSalts(cfg, as)
		if p := cfg.Access.UsageLog; p != "" && g.usageLog != nil {
			w, err := g.usageLog(p, cfg.Access.UsageLogSize(), tenancy.UsageLogKeep)
			if err != nil {
				return fmt.Errorf("access.usage_log: %w", err)
			}
			s.usageOut = w
		}
	}
	s.listed = listModels(s)
	s.modelList = renderModels(s.listed)
	if s.sessions != nil {
		// Conversations outlive the reload, whatever their settings: a
		// new size keeps the most recently used, and each session goes
		// where its route goes now (ended if the route is gone).
		s.sessions.Configure(routing.Sessions())
	}
	g.snap.Store(s)
	g.runJWT(jwt)
	if s.access != nil {
		s.access.Retain()
	} else {
		g.limiter.Retain(nil)
	}
	if routing != nil {
		g.metrics.RulesVersion(routing.Version())
	} else {
		g.metrics.RulesVersion("")
	}

	keep := map[string]bool{}
	for _, e := range s.pools {
		for _, b := range e.pool.Backends() {
			keep[b.Key] = true
		}
	}
	g.tr.Retain(keep)
	select {
	case g.changed <- struct{}{}:
	default:
	}
	return nil
}

// compileAccess reads the keys file and compiles the access policies
// against the snapshot's pools, model names and rules.
func (g *Gateway) compileAccess(cfg *config.Config, s *snapshot) (*tenancy.Snapshot, *tenancy.JWT, error) {
	known := tenancy.Known{Pools: []string{}, Models: []string{}}
	for _, e := range s.pools {
		known.Pools = append(known.Pools, e.pool.Name())
	}
	for name := range s.models {
		known.Models = append(known.Models, name)
	}
	if s.rules != nil {
		known.Models = append(known.Models, s.rules.Aliases()...)
		for _, r := range s.rules.Routes() {
			known.Routes = append(known.Routes, r.Name)
		}
		known.Classes = s.rules.Classes()
	}
	slices.Sort(known.Models)
	if errs := cfg.Access.Validate(known); len(errs) > 0 {
		return nil, nil, &config.Error{Path: cfg.Path, Problems: errs}
	}
	var keys []tenancy.Key
	if cfg.Access.KeysFile != "" {
		var prev []tenancy.Key
		if old := g.snap.Load(); old != nil && old.access != nil {
			prev = old.access.KeySet()
		}
		var kept bool
		var err error
		if keys, kept, err = tenancy.ReloadKeys(cfg.Access.KeysFile, prev); err != nil {
			return nil, nil, fmt.Errorf("access.keys_file: %w", err)
		}
		if kept {
			g.log.Warn("access.keys_file holds no key where it held some: taken for a file being rewritten, the keys before stay in effect (a line \""+tenancy.KeysEmptyMarker+"\" withdraws them all)",
				"file", cfg.Access.KeysFile, "keys", len(keys))
		}
	}
	var jwt *tenancy.JWT
	if cfg.Access.JWT.Enabled() {
		var err error
		if jwt, err = tenancy.NewJWT(cfg.Access.JWT, g.log); err != nil {
			return nil, nil, fmt.Errorf("access.jwt: %w", err)
		}
	}
	as, err := tenancy.Compile(&cfg.Access, keys, jwt, g.limiter)
	return as, jwt, err
}

// runJWT keeps jwt's key set fresh (a JWKS URL) until the next snapshot
// replaces it or the gateway stops.
func (g *Gateway) runJWT(jwt *tenancy.JWT) {
	if g.stopJWT != nil {
		g.stopJWT()
		g.stopJWT = nil
	}
	if jwt == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.stopJWT = cancel
	go jwt.Run(ctx)
}

// samePool reports whether p was built from pc and the TLS files as they
// are now (a certificate may have been rotated). Replica keys are part of
// pc, read from the environment when the config was loaded.
func samePool(p *pool.Pool, pc pool.Config) bool {
	if !reflect.DeepEqual(*p.Config(), pc) {
		return false
	}
	if d, err := pc.TLS.Digest(); err != nil || d != p.TLSDigest() {
		return false
	}
	return true
}

// apisOf lists the endpoints a pool of the kind serves.
func apisOf(kind string) []string {
	if kind == pool.KindAnthropic {
		return []string{"chat.completions", "messages"}
	}
	return []string{"chat.completions", "completions", "embeddings", "messages", "responses"}
}

// listedModel is one entry of /v1/models.
type listedModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root"`
	// APIs are the endpoints that may name the model: what its pool
	// serves, directly or translated.
	APIs []string `json:"triage_apis"`
	// pool serves the model ("" for a rules alias, which may land on any).
	pool string
}

// listModels is every name a client may send, sorted: each pool's models
// and aliases, and the rules' aliases.
func listModels(s *snapshot) []listedModel {
	out := []listedModel{}
	for name, e := range s.models {
		out = append(out, listedModel{ID: name, Object: "model", Created: s.loadedAt.Unix(), OwnedBy: "triage", Root: e.model, APIs: apisOf(e.kind), pool: e.pool.Name()})
	}
	if s.rules != nil {
		// A rules alias may land on any pool: what every pool serves, the
		// shapes translated into every kind.
		for _, a := range s.rules.Aliases() {
			apis := apisOf(pool.KindVLLM)
			for _, e := range s.pools {
				if e.kind == pool.KindAnthropic {
					apis = apisOf(pool.KindAnthropic)
				}
			}
			out = append(out, listedModel{ID: a, Object: "model", Created: s.loadedAt.Unix(), OwnedBy: "triage", Root: a, APIs: apis})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// mayName reports whether the caller may send m's name: what the request
// path checks of a model name, and for a pool's model the pool too (as a
// request naming it would be routed, to the default route).
func mayName(c tenancy.Caller, m *listedModel) bool {
	if m.pool == "" {
		return c.AllowModel(m.ID, true) == nil
	}
	return c.AllowModel(m.ID, false) == nil && c.AllowRoute(m.pool, "", "") == nil
}

// renderModels is the /v1/models body of the models list.
func renderModels(models []listedModel) []byte {
	b, _ := json.Marshal(struct {
		Object string        `json:"object"`
		Data   []listedModel `json:"data"`
	}{"list", models})
	return b
}

// Run runs the active health checks of the pools in effect, starting and
// stopping them as Apply swaps snapshots, and closes upstream connections
// left idle too long. It returns when ctx is done and every check has
// stopped.
func (g *Gateway) Run(ctx context.Context) {
	var wg sync.WaitGroup
	running := map[*pool.Pool]context.CancelFunc{}
	reconcile := func() {
		cur := map[*pool.Pool]bool{}
		for _, e := range g.snap.Load().pools {
			cur[e.pool] = true
			if _, ok := running[e.pool]; ok {
				continue
			}
			pctx, cancel := context.WithCancel(ctx)
			running[e.pool] = cancel
			p := e.pool
			wg.Go(func() { p.Run(pctx, g.onHealthChange) })
		}
		for p, cancel := range running {
			if !cur[p] {
				cancel()
				delete(running, p)
			}
		}
	}
	reconcile()
	wg.Go(func() { g.shadow.Run(ctx) })
	wg.Go(func() { g.sampler.Run(ctx) })
	wg.Go(func() { g.split.run(ctx) })
	wg.Go(func() { g.limiter.Run(ctx) }) // shared limits' leases and budgets, with Redis
	if g.share != nil {
		wg.Go(func() { g.share.run(ctx, g) }) // sessions, with the other replicas
	}
	janitor := time.NewTicker(time.Second)
	defer janitor.Stop()
	ticks := 0
	for {
		select {
		case <-ctx.Done():
			g.applyMu.Lock()
			g.runJWT(nil) // stops the JWKS refresh
			g.applyMu.Unlock()
			g.saveBudgets()
			for _, cancel := range running {
				cancel()
			}
			wg.Wait()
			g.tr.CloseIdle()
			if g.redis != nil {
				_ = g.redis.Close()
			}
			return
		case <-g.changed:
			reconcile()
		case <-janitor.C:
			g.tr.CloseStale()
			if ticks++; ticks%10 == 0 {
				g.saveBudgets()
			}
		}
	}
}

// budgetStates are the shared budgets' states, for the metric.
func (g *Gateway) budgetStates() []metrics.BudgetState {
	a := g.snap.Load().access
	if a == nil {
		return nil
	}
	var out []metrics.BudgetState
	for _, b := range a.Budgets(time.Now()) {
		out = append(out, metrics.BudgetState{Policy: b.Policy, Period: b.Period, Remaining: b.Remaining})
	}
	return out
}

// saveBudgets writes what the budgets have spent to access.state_file, if
// the config names one; off the request path (Run's loop).
func (g *Gateway) saveBudgets() {
	p := g.snap.Load().cfg.Access.StateFile
	if p == "" {
		return
	}
	if err := g.limiter.Save(p, time.Now()); err != nil {
		g.log.Error("saving the budgets' state failed; a restart may forget recent spending", "path", p, "error", err.Error())
	}
}

func (g *Gateway) onHealthChange(t pool.Transition) {
	if t.Metrics {
		if t.Healthy {
			g.log.Info("replica metrics read again", "pool", t.Pool, "backend", t.Backend)
		} else {
			g.log.Warn("replica metrics unreadable: balancing on in-flight counts until they are", "pool", t.Pool, "backend", t.Backend, "error", t.Err)
		}
		return
	}
	if t.Healthy {
		g.log.Info("backend healthy", "pool", t.Pool, "backend", t.Backend)
		return
	}
	g.log.Warn("backend unhealthy", "pool", t.Pool, "backend", t.Backend, "error", t.Err)
}

// Served counts the requests answered on the OpenAI endpoints.
func (g *Gateway) Served() uint64 { return g.served.Load() }

// Drain marks the gateway as shutting down: /readyz answers 503 so load
// balancers stop sending, while requests in flight go on.
func (g *Gateway) Drain() { g.draining.Store(true) }

// Ready reports whether the gateway should receive traffic: not draining,
// and the default pool (or, without one, some pool) has a replica that is
// confirmed healthy.
func (g *Gateway) Ready() bool {
	if g.draining.Load() {
		return false
	}
	s := g.snap.Load()
	if s.def != nil {
		return s.def.pool.Ready()
	}
	for _, e := range s.pools {
		if e.pool.Ready() {
			return true
		}
	}
	return false
}

// tier2State is tier 2 as the current rules have it, for the metrics.
func (g *Gateway) tier2State() metrics.Tier2State {
	s := g.snap.Load()
	if s == nil || s.rules == nil {
		return metrics.Tier2State{State: "off"}
	}
	st := metrics.Tier2State{State: s.rules.Tier2State()}
	st.Run, st.Scheduled, st.CacheHits, st.CacheMiss = s.rules.Tier2Stats()
	return st
}

func (g *Gateway) backendStates(yield func(metrics.BackendState)) {
	now := time.Now()
	for _, e := range g.snap.Load().pools {
		for _, b := range e.pool.Backends() {
			st := metrics.BackendState{Pool: e.pool.Name(), Backend: b.Name, InFlight: b.InFlight(), Healthy: e.pool.Healthy(b)}
			if sc, ok := b.Scraped(); ok {
				st.Scraped, st.Fresh = true, b.ScrapeFresh(now)
				st.Running, st.Waiting, st.KVUsage = sc.Running, sc.Waiting, sc.KVUsage
				st.PrefixQueries, st.PrefixHits = sc.PrefixQueries, sc.PrefixHits
			}
			yield(st)
		}
	}
}

// choiceCounts lists each pool's balancing choices made, for the
// balancers that choose for reasons: round_robin and prefix pools, and
// p2c pools' counts when they have any besides p2c.
func (g *Gateway) choiceCounts(yield func(metrics.ChoiceCount)) {
	for _, e := range g.snap.Load().pools {
		for _, c := range pool.Choices {
			if n := e.pool.ChoicesMade(c); n > 0 || (e.pool.Config().Balance == pool.BalancePrefix && (c == pool.ChoiceHit || c == pool.ChoiceMiss || c == pool.ChoiceLoad)) {
				yield(metrics.ChoiceCount{Pool: e.pool.Name(), Choice: c.String(), N: n})
			}
		}
	}
}
