package pool

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNoBackend is returned by Pick when no replica can take the request.
var ErrNoBackend = errors.New("pool: no healthy backend")

// Backend is one replica. Its identity fields are fixed at construction; its
// counters are atomics shared by every request and the health checker.
type Backend struct {
	// Name is the replica's label in metrics and logs (its base URL).
	Name string
	// Key identifies the replica's connection target (scheme://host:port,
	// plus the pool's TLS identity when the pool sets tls): equal keys may
	// share connections across pools and reloads.
	Key string
	// Scheme is "http" or "https"; Addr is host:port for dialing; Host is
	// the Host header; BasePath is prefixed to request paths (no trailing /).
	Scheme, Addr, Host, BasePath string
	// Weight is the relative share of traffic.
	Weight int64
	// APIKey is sent upstream as a bearer token when not empty (as
	// x-api-key to an Anthropic replica).
	APIKey string
	// Anthropic: the replica speaks Anthropic's Messages API (Config.Kind),
	// which takes its key as x-api-key and wants anthropic-version.
	Anthropic bool
	// TLS is the client TLS config for an https replica of a pool that sets
	// tls, its ServerName filled in; nil otherwise (the transport's own
	// applies). Shared: never modify it.
	TLS *tls.Config

	// health checks' HTTP client when TLS is set, built at the first check.
	checkOnce   sync.Once
	checkClient *http.Client

	inflight atomic.Int64

	// Prefix affinity: the replica's rendezvous seed, and its index of the
	// prefix blocks sent to it (nil unless the pool balances by prefix).
	seed uint64
	idx  *index

	// The replica's own /metrics, as last scraped (scrape.go): queue is
	// its running plus waiting requests, queueBase the gateway's in-flight
	// count then, queueUntil the unix-nano time after which the figures
	// are stale (0: none).
	queue, queueBase, queueUntil atomic.Int64
	scraped                      atomic.Pointer[Scraped]
	scrapeErr                    string // the last failure reported; only the scraper touches it

	// Active health: health is one of the state constants; only the
	// backend's checker goroutine writes it.
	health                  atomic.Int32
	checkPasses, checkFails int

	// Passive breaker: consecutive failures; openUntil is 0 when closed,
	// else the unix-nano time the ejection ends (half-open after it);
	// ejections counts ejections in a row; probing is set while the single
	// half-open probe is in flight.
	consecFails atomic.Int32
	openUntil   atomic.Int64
	ejections   atomic.Int32
	probing     atomic.Bool
}

const (
	healthUnknown int32 = iota // not checked yet: takes traffic, not ready
	healthUp
	healthDown
)

// InFlight is the number of requests currently forwarded to b.
func (b *Backend) InFlight() int64 { return b.inflight.Load() }

// Release ends a request that Pick counted against b. Call it exactly once,
// when the response has ended or the client has left.
func (b *Backend) Release() { b.inflight.Add(-1) }

// Pool is a named set of replicas serving one model.
type Pool struct {
	cfg       Config
	tlsDigest string // of the TLS files' content when the pool was built
	backends  []*Backend
	now       func() time.Time
	checker   Checker
	policy    policy
	rr        atomic.Uint64 // round robin's turn
	scrapes   bool          // the replicas' /metrics are scraped
	scraper   Scraper
	counts    [len(choiceNames)]atomic.Uint64 // choices made, by Choice
}

// Option adjusts a Pool at construction.
type Option func(*Pool)

// WithClock replaces time.Now, for tests of ejection and recovery.
func WithClock(now func() time.Time) Option { return func(p *Pool) { p.now = now } }

// WithChecker replaces the HTTP health check.
func WithChecker(c Checker) Option { return func(p *Pool) { p.checker = c } }

// WithScraper replaces the HTTP scrape of the replicas' /metrics.
func WithScraper(s Scraper) Option { return func(p *Pool) { p.scraper = s } }

