package tenancy

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// replica is one gateway's access control on a shared Redis: its own
// Limiter and snapshot, its top-up loop running.
type replica struct {
	l *Limiter
	s *Snapshot
	c Caller
}

func newReplica(t *testing.T, addr string, cfg Config, k Key, secret string, failClosed bool) *replica {
	t.Helper()
	return newReplicaOn(t, newTestRedisStore(t, addr, RedisConfig{}), cfg, k, secret, failClosed)
}

// newReplicaOn is newReplica on a store of the test's.
func newReplicaOn(t *testing.T, store *RedisStore, cfg Config, k Key, secret string, failClosed bool) *replica {
	t.Helper()
	l := NewLimiter()
	l.Share(store, failClosed)
	s, err := Compile(&cfg, []Key{k}, nil, l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	c, d := s.Authenticate(bearer(secret), time.Now())
	if d != nil {
		t.Fatal(d)
	}
	return &replica{l: l, s: s, c: c}
}

// Two replicas on one Redis admit, together, the limit and at most the
// overshoot shared.go documents (two leases each).
func TestSharedLimitAcrossReplicas(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	secret, k := mustKey(t, "alice")
	cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Limits: Limits{RequestsPerMinute: 120}}}}
	a := newReplica(t, addr, cfg, k, secret, false)
	b := newReplica(t, addr, cfg, k, secret, false)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(700 * time.Millisecond) // the limit's burst, not its refill (one per 0.5 s)
	for _, r := range []*replica{a, b, a, b} {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if adm, d := r.c.Admit(time.Now(), 0); d == nil {
					admitted.Add(1)
					if adm.Degraded {
						t.Error("degraded with Redis up")
					}
				}
				// The clients' pace, not a wait for anything: four
				// clients spinning on refusals would starve the lease
				// loops on a small machine. The window is what the limit
				// bounds, however many tries it holds.
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	n := admitted.Load()
	over := 2 * 2 * leaseSize(120)
	if n < 120 || n > 120+2+over {
		t.Fatalf("two replicas admitted %d at a limit of 120 (allowed: 120 to %d, plus one refill)", n, 120+over)
	}
	t.Logf("admitted %d at a limit of 120 over two replicas", n)
}

// Redis stops: requests are admitted on local counts, marked degraded;
// Redis returns: enforcement resumes by itself, and what was admitted
// meanwhile is charged, as the budgets' spending is added.
func TestSharedLimitRedisDownAndBack(t *testing.T) {
	addr, stop, start := testenv.Redis(t)
	secret, k := mustKey(t, "alice")
	cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice",
		Limits: Limits{RequestsPerMinute: 30}, Budget: Budget{TokensPerDay: 1 << 40}}}}
	r := newReplica(t, addr, cfg, k, secret, false)
	waitShared(t, r, false)
	stop()
	waitShared(t, r, true)
	degraded := 0
	for range 40 { // more than the limit: fail open admits them all
		adm, d := r.c.Admit(time.Now(), 100)
		if d != nil {
			t.Fatalf("refused while Redis is down (fail open): %v", d)
		}
		if adm.Degraded {
			degraded++
		}
		adm.Settle(10, 0, "")
	}
	if degraded != 40 {
		t.Fatalf("%d of 40 admissions marked degraded", degraded)
	}
	start()
	waitShared(t, r, false)
	// The 40 admitted during the outage were charged: the limit (30) is
	// spent, so the next request is refused.
	testenv.WaitWithin(t, 2*time.Second, "enforcement to resume after Redis came back", func() (bool, string) {
		_, d := r.c.Admit(time.Now(), 0)
		return d != nil && d.Code == "rate_limit_exceeded", "admitted"
	})
	// And the 400 tokens spent during the outage reached Redis.
	b := r.s.keys[k.ID].budgets[0]
	key := limitScope(&cfg.Policies[0], "p:alice", Principal{Name: "alice"}) + "|day|" + itoa(b.periodOf(time.Now()))
	testenv.Wait(t, func() bool {
		return spentInRedis(t, addr, key) == 400
	}, "the outage's 400 tokens in Redis")
}

