package tenancy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Sharing limits across replicas. With a Redis configured, a
// requests-per-minute limit counts every replica's requests together, a
// tokens-per-minute limit every replica's tokens, and a budget every
// replica's spending. Concurrent-request limits stay each replica's own
// (Limits.PerReplica must say so). The request path does no I/O of its
// own:
//
//   - Admissions come from a local lease: admissions Redis granted this
//     replica ahead (about a tenth of a second of the limit's rate, at
//     least 2). A lease loop (in Limiter.Run) tops leases up every 20 ms.
//   - A request that finds its lease empty asks the lease loop for more
//     and waits for its answer, at most access.redis.timeout (default
//     50 ms): granted, it is admitted; Redis had none left, it is refused
//     (429), and so is every request until Redis said the next one comes
//     back, without asking again. So a burst is admitted as the same
//     limit alone would admit it (GCRA: a minute's worth at once), only
//     later by the round trip.
//   - While Redis does not answer (a call failed, or the wait ran out),
//     requests are admitted on the replica's own counts, marked degraded
//     and counted (fail open), or refused with 503 limits_unavailable
//     (fail closed): either within access.redis.timeout of the request,
//     whether Redis refuses connections or stalls. What fail-open
//     admitted is charged to Redis when it answers again, and tokens spent
//     meanwhile are reported then: nothing is lost.
//   - Every call is idempotent: a lease call that timed out is sent again,
//     unchanged, under the same sequence number, and Redis answers a copy
//     it ran already from its record (gcraScript); spending is
//     reported as this replica's whole count in the period, never as a
//     delta (reportScript). A Redis that stalls and then runs what it was
//     sent meanwhile counts nothing twice, and a Redis restarted empty
//     gets each running replica's spending back at its next report (what
//     replicas no longer running had spent is lost to Redis unless it
//     persists it). Until a replica reports again, the others keep
//     counting what they last saw it spend (othersSeen): a count Redis
//     forgot is not a refund.
//   - A tokens-per-minute limit is admitted on the replica's own GCRA,
//     which a sync loop (in Run, every 20 ms) also charges with what the
//     other replicas spent (each replica reports its tokens in the hour,
//     and reads back every replica's): a request's tokens vary too much
//     for leases. Budgets are synced by the same loop.
//
// Replicas overshoot a requests-per-minute limit by at most the leases
// they hold unused: N replicas, N leases' worth (a lease is
// max(2, limit/600)), and what requests that stopped waiting past the
// bound had asked for. A Redis restarted empty forgets the requests
// counted this minute (leases are not re-sent). A tokens-per-minute limit or a budget is overshot by
// at most what the other replicas admitted in one sync round (20 ms plus
// its calls) before this one heard of it: in a burst, N replicas may each
// spend what is left. Nothing bounds what fail-open admits during an
// outage but the replica's own counts.

// refillEvery is how often the loops top leases up and sync budgets.
const refillEvery = 20 * time.Millisecond

// refreshEvery is how many lease rounds pass between two top-ups of a
// lease that needs none (whole, nothing owed, nothing asked): enough to
// keep the remaining count the headers report fresh (every second),
// without a call per idle tenant every round.
const refreshEvery = 50

// leaseSize is how many admissions a replica holds ahead for a limit of
// perMinute: a tenth of a second of its sustained rate, at least 2.
func leaseSize(perMinute int) int64 { return max(2, int64(perMinute)/600) }

// shared is a Limiter's link to Redis.
type shared struct {
	store      Store
	failClosed bool
	wait       time.Duration // the longest a request waits for the lease loop: the store's Timeout
	replica    string        // this replica's id in Redis's records: random, one per Limiter
	seq        atomic.Uint64 // the last sequence number a call used
	kick       chan struct{}
	// next is closed when the lease round that starts next ends: a
	// request that has asked for a lease waits on it.
	next      atomic.Pointer[chan struct{}]
	leaseDown atomic.Bool   // the last lease round that called Redis failed
	syncDown  atomic.Bool   // the last sync round failed
	admitted  atomic.Uint64 // requests admitted while degraded
}

