package access

import (
	"context"
	"maps"
	"strconv"
	"sync/atomic"
	"time"
)

// Sharing limits across replicas. With a Redis configured, a
// requests-per-minute limit counts every replica's requests together, and
// a budget every replica's tokens. The request path still does no I/O:
//
//   - Admissions come from a local lease: admissions Redis granted this
//     replica ahead (about a tenth of a second of the limit's rate, at
//     least 2). A background loop (Limiter.Run) tops leases up every 20
//     ms, and at once when one runs dry, asking for what was refused
//     meanwhile too. A request that finds its lease empty is refused
//     (429) until the next top-up grants more.
//   - A tenant whose lease was never filled yet (its first ~20 ms) is
//     admitted by the local count, at most a lease's worth, and those
//     admissions are charged to Redis at the next round.
//   - While Redis does not answer, requests are admitted (fail open,
//     marked degraded) or refused (fail closed); what was admitted is
//     charged to Redis when it answers again, and tokens spent meanwhile
//     are added to the budgets then: nothing is lost.
//
//   - A tokens-per-minute limit is admitted on the replica's own GCRA,
//     which every round also charges with what the other replicas spent
//     (each replica adds its tokens to an hourly total in Redis and reads
//     it back): a request's tokens vary too much for leases.
//
// Replicas overshoot a requests-per-minute limit by at most the leases
// they hold unused plus what they admitted before their first top-up: N
// replicas, at most 2N leases' worth. A tokens-per-minute limit or a
// budget is overshot by at most what the other replicas admitted in one
// round (20 ms) before this one heard of it: in a burst, N replicas may
// each spend what is left. Nothing bounds what fail-open admits during an
// outage.

// refillEvery is how often the loop tops leases up and syncs budgets.
const refillEvery = 20 * time.Millisecond

// leaseSize is how many admissions a replica holds ahead for a limit of
// perMinute: a tenth of a second of its sustained rate, at least 2.
func leaseSize(perMinute int) int64 { return max(2, int64(perMinute)/600) }

// shared is a Limiter's link to Redis.
type shared struct {
	store      *RedisStore
	failClosed bool
	kick       chan struct{}
	degraded   atomic.Bool   // the last round failed: admit on local counts
	admitted   atomic.Uint64 // requests admitted while degraded
}

// sharedRate is a requests-per-minute limit counted in Redis.
type sharedRate struct {
	c         *counter
	perMinute int
}

// Share makes l's requests- and tokens-per-minute limits and budgets count
// across the replicas that share store (see above); Run keeps them in
// step. Call it before the first Compile.
func (l *Limiter) Share(store *RedisStore, failClosed bool) {
	l.sh = &shared{store: store, failClosed: failClosed, kick: make(chan struct{}, 1)}
	l.sh.degraded.Store(!store.Healthy())
	l.rates = map[string]sharedRate{}
	l.tokens = map[string]sharedRate{}
}

// Degraded reports whether shared limits are enforced on local counts
// only because Redis did not answer, and how many requests were admitted
// so; false and 0 without Redis.
func (l *Limiter) Degraded() (bool, uint64) {
	if l.sh == nil {
		return false, 0
	}
	return l.sh.degraded.Load(), l.sh.admitted.Load()
}

// takeShared admits one request against a shared limit.
func (r *rate) takeShared(sh *shared, now int64) (ok bool, remaining int, reset, retry time.Duration, degraded bool) {
	c := r.c
	if sh.degraded.Load() {
		if sh.failClosed {
			return false, 0, 0, time.Second, true
		}
		c.debt.Add(1)
		sh.admitted.Add(1)
		return true, int(c.remaining.Load()), time.Duration(c.reset.Load()), 0, true
	}
	if !c.primed.Load() {
		// Before the first top-up: the local count, a lease's worth at most.
		if c.debt.Load() < leaseSize(r.limit) {
			if ok, rem, reset, _ := r.take(now); ok {
				c.debt.Add(1)
				return true, rem, reset, 0, false
			}
		}
		c.demand.Add(1)
		sh.wake()
		return false, 0, 0, refillEvery, false
	}
	if c.lease.Add(-1) >= 0 {
		return true, int(c.remaining.Load()), time.Duration(c.reset.Load()), 0, false
	}
	c.lease.Add(1)
	c.demand.Add(1)
	sh.wake()
	return false, 0, time.Duration(c.reset.Load()), time.Duration(r.interval), false
}

