package metrics

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the gateway's collectors.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	ttfb     *prometheus.HistogramVec
	attempts *prometheus.CounterVec
	aborted  *prometheus.CounterVec
	reloads  *prometheus.CounterVec

	decisions    *prometheus.CounterVec
	decisionTime prometheus.Histogram
	rulesInfo    *prometheus.GaugeVec
	decided      sync.Map // decisionKey -> prometheus.Counter

	shadow       *prometheus.CounterVec
	shadowDrop   prometheus.Counter
	shadowAgree  prometheus.Counter
	shadowDiffer prometheus.Counter

	limited map[string]prometheus.Counter // by reason, made up front
	tokens  *prometheus.CounterVec
	counted sync.Map // tokenKey -> [2]prometheus.Counter (prompt, completion)

	mu    sync.Mutex
	pools map[string]*Pool
}

// LimitReasons are the reasons access control refuses a request: the
// OpenAI error codes it answers with.
var LimitReasons = []string{"invalid_api_key", "model_not_allowed", "permission_denied", "rate_limit_exceeded", "insufficient_quota"}

type decisionKey struct {
	route, reason string
	tier          int
}

// NoPool labels requests that never reached a pool (bad input, unknown model).
const NoPool = "none"

// NoRoute labels tokens of requests that named a pool's model (not routed
// by rules).
const NoRoute = "none"

type tokenKey struct{ pool, route string }

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_requests_total",
			Help: "Requests answered, by pool and HTTP status (499: the client left first).",
		}, []string{"pool", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "triage_request_duration_seconds",
			Help:    "Time from receiving a request to the end of its response, streams included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"pool"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "triage_ttfb_seconds",
			Help:    "Time from receiving a request to sending the upstream's response head.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"pool"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_retries_total",
			Help: "Upstream attempts beyond the first (retries on another replica).",
		}, []string{"pool"}),
		aborted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_responses_aborted_total",
			Help: "Responses cut off after their head was sent because the upstream failed mid-body.",
		}, []string{"pool"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_config_reloads_total",
			Help: "Config reloads by result (success, invalid).",
		}, []string{"result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_decisions_total",
			Help: "Routing decisions for requests naming an alias, by route (\"default\" for the default pool), reason and deciding tier (0: none ran).",
		}, []string{"route", "reason", "tier"}),
		decisionTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "triage_decision_seconds",
			Help:    "Time to decide a request naming an alias: conversation text, classification (every tier that ran) and rules.",
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, .001, .0025, .005, .01, .025, .05, .1},
		}),
		rulesInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "triage_rules_info",
			Help: "1 for the rules/heads version in effect (empty without rules).",
		}, []string{"version"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_shadow_decisions_total",
			Help: "Sampled requests decided in shadow, by result: agree or differ (the shadow chose the same pool or another one), dropped (the shadow queue was full).",
		}, []string{"result"}),
		pools: map[string]*Pool{},
	}
	limited := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_limited_total",
		Help: "Requests access control refused, by reason: invalid_api_key (401), model_not_allowed and permission_denied (403), rate_limit_exceeded and insufficient_quota (429, a budget spent).",
	}, []string{"reason"})
	m.limited = map[string]prometheus.Counter{}
	for _, r := range LimitReasons {
		m.limited[r] = limited.WithLabelValues(r)
	}
	reg.MustRegister(limited)
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_tokens_total",
		Help: "Tokens the replicas reported in their responses' usage, by pool, route (\"none\": the request named a pool's model) and kind (prompt, completion).",
	}, []string{"pool", "route", "kind"})
	reg.MustRegister(m.tokens)
	m.shadowAgree, m.shadowDiffer, m.shadowDrop = m.shadow.WithLabelValues("agree"), m.shadow.WithLabelValues("differ"), m.shadow.WithLabelValues("dropped")
	reg.MustRegister(m.requests, m.duration, m.ttfb, m.attempts, m.aborted, m.reloads, m.decisions, m.decisionTime, m.rulesInfo, m.shadow)
	for _, r := range []string{"success", "invalid"} {
		m.reloads.WithLabelValues(r)
	}
	return m
}