// down reports whether Redis did not answer the last calls: shared
// limits are enforced on local counts (fail open) or refused (fail
// closed).
func (sh *shared) down() bool { return sh.leaseDown.Load() || sh.syncDown.Load() }

// sharedRate is a requests- or tokens-per-minute limit counted in Redis,
// with the state of its loop (only the loop's goroutine touches what
// follows perMinute).
type sharedRate struct {
	c         *counter
	perMinute atomic.Int64 // a reload may change it
	// op is a lease call not answered yet (requests per minute): sent
	// again, unchanged, until Redis answers it.
	op *rateOp
	// hour, mine and others count a tokens-per-minute limit's tokens in
	// the current hour: this replica's, and the other replicas' as last
	// seen.
	hour, mine, others int64
	// seen is each other replica's tokens in the hour, as last seen.
	seen map[string]int64
}

// othersSeen folds counts (every replica's, as Redis holds them now) into
// seen (the other replicas' as last seen) and returns the others' total.
// A replica Redis no longer holds (restarted empty, and not reported to
// since) keeps the count last seen: Redis forgot what it spent, which is
// no refund; a count that went down (settled below its estimate) is taken
// as it is.
func othersSeen(seen, counts map[string]int64, self string) int64 {
	for id, n := range counts {
		if id != self {
			seen[id] = n
		}
	}
	total := int64(0)
	for _, n := range seen {
		total += n
	}
	return total
}

// rateOp is one idempotent lease call: n admissions asked for, the first
// debt of them charging what was admitted on local counts.
type rateOp struct {
	seq       uint64
	perMinute int
	n, debt   int64
}

// idle reports whether the lease needs no top-up at now (ns since the
// epoch): nothing owed or asked for, no call pending, and the lease whole
// or Redis having said none are left until later.
func (r *sharedRate) idle(now int64) bool {
	c := r.c
	return r.op == nil && c.debt.Load() == 0 && c.demand.Load() == 0 &&
		(c.lease.Load() >= leaseSize(int(r.perMinute.Load())) || c.dry.Load() > now)
}

// Share makes l's requests- and tokens-per-minute limits and budgets count
// across the replicas that share store (see above); Run keeps them in
// step. Call it before the first Compile.
func (l *Limiter) Share(store Store, failClosed bool) {
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read does not fail
	sh := &shared{store: store, failClosed: failClosed, wait: store.Timeout(), replica: hex.EncodeToString(id[:]), kick: make(chan struct{}, 1)}
	next := make(chan struct{})
	sh.next.Store(&next)
	sh.syncDown.Store(!store.Healthy())
	l.sh = sh
	l.rates = map[string]*sharedRate{}
	l.tokens = map[string]*sharedRate{}
}

// Degraded reports whether shared limits are enforced on local counts
// only because Redis did not answer, and how many requests were admitted
// so; false and 0 without Redis.
func (l *Limiter) Degraded() (bool, uint64) {
	if l.sh == nil {
		return false, 0
	}
	return l.sh.down(), l.sh.admitted.Load()
}

// takeShared admits one request against a shared limit: from the lease,
// else from what the lease loop gets from Redis within sh.wait, else as
// Redis being down says (see above).
func (r *rate) takeShared(sh *shared, now int64) (ok bool, remaining int, reset, retry time.Duration, degraded bool) {
	c := r.c
	if c.lease.Add(-1) >= 0 {
		return true, int(c.remaining.Load()), time.Duration(c.reset.Load()), 0, false
	}
	c.lease.Add(1)
	if !sh.down() {
		var t *time.Timer // the bound on the wait, made on the first
		defer func() {
			if t != nil {
				t.Stop()
			}
		}()
		for {
			if dry := c.dry.Load(); now < dry { // Redis said none are left until dry
				return false, 0, time.Duration(c.reset.Load()), time.Duration(dry - now), false
			}
			c.demand.Add(1)
			if t == nil {
				t = time.NewTimer(sh.wait)
			}
			if !sh.await(t.C) {
				break // Redis did not answer in time: as while it is down
			}
			if c.lease.Add(-1) >= 0 {
				return true, int(c.remaining.Load()), time.Duration(c.reset.Load()), 0, false
			}
			c.lease.Add(1)
			if sh.down() {
				break
			}
			// Granted, and taken by a request that found the lease
			// before this one woke: ask again, unless Redis has none.
			if dry := c.dry.Load(); dry > now {
				return false, 0, time.Duration(c.reset.Load()), time.Duration(dry - now), false
			}
		}
	}
	if sh.failClosed {
		return false, 0, 0, time.Second, true
	}
	c.debt.Add(1)
	sh.admitted.Add(1)
	return true, int(c.remaining.Load()), time.Duration(c.reset.Load()), 0, true
}

