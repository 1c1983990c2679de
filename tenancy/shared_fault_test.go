package tenancy

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// These tests stall a real redis-server (SIGSTOP, then SIGCONT) or the
// network path to it (a proxy that stops forwarding), as the failures the
// shared limits must survive: not a Redis that refuses, but one that
// takes what it is sent and answers nothing.

// stallTimeout is the Redis Timeout of the fault tests: the default, the
// bound they check.
const stallTimeout = DefaultRedisTimeout

// newStallReplica is a replica whose store has the default Timeout.
func newStallReplica(t *testing.T, addr string, cfg Config, k Key, secret string, failClosed bool) *replica {
	t.Helper()
	return newReplicaOn(t, newTestRedisStore(t, addr, RedisConfig{Timeout: stallTimeout}), cfg, k, secret, failClosed)
}

// used is what r counts as spent of its principal's first budget.
func (r *replica) used() int64 { return r.c.e.budgets[0].c.used.Load() }

// served makes r count its principal's budgets in today's period, as a
// replica that has served it today does: a request admitted, then
// refunded.
func (r *replica) served(t *testing.T) {
	t.Helper()
	adm, d := r.c.Admit(time.Now(), 10)
	if d != nil {
		t.Fatal(d)
	}
	adm.Settle(0, 0, "")
}

// errorsAfter waits until r's store has failed n more calls than it had
// at the start: calls made while Redis is stalled, each one sent.
func (r *replica) errorsAfter(t *testing.T, n uint64) func() {
	base := r.l.sh.store.(*RedisStore).Stats().Errors
	return func() {
		t.Helper()
		testenv.Wait(t, func() bool { return r.l.sh.store.(*RedisStore).Stats().Errors >= base+n }, "failed calls to a stalled Redis")
	}
}

// A Redis that stalls while a replica reports its spending, then runs
// every report it was sent meanwhile, counts the spending once: on the
// replica that spent it and on another one.
func TestSharedBudgetStallCountsOnce(t *testing.T) {
	addr, pause, resume := testenv.RedisStalls(t)
	secret, k := mustKey(t, "alice")
	cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Budget: Budget{TokensPerDay: 1 << 40}}}}
	a := newStallReplica(t, addr, cfg, k, secret, false)
	b := newReplica(t, addr, cfg, k, secret, false)
	b.served(t)
	adm, d := a.c.Admit(time.Now(), 10)
	if d != nil {
		t.Fatal(d)
	}
	adm.Settle(100, 0, "")
	testenv.Wait(t, func() bool { return a.used() == 100 && b.used() == 100 }, "100 tokens counted on both replicas")

	pause()
	failed := a.errorsAfter(t, 3)
	adm, d = a.c.Admit(time.Now(), 10)
	if d != nil {
		t.Fatal(d)
	}
	adm.Settle(50, 0, "")
	failed() // at least two reports of the 50 sent to the stalled Redis
	resume()
	waitShared(t, a, false)
	testenv.Wait(t, func() bool { return b.used() == 150 }, "150 tokens counted on the other replica")
	// Some rounds on: the reports Redis ran late changed nothing.
	calls := a.l.sh.store.(*RedisStore).Stats().Calls
	testenv.Wait(t, func() bool { return a.l.sh.store.(*RedisStore).Stats().Calls > calls+10 }, "ten more calls")
	if a.used() != 150 || b.used() != 150 {
		t.Fatalf("after the stall: %d and %d tokens counted, want 150 on both", a.used(), b.used())
	}
}

