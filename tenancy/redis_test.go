package tenancy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/triagegw/triage/internal/testenv"
)

// These tests run against a real redis-server (testenv.Redis starts one
// per test), not an imitation: the Lua scripts, TIME, expiry and a server
// going away are what they check.

// redisTestTimeout is the Timeout of the tests that time how a call
// fails: the default.
const redisTestTimeout = DefaultRedisTimeout

// redisFunctionalTimeout is the Timeout of the stores the other tests
// make: a real round trip under the race detector, with CI's packages
// running side by side, can take longer than the 50 ms default
// (TestRedisGCRA's first call, which loads the script, once did), and
// those tests are about what Redis answers, not how soon.
const redisFunctionalTimeout = MaxRedisTimeout

// redisSlack is what a failing call may take beyond Timeout (scheduling,
// the race detector).
const redisSlack = 100 * time.Millisecond

// newTestRedisStore makes a store on addr with cfg's other fields, closed at
// the end of the test.
func newTestRedisStore(t testing.TB, addr string, cfg RedisConfig) *RedisStore {
	t.Helper()
	cfg.Addr = addr
	if cfg.Timeout == 0 {
		cfg.Timeout = redisFunctionalTimeout
	}
	s, err := NewRedisStore(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawRedis is a plain client on addr, to look at what the store wrote.
func rawRedis(t testing.TB, addr string, db int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, Protocol: 2, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

type redisLease struct{ granted, remaining int }

func mustLease(t *testing.T, s *RedisStore, scope string, perMinute, n int) (redisLease, time.Duration) {
	t.Helper()
	g, r, reset, err := s.TakeRequests(context.Background(), scope, perMinute, n)
	if err != nil {
		t.Fatalf("TakeRequests(%q, %d, %d): %v", scope, perMinute, n, err)
	}
	return redisLease{g, r}, reset
}

func TestRedisConfigValidate(t *testing.T) {
	t.Setenv("TRIAGE_TEST_REDIS_PW", "secret")
	t.Setenv("TRIAGE_TEST_REDIS_EMPTY", "")
	for _, tc := range []struct {
		name string
		cfg  RedisConfig
		want []string // substrings of the errors, in order; none: valid
	}{
		{"off", RedisConfig{}, nil},
		{"full", RedisConfig{Addr: "redis.internal:6380", Username: "triage", PasswordEnv: "TRIAGE_TEST_REDIS_PW", DB: 3, Timeout: time.Second, Prefix: "gw:"}, nil},
		{"ipv6", RedisConfig{Addr: "[::1]:6379"}, nil},
		{"no port", RedisConfig{Addr: "localhost"}, []string{"access.redis.addr: must be host:port"}},
		{"bad port", RedisConfig{Addr: "localhost:redis"}, []string{"access.redis.addr: the port must be a number from 1 to 65535"}},
		{"port 0", RedisConfig{Addr: "localhost:0"}, []string{"access.redis.addr: the port"}},
		{"password unset", RedisConfig{Addr: "localhost:6379", PasswordEnv: "TRIAGE_TEST_REDIS_UNSET"}, []string{"access.redis.password_env: environment variable TRIAGE_TEST_REDIS_UNSET is not set"}},
		{"password empty", RedisConfig{Addr: "localhost:6379", PasswordEnv: "TRIAGE_TEST_REDIS_EMPTY"}, []string{"access.redis.password_env: environment variable TRIAGE_TEST_REDIS_EMPTY is empty"}},
		{"negative", RedisConfig{Addr: "localhost:6379", DB: -1, Timeout: -time.Second}, []string{"access.redis.db: must not be negative", "access.redis.timeout: must not be negative"}},
		{"slow", RedisConfig{Addr: "localhost:6379", Timeout: 2 * time.Second}, []string{"access.redis.timeout: must be at most 1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.cfg.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors %v, want %d", len(errs), errs, len(tc.want))
			}
			for i, err := range errs {
				if !strings.Contains(err.Error(), tc.want[i]) {
					t.Errorf("error %d is %q, want it to say %q", i, err, tc.want[i])
				}
			}
		})
	}
}

func TestRedisConfigDefaults(t *testing.T) {
	var c RedisConfig
	c.SetDefaults()
	if c.Timeout != 50*time.Millisecond || c.Prefix != "triage:" || c.FailClosed {
		t.Errorf("defaults are %+v, want 50ms, \"triage:\" and fail open", c)
	}
	if c.Enabled() {
		t.Error("Redis is on without an addr")
	}
}

func TestNewRedisStoreRefusesBadConfig(t *testing.T) {
	if _, err := NewRedisStore(RedisConfig{}, nil); err == nil || !strings.Contains(err.Error(), "access.redis.addr") {
		t.Errorf("without an addr: %v, want an error naming access.redis.addr", err)
	}
	if _, err := NewRedisStore(RedisConfig{Addr: "localhost:6379", Timeout: time.Minute}, nil); err == nil || !strings.Contains(err.Error(), "access.redis.timeout") {
		t.Errorf("with a timeout too long: %v, want an error naming access.redis.timeout", err)
	}
}

// TestRedisGCRA: a whole budget admits perMinute at once, then one each
// interval (600 a minute: 100ms), with the remaining and reset GCRA says.
func TestRedisGCRA(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	s := newTestRedisStore(t, addr, RedisConfig{})
	const perMinute, interval = 600, 100 * time.Millisecond

	// The first from a whole budget: the TAT is one interval from now.
	got, reset := mustLease(t, s, "gcra", perMinute, 1)
	if got != (redisLease{1, perMinute - 1}) || reset != interval {
		t.Fatalf("first: got %+v reset %s, want {1 %d} reset %s", got, reset, perMinute-1, interval)
	}
	// The rest of the budget at once (asking for more than there is).
	got, reset = mustLease(t, s, "gcra", perMinute, 10*perMinute)
	// An interval passing since the first call gives one more back.
	if got.granted < perMinute-1 || got.granted > perMinute || got.remaining != 0 {
		t.Fatalf("the rest: got %+v, want %d or %d granted and none left", got, perMinute-1, perMinute)
	}
	if reset <= time.Minute-interval || reset > time.Minute {
		t.Fatalf("the rest: reset %s, want within an interval below 1m", reset)
	}
	// Spent: nothing, until an interval passes.
	aEnd := time.Now()
	if got, _ = mustLease(t, s, "gcra", perMinute, 1); got != (redisLease{0, 0}) {
		t.Fatalf("spent: got %+v, want nothing", got)
	}
	time.Sleep(interval + interval/2) // the time under test: Redis's clock moving past an interval
	bStart := time.Now()
	got, _ = mustLease(t, s, "gcra", perMinute, 5)
	// Redis's clock moved between the calls by at least bStart-aEnd, and
	// (a drained budget having been a full window ahead of its clock at
	// most) a request comes back each interval.
	if lo := int((bStart.Sub(aEnd)) / interval); got.granted < max(lo, 1) || got.granted > 5 || got.remaining != 0 {
		t.Fatalf("after %s: got %+v, want at least %d granted and none left", bStart.Sub(aEnd), got, max(lo, 1))
	}
	// n 0 reads without taking.
	got, reset = mustLease(t, s, "gcra", perMinute, 0)
	if got.granted != 0 || reset <= time.Minute-2*interval {
		t.Fatalf("read: got %+v reset %s", got, reset)
	}
}

// TestRedisBatchLease: a batch is granted whole while the budget holds it,
// then in part, then not at all (10 a minute: 6s an interval, so no
// request comes back during the test).
func TestRedisBatchLease(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	s := newTestRedisStore(t, addr, RedisConfig{})
	for i, want := range []redisLease{{4, 6}, {4, 2}, {2, 0}, {0, 0}} {
		got, reset := mustLease(t, s, "lease", 10, 4)
		if got != want {
			t.Fatalf("lease %d: got %+v, want %+v", i, got, want)
		}
		// Spent: reset is the time until all 10 are back, nearly a minute.
		if wantReset := time.Duration(10-want.remaining) * 6 * time.Second; reset > wantReset || reset < wantReset-time.Second {
			t.Errorf("lease %d: reset %s, want about %s", i, reset, wantReset)
		}
	}
	// Each scope its own budget; a different limit on a scope reads its TAT anew.
	if got, _ := mustLease(t, s, "lease2", 10, 4); got != (redisLease{4, 6}) {
		t.Errorf("another scope: got %+v, want {4 6}", got)
	}
	if got, _ := mustLease(t, s, "lease", 20, 4); got != (redisLease{0, 0}) {
		t.Errorf("the limit doubled, a minute's TAT ahead: got %+v, want nothing", got)
	}
}

func TestRedisTakeRequestsArguments(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	s := newTestRedisStore(t, addr, RedisConfig{})
	for _, tc := range []struct{ perMinute, n int }{{0, 1}, {-5, 1}, {maxRedisPerMinute + 1, 1}, {10, -1}} {
		if _, _, _, err := s.TakeRequests(context.Background(), "args", tc.perMinute, tc.n); err == nil {
			t.Errorf("TakeRequests(%d a minute, %d): no error", tc.perMinute, tc.n)
		}
	}
	if st := s.Stats(); st.Errors != 0 || !st.Healthy {
		t.Errorf("a bad argument counted against Redis: %+v", st)
	}
	// The largest limit: an interval of 1µs.
	if got, _ := mustLease(t, s, "args", maxRedisPerMinute, 1000); got.granted != 1000 {
		t.Errorf("at %d a minute: got %+v", maxRedisPerMinute, got)
	}
}

// TestRedisReplicasShareTheLimit: two stores (two replicas) on one Redis,
// many goroutines on each leasing batches, grant the limit between them
// and not one more.
func TestRedisReplicasShareTheLimit(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	stores := []*RedisStore{newTestRedisStore(t, addr, RedisConfig{}), newTestRedisStore(t, addr, RedisConfig{})}
	// One a second: the test takes far less, so no request comes back
	// during it (if it does not, the bound below allows for it).
	const limit, interval = 60, time.Second
	const goroutines, calls, batch = 8, 20, 3 // per store: 2×8×20×3 = 960 asked for

	var mu sync.Mutex
	total, byStore := 0, make([]int, len(stores))
	var wg sync.WaitGroup
	start := time.Now()
	for i, s := range stores {
		for range goroutines {
			wg.Go(func() {
				sum := 0
				for range calls {
					g, _, _, err := s.TakeRequests(context.Background(), "shared", limit, batch)
					if err != nil {
						t.Error(err)
						return
					}
					sum += g
				}
				mu.Lock()
				total += sum
				byStore[i] += sum
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if most := limit + int(elapsed/interval); total < limit || total > most {
		t.Fatalf("granted %d (%v by store) in %s, want %d (at most %d)", total, byStore, elapsed, limit, most)
	}
	t.Logf("granted %d of %d asked for, %v by store, in %s", total, 2*goroutines*calls*batch, byStore, elapsed)
}

// TestRedisRateKeyExpires: the TAT key expires when the budget is whole
// again, so idle tenants' keys vanish.
func TestRedisRateKeyExpires(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	s := newTestRedisStore(t, addr, RedisConfig{Prefix: "t1:"})
	raw := rawRedis(t, addr, 0)
	ctx := context.Background()

	mustLease(t, s, "drained", 600, 600)
	if ttl := raw.PTTL(ctx, "t1:rl:drained").Val(); ttl <= 59*time.Second || ttl > time.Minute {
		t.Errorf("a drained budget's key: PTTL %s, want about a minute (the window)", ttl)
	}
	mustLease(t, s, "one", 600, 1)
	if ttl := raw.PTTL(ctx, "t1:rl:one").Val(); ttl <= 0 || ttl > 100*time.Millisecond {
		t.Errorf("one request's key: PTTL %s, want up to one interval (100ms)", ttl)
	}
	testenv.WaitWithin(t, 2*time.Second, "the key of a budget whole again to expire", func() (bool, string) {
		return raw.Exists(ctx, "t1:rl:one").Val() == 0, "still there"
	})
	if got, _ := mustLease(t, s, "one", 600, 1); got != (redisLease{1, 599}) {
		t.Errorf("after the key expired: got %+v, want a whole budget's {1 599}", got)
	}
	// A refusal writes nothing.
	mustLease(t, s, "drained", 600, 5)
	if n := raw.Exists(ctx, "t1:rl:never").Val(); n != 0 {
		t.Error("a key nobody took from exists")
	}
}

// TestRedisReport: replicas report their whole counts, and each report
// returns the sum; a report sent twice, or an older one run late, counts
// once; the count lives as long as its period.
func TestRedisReport(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	s := newTestRedisStore(t, addr, RedisConfig{DB: 2, Prefix: "t2:"})
	raw := rawRedis(t, addr, 2)
	ctx := context.Background()
	report := func(key, replica string, seq uint64, n int64, ttl time.Duration) int64 {
		t.Helper()
		total, err := s.Report(ctx, key, replica, seq, n, ttl)
		if err != nil {
			t.Fatalf("Report(%q, %q, %d, %d, %s): %v", key, replica, seq, n, ttl, err)
		}
		return total
	}

	if v := report("day", "a", 1, 1200, time.Hour); v != 1200 {
		t.Fatalf("first report: %d", v)
	}
	ttl := raw.PTTL(ctx, "t2:spent:day").Val()
	if ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("a new count's PTTL %s, want about an hour", ttl)
	}
	// Another replica's count adds; reporting again neither resets nor
	// extends the expiry.
	if v := report("day", "b", 1, 300, 24*time.Hour); v != 1500 {
		t.Fatalf("a second replica: %d, want 1500", v)
	}
	if ttl2 := raw.PTTL(ctx, "t2:spent:day").Val(); ttl2 > ttl {
		t.Errorf("reporting extended the expiry from %s to %s", ttl, ttl2)
	}
	// The same report twice (a timeout, then the retry) counts once.
	for range 2 {
		if v := report("day", "a", 2, 1250, time.Hour); v != 1550 {
			t.Fatalf("a report sent again: %d, want 1550", v)
		}
	}
	// An older report run late (held in a stalled Redis) changes nothing.
	if v := report("day", "a", 1, 1200, time.Hour); v != 1550 {
		t.Errorf("an older report run late: %d, want 1550", v)
	}
	// A count may go down (a refund) and below zero.
	if v := report("day", "b", 5, -50, time.Hour); v != 1200 {
		t.Errorf("b reporting -50: %d, want 1200", v)
	}
	// The count is where the prefix and DB say.
	if n := rawRedis(t, addr, 0).Exists(ctx, "t2:spent:day").Val(); n != 0 {
		t.Error("the count is in DB 0, not 2")
	}
	// ttl <= 0: a count that never expires.
	report("forever", "a", 1, 5, 0)
	if ttl := raw.PTTL(ctx, "t2:spent:forever").Val(); ttl != -1 {
		t.Errorf("ttl 0: PTTL %s, want none (-1)", ttl)
	}
	// An expiry lost (PERSIST) comes back with the next report.
	raw.Persist(ctx, "t2:spent:day")
	report("day", "a", 3, 1250, time.Hour)
	if ttl := raw.PTTL(ctx, "t2:spent:day").Val(); ttl <= 0 {
		t.Errorf("after PERSIST and a report: PTTL %s, want an hour again", ttl)
	}
	// The count expires: the period is over, and the next report starts
	// it again from what the replica reports.
	report("short", "a", 1, 10, 50*time.Millisecond)
	testenv.WaitWithin(t, 2*time.Second, "a count with a 50ms TTL to expire", func() (bool, string) {
		return raw.Exists(ctx, "t2:spent:short").Val() == 0, "still there"
	})
	if v := report("short", "b", 1, 7, time.Hour); v != 7 {
		t.Errorf("after the count expired: %d, want 7", v)
	}
	// A count kept as a plain integer by versions before is taken over
	// once, when the hash is made.
	raw.Set(ctx, "t2:budget:old", 500, time.Hour)
	if v := report("old", "a", 1, 20, time.Hour); v != 520 {
		t.Errorf("over a count of 500 kept before: %d, want 520", v)
	}
	raw.IncrBy(ctx, "t2:budget:old", 100) // an old replica still adding: not read again
	if v := report("old", "a", 2, 30, time.Hour); v != 530 {
		t.Errorf("reported again: %d, want 530", v)
	}
	// A sub-millisecond ttl is one millisecond, not none.
	report("tiny", "a", 1, 1, time.Microsecond)
	if ttl := raw.PTTL(ctx, "t2:spent:tiny").Val(); ttl == -1 {
		t.Error("a 1µs ttl made a count that never expires")
	}
}

// TestRedisTakeRequestsOnce: a lease call sent twice takes once and
// answers both copies alike; a copy older than the last answered takes
// nothing; each replica has its own sequence.
func TestRedisTakeRequestsOnce(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	s := newTestRedisStore(t, addr, RedisConfig{})
	ctx := context.Background()
	take := func(replica string, seq uint64, n int) (int, int, bool) {
		t.Helper()
		g, r, _, again, err := s.TakeRequestsOnce(ctx, "once", 10, n, replica, seq)
		if err != nil {
			t.Fatal(err)
		}
		return g, r, again
	}
	for i, tc := range []struct {
		replica       string
		seq           uint64
		n             int
		granted, left int
		again         bool
	}{
		{"a", 1, 4, 4, 6, false},
		{"a", 1, 4, 4, 6, true},  // the same call again: the recorded answer
		{"b", 1, 3, 3, 3, false}, // another replica's own sequence
		{"a", 2, 2, 2, 1, false},
		{"a", 1, 4, 0, 0, true}, // older than the last answered: nothing
		{"a", 2, 2, 2, 1, true},
		{"b", 2, 5, 1, 0, false},
	} {
		g, r, again := take(tc.replica, tc.seq, tc.n)
		if g != tc.granted || r != tc.left || again != tc.again {
			t.Errorf("call %d (%s #%d, %d): granted %d, %d left, again %v; want %d, %d, %v", i, tc.replica, tc.seq, tc.n, g, r, again, tc.granted, tc.left, tc.again)
		}
	}
	raw := rawRedis(t, addr, 0)
	if ttl := raw.PTTL(ctx, "triage:rlop:once").Val(); ttl <= opRecordTTL-time.Minute || ttl > opRecordTTL {
		t.Errorf("the answers' record: PTTL %s, want %s", ttl, opRecordTTL)
	}
	// A plain TakeRequests records nothing.
	mustLease(t, s, "plain", 10, 1)
	if n := raw.Exists(ctx, "triage:rlop:plain").Val(); n != 0 {
		t.Error("TakeRequests wrote a record of its answer")
	}
}

// TestRedisScriptFlushed: a script Redis no longer has (SCRIPT FLUSH, as a
// restart does) is sent again (EVALSHA's NOSCRIPT, then EVAL).
func TestRedisScriptFlushed(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	s := newTestRedisStore(t, addr, RedisConfig{})
	raw := rawRedis(t, addr, 0)
	ctx := context.Background()
	mustLease(t, s, "flush", 60, 1)
	if _, err := s.Report(ctx, "flush", "a", 1, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := raw.ScriptExists(ctx, gcraScript.Hash()).Result(); len(ok) != 1 || ok[0] {
		t.Fatalf("the script is still loaded after SCRIPT FLUSH: %v", ok)
	}
	if got, _ := mustLease(t, s, "flush", 60, 1); got != (redisLease{1, 58}) {
		t.Errorf("after SCRIPT FLUSH: got %+v, want {1 58}", got)
	}
	if v, err := s.Report(ctx, "flush", "a", 2, 2, time.Hour); err != nil || v != 2 {
		t.Errorf("Report after SCRIPT FLUSH: %d, %v", v, err)
	}
	if ok, _ := raw.ScriptExists(ctx, gcraScript.Hash(), reportScript.Hash()).Result(); len(ok) != 2 || !ok[0] || !ok[1] {
		t.Errorf("EVAL did not load the scripts again: %v", ok)
	}
	if st := s.Stats(); st.Errors != 0 {
		t.Errorf("NOSCRIPT counted as a failure: %+v", st)
	}
}

// failsWithinTimeout calls f and fails t if it succeeds or takes longer
// than Timeout and redisSlack.
func failsWithinTimeout(t *testing.T, what string, f func() error) {
	t.Helper()
	start := time.Now()
	err := f()
	took := time.Since(start)
	if err == nil {
		t.Errorf("%s succeeded with Redis down", what)
	}
	if took > redisTestTimeout+redisSlack {
		t.Errorf("%s took %s, want less than %s (Timeout %s): %v", what, took, redisTestTimeout+redisSlack, redisTestTimeout, err)
	}
}

// untilRedisAnswers calls f until it succeeds, for up to 5s: go-redis,
// having failed to dial, probes once a second before dialing for calls
// again.
func untilRedisAnswers(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.WaitWithin(t, 5*time.Second, what+" to succeed after Redis came back", func() (bool, string) {
		if err := f(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// TestRedisDownAndBack: Redis going away mid-test makes each call fail
// within Timeout and the store unhealthy; Redis back (empty, without the
// scripts) makes calls succeed again, with no help.
func TestRedisDownAndBack(t *testing.T) {
	addr, stop, start := testenv.Redis(t)
	var logs testenv.Buffer
	cfg := RedisConfig{Addr: addr, Timeout: redisTestTimeout}
	s, err := NewRedisStore(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	mustLease(t, s, "down", 600, 1)
	if !s.Healthy() {
		t.Fatal("unhealthy with Redis up")
	}

	stop()
	for i := range 5 {
		failsWithinTimeout(t, "TakeRequests", func() error { _, _, _, err := s.TakeRequests(ctx, "down", 600, 1); return err })
		failsWithinTimeout(t, "Report", func() error { _, err := s.Report(ctx, "down", "a", 1, 1, time.Hour); return err })
		failsWithinTimeout(t, "TakeRequestsOnce", func() error {
			_, _, _, _, err := s.TakeRequestsOnce(ctx, "down", 600, 1, "a", 1)
			return err
		})
		if s.Healthy() {
			t.Fatalf("round %d: healthy with Redis down", i)
		}
	}
	st := s.Stats()
	if st.Errors != 15 || st.Calls != 17 || st.Healthy || time.Since(st.LastError) > 5*time.Second {
		t.Errorf("stats with Redis down: %+v, want 15 errors of 17 calls (the ping, a take, 15 failures), a recent last error", st)
	}

	start()
	untilRedisAnswers(t, "TakeRequests", func() error { _, _, _, err := s.TakeRequests(ctx, "down", 600, 1); return err })
	if !s.Healthy() {
		t.Error("unhealthy after a call succeeded")
	}
	// A new, empty Redis: the scripts are sent again, the counts start over.
	if got, reset := mustLease(t, s, "up", 600, 1); got != (redisLease{1, 599}) || reset != 100*time.Millisecond {
		t.Errorf("after the restart: got %+v reset %s", got, reset)
	}
	if v, err := s.Report(ctx, "down", "a", 2, 3, time.Hour); err != nil || v != 3 {
		t.Errorf("Report after the restart: %d, %v", v, err)
	}
	// One warning when it went, one note when it came back: not one a call.
	out := logs.String()
	if w, i := strings.Count(out, "level=WARN"), strings.Count(out, "redis answering again"); w != 1 || i != 1 {
		t.Errorf("logged %d warnings and %d recoveries, want 1 and 1:\n%s", w, i, out)
	}
}

// TestNewRedisStoreRedisDown: the gateway starts with Redis down (the store
// is made, unhealthy) and uses Redis once it is up.
func TestNewRedisStoreRedisDown(t *testing.T) {
	addr, stop, start := testenv.Redis(t)
	stop()
	began := time.Now()
	s := newTestRedisStore(t, addr, RedisConfig{Timeout: redisTestTimeout})
	if took := time.Since(began); took > redisTestTimeout+redisSlack {
		t.Errorf("NewRedisStore took %s with Redis down", took)
	}
	if s.Healthy() {
		t.Error("healthy with Redis down")
	}
	if st := s.Stats(); st.Calls != 1 || st.Errors != 1 || st.LastError.IsZero() {
		t.Errorf("stats after a failed ping: %+v", st)
	}
	start()
	untilRedisAnswers(t, "Report", func() error { _, err := s.Report(context.Background(), "x", "a", 1, 0, time.Hour); return err })
	if !s.Healthy() {
		t.Error("unhealthy after a call succeeded")
	}
}

// TestRedisStalled: a server that accepts connections and never answers
// (a Redis stopped, or a network path dropping packets) costs each call
// Timeout, whatever the context says.
func TestRedisStalled(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	defer func() { l.Close(); conns.Wait() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { // read, never answer, until the client gives up
				defer c.Close()
				buf := make([]byte, 512)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			})
		}
	}()

	began := time.Now()
	s := newTestRedisStore(t, l.Addr().String(), RedisConfig{Timeout: 30 * time.Millisecond})
	if took := time.Since(began); took > 30*time.Millisecond+redisSlack || s.Healthy() {
		t.Errorf("NewRedisStore took %s (healthy %v) on a stalled server", took, s.Healthy())
	}
	for range 3 {
		began := time.Now()
		_, _, _, err := s.TakeRequests(context.Background(), "stall", 60, 1)
		took := time.Since(began)
		if err == nil || took > 30*time.Millisecond+redisSlack {
			t.Errorf("TakeRequests on a stalled server: %v after %s", err, took)
		}
		if took < 25*time.Millisecond {
			t.Errorf("TakeRequests gave up after %s, before Timeout (30ms): %v", took, err)
		}
	}
	// A longer deadline does not lengthen the bound; a shorter one shortens it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began = time.Now()
	if _, err := s.Report(ctx, "stall", "a", 1, 1, time.Hour); err == nil || time.Since(began) > 30*time.Millisecond+redisSlack {
		t.Errorf("Report with a minute's deadline: %v after %s", err, time.Since(began))
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	began = time.Now()
	if _, err := s.Report(ctx, "stall", "a", 2, 1, time.Hour); err == nil || time.Since(began) > 5*time.Millisecond+redisSlack {
		t.Errorf("Report with a 5ms deadline: %v after %s", err, time.Since(began))
	}
}

// TestRedisCallerCanceled: a call the caller canceled (the gateway
// stopping) is no failure of Redis.
func TestRedisCallerCanceled(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	s := newTestRedisStore(t, addr, RedisConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := s.TakeRequests(ctx, "cancel", 60, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v, want context.Canceled", err)
	}
	if st := s.Stats(); !st.Healthy || st.Errors != 0 || st.Calls != 2 {
		t.Errorf("stats after a canceled call: %+v, want healthy, no errors, 2 calls", st)
	}
}

// TestRedisAuth: the password comes from the variable PasswordEnv names,
// with the ACL user Username; a wrong one is a failing store, not a
// failing start.
func TestRedisAuth(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	raw := rawRedis(t, addr, 0)
	ctx := context.Background()
	if err := raw.Do(ctx, "ACL", "SETUSER", "gw", "on", ">s3cret-pw", "~triage:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil { // new connections must authenticate
		t.Fatal(err)
	}
	t.Setenv("TRIAGE_TEST_REDIS_PW", "s3cret-pw")
	s := newTestRedisStore(t, addr, RedisConfig{Username: "gw", PasswordEnv: "TRIAGE_TEST_REDIS_PW"})
	if !s.Healthy() {
		t.Fatalf("unhealthy with the right password: %+v", s.Stats())
	}
	if got, _ := mustLease(t, s, "auth", 60, 1); got.granted != 1 {
		t.Errorf("with the right password: %+v", got)
	}

	t.Setenv("TRIAGE_TEST_REDIS_PW", "wrong")
	var logs testenv.Buffer
	bad, err := NewRedisStore(RedisConfig{Addr: addr, Username: "gw", PasswordEnv: "TRIAGE_TEST_REDIS_PW", Timeout: redisTestTimeout}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if bad.Healthy() {
		t.Error("healthy with a wrong password")
	}
	if _, _, _, err := bad.TakeRequests(ctx, "auth", 60, 1); err == nil {
		t.Error("a call with a wrong password succeeded")
	}
	if strings.Contains(logs.String(), "wrong") {
		t.Errorf("the log shows the password:\n%s", logs.String())
	}
}