// New builds a pool from a validated config (SetDefaults and Validate first).
func New(cfg Config, opts ...Option) (*Pool, error) {
	p := &Pool{cfg: cfg, now: time.Now, policy: policyOf(cfg.Balance), scrapes: cfg.ScrapesMetrics()}
	var tlsCfg *tls.Config
	var tlsID string
	if cfg.TLS.Set() {
		// The digest first: if a file changes between the two reads, the
		// next reload sees a digest that differs and rebuilds the pool.
		d, err := cfg.TLS.Digest()
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		if tlsCfg, err = cfg.TLS.client(); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		p.tlsDigest = d
		id := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%t", d, cfg.TLS.ServerName, cfg.TLS.InsecureSkipVerify))
		tlsID = hex.EncodeToString(id[:8])
	}
	for _, r := range cfg.Replicas {
		u, err := parseBase(r.URL)
		if err != nil {
			return nil, err
		}
		b := &Backend{
			Name:     r.URL,
			Scheme:   u.Scheme,
			Addr:     hostPort(u),
			Host:     u.Host,
			BasePath: strings.TrimRight(u.EscapedPath(), "/"),
			Weight:   int64(max(r.Weight, 1)),
		}
		b.Key = b.Scheme + "://" + b.Addr
		if tlsCfg != nil && b.Scheme == "https" {
			// Connections made with other TLS settings must not be shared.
			b.Key += "#tls=" + tlsID
			b.TLS = tlsCfg.Clone()
			if b.TLS.ServerName == "" {
				b.TLS.ServerName = u.Hostname()
			}
		}
		b.APIKey = string(r.APIKey)
		b.Anthropic = cfg.Kind == KindAnthropic
		b.seed = backendSeed(b.Name)
		if p.policy == policyPrefix {
			b.idx = newIndex(cfg.Prefix.IndexBlocks)
		}
		if !*cfg.Health.Enabled {
			b.health.Store(healthUp)
		}
		p.backends = append(p.backends, b)
	}
	for _, o := range opts {
		o(p)
	}
	if p.checker == nil {
		p.checker = NewHTTPChecker()
	}
	if p.scraper == nil && p.scrapes {
		p.scraper = NewHTTPScraper()
	}
	return p, nil
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// Name is the pool's name.
func (p *Pool) Name() string { return p.cfg.Name }

// Model is the model name the pool's replicas serve.
func (p *Pool) Model() string { return p.cfg.Model }

// TLSDigest identifies the content of the TLS files the pool was built
// from (TLS.Digest then); empty without any.
func (p *Pool) TLSDigest() string { return p.tlsDigest }

// Config is the pool's configuration, defaults filled in.
func (p *Pool) Config() *Config { return &p.cfg }

// Backends lists the replicas in config order.
func (p *Pool) Backends() []*Backend { return p.backends }

// Pick chooses a replica for one request and counts it in flight, by the
// pool's balancing policy, among the replicas available and not in tried:
//   - p2c: two candidates drawn at random in proportion to their weights,
//     and the one with fewer requests in flight per unit of weight wins;
//   - round_robin: the next replica in turn;
//   - prefix: as p2c, since Pick has no key (PickKey).
//
// A half-open replica is given out to one request at a time (its probe).
// The caller must Release the backend and Report the outcome.
func (p *Pool) Pick(tried []*Backend) (*Backend, error) {
	b, _, err := p.PickKey(nil, tried)
	return b, err
}

// PickKey is Pick for a request whose prefix key is k (Pool.Key; nil or
// empty: none): with balance prefix, the replica holding the longest
// prefix of k, within the bound on load (choosePrefix). It also says why
// it chose the replica.
func (p *Pool) PickKey(k *Key, tried []*Backend) (*Backend, Choice, error) {
	for range 4 { // lose a half-open probe race at most a few times
		b, c := p.choose(k, tried)
		if b == nil {
			return nil, c, ErrNoBackend
		}
		if b.openUntil.Load() != 0 && !b.probing.CompareAndSwap(false, true) {
			tried = append(tried[:len(tried):len(tried)], b) // copy: never touch the caller's array
			continue
		}
		b.inflight.Add(1)
		p.counts[c].Add(1)
		return b, c, nil
	}
	return nil, ChoiceP2C, ErrNoBackend
}

// PickNamed is Pick, preferring the replica named name (Backend.Name)
// while it is available: a conversation whose state lives on one replica
// (a Responses chain, in vLLM's memory) goes back to it.
func (p *Pool) PickNamed(name string) (*Backend, error) {
	b, _, err := p.PickNamedKey(name, nil)
	return b, err
}

// PickNamedKey is PickNamed, with PickKey's key and choice when the named
// replica is not available.
func (p *Pool) PickNamedKey(name string, k *Key) (*Backend, Choice, error) {
	if name != "" {
		for _, b := range p.backends {
			if b.Name == name && b.health.Load() != healthDown && b.openUntil.Load() == 0 {
				b.inflight.Add(1)
				if b.idx != nil && k != nil {
					b.idx.add(k)
				}
				p.counts[ChoicePreferred].Add(1)
				return b, ChoicePreferred, nil
			}
		}
	}
	return p.PickKey(k, nil)
}

// ChoicesMade is how many times Pick and its variants gave a replica
// for reason c since the pool was built.
func (p *Pool) ChoicesMade(c Choice) uint64 {
	if int(c) >= len(p.counts) {
		return 0
	}
	return p.counts[c].Load()
}

func (p *Pool) choose(k *Key, tried []*Backend) (*Backend, Choice) {
	var now int64 // read the clock only when some breaker is open
	avail := func(b *Backend) bool {
		if b.health.Load() == healthDown {
			return false
		}
		if until := b.openUntil.Load(); until != 0 {
			if now == 0 {
				now = p.now().UnixNano()
			}
			if now < until || b.probing.Load() {
				return false
			}
		}
		for _, t := range tried {
			if t == b {
				return false
			}
		}
		return true
	}
	if len(p.backends) == 1 {
		if b := p.backends[0]; avail(b) {
			if b.idx != nil && k != nil {
				b.idx.add(k)
			}
			return b, ChoiceOnly
		}
		return nil, ChoiceOnly
	}
	switch {
	case p.policy == policyRoundRobin:
		return p.chooseRoundRobin(avail), ChoiceRoundRobin
	case p.policy == policyPrefix && k != nil && k.Conv != 0:
		return p.choosePrefix(k, avail)
	}
	// The replicas available now, read once: health and breakers change
	// under the pick, and both draws must come from the same set (a
	// replica that went down between a count and a draw left nothing to
	// draw, and a nil candidate).
	var buf [16]*Backend
	cands := buf[:0]
	var total int64
	for _, b := range p.backends {
		if avail(b) {
			total += b.Weight
			cands = append(cands, b)
		}
	}
	switch len(cands) {
	case 0:
		return nil, ChoiceP2C
	case 1:
		return cands[0], ChoiceOnly
	}
	a := draw(cands, total, nil)
	c := draw(cands, total-a.Weight, a)
	// Fewer in flight per unit of weight wins; a tie goes to the first draw,
	// which was weight-proportional, so an idle pool splits by weight.
	if a.inflight.Load()*c.Weight <= c.inflight.Load()*a.Weight {
		return a, ChoiceP2C
	}
	return c, ChoiceP2C
}

// draw picks one of cands other than skip with probability proportional
// to its weight; total is the sum of their weights (skip's left out), at
// least 1, as every weight is.
func draw(cands []*Backend, total int64, skip *Backend) *Backend {
	r := rand.Int64N(total)
	for _, b := range cands {
		if b == skip {
			continue
		}
		if r < b.Weight {
			return b
		}
		r -= b.Weight
	}
	for i := len(cands) - 1; ; i-- { // not reached while total is right
		if cands[i] != skip {
			return cands[i]
		}
	}
}

// Outcome is what a forwarded attempt came to, for the breaker.
type Outcome int

const (
	// Success: the upstream answered with a status below 500.
	Success Outcome = iota
	// Failure: a connect error, a timeout, a broken response or a 5xx.
	Failure
	// Neutral: the attempt says nothing about the replica (the client left).
	Neutral
)

// Report feeds one attempt's outcome to b's breaker: Failures in a row
// eject it for a cooldown that doubles with each ejection in a row; after
// the cooldown one probe request is let through, and its outcome closes the
// breaker or ejects the replica again.
func (p *Pool) Report(b *Backend, o Outcome) {
	switch o {
	case Neutral:
		if b.openUntil.Load() != 0 {
			b.probing.Store(false) // the probe proved nothing; let another try
		}
	case Success:
		b.consecFails.Store(0)
		if b.openUntil.Load() != 0 && b.probing.Load() {
			b.ejections.Store(0)
			b.openUntil.Store(0)
			b.probing.Store(false)
		}
	case Failure:
		n := b.consecFails.Add(1)
		until := b.openUntil.Load()
		switch {
		case until != 0 && b.probing.Load():
			p.eject(b, until)
		case until == 0 && int(n) >= p.cfg.Breaker.Failures:
			p.eject(b, 0)
		}
	}
}

func (p *Pool) eject(b *Backend, old int64) {
	k := b.ejections.Load()
	d := p.cfg.Breaker.Cooldown << min(k, 20)
	if d > p.cfg.Breaker.MaxCooldown || d <= 0 {
		d = p.cfg.Breaker.MaxCooldown
	}
	if b.openUntil.CompareAndSwap(old, p.now().Add(d).UnixNano()) {
		b.ejections.Add(1)
		b.probing.Store(false)
	}
}

// State is a backend's condition, as Pool.State reports it. Its String
// (and MarshalText, for JSON and structured logs) is the name below.
type State uint8

const (
	StateUnknown   State = iota // "unknown": not checked yet (takes traffic, not ready)
	StateHealthy                // "healthy": passing active checks (or checks are off), not ejected
	StateUnhealthy              // "unhealthy": failing active checks
	StateEjected                // "ejected": breaker open
	StateHalfOpen               // "half-open": cooldown over, waiting for a probe
)

var stateNames = [...]string{"unknown", "healthy", "unhealthy", "ejected", "half-open"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText returns the state's name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// State is b's condition now.
func (p *Pool) State(b *Backend) State {
	if until := b.openUntil.Load(); until != 0 {
		if p.now().UnixNano() < until {
			return StateEjected
		}
		return StateHalfOpen
	}
	switch b.health.Load() {
	case healthUp:
		return StateHealthy
	case healthDown:
		return StateUnhealthy
	}
	return StateUnknown
}

// Healthy reports whether b is confirmed healthy: passing active checks (or
// checks are off) and not ejected.
func (p *Pool) Healthy(b *Backend) bool { return p.State(b) == StateHealthy }

// Available reports whether Pick could find a replica now: one not failing
// its checks and not ejected (an unchecked one counts).
func (p *Pool) Available() bool {
	b, _ := p.choose(nil, nil)
	return b != nil
}

// Ready reports whether some replica is confirmed healthy.
func (p *Pool) Ready() bool {
	for _, b := range p.backends {
		if p.Healthy(b) {
			return true
		}
	}
	return false
}