// A lease call sent to a stalled Redis, and sent again while it stalls,
// is taken once when Redis runs them all on resume.
func TestSharedLeaseStallCountsOnce(t *testing.T) {
	addr, pause, resume := testenv.RedisStalls(t)
	secret, k := mustKey(t, "alice")
	const limit = 30 // one back every 2s
	cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Limits: Limits{RequestsPerMinute: limit}}}}
	a := newStallReplica(t, addr, cfg, k, secret, false)
	began := time.Now()
	waitShared(t, a, false)
	testenv.Wait(t, func() bool { return a.c.e.rates[0].c.lease.Load() == leaseSize(limit) }, "the first lease")
	pause()
	failed := a.errorsAfter(t, 3)
	for i := range 3 { // two from the lease, the third asks for more
		if _, d := a.c.Admit(time.Now(), 0); d != nil {
			t.Fatalf("request %d with Redis stalled, fail open: %v", i, d)
		}
	}
	failed() // the call asking for more sent at least twice
	resume()
	waitShared(t, a, false)
	// Taken from Redis: the first lease (2), the call sent while stalled
	// (a lease and the request that asked: 3), and the request admitted
	// past the lease, charged after (1).
	const taken = 2 + 3 + 1
	read := newTestRedisStore(t, addr, RedisConfig{})
	left := func() int {
		_, n, _, err := read.TakeRequests(context.Background(), "p:alice|principal:alice", limit, 0)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	back := func() int { return int(time.Since(began) / (time.Minute / limit)) } // came back meanwhile
	testenv.Wait(t, func() bool { return left() <= limit-taken+back() }, "the calls answered and charged")
	// Two more calls answered (a lease needing nothing is read once a
	// second): copies Redis ran late would have run by then.
	calls := a.l.sh.store.(*RedisStore).Stats().Calls
	testenv.Wait(t, func() bool { return a.l.sh.store.(*RedisStore).Stats().Calls > calls+2 }, "two more calls")
	if n := left(); n < limit-taken {
		t.Fatalf("%d of %d left in Redis after the stall, want %d (and what came back since)", n, limit, limit-taken)
	}
}

// A Redis restarted empty gets back what a replica spent, and the replica
// keeps counting it.
func TestSharedBudgetRedisRestartedEmpty(t *testing.T) {
	addr, stop, start := testenv.Redis(t)
	secret, k := mustKey(t, "alice")
	cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Budget: Budget{TokensPerDay: 1 << 40}}}}
	a := newReplica(t, addr, cfg, k, secret, false)
	b := newReplica(t, addr, cfg, k, secret, false)
	b.served(t)
	adm, d := a.c.Admit(time.Now(), 10)
	if d != nil {
		t.Fatal(d)
	}
	adm.Settle(300, 0, "")
	testenv.Wait(t, func() bool { return b.used() == 300 }, "300 tokens counted on the other replica")
	stop()
	waitShared(t, a, true)
	start()
	waitShared(t, a, false)
	testenv.Wait(t, func() bool { return a.used() == 300 && b.used() == 300 }, "300 tokens counted on both replicas after the restart")
}

// A replica that has not served a tenant today learns what the others
// spent of its budget, and refuses what would exceed it.
func TestSharedBudgetIdleReplicaLearns(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	secret, k := mustKey(t, "alice")
	cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Budget: Budget{TokensPerDay: 1000}}}}
	a := newReplica(t, addr, cfg, k, secret, false)
	b := newReplica(t, addr, cfg, k, secret, false)
	adm, d := a.c.Admit(time.Now(), 10)
	if d != nil {
		t.Fatal(d)
	}
	adm.Settle(900, 0, "")
	testenv.Wait(t, func() bool { return b.used() == 900 }, "900 tokens counted on the replica that served nothing")
	if _, d := b.c.Admit(time.Now(), 200); d == nil || d.Code != "insufficient_quota" {
		t.Errorf("200 tokens with 100 left of the budget: %+v, want insufficient_quota", d)
	}
}

// blackHole is a TCP proxy to a Redis that, once cut, accepts connections
// and takes what is sent on them but forwards nothing either way: a
// network path that drops packets.
type blackHole struct {
	l     net.Listener
	cut   atomic.Bool
	conns sync.WaitGroup
}