// await asks the lease loop for a round and waits for it to end, or for
// expired; it reports whether the round ended first. The demand the
// caller registered before is seen by that round: it is the next to
// start.
func (sh *shared) await(expired <-chan time.Time) bool {
	done := *sh.next.Load()
	sh.wake()
	select {
	case <-done:
		return true
	case <-expired:
		return false
	}
}

func (sh *shared) wake() {
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

// Run keeps shared limits in step with Redis until ctx ends, on two
// loops: one tops up the leases (every 20 ms, and at once when a request
// asks), the other reports the tokens-per-minute limits' and budgets'
// spending (every 20 ms). It returns when both have ended, after a last
// round each, so that what was spent reaches Redis. Without Share it
// returns at once.
func (l *Limiter) Run(ctx context.Context) {
	if l.sh == nil {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { l.loop(ctx, l.sh.kick, l.leaseRound) })
	wg.Go(func() { l.loop(ctx, nil, l.syncRound) })
	wg.Wait()
}

// loop runs round every refillEvery and when kick fires, until ctx ends;
// then once more, bounded by the store's Timeout.
func (l *Limiter) loop(ctx context.Context, kick <-chan struct{}, round func(context.Context, int)) {
	t := time.NewTicker(refillEvery)
	defer t.Stop()
	for n := 0; ; n++ {
		round(ctx, n)
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.Background(), l.sh.store.Timeout())
			round(last, n+1)
			cancel()
			return
		case <-t.C:
		case <-kick:
		}
	}
}

// leaseRound tops up the leases that need it (every one each
// refreshEvery rounds). The leases requests asked for come first, and
// the requests waiting are woken as soon as those are answered; the rest
// follow, until a request asks again (the next round takes them up, and
// starts at another scope). So a request waits for at most one other
// top-up and those asked for with it, one round trip each, not for every
// tenant's.
func (l *Limiter) leaseRound(ctx context.Context, n int) {
	sh := l.sh
	fresh := make(chan struct{})
	done := sh.next.Swap(&fresh)
	l.mu.Lock()
	rates := maps.Clone(l.rates)
	l.mu.Unlock()
	asked := func(r *sharedRate) bool { return r.op != nil || r.c.demand.Load() > 0 }
	first := make(map[string]bool)
	called, failed := false, false
	for scope, r := range rates {
		if !asked(r) {
			continue
		}
		first[scope], called = true, true
		if !l.topUp(ctx, scope, r) {
			failed = true
			break // Redis is not answering: the next round tries again
		}
	}
	if called {
		sh.leaseDown.Store(failed)
	}
	close(*done)
	if failed {
		return
	}
	for scope, r := range rates { // a map: each round starts at a random scope, so none waits for ever
		if first[scope] || n%refreshEvery != 0 && r.idle(int64(time.Since(l.epoch))) {
			continue
		}
		if !l.topUp(ctx, scope, r) {
			sh.leaseDown.Store(true)
			return
		}
		sh.leaseDown.Store(false)
		if len(sh.kick) > 0 {
			return // a request asks: the next round, at once
		}
	}
}

// syncRound reports the tokens-per-minute limits' and the budgets'
// spending and reads back every replica's.
func (l *Limiter) syncRound(ctx context.Context, _ int) {
	l.mu.Lock()
	tokens, budgets := maps.Clone(l.tokens), maps.Clone(l.budgets)
	l.mu.Unlock()
	now := time.Now()
	failed := false
	for scope, r := range tokens {
		if !l.syncTokens(ctx, scope, r, now) {
			failed = true
			break
		}
	}
	if !failed {
		for scope, b := range budgets {
			if !l.syncBudget(ctx, scope, b, now) {
				failed = true
				break
			}
		}
	}
	l.sh.syncDown.Store(failed)
}

