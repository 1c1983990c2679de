package tenancy

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/triagegw/triage/internal/atomicfile"
)

// Budget caps the tokens a tenant uses in a calendar day and month (UTC),
// prompt and completion together. Zero: no cap.
type Budget struct {
	// TokensPerDay caps the tokens of a calendar day (UTC).
	TokensPerDay int64 `koanf:"tokens_per_day"`
	// TokensPerMonth caps the tokens of a calendar month (UTC).
	TokensPerMonth int64 `koanf:"tokens_per_month"`
	// CostPerDay and CostPerMonth cap the dollars spent, at the pools'
	// access.prices.
	CostPerDay   float64 `koanf:"cost_per_day"`
	CostPerMonth float64 `koanf:"cost_per_month"`
}

func (b Budget) any() bool {
	return b.TokensPerDay > 0 || b.TokensPerMonth > 0 || b.CostPerDay > 0 || b.CostPerMonth > 0
}

// micros is dollars in microdollars, the unit cost budgets count in.
func micros(dollars float64) int64 { return int64(dollars*1e6 + 0.5) }

// budgetCounter is one tenant's use in the current period. Like counter,
// it fills a cache line.
type budgetCounter struct {
	period atomic.Int64 // the period used counts: days or months since 1970
	used   atomic.Int64
	// pending is what this replica spent since the last sync with Redis
	// (shared: counted only when the Limiter shares its budgets).
	pending atomic.Int64
	shared  bool
	month   bool // counts months, else days
	// mine is what this replica spent in minePeriod, as it reports it to
	// Redis; only the sync loop touches them.
	mine, minePeriod int64
	// others is each other replica's spending in minePeriod, as last
	// seen (othersSeen); only the sync loop touches it.
	others map[string]int64
	_      [cacheLine - 56]byte
}

// reserve adds n to the period's use if it stays within limit.
func (b *budgetCounter) reserve(period, n, limit int64) bool {
	b.advance(period)
	if b.used.Add(n) > limit && n > 0 {
		b.used.Add(-n)
		return false
	}
	if b.shared {
		b.pending.Add(n)
	}
	return true
}

// advance moves the count on to period, if it counts an earlier one, and
// returns the period it counts.
func (b *budgetCounter) advance(period int64) int64 {
	for {
		p := b.period.Load()
		if p >= period { // the same, or a clock gone back: count in the newer period
			return p
		}
		if b.period.CompareAndSwap(p, period) {
			b.used.Store(0) // a new period; a reservation racing this reset may be lost (it under-counts)
			return period
		}
	}
}

// periodOf is the period holding now: days or months since 1970 (UTC).
func periodOf(now time.Time, month bool) int64 {
	u := now.UTC()
	if month {
		return int64(u.Year()-1970)*12 + int64(u.Month()-1)
	}
	return u.Unix() / 86400
}

// adjust corrects a reservation made in period (no-op once it ended).
func (b *budgetCounter) adjust(period, delta int64) {
	if b.period.Load() == period {
		b.used.Add(delta)
		if b.shared {
			b.pending.Add(delta)
		}
	}
}

// budgetRef is one budget limit on a counter.
type budgetRef struct {
	c     *budgetCounter
	limit int64
	month bool // else a day
	cost  bool // counts microdollars, else tokens
}

func (r *budgetRef) periodOf(now time.Time) int64 { return periodOf(now, r.month) }

