package tenancy

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// cacheLine is the size a counter is padded to, so two tenants' counters
// never share a cache line (BenchmarkAdmitParallel measures it).
const cacheLine = 64

// counter is one tenant's (key's, principal's or group's) limit state.
// Its 64 bytes are a whole size class, so the allocator places each one
// on its own cache line.
type counter struct {
	// tat is GCRA's theoretical arrival time, in ns since the Limiter's
	// epoch: the request budget is spent up to tat.
	tat      atomic.Int64
	inflight atomic.Int64
	// With a shared limit (shared.go): admissions granted ahead, asked
	// for since the last top-up, and admitted on local counts (not yet
	// charged); the shared count's requests left and time until whole at
	// the last top-up; and until when (ns since the epoch) Redis said none
	// are left. A shared tokens-per-minute counter (scope "…|tpm") uses
	// debt for the tokens charged here since the last round.
	lease, demand, debt atomic.Int64
	remaining, reset    atomic.Int64
	dry                 atomic.Int64
}

// Limiter owns the limit counters. They outlive configuration snapshots: a
// reload that keeps a tenant keeps its counts. It also holds the secret
// cache salts are derived from when the config names none, for the same
// reason: a reload keeps each tenant's salt.
type Limiter struct {
	epoch   time.Time
	mu      sync.Mutex
	byKey   map[string]*counter
	budgets map[string]*budgetCounter // kept whatever reloads do: spending is not forgotten
	sh      *shared                   // nil: counts are this replica's alone
	rates   map[string]*sharedRate    // the requests-per-minute limits counted in Redis, by scope
	tokens  map[string]*sharedRate    // the tokens-per-minute limits counted in Redis, by scope

	saltFallback []byte // random, made with the Limiter
}

// NewLimiter returns an empty Limiter.
func NewLimiter() *Limiter {
	return &Limiter{epoch: time.Now(), saltFallback: randomSecret(), byKey: map[string]*counter{}, budgets: map[string]*budgetCounter{}}
}

// counter returns the counter for scope (made on first use). Snapshots
// call it when they are built, never on the request path.
func (l *Limiter) counter(scope string) *counter {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.byKey[scope]
	if c == nil {
		c = &counter{}
		c.tat.Store(math.MinInt64 / 4) // a budget spent long ago: whole
		l.byKey[scope] = c
	}
	return c
}

// Retain drops the counters of scopes not in keep (tenants a reload
// removed).
func (l *Limiter) Retain(keep map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.byKey {
		if !keep[k] {
			delete(l.byKey, k)
			delete(l.rates, k)
			delete(l.tokens, k)
		}
	}
}

// Len is the number of counters held.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byKey)
}

// shareRate counts scope's requests-per-minute limit in Redis, when l
// shares its limits.
func (l *Limiter) shareRate(scope string, c *counter, perMinute int) {
	if l.sh == nil {
		return
	}
	l.mu.Lock()
	keepShared(l.rates, scope, c, perMinute)
	l.mu.Unlock()
	l.sh.wake()
}

// shareTokens counts scope's tokens-per-minute limit in Redis too, when l
// shares its limits, and reports whether it does.
func (l *Limiter) shareTokens(scope string, c *counter, perMinute int) bool {
	if l.sh == nil {
		return false
	}
	l.mu.Lock()
	keepShared(l.tokens, scope, c, perMinute)
	l.mu.Unlock()
	return true
}

// keepShared records scope's shared limit in m, keeping the loop's state
// of one recorded before on the same counter (a reload, a token
// principal seen again): a lease call not answered yet, the tokens this
// replica reported.
func keepShared(m map[string]*sharedRate, scope string, c *counter, perMinute int) {
	if r := m[scope]; r != nil && r.c == c {
		r.perMinute.Store(int64(perMinute))
		return
	}
	r := &sharedRate{c: c}
	r.perMinute.Store(int64(perMinute))
	m[scope] = r
}

// rate is one requests-per-minute (or tokens-per-minute) limit on a
// counter.
type rate struct {
	c        *counter
	limit    int   // per minute
	interval int64 // ns between requests at the sustained rate: 60s/limit
	window   int64 // interval × limit: how far tat may run ahead of now
	shared   bool  // tokens per minute counted in Redis too: charges go to c.debt
}

func newRate(c *counter, perMinute int) rate {
	iv := int64(time.Minute) / int64(perMinute)
	return rate{c: c, limit: perMinute, interval: iv, window: iv * int64(perMinute)}
}

// take admits one request at now (ns since the epoch) when the limit
// allows, GCRA's way: tat advances by one interval and may run at most
// window ahead of now. It returns the requests left, the time until the
// budget is whole again, and (refused) the time until one is admitted.
func (r *rate) take(now int64) (ok bool, remaining int, reset, retry time.Duration) {
	return gcra(&r.c.tat, now, r.interval, r.window)
}

func gcra(tat *atomic.Int64, now, interval, window int64) (ok bool, remaining int, reset, retry time.Duration) {
	for {
		t := tat.Load()
		next := max(t, now) + interval
		if next-now > window {
			return false, 0, time.Duration(t - now), time.Duration(next - now - window)
		}
		if tat.CompareAndSwap(t, next) {
			return true, int((now + window - next) / interval), time.Duration(next - now), 0
		}
	}
}

// refund gives back a request take admitted (another limit refused it).
func (r *rate) refund() { r.c.tat.Add(-r.interval) }

// slots is one concurrent-requests limit on a counter.
type slots struct {
	c     *counter
	limit int64
}

func (s *slots) take() bool {
	if s.c.inflight.Add(1) > s.limit {
		s.c.inflight.Add(-1)
		return false
	}
	return true
}

func (s *slots) release() { s.c.inflight.Add(-1) }