// topUp charges what scope admitted on local counts and refills its lease
// (reading the shared count when it needs nothing), in one idempotent
// call: a call that failed is sent again as it was.
func (l *Limiter) topUp(ctx context.Context, scope string, r *sharedRate) bool {
	c, sh := r.c, l.sh
	if r.op == nil {
		perMinute := r.perMinute.Load()
		debt := min(c.debt.Swap(0), perMinute)
		want := max(leaseSize(int(perMinute))-c.lease.Load(), 0) + c.demand.Swap(0)
		r.op = &rateOp{seq: sh.seq.Add(1), perMinute: int(perMinute), debt: debt, n: min(debt+want, perMinute)}
	}
	op := r.op
	granted, remaining, reset, _, err := sh.store.TakeRequestsOnce(ctx, scope, op.perMinute, int(op.n), sh.replica, op.seq)
	if err != nil {
		return false
	}
	r.op = nil
	c.lease.Add(max(int64(granted)-op.debt, 0))
	c.remaining.Store(min(int64(op.perMinute), int64(remaining)+c.lease.Load())) // what is left to every replica, this one's lease included
	c.reset.Store(int64(reset))
	if int64(granted) < op.n && remaining == 0 {
		// None left: the next comes back when the TAT is a window less
		// an interval ahead.
		interval := time.Minute / time.Duration(op.perMinute)
		c.dry.Store(int64(time.Since(l.epoch) + max(reset-time.Duration(op.perMinute-1)*interval, 0)))
	} else {
		c.dry.Store(0)
	}
	return true
}

// syncBudget reports what this replica has spent of scope's budget in
// its period and takes the total every replica spent as its count.
func (l *Limiter) syncBudget(ctx context.Context, scope string, b *budgetCounter, now time.Time) bool {
	period := b.advance(periodOf(now, b.month)) // a replica that spent nothing yet today still learns what the others did
	if b.minePeriod != period || b.others == nil {
		b.minePeriod, b.mine, b.others = period, 0, map[string]int64{}
	}
	b.mine += b.pending.Swap(0)
	key := scope + "|" + strconv.FormatInt(period, 10)
	counts, err := l.sh.store.ReportEach(ctx, key, l.sh.replica, l.sh.seq.Add(1), b.mine, 32*24*time.Hour) // outlives a month, then goes
	if err != nil {
		return false // b.mine is sent again next round
	}
	total := b.mine + othersSeen(b.others, counts, l.sh.replica)
	if b.period.Load() == period {
		b.used.Store(total + b.pending.Load()) // every replica's, and what this one spent since the call
	}
	return true
}

// syncTokens reports the tokens scope's tokens-per-minute limit charged
// here in the hour, and charges the local GCRA with what the other
// replicas added since the last round.
func (l *Limiter) syncTokens(ctx context.Context, scope string, r *sharedRate, now time.Time) bool {
	c := r.c
	hour := now.Unix() / 3600
	if r.hour != hour || r.seen == nil {
		r.hour, r.mine, r.others, r.seen = hour, 0, 0, map[string]int64{} // a new hour's total
	}
	r.mine += c.debt.Swap(0)
	key := "tpm:" + scope + "|" + strconv.FormatInt(hour, 10)
	counts, err := l.sh.store.ReportEach(ctx, key, l.sh.replica, l.sh.seq.Add(1), r.mine, 2*time.Hour)
	if err != nil {
		return false
	}
	others := othersSeen(r.seen, counts, l.sh.replica)
	d := others - r.others
	r.others = others
	if d == 0 {
		return true
	}
	interval := int64(time.Minute) / r.perMinute.Load()
	if d < 0 { // others settled below their estimates
		c.tat.Add(d * interval)
		return true
	}
	t := now.Sub(l.epoch).Nanoseconds()
	for {
		old := c.tat.Load()
		if c.tat.CompareAndSwap(old, max(old, t)+d*interval) {
			return true
		}
	}
}