func newBlackHole(t *testing.T, target string) *blackHole {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackHole{l: l}
	var open sync.Map // net.Conn -> struct{}: closed at the end
	t.Cleanup(func() {
		l.Close()
		open.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		p.conns.Wait()
	})
	p.conns.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			open.Store(c, struct{}{})
			p.conns.Go(func() {
				if p.cut.Load() {
					_, _ = io.Copy(io.Discard, c) // accept, never forward
					return
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				open.Store(up, struct{}{})
				p.conns.Go(func() { p.pipe(up, c) })
				p.pipe(c, up)
			})
		}
	})
	return p
}

// pipe copies from src to dst until src ends, dropping what it reads once
// the proxy is cut.
func (p *blackHole) pipe(dst, src net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *blackHole) addr() string { return p.l.Addr().String() }

// A Redis that stalls (stopped, or behind a path that drops everything)
// while a replica's lease runs dry: every request is answered within the
// store's Timeout (and some slack), admitted marked degraded and counted
// (fail open) or refused with 503 limits_unavailable (fail closed), and
// never refused as over the limit, which it is not.
func TestSharedLimitStalledRedis(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		for _, how := range []string{"SIGSTOP", "black hole"} {
			name := how + map[bool]string{false: ", fail open", true: ", fail closed"}[failClosed]
			t.Run(name, func(t *testing.T) {
				var addr string
				var stall, unstall func()
				if how == "SIGSTOP" {
					addr, stall, unstall = testenv.RedisStalls(t)
				} else {
					raddr, _, _ := testenv.Redis(t)
					p := newBlackHole(t, raddr)
					addr = p.addr()
					stall, unstall = func() { p.cut.Store(true) }, func() { p.cut.Store(false) }
				}
				secret, k := mustKey(t, "alice")
				cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Limits: Limits{RequestsPerMinute: 600}}}}
				r := newStallReplica(t, addr, cfg, k, secret, failClosed)
				waitShared(t, r, false)
				if _, d := r.c.Admit(time.Now(), 0); d != nil {
					t.Fatalf("with Redis up: %v", d)
				}

				stall()
				var answers, degraded int
				var slowest time.Duration
				for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); {
					began := time.Now()
					adm, d := r.c.Admit(began, 0)
					took := time.Since(began)
					slowest = max(slowest, took)
					answers++
					switch {
					case d == nil && adm.Degraded:
						degraded++
						if failClosed {
							t.Fatal("admitted marked degraded under fail closed")
						}
					case d == nil: // from the lease Redis granted before the stall
					case failClosed && d.Status == 503 && d.Code == "limits_unavailable":
						degraded++
					default:
						t.Fatalf("request %d (after %s): %d %s: %s", answers, took, d.Status, d.Code, d.Message)
					}
					if took > stallTimeout+redisSlack {
						t.Errorf("request %d answered after %s, want within %s (Timeout %s)", answers, took, stallTimeout+redisSlack, stallTimeout)
					}
				}
				if degraded == 0 {
					t.Fatalf("%d requests in 400ms with Redis stalled, none past the lease", answers)
				}
				if ok, n := r.l.Degraded(); !ok || !failClosed && n < uint64(degraded) {
					t.Errorf("Degraded() = %v, %d after %d degraded answers", ok, n, degraded)
				}
				t.Logf("%d answers, %d past the lease, the slowest in %s", answers, degraded, slowest)
				unstall()
				waitShared(t, r, false)
			})
		}
	}
}

// A burst at a fresh tenant under a shared limit is admitted as the same
// limit alone admits it: a minute's worth at once, and not one more.
func TestSharedBurstAsLocal(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	const limit, burst = 60, 70 // one a second comes back: none during the test
	admitAll := func(c Caller, n int) (admitted int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var bad []*Denial
		gate := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-gate
				adm, d := c.Admit(time.Now(), 0)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case d == nil && !adm.Degraded:
					admitted++
				case d == nil || d.Code != "rate_limit_exceeded":
					bad = append(bad, d)
				}
			})
		}
		close(gate)
		wg.Wait()
		for _, d := range bad {
			t.Errorf("an answer neither admitted nor over the limit: %+v", d)
		}
		return admitted
	}
	for _, n := range []int{8, burst} {
		who := "p" + itoa(int64(n)) // a fresh tenant each
		cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: who, Limits: Limits{RequestsPerMinute: limit}}}}
		secret, k := mustKey(t, who)
		local := compile(t, cfg, k)
		c, d := local.Authenticate(bearer(secret), time.Now())
		if d != nil {
			t.Fatal(d)
		}
		want := admitAll(c, n)
		r := newReplica(t, addr, cfg, k, secret, false)
		if got := admitAll(r.c, n); got != want {
			t.Errorf("%d at once at %d a minute: %d admitted under Redis, %d alone", n, limit, got, want)
		}
		if want != min(n, limit) {
			t.Errorf("%d at once at %d a minute: %d admitted alone", n, limit, want)
		}
	}
}

