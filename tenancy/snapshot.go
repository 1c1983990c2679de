package tenancy

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Denial is why a request is refused, in the terms of OpenAI's errors.
type Denial struct {
	Status  int    // 400, 401, 403, 429 or 503
	Code    string // invalid_request_error, invalid_api_key, model_not_allowed, permission_denied, rate_limit_exceeded, limits_unavailable
	Message string // safe to show the client: never a credential
	// RetryAfter is when a refused request may be admitted (429).
	RetryAfter time.Duration
}

func (d *Denial) Error() string { return d.Message }

// Snapshot is the access control compiled from one configuration: keys by
// id, policies, and the limit counters each principal counts against. It
// is immutable but for a cache of the token principals seen; the request
// path reads it without locks or I/O (a principal's first token takes the
// limiter's lock once).
type Snapshot struct {
	keys     map[string]*keyEntry
	keyList  []Key // as Compile was given them
	jwt      *JWT  // nil: API keys only
	limiter  *Limiter
	scopes   map[string]bool // the counters its keys use, for Limiter.Retain
	byWho    map[string]*Policy
	prices   map[string]Price
	maxPrice int64
	compiled map[string]*policy
	// shared are the budgets one policy's tenants share (a group's with
	// per: group, a principal's own), by scope: what
	// triage_budget_remaining_tokens reports.
	shared    map[string]sharedBudget
	perMember bool  // access.budget_metrics_per_member
	reserve   int64 // access.reserve_tokens in effect
	// tokens holds the entries of principals seen in tokens, by name.
	tokens     sync.Map // string -> *keyEntry
	tokenCount atomic.Int64
	// keyPrincipals are the principals the API keys name: a token may not
	// name one (JWTConfig.PrincipalPrefix).
	keyPrincipals map[string]bool
	// saltSecret keys the principals' cache salts (isolation.go).
	saltSecret []byte
}

// maxTokenPrincipals bounds the token principals whose entries are kept;
// past it an entry is built for each request (and its counters still
// count, being the limiter's).
const maxTokenPrincipals = 100_000

type keyEntry struct {
	key       Key
	principal Principal
	pol       *policy // what it may do; nil: anything
	rates     []rate
	slots     []slots
	tpm       []rate // tokens per minute
	budgets   []budgetRef
	epoch     time.Time // the limiter's: rates count in ns since it
	sh        *shared   // the limiter's link to Redis; nil: local counts
	prices    map[string]Price
	maxPrice  int64 // microdollars a token costs on the dearest pool: what an estimate is priced at
	reserve   int64 // the completion a request without max_tokens is counted as
	iso       isolation
}

// policy is a Policy with its lists as sets (nil: any).
type policy struct {
	models, pools, routes, classes map[string]bool
	direct                         bool
	pins                           map[string]string // class -> pool
}