// Tokens counts a response's reported usage; counters are cached per
// pool and route.
func (m *Metrics) Tokens(pool, route string, prompt, completion int64) {
	k := tokenKey{pool, route}
	v, ok := m.counted.Load(k)
	if !ok {
		v, _ = m.counted.LoadOrStore(k, m.tokenCounters(pool, route))
	}
	c := v.([2]prometheus.Counter)
	c[0].Add(float64(prompt))
	c[1].Add(float64(completion))
}

// tokenCounters are the prompt and completion token counters of a pool
// and route.
func (m *Metrics) tokenCounters(pool, route string) [2]prometheus.Counter {
	return [2]prometheus.Counter{m.tokens.WithLabelValues(pool, route, "prompt"), m.tokens.WithLabelValues(pool, route, "completion")}
}

// Limited counts a request access control refused, by its error code.
func (m *Metrics) Limited(reason string) {
	if c := m.limited[reason]; c != nil {
		c.Inc()
	}
}

// Reload counts a config reload with result "success" or "invalid".
func (m *Metrics) Reload(result string) { m.reloads.WithLabelValues(result).Inc() }

// Decision counts one routing decision; counters are cached per label set.
func (m *Metrics) Decision(route, reason string, tier int, seconds float64) {
	k := decisionKey{route, reason, tier}
	c, ok := m.decided.Load(k)
	if !ok {
		c, _ = m.decided.LoadOrStore(k, m.decisions.WithLabelValues(route, reason, strconv.Itoa(tier)))
	}
	c.(prometheus.Counter).Inc()
	m.decisionTime.Observe(seconds)
}

// ShadowDecided counts a shadow decision that chose the same pool as the
// live one (agree) or another.
func (m *Metrics) ShadowDecided(agree bool) {
	if agree {
		m.shadowAgree.Inc()
	} else {
		m.shadowDiffer.Inc()
	}
}

// ShadowDropped counts a sampled request the shadow had no room for.
func (m *Metrics) ShadowDropped() { m.shadowDrop.Inc() }

// RulesVersion marks version as the rules in effect.
func (m *Metrics) RulesVersion(version string) {
	m.rulesInfo.Reset()
	m.rulesInfo.WithLabelValues(version).Set(1)
}

// Pool returns the observers for one pool, creating them on first use.
// Call it when building a snapshot, not per request.
func (m *Metrics) Pool(name string) *Pool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.pools[name]; ok {
		return p
	}
	p := &Pool{
		m:        m,
		name:     name,
		Duration: m.duration.WithLabelValues(name),
		TTFB:     m.ttfb.WithLabelValues(name),
		Retries:  m.attempts.WithLabelValues(name),
		Aborted:  m.aborted.WithLabelValues(name),
	}
	for _, c := range []int{200, 400, 404, 413, 499, 500, 502, 503, 504} {
		p.Code(c)
	}
	m.pools[name] = p
	return p
}

// Pool holds one pool's observers.
type Pool struct {
	m        *Metrics
	name     string
	Duration prometheus.Observer
	TTFB     prometheus.Observer
	Retries  prometheus.Counter
	Aborted  prometheus.Counter
	codes    [600]atomic.Pointer[prometheus.Counter]
	unrouted atomic.Pointer[[2]prometheus.Counter] // tokens of requests naming the pool's model
}

// Tokens counts a response's reported usage in this pool, for route
// (NoRoute: the request named the pool's model). NoRoute's counters are
// cached in the pool, found without a lookup; routes' go through Metrics.
func (p *Pool) Tokens(route string, prompt, completion int64) {
	if route != NoRoute {
		p.m.Tokens(p.name, route, prompt, completion)
		return
	}
	c := p.unrouted.Load()
	if c == nil {
		// Two first requests may both get here: the vector hands both the
		// same children.
		cs := p.m.tokenCounters(p.name, NoRoute)
		c = &cs
		p.unrouted.Store(c)
	}
	c[0].Add(float64(prompt))
	c[1].Add(float64(completion))
}