// periodEnd is when the period holding now ends.
func (r *budgetRef) periodEnd(now time.Time) time.Time {
	u := now.UTC()
	if r.month {
		return time.Date(u.Year(), u.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
}

// takeTokens charges n tokens to a tokens-per-minute rate (GCRA, as for
// requests, each token one interval).
func (r *rate) takeTokens(now, n int64) (ok bool, remaining int, reset, retry time.Duration) {
	for {
		t := r.c.tat.Load()
		next := max(t, now) + n*r.interval
		if next-now > r.window {
			return false, max(0, int((now+r.window-max(t, now))/r.interval)), time.Duration(max(t-now, 0)), time.Duration(next - now - r.window)
		}
		if r.c.tat.CompareAndSwap(t, next) {
			if r.shared {
				r.c.debt.Add(n)
			}
			return true, int((now + r.window - next) / r.interval), time.Duration(next - now), 0
		}
	}
}

// addTokens adds n (negative: gives back) to a tokens-per-minute rate
// after admission.
func (r *rate) addTokens(n int64) {
	r.c.tat.Add(n * r.interval)
	if r.shared {
		r.c.debt.Add(n)
	}
}

// EstimateTokens is what a request is admitted as before its usage is
// known: its body's bytes over four (a token is about four bytes of
// English), plus the completion it may ask for (max_tokens).
func EstimateTokens(bodyBytes int, maxTokens int64) int64 {
	return int64(bodyBytes+3)/4 + max(maxTokens, 0)
}

// Estimate is what the caller's request is admitted as (Admit's
// estimate): EstimateTokens, with access.reserve_tokens as the completion
// when the request sets no max_tokens (maxTokens <= 0).
func (c Caller) Estimate(bodyBytes int, maxTokens int64) int64 {
	if maxTokens <= 0 {
		maxTokens = c.e.reserve
	}
	return EstimateTokens(bodyBytes, maxTokens)
}

// chargeTokens admits estimate against the token rates and budgets of e,
// all or none; on refusal it says why.
func (a *Admission) chargeTokens(e *keyEntry, now time.Time, t, estimate int64) *Denial {
	a.estimate, a.at = estimate, now
	for i := range e.tpm {
		r := &e.tpm[i]
		ok, rem, reset, retry := r.takeTokens(t, estimate)
		if !ok {
			a.refundTokens(e, i, 0)
			msg := fmt.Sprintf("Rate limit reached for %s: %d tokens per minute; this request is counted as %d. Try again in %s.", e.principal.Name, r.limit, estimate, roundUp(retry))
			if estimate > int64(r.limit) {
				msg = fmt.Sprintf("This request is counted as %d tokens, more than %s's limit of %d tokens per minute: send a shorter prompt or a lower max_tokens.", estimate, e.principal.Name, r.limit)
				retry = time.Minute
			}
			a.TokLimit, a.TokRemaining, a.TokReset = r.limit, rem, reset
			return &Denial{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", RetryAfter: retry, Message: msg}
		}
		if a.TokLimit == 0 || rem < a.TokRemaining {
			a.TokLimit, a.TokRemaining, a.TokReset = r.limit, rem, reset
		}
	}
	a.costEstimate = estimate * e.maxPrice
	for i := range e.budgets {
		b := &e.budgets[i]
		n := estimate
		if b.cost {
			n = a.costEstimate
		}
		if !b.c.reserve(b.periodOf(now), n, b.limit) {
			a.refundTokens(e, len(e.tpm), i)
			per, end := "day", b.periodEnd(now)
			if b.month {
				per = "month"
			}
			what := fmt.Sprintf("%d tokens", b.limit)
			if b.cost {
				what = "$" + strconv.FormatFloat(float64(b.limit)/1e6, 'f', -1, 64)
			}
			return &Denial{Status: http.StatusTooManyRequests, Code: "insufficient_quota", RetryAfter: end.Sub(now),
				Message: fmt.Sprintf("%s has used its budget of %s this %s; it renews at %s.", e.principal.Name, what, per, end.Format(time.RFC3339))}
		}
	}
	a.charged = e
	return nil
}

// refundTokens gives back the estimate charged to the first rates token
// rates and budgets budgets.
func (a *Admission) refundTokens(e *keyEntry, rates, budgets int) {
	for i := range rates {
		e.tpm[i].addTokens(-a.estimate)
	}
	for i := range budgets {
		b := &e.budgets[i]
		n := a.estimate
		if b.cost {
			n = a.costEstimate
		}
		b.c.adjust(b.periodOf(a.at), -n)
	}
}

// Settle replaces the estimate the request was admitted with by what it
// used (the response's usage, on pool, priced by access.prices), in its
// token limits and budgets. A request that failed (no usage) settles with
// zeros: the estimate is refunded. Only the first call counts.
func (a *Admission) Settle(prompt, completion int64, pool string) {
	e := a.charged
	if e == nil {
		return
	}
	a.charged = nil
	delta := max(prompt+completion, 0) - a.estimate
	for i := range e.tpm {
		e.tpm[i].addTokens(delta)
	}
	var cost int64
	if pr, ok := e.prices[pool]; ok {
		cost = int64(float64(max(prompt, 0))*pr.PromptPerMillion + float64(max(completion, 0))*pr.CompletionPerMillion + 0.5)
	}
	for i := range e.budgets {
		b := &e.budgets[i]
		if b.cost {
			b.c.adjust(b.periodOf(a.at), cost-a.costEstimate)
		} else {
			b.c.adjust(b.periodOf(a.at), delta)
		}
	}
}

// Keep settles the request at its estimate (its response reported no
// usage).
func (a *Admission) Keep() { a.charged = nil }

// Budgets

// budget returns the budget counter for scope (made on first use).
func (l *Limiter) budget(scope string) *budgetCounter {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.budgets[scope]
	if c == nil {
		c = &budgetCounter{shared: l.sh != nil, month: strings.HasSuffix(scope, "month")}
		l.budgets[scope] = c
	}
	return c
}

// state is what Save writes: each budget's period and use.
type state struct {
	Version int                 `json:"version"`
	Saved   time.Time           `json:"saved"`
	Budgets map[string][2]int64 `json:"budgets"` // scope -> period, used
}

// Save writes the budgets' use to path (atomically, mode 0600), so a
// restart keeps what was spent.
func (l *Limiter) Save(path string, now time.Time) error {
	st := state{Version: 1, Saved: now.UTC(), Budgets: map[string][2]int64{}}
	l.mu.Lock()
	for k, c := range l.budgets {
		if u := c.used.Load(); u != 0 {
			st.Budgets[k] = [2]int64{c.period.Load(), u}
		}
	}
	l.mu.Unlock()
	return atomicfile.WriteMode(path, 0o600, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(st)
	})
}

// Load restores budgets Save wrote (a missing file: nothing to restore).
func (l *Limiter) Load(path string) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%s: not a budget state file: %v", path, err)
	}
	if st.Version != 1 {
		return fmt.Errorf("%s: state version %d, want 1", path, st.Version)
	}
	for k, v := range st.Budgets {
		if v[1] < 0 || v[1] > math.MaxInt64/2 {
			return fmt.Errorf("%s: budget %q: use %d out of range", path, k, v[1])
		}
		c := l.budget(k)
		c.period.Store(v[0])
		c.used.Store(v[1])
	}
	return nil
}