func set(names []string) map[string]bool {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// Compile builds the access snapshot of cfg and keys, counting against
// limiter; jwt (nil: none) verifies bearer tokens that are not API keys.
// cfg is validated already (Config.Validate).
func Compile(cfg *Config, keys []Key, jwt *JWT, limiter *Limiter) (*Snapshot, error) {
	s := &Snapshot{keys: make(map[string]*keyEntry, len(keys)), jwt: jwt, limiter: limiter, scopes: map[string]bool{},
		byWho: map[string]*Policy{}, compiled: map[string]*policy{}, shared: map[string]sharedBudget{}}
	s.prices, s.perMember, s.reserve = cfg.Prices, cfg.BudgetMetricsPerMember, cfg.Reserve()
	s.saltSecret = saltSecret(cfg, limiter.saltFallback)
	for _, pr := range cfg.Prices {
		s.maxPrice = max(s.maxPrice, int64(math.Ceil(max(pr.PromptPerMillion, pr.CompletionPerMillion))))
	}
	for i := range cfg.Policies {
		p := &cfg.Policies[i]
		s.byWho[p.who()] = p
		direct := p.Direct == nil || *p.Direct
		s.compiled[p.who()] = &policy{models: set(p.Models), pools: set(p.Pools), routes: set(p.Routes), classes: set(p.Classes), direct: direct, pins: maps.Clone(p.Pins)}
	}
	s.keyPrincipals = make(map[string]bool, len(keys))
	for _, k := range keys {
		s.keyPrincipals[k.Principal] = true
		if jwt != nil && jwt.cfg.PrincipalPrefix != "" && strings.HasPrefix(k.Principal, jwt.cfg.PrincipalPrefix) {
			return nil, fmt.Errorf("access: key %s: its principal %q starts with access.jwt.principal_prefix %q, which names token principals: keys and tokens must not name the same principal", k.ID, k.Principal, jwt.cfg.PrincipalPrefix)
		}
	}
	s.keyList = keys
	for _, k := range keys {
		s.keys[k.ID] = s.entry(Principal{Name: k.Principal, Groups: k.Groups, Key: k.ID, Expires: k.Expires}, k, s.scopes)
	}
	return s, nil
}

// entry resolves what applies to a principal: the most specific policy's
// permissions and every applicable policy's limit counters (recording
// their scopes in scopes when not nil).
func (s *Snapshot) entry(p Principal, k Key, scopes map[string]bool) *keyEntry {
	e := &keyEntry{epoch: s.limiter.epoch, key: k, principal: p, sh: s.limiter.sh, prices: s.prices, maxPrice: s.maxPrice, reserve: s.reserve,
		iso: newIsolation(s.saltSecret, p.Name)}
	who := make([]string, 0, len(p.Groups)+2)
	who = append(who, "p:"+p.Name)
	for _, g := range p.Groups {
		who = append(who, "g:"+g)
	}
	who = append(who, "*")
	for _, w := range who {
		if pol := s.compiled[w]; pol != nil {
			e.pol = pol
			break
		}
	}
	for _, w := range who {
		pol := s.byWho[w]
		if pol == nil || !pol.Limits.any() && !pol.Budget.any() {
			continue
		}
		scope := limitScope(pol, w, p)
		if b := pol.Budget; b.TokensPerDay > 0 {
			e.budgets = append(e.budgets, budgetRef{c: s.limiter.budget(scope + "|day"), limit: b.TokensPerDay})
			s.share(scopes, pol, w, p, scope+"|day", e.budgets[len(e.budgets)-1])
		}
		if b := pol.Budget; b.TokensPerMonth > 0 {
			e.budgets = append(e.budgets, budgetRef{c: s.limiter.budget(scope + "|month"), limit: b.TokensPerMonth, month: true})
			s.share(scopes, pol, w, p, scope+"|month", e.budgets[len(e.budgets)-1])
		}
		if b := pol.Budget; b.CostPerDay > 0 {
			e.budgets = append(e.budgets, budgetRef{c: s.limiter.budget(scope + "|cost-day"), limit: micros(b.CostPerDay), cost: true})
		}
		if b := pol.Budget; b.CostPerMonth > 0 {
			e.budgets = append(e.budgets, budgetRef{c: s.limiter.budget(scope + "|cost-month"), limit: micros(b.CostPerMonth), month: true, cost: true})
		}
		if n := pol.Limits.TokensPerMinute; n > 0 {
			c := s.limiter.counter(scope + "|tpm")
			if scopes != nil {
				scopes[scope+"|tpm"] = true
			}
			r := newRate(c, n)
			r.shared = s.limiter.shareTokens(scope+"|tpm", c, n)
			e.tpm = append(e.tpm, r)
		}
		if !pol.Limits.any() {
			continue
		}
		c := s.limiter.counter(scope)
		if scopes != nil {
			scopes[scope] = true
		}
		if n := pol.Limits.RequestsPerMinute; n > 0 {
			e.rates = append(e.rates, newRate(c, n))
			s.limiter.shareRate(scope, c, n)
		}
		if n := pol.Limits.Concurrent; n > 0 {
			e.slots = append(e.slots, slots{c: c, limit: int64(n)})
		}
	}
	return e
}

// limitScope names the counter a policy's limits use for key k: the
// policy and what shares the count (the key, the principal, the group).
func limitScope(p *Policy, who string, pr Principal) string {
	switch {
	case p.Limits.Per == "key" && pr.Key != "":
		return who + "|key:" + pr.Key
	case p.Limits.Per == "group":
		return who + "|group"
	}
	return who + "|principal:" + pr.Name // a token principal's "key" is itself
}

// Retain drops the limit counters no longer used, once s is in effect.
// Token principals' counters stay (they are not known ahead).
func (s *Snapshot) Retain() {
	if s.jwt == nil {
		s.limiter.Retain(s.scopes)
	}
}

// Keys is the number of keys loaded.
func (s *Snapshot) Keys() int { return len(s.keys) }

// KeySet is the keys loaded, as Compile was given them (not to be
// modified): what a reload keeps when the keys file turns up empty
// (ReloadKeys).
func (s *Snapshot) KeySet() []Key { return s.keyList }

// Caller is an authenticated request's principal and what applies to it.
type Caller struct {
	e *keyEntry
}

// Principal is who the request acts for.
func (c Caller) Principal() *Principal { return &c.e.principal }

// Authenticate finds the caller from the request's Authorization header
// (Bearer) or, as some clients send it, x-api-key.
func (s *Snapshot) Authenticate(h http.Header, now time.Time) (Caller, *Denial) {
	secret, d := credential(h)
	if d != nil {
		return Caller{}, d
	}
	if secret == "" {
		return Caller{}, &Denial{Status: http.StatusUnauthorized, Code: "invalid_api_key",
			Message: "No API key provided: send it as Authorization: Bearer sk-triage-…"}
	}
	if s.jwt != nil && !strings.HasPrefix(secret, keyPrefix) {
		return s.token(secret, now)
	}
	e := s.keys[KeyID(secret)]
	if e == nil {
		return Caller{}, badKey
	}
	var buf [keyLen]byte // KeyID checked the length; on the stack, not the heap
	sum := sha256.Sum256(buf[:copy(buf[:], secret)])
	if subtle.ConstantTimeCompare(sum[:], e.key.sum[:]) != 1 {
		return Caller{}, badKey
	}
	if !e.key.Revoked.IsZero() {
		return Caller{}, &Denial{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: "This API key (" + e.key.ID + ") has been revoked."}
	}
	if !e.key.Expires.IsZero() && !now.Before(e.key.Expires) {
		return Caller{}, &Denial{Status: http.StatusUnauthorized, Code: "invalid_api_key",
			Message: "This API key (" + e.key.ID + ") expired at " + e.key.Expires.UTC().Format(time.RFC3339) + "."}
	}
	return Caller{e: e}, nil
}

// token authenticates a JWT: its principal's entry is kept by name, and
// rebuilt when the token names other groups.
func (s *Snapshot) token(tok string, now time.Time) (Caller, *Denial) {
	p, err := s.jwt.Verify(tok, now)
	if err != nil {
		return Caller{}, &Denial{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: "Invalid token: " + strings.TrimPrefix(err.Error(), ErrInvalidToken.Error()+": ")}
	}
	if s.keyPrincipals[p.Name] {
		// Keys and tokens name principals in one namespace unless
		// access.jwt.principal_prefix separates them: a token must not
		// become a key's principal (its stored responses, sessions,
		// limits and budgets).
		return Caller{}, &Denial{Status: http.StatusUnauthorized, Code: "invalid_api_key",
			Message: "Invalid token: its principal is an API key's; set access.jwt.principal_prefix to keep token principals apart."}
	}
	if v, ok := s.tokens.Load(p.Name); ok {
		if e := v.(*keyEntry); slices.Equal(e.principal.Groups, p.Groups) {
			return Caller{e: e}, nil
		}
	}
	p.Groups = slices.Clone(p.Groups) // the verifier's cache owns its slice
	e := s.entry(p, Key{}, nil)
	if s.tokenCount.Load() < maxTokenPrincipals {
		if _, loaded := s.tokens.Swap(p.Name, e); !loaded {
			s.tokenCount.Add(1)
		}
	}
	return Caller{e: e}, nil
}

var badKey = &Denial{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: "Incorrect API key provided."}

// credential is the request's secret: Authorization's bearer token, else
// x-api-key's value. A credential header given twice, or both headers
// naming different secrets, is refused (400): which one counts would
// depend on who reads the request, and a proxy in front of the gateway, or
// a replica behind it, may read the other.
func credential(h http.Header) (string, *Denial) {
	auth, key := h["Authorization"], h["X-Api-Key"]
	if len(auth) > 1 || len(key) > 1 {
		name := "Authorization"
		if len(auth) <= 1 {
			name = "x-api-key"
		}
		return "", &Denial{Status: http.StatusBadRequest, Code: "invalid_request_error",
			Message: "The " + name + " header was sent more than once: send one credential."}
	}
	if len(auth) == 0 {
		if len(key) > 0 {
			return trimSpace(key[0]), nil
		}
		return "", nil
	}
	a := auth[0]
	if len(a) <= 7 || a[:7] != "Bearer " && a[:7] != "bearer " {
		return "", nil // not a bearer token: no credential of ours
	}
	secret := trimSpace(a[7:])
	if len(key) > 0 && trimSpace(key[0]) != secret {
		return "", &Denial{Status: http.StatusBadRequest, Code: "invalid_request_error",
			Message: "Authorization and x-api-key name different credentials: send one."}
	}
	return secret, nil
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// AllowModel checks the model name a request sends; alias: it names a
// rules alias (the router decides the pool), not a pool's model.
func (c Caller) AllowModel(model string, alias bool) *Denial {
	p := c.e.pol
	if p == nil {
		return nil
	}
	if !alias && !p.direct {
		return &Denial{Status: http.StatusForbidden, Code: "model_not_allowed",
			Message: fmt.Sprintf("%s may not name a model directly: send a routed model (such as auto) instead of %q.", c.e.principal.Name, model)}
	}
	if p.models != nil && !p.models[model] {
		return &Denial{Status: http.StatusForbidden, Code: "model_not_allowed",
			Message: fmt.Sprintf("%s may not use the model %q.", c.e.principal.Name, model)}
	}
	return nil
}

// Pins are the pools the caller's policy pins classes to (class → pool;
// nil: none), for the decision (rules.Signals.Pins). The map is the
// snapshot's: read it, never write it.
func (c Caller) Pins() map[string]string {
	if p := c.e.pol; p != nil {
		return p.pins
	}
	return nil
}

// AllowRoute checks where the router sends the request: its pool, the
// route taken (route "" is the default pool's, checked as "default") and
// the class decided (empty when not routed by class).
func (c Caller) AllowRoute(pool, route, class string) *Denial {
	p := c.e.pol
	if p == nil {
		return nil
	}
	if route == "" {
		route = "default"
	}
	switch {
	case p.pools != nil && !p.pools[pool]:
		return denied(c, "the pool "+strconv.Quote(pool))
	case p.routes != nil && !p.routes[route]:
		return denied(c, "the route "+strconv.Quote(route))
	case p.classes != nil && class != "" && !p.classes[class]:
		return denied(c, "requests classified as "+strconv.Quote(class))
	}
	return nil
}

func denied(c Caller, what string) *Denial {
	return &Denial{Status: http.StatusForbidden, Code: "permission_denied",
		Message: fmt.Sprintf("%s may not use %s.", c.e.principal.Name, what)}
}

// Admission is an admitted request's place in its limits: what the
// x-ratelimit-* headers report (the tightest requests-per-minute limit),
// and the concurrent slots it holds until Release.
type Admission struct {
	// Limit is the tightest requests-per-minute limit (0: none applies);
	// Remaining the requests it has left; Reset the time until it is
	// whole again.
	Limit, Remaining int
	Reset            time.Duration
	// TokLimit, TokRemaining and TokReset are the same for the tightest
	// tokens-per-minute limit.
	TokLimit, TokRemaining int
	TokReset               time.Duration
	// Degraded: a shared limit was admitted on this replica's counts
	// alone (Redis does not answer).
	Degraded               bool
	held                   []slots
	charged                *keyEntry // its token limits hold the estimate until Settle
	estimate, costEstimate int64
	at                     time.Time
}

// Admit counts the request against every limit that applies at now, its
// tokens as estimate (EstimateTokens) until Settle. A refused request
// counts against none.
func (c Caller) Admit(now time.Time, estimate int64) (Admission, *Denial) {
	e := c.e
	var a Admission
	t := now.Sub(e.epoch).Nanoseconds()
	for i := range e.rates {
		r := &e.rates[i]
		var ok bool
		var rem int
		var reset, retry time.Duration
		if e.sh != nil {
			var degraded bool
			ok, rem, reset, retry, degraded = r.takeShared(e.sh, t)
			a.Degraded = a.Degraded || degraded
			if !ok && degraded {
				for j := range i {
					e.refundRate(j)
				}
				return Admission{}, limitsUnavailable(retry)
			}
		} else {
			ok, rem, reset, retry = r.take(t)
		}
		if !ok {
			for j := range i {
				e.refundRate(j)
			}
			return Admission{Limit: r.limit, Reset: reset}, &Denial{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", RetryAfter: retry,
				Message: fmt.Sprintf("Rate limit reached for %s: %d requests per minute. Try again in %s.", e.principal.Name, r.limit, roundUp(retry))}
		}
		if a.Limit == 0 || rem < a.Remaining {
			a.Limit, a.Remaining, a.Reset = r.limit, rem, reset
		}
	}
	if e.sh != nil && (len(e.tpm) > 0 || len(e.budgets) > 0) && e.sh.down() {
		// Tokens per minute and budgets counted on this replica's
		// spending alone.
		if e.sh.failClosed {
			for j := range e.rates {
				e.refundRate(j)
			}
			return Admission{}, limitsUnavailable(time.Second)
		}
		if !a.Degraded {
			e.sh.admitted.Add(1)
		}
		a.Degraded = true
	}
	if len(e.tpm) > 0 || len(e.budgets) > 0 {
		if d := a.chargeTokens(e, now, t, estimate); d != nil {
			for j := range e.rates {
				e.refundRate(j)
			}
			return a, d
		}
	}
	for i := range e.slots {
		if !e.slots[i].take() {
			a.Settle(0, 0, "")
			for j := range i {
				e.slots[j].release()
			}
			for j := range e.rates {
				e.refundRate(j)
			}
			return a, &Denial{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", RetryAfter: time.Second,
				Message: fmt.Sprintf("Too many concurrent requests for %s: at most %d at once.", e.principal.Name, e.slots[i].limit)}
		}
	}
	a.held = e.slots
	return a, nil
}

// limitsUnavailable refuses a request whose shared limits cannot be
// checked, under access.redis.fail_closed.
func limitsUnavailable(retry time.Duration) *Denial {
	return &Denial{Status: http.StatusServiceUnavailable, Code: "limits_unavailable", RetryAfter: retry,
		Message: "The shared rate limits cannot be checked (Redis does not answer) and access.redis.fail_closed is set. Try again shortly."}
}

// Release frees the concurrent slots the admission holds (once).
func (a *Admission) Release() {
	for i := range a.held {
		a.held[i].release()
	}
	a.held = nil
}

func roundUp(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

type sharedBudget struct {
	policy string // "group:NAME", "principal:NAME"
	ref    budgetRef
}

// share records a budget one policy's tenants share as a whole: a group's
// counted per group, or a principal's own policy counted per principal.
// Budgets counted per member of a group (or of everyone) are recorded
// only with access.budget_metrics_per_member: a label per member grows
// with the users. Only Compile records
// (scopes not nil): the snapshot is read-only once in use, so token
// principals seen later are not reported.
func (s *Snapshot) share(scopes map[string]bool, pol *Policy, who string, p Principal, scope string, ref budgetRef) {
	if scopes == nil {
		return
	}
	switch {
	case pol.Limits.Per == "group":
		s.shared[scope] = sharedBudget{policy: "group:" + pol.Group, ref: ref}
	case strings.HasPrefix(who, "p:") && pol.Limits.Per != "key":
		s.shared[scope] = sharedBudget{policy: "principal:" + pol.Principal, ref: ref}
	case !s.perMember:
	case pol.Limits.Per == "key" && p.Key != "":
		s.shared[scope] = sharedBudget{policy: "key:" + p.Key, ref: ref}
	default:
		s.shared[scope] = sharedBudget{policy: "principal:" + p.Name, ref: ref}
	}
}

// BudgetState is one shared budget's state, for metrics.
type BudgetState struct {
	Policy, Period string // Period: "day" or "month"
	Remaining      int64  // tokens left in the current period
}

// Budgets reports the shared budgets at now, ordered by policy and period.
func (s *Snapshot) Budgets(now time.Time) []BudgetState {
	out := make([]BudgetState, 0, len(s.shared))
	for _, b := range s.shared {
		per := "day"
		if b.ref.month {
			per = "month"
		}
		used := int64(0)
		if b.ref.c.period.Load() == b.ref.periodOf(now) {
			used = b.ref.c.used.Load()
		}
		out = append(out, BudgetState{Policy: b.policy, Period: per, Remaining: max(b.ref.limit-used, 0)})
	}
	slices.SortFunc(out, func(a, b BudgetState) int { return strings.Compare(a.Policy+a.Period, b.Policy+b.Period) })
	return out
}

// refundRate gives back the request rate j admitted when another limit
// refused it. A shared limit keeps it: its admission may have come from
// the lease, the local count or fail-open, and the count errs on the
// side of the limit.
func (e *keyEntry) refundRate(j int) {
	if e.sh == nil {
		e.rates[j].refund()
	}
}