// Code returns the request counter for an HTTP status, cached after first use.
func (p *Pool) Code(code int) prometheus.Counter {
	if code < 0 || code >= len(p.codes) {
		return p.m.requests.WithLabelValues(p.name, strconv.Itoa(code))
	}
	if c := p.codes[code].Load(); c != nil {
		return *c
	}
	c := p.m.requests.WithLabelValues(p.name, strconv.Itoa(code))
	p.codes[code].Store(&c)
	return c
}

// BackendState is one replica's live state, for the scrape-time gauges.
type BackendState struct {
	Pool, Backend string
	InFlight      int64
	Healthy       bool
	// Scraped is set when the replica's own /metrics has been read (a
	// pool that scrapes them); Fresh when the last read is recent enough
	// to balance by. The figures are the replica's, as last read; NaN
	// where it reports none.
	Scraped, Fresh            bool
	Running, Waiting, KVUsage float64
	PrefixQueries, PrefixHits float64
}

// ChoiceCount is how many requests a pool's balancer sent to a replica
// for one reason (pool.Choice: prefix_hit, prefix_miss, prefix_load, ...).
type ChoiceCount struct {
	Pool, Choice string
	N            uint64
}

// RegisterBackends registers triage_upstream_inflight,
// triage_backend_healthy and the replicas' scraped state
// (triage_replica_*), read from list at every scrape, and
// triage_pool_replica_choices_total, read from choices.
func RegisterBackends(reg prometheus.Registerer, list func(yield func(BackendState)), choices func(yield func(ChoiceCount))) {
	reg.MustRegister(&backendCollector{list: list, choices: choices})
}

var (
	inflightDesc = prometheus.NewDesc("triage_upstream_inflight",
		"Requests in flight to each replica.", []string{"pool", "backend"}, nil)
	healthyDesc = prometheus.NewDesc("triage_backend_healthy",
		"1 when the replica passes its health checks and is not ejected, else 0.", []string{"pool", "backend"}, nil)
	scrapeUpDesc = prometheus.NewDesc("triage_replica_metrics_fresh",
		"1 when the replica's own /metrics was read recently enough to balance by, else 0 (the pool then balances on in-flight counts).", []string{"pool", "backend"}, nil)
	runningDesc = prometheus.NewDesc("triage_replica_requests_running",
		"Requests the replica runs, as its /metrics last reported (vllm:num_requests_running).", []string{"pool", "backend"}, nil)
	waitingDesc = prometheus.NewDesc("triage_replica_requests_waiting",
		"Requests the replica queues, as its /metrics last reported (vllm:num_requests_waiting).", []string{"pool", "backend"}, nil)
	kvDesc = prometheus.NewDesc("triage_replica_kv_cache_usage_ratio",
		"Fraction of the replica's KV cache in use, as its /metrics last reported (vllm:kv_cache_usage_perc).", []string{"pool", "backend"}, nil)
	pcQueriesDesc = prometheus.NewDesc("triage_replica_prefix_cache_queries_tokens_total",
		"Prompt tokens the replica looked up in its prefix cache, as its /metrics last reported (vllm:prefix_cache_queries_total; resets when the replica restarts).", []string{"pool", "backend"}, nil)
	pcHitsDesc = prometheus.NewDesc("triage_replica_prefix_cache_hits_tokens_total",
		"Prompt tokens the replica found in its prefix cache, as its /metrics last reported (vllm:prefix_cache_hits_total; resets when the replica restarts).", []string{"pool", "backend"}, nil)
	choicesDesc = prometheus.NewDesc("triage_pool_replica_choices_total",
		"Requests given a replica, by why: p2c, round_robin, prefix_hit (the replica holding the longest prefix), prefix_miss (no replica held it: the conversation's home), prefix_load (the holder was over the load bound), preferred (a Responses chain's replica), only (one replica could take it).", []string{"pool", "choice"}, nil)
)

type backendCollector struct {
	list    func(yield func(BackendState))
	choices func(yield func(ChoiceCount))
}

func (c *backendCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{inflightDesc, healthyDesc, scrapeUpDesc, runningDesc, waitingDesc, kvDesc, pcQueriesDesc, pcHitsDesc, choicesDesc} {
		ch <- d
	}
}