// A principal with only a budget is checked as the shared state allows:
// with Redis down, admitted marked degraded (fail open) or refused with
// 503 (fail closed).
func TestSharedBudgetOnlyRedisDown(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		addr, stop, _ := testenv.Redis(t)
		secret, k := mustKey(t, "alice")
		cfg := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Budget: Budget{TokensPerDay: 1 << 40}}}}
		r := newStallReplica(t, addr, cfg, k, secret, failClosed)
		waitShared(t, r, false)
		stop()
		waitShared(t, r, true)
		adm, d := r.c.Admit(time.Now(), 10)
		switch {
		case failClosed && (d == nil || d.Status != 503 || d.Code != "limits_unavailable"):
			t.Errorf("fail closed, Redis down: %+v, want 503 limits_unavailable", d)
		case !failClosed && (d != nil || !adm.Degraded):
			t.Errorf("fail open, Redis down: %+v %v, want admitted, degraded", adm, d)
		}
		if !failClosed {
			if _, n := r.l.Degraded(); n != 1 {
				t.Errorf("%d degraded admissions counted, want 1", n)
			}
		}
	}
}

// A Redis restarted empty has forgotten what the replicas spent until
// each reports again; one that cannot reach it yet (partitioned, or
// simply later in its round) has not. A replica that hears the smaller
// total does not take the forgotten spending for a refund: a's 700 tokens
// still count on b, for a tokens-per-minute limit and for a budget.
func TestSharedSpendingForgottenIsNotRefunded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  Policy
		refused string
	}{
		{"tokens per minute", Policy{Principal: "alice", Limits: Limits{TokensPerMinute: 1000}}, "rate_limit_exceeded"},
		{"budget", Policy{Principal: "alice", Budget: Budget{TokensPerDay: 1000}}, "insufficient_quota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, stop, start := testenv.Redis(t)
			secret, k := mustKey(t, "alice")
			cfg := Config{KeysFile: "k", Policies: []Policy{tc.policy}}
			hole := newBlackHole(t, addr)
			a := newReplica(t, hole.addr(), cfg, k, secret, false)
			b := newReplica(t, addr, cfg, k, secret, false)
			waitShared(t, a, false)
			waitShared(t, b, false)
			b.served(t)
			adm, d := a.c.Admit(time.Now(), 100)
			if d != nil {
				t.Fatal(d)
			}
			adm.Settle(500, 200, "") // 700 spent on a
			testenv.Wait(t, func() bool {
				adm, d := b.c.Admit(time.Now(), 400)
				if d == nil {
					adm.Settle(0, 0, "") // admitted before b heard: give it back
					return false
				}
				return d.Code == tc.refused
			}, "b refusing 400 after a spent 700")
			hole.cut.Store(true) // a cannot report again
			stop()
			waitShared(t, b, true)
			start()
			waitShared(t, b, false)
			reports := b.l.sh.store.(*RedisStore).Stats().Calls
			testenv.Wait(t, func() bool { return b.l.sh.store.(*RedisStore).Stats().Calls >= reports+10 }, "b's rounds with the empty Redis")
			if adm, d := b.c.Admit(time.Now(), 400); d == nil {
				adm.Settle(0, 0, "")
				t.Fatalf("b admitted 400 tokens after the restart: a's 700 were taken for a refund")
			}
		})
	}
}