// Fail closed: while Redis is down, requests are refused with 503, for a
// requests-per-minute limit and for a tokens-per-minute one.
func TestSharedLimitFailClosed(t *testing.T) {
	for _, lim := range []Limits{{RequestsPerMinute: 30}, {TokensPerMinute: 1000}} {
		addr, stop, _ := testenv.Redis(t)
		secret, k := mustKey(t, "alice")
		cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Limits: lim}}}
		r := newReplica(t, addr, cfg, k, secret, true)
		waitShared(t, r, false)
		stop()
		waitShared(t, r, true)
		// A lease Redis granted before it went down is within the shared
		// limit and may still be spent (a lease is max(2, limit/600)
		// admissions); past it, nothing is admitted.
		var d *Denial
		n := 0
		for ; n <= 2; n++ {
			if _, d = r.c.Admit(time.Now(), 10); d != nil {
				break
			}
		}
		if d == nil || d.Status != 503 || d.Code != "limits_unavailable" {
			t.Fatalf("%+v: fail closed with Redis down: %d admitted, then %+v", lim, n, d)
		}
	}
}

func waitShared(t *testing.T, r *replica, degraded bool) {
	t.Helper()
	testenv.Wait(t, func() bool {
		d, _ := r.l.Degraded()
		return d == degraded
	}, "degraded="+map[bool]string{true: "true", false: "false"}[degraded])
}

// spentInRedis is the total every replica reported at key.
func spentInRedis(t *testing.T, addr, key string) int64 {
	t.Helper()
	vals, err := rawRedis(t, addr, 0).HVals(context.Background(), DefaultRedisPrefix+"spent:"+key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, v := range vals {
		_, n, _ := strings.Cut(v, " ")
		c, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			t.Fatalf("%s: %q is not \"seq count\"", key, v)
		}
		total += c
	}
	return total
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A tokens-per-minute limit counts every replica's tokens: what one spends
// (settled, not estimated) the other refuses once a round has passed; a
// refund on one is given back on the other; and with Redis down the limit
// is counted on local spending, marked degraded.
func TestSharedTokensAcrossReplicas(t *testing.T) {
	addr, stop, _ := testenv.Redis(t)
	secret, k := mustKey(t, "alice")
	cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Limits: Limits{TokensPerMinute: 1000}}}}
	a := newReplica(t, addr, cfg, k, secret, false)
	b := newReplica(t, addr, cfg, k, secret, false)
	waitShared(t, a, false)
	waitShared(t, b, false)

	adm, d := a.c.Admit(time.Now(), 100)
	if d != nil {
		t.Fatal(d)
	}
	adm.Settle(500, 200, "") // 700 used, not the estimate
	// b hears of a's 700 within a round or two: 400 no longer fits.
	testenv.Wait(t, func() bool {
		adm, d := b.c.Admit(time.Now(), 400)
		if d == nil {
			adm.Settle(0, 0, "") // admitted before b heard: give it back
			return false
		}
		return d.Code == "rate_limit_exceeded"
	}, "replica b refusing 400 tokens after a spent 700")
	adm, d = b.c.Admit(time.Now(), 200)
	if d != nil {
		t.Fatalf("200 tokens refused with 300 left: %v", d)
	}
	if adm.Degraded {
		t.Fatal("degraded with Redis up")
	}
	// a hears of b's 200 (900 used of 1000): 250 no longer fits there...
	testenv.Wait(t, func() bool {
		adm, d := a.c.Admit(time.Now(), 250)
		if d == nil {
			adm.Settle(0, 0, "")
		}
		return d != nil
	}, "replica a refusing 250 after b took 200")
	adm.Settle(0, 0, "") // ...until b's request fails and is refunded, on both replicas
	testenv.Wait(t, func() bool {
		adm, d := a.c.Admit(time.Now(), 250)
		if d == nil {
			adm.Settle(0, 0, "")
		}
		return d == nil
	}, "replica a admitting 250 after b's refund")

	stop()
	waitShared(t, a, true)
	adm, d = a.c.Admit(time.Now(), 100)
	if d != nil || !adm.Degraded {
		t.Fatalf("Redis down, fail open: %+v %v", adm, d)
	}
	adm.Settle(100, 0, "")
}