func (c *backendCollector) Collect(ch chan<- prometheus.Metric) {
	c.list(func(s BackendState) {
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(s.InFlight), s.Pool, s.Backend)
		h := 0.0
		if s.Healthy {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, h, s.Pool, s.Backend)
		if !s.Scraped {
			return
		}
		fresh := 0.0
		if s.Fresh {
			fresh = 1
		}
		ch <- prometheus.MustNewConstMetric(scrapeUpDesc, prometheus.GaugeValue, fresh, s.Pool, s.Backend)
		ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, s.Running, s.Pool, s.Backend)
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, s.Waiting, s.Pool, s.Backend)
		if !math.IsNaN(s.KVUsage) {
			ch <- prometheus.MustNewConstMetric(kvDesc, prometheus.GaugeValue, s.KVUsage, s.Pool, s.Backend)
		}
		if !math.IsNaN(s.PrefixQueries) && !math.IsNaN(s.PrefixHits) {
			ch <- prometheus.MustNewConstMetric(pcQueriesDesc, prometheus.CounterValue, s.PrefixQueries, s.Pool, s.Backend)
			ch <- prometheus.MustNewConstMetric(pcHitsDesc, prometheus.CounterValue, s.PrefixHits, s.Pool, s.Backend)
		}
	})
	if c.choices != nil {
		c.choices(func(n ChoiceCount) {
			ch <- prometheus.MustNewConstMetric(choicesDesc, prometheus.CounterValue, float64(n.N), n.Pool, n.Choice)
		})
	}
}

// BudgetState is one shared token budget's state (see tenancy.BudgetState).
type BudgetState struct {
	Policy, Period string
	Remaining      int64
}

// RegisterBudgets registers triage_budget_remaining_tokens, read from list
// at each scrape.
func RegisterBudgets(reg prometheus.Registerer, list func() []BudgetState) {
	reg.MustRegister(&budgetCollector{list: list})
}

var budgetDesc = prometheus.NewDesc("triage_budget_remaining_tokens",
	"Tokens left in the current day or month (UTC) of the budgets a policy's tenants share: a group's counted per group, a principal's own policy's. Budgets counted per member are not reported (a label per user).",
	[]string{"policy", "period"}, nil)

type budgetCollector struct{ list func() []BudgetState }

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- budgetDesc }

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.list() {
		ch <- prometheus.MustNewConstMetric(budgetDesc, prometheus.GaugeValue, float64(b.Remaining), b.Policy, b.Period)
	}
}

// RegisterShared registers triage_limits_degraded (1 while shared limits
// are counted on this replica alone, Redis not answering) and
// triage_degraded_admissions_total, read from state at each scrape.
func RegisterShared(reg prometheus.Registerer, state func() (bool, uint64)) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "triage_limits_degraded",
			Help: "1 while the shared limits are counted on this replica alone because Redis does not answer, else 0."},
			func() float64 {
				if d, _ := state(); d {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "triage_degraded_admissions_total",
			Help: "Requests admitted on this replica's counts alone while Redis did not answer (fail open); charged to Redis when it answers again."},
			func() float64 { _, n := state(); return float64(n) }),
	)
}

// RegisterTracing registers triage_trace_spans_dropped_total: the spans
// lost because the export queue was full (reason queue_full) or their
// batch's export failed (export_failed), read from dropped at each
// scrape. Register it only with tracing on.
func RegisterTracing(reg prometheus.Registerer, dropped func() (queueFull, exportFailed uint64)) {
	reg.MustRegister(&tracingCollector{dropped: dropped})
}

var spansDroppedDesc = prometheus.NewDesc("triage_trace_spans_dropped_total",
	"Spans not exported: the export queue was full (tracing.max_queue spans waiting: the endpoint is slow or down), or the export of their batch failed.",
	[]string{"reason"}, nil)

type tracingCollector struct {
	dropped func() (queueFull, exportFailed uint64)
}

func (c *tracingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- spansDroppedDesc }

func (c *tracingCollector) Collect(ch chan<- prometheus.Metric) {
	q, f := c.dropped()
	ch <- prometheus.MustNewConstMetric(spansDroppedDesc, prometheus.CounterValue, float64(q), "queue_full")
	ch <- prometheus.MustNewConstMetric(spansDroppedDesc, prometheus.CounterValue, float64(f), "export_failed")
}