func (sh *shared) wake() {
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

// Run keeps shared limits in step with Redis until ctx ends: it tops up
// the leases, charges what was admitted on local counts, and adds the
// budgets' spending. Without Share it returns at once.
func (l *Limiter) Run(ctx context.Context) {
	if l.sh == nil {
		return
	}
	t := time.NewTicker(refillEvery)
	defer t.Stop()
	for {
		l.round(ctx)
		select {
		case <-ctx.Done():
			// A last round, so budgets spent up to now reach Redis.
			last, cancel := context.WithTimeout(context.Background(), l.sh.store.timeout)
			l.round(last)
			cancel()
			return
		case <-t.C:
		case <-l.sh.kick:
		}
	}
}

// round is one pass over the shared limits and budgets.
func (l *Limiter) round(ctx context.Context) {
	sh := l.sh
	l.mu.Lock()
	rates, tokens, budgets := maps.Clone(l.rates), maps.Clone(l.tokens), maps.Clone(l.budgets)
	l.mu.Unlock()
	failed := false
	for scope, r := range rates {
		if !l.topUp(ctx, scope, r) {
			failed = true
			break // Redis is not answering: the next round tries again
		}
	}
	if !failed {
		now := time.Now()
		for scope, r := range tokens {
			if !l.syncTokens(ctx, scope, r, now) {
				failed = true
				break
			}
		}
	}
	if !failed {
		for scope, b := range budgets {
			if !l.syncBudget(ctx, scope, b) {
				failed = true
				break
			}
		}
	}
	sh.degraded.Store(failed)
}

// topUp charges what scope admitted on local counts and refills its lease
// (reading the shared count when it needs nothing).
func (l *Limiter) topUp(ctx context.Context, scope string, r sharedRate) bool {
	c, store := r.c, l.sh.store
	if debt := c.debt.Swap(0); debt > 0 {
		if _, _, _, err := store.TakeRequests(ctx, scope, r.perMinute, int(min(debt, int64(r.perMinute)))); err != nil {
			c.debt.Add(debt)
			return false
		}
	}
	demand := c.demand.Swap(0)
	want := max(leaseSize(r.perMinute)-c.lease.Load(), 0) + demand
	want = min(want, int64(r.perMinute))
	granted, remaining, reset, err := store.TakeRequests(ctx, scope, r.perMinute, int(want))
	if err != nil {
		c.demand.Add(demand)
		return false
	}
	c.lease.Add(int64(granted))
	c.remaining.Store(min(int64(r.perMinute), int64(remaining)+c.lease.Load())) // what is left to every replica, this one's lease included
	c.reset.Store(int64(reset))
	c.primed.Store(true)
	return true
}

// syncBudget adds what scope's budget spent here since the last round to
// Redis and takes the total every replica spent as its count.
func (l *Limiter) syncBudget(ctx context.Context, scope string, b *budgetCounter) bool {
	period := b.period.Load()
	d := b.pending.Swap(0)
	key := scope + "|" + strconv.FormatInt(period, 10)
	total, err := l.push(ctx, key, d, 32*24*time.Hour) // outlives a month, then goes
	if err != nil {
		b.pending.Add(d)
		return false
	}
	if b.period.Load() == period {
		b.used.Store(total + b.pending.Load()) // what others spent, and what this replica spent since the call
	}
	return true
}

// syncTokens adds the tokens scope's tokens-per-minute limit charged here
// since the last round to the hour's total in Redis, and charges the
// local GCRA with what the other replicas added meanwhile.
func (l *Limiter) syncTokens(ctx context.Context, scope string, r sharedRate, now time.Time) bool {
	c := r.c
	hour := now.Unix() / 3600
	key := "tpm:" + scope + "|" + strconv.FormatInt(hour, 10)
	d := c.debt.Swap(0)
	total, err := l.push(ctx, key, d, 2*time.Hour)
	if err != nil {
		c.debt.Add(d)
		return false
	}
	last := c.remaining.Load()
	if c.reset.Load() != hour {
		last = 0 // a new hour's total
		c.reset.Store(hour)
	}
	c.remaining.Store(total)
	others := total - last - d
	if others == 0 {
		return true
	}
	interval := int64(time.Minute) / int64(r.perMinute)
	if others < 0 { // others settled below their estimates
		c.tat.Add(others * interval)
		return true
	}
	t := now.Sub(l.epoch).Nanoseconds()
	for {
		old := c.tat.Load()
		if c.tat.CompareAndSwap(old, max(old, t)+others*interval) {
			return true
		}
	}
}

// push adds d to the shared count at key (a new key lives ttl) and
// returns the total every replica added; with nothing to add it only
// reads it.
func (l *Limiter) push(ctx context.Context, key string, d int64, ttl time.Duration) (int64, error) {
	if d != 0 {
		return l.sh.store.AddTokens(ctx, key, d, ttl)
	}
	return l.sh.store.GetTokens(ctx, key)
}
