package tenancy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Redis defaults and bounds.
const (
	// DefaultRedisTimeout bounds each call to Redis: a round trip on a LAN
	// is well under a millisecond, so 50ms only ever cuts off a Redis that
	// is down or stalled.
	DefaultRedisTimeout = 50 * time.Millisecond
	// MaxRedisTimeout is the longest Timeout allowed: the calls run on a
	// background loop that refreshes admission leases, and a loop stuck
	// for longer than a second on a dead Redis leaves replicas counting
	// on stale leases for too long.
	MaxRedisTimeout = time.Second
	// DefaultRedisPrefix starts every key the gateway writes, so that it
	// can share a Redis (and a database) with others.
	DefaultRedisPrefix = "triage:"
)

// redisPoolSize is the connections kept to Redis. The store is called from
// one background loop (a few calls at a time at most), so a small pool is
// plenty; it also bounds what a dead Redis costs: go-redis stops dialing
// after this many failed dials in a row and probes once a second instead.
const redisPoolSize = 4

// maxRedisPerMinute is the largest requests-per-minute limit TakeRequests
// counts: the script works in microseconds, and 60s/limit must be one at
// least.
const maxRedisPerMinute = int(time.Minute / time.Microsecond)

// RedisConfig is the access section's redis: the Redis that gateway
// replicas share their limit and budget counts through (with keys or
// JWT), and the conversations' sessions (with a rules session section).
// Without Addr Redis is off and each replica counts, and remembers, alone.
type RedisConfig struct {
	// Addr is Redis's host:port; empty: Redis off.
	Addr string `koanf:"addr"`
	// Username is the ACL user (Redis 6+); empty: the default user.
	Username string `koanf:"username"`
	// PasswordEnv names the environment variable holding the password,
	// read when the store is made; the config never holds the password.
	// Empty: no password.
	PasswordEnv string `koanf:"password_env"`
	// DB is the database number (SELECT). Default 0.
	DB int `koanf:"db"`
	// Timeout bounds every call (dial, round trip, the whole of one
	// method): default 50ms, at most 1s. A call that takes longer fails,
	// so a stalled Redis costs the background loops no more than this. It
	// is also the longest a request whose lease is empty waits for the
	// lease loop before it is admitted degraded (fail open) or refused
	// (fail closed).
	Timeout time.Duration `koanf:"timeout"`
	// Prefix starts every key written; default "triage:".
	Prefix string `koanf:"prefix"`
	// FailClosed refuses requests with 503 limits_unavailable while Redis
	// does not answer, whether it refuses or stalls (within Timeout);
	// default false: fail open, each replica admitting on its local counts,
	// marked degraded (a Redis outage should not become a gateway
	// outage). The store only reports failures (errors, Healthy); the
	// Limiter applies this.
	FailClosed bool `koanf:"fail_closed"`
	// TLS speaks to Redis over TLS; off by default.
	TLS RedisTLS `koanf:"tls"`
}

// Enabled reports whether Redis is configured.
func (c *RedisConfig) Enabled() bool { return c.Addr != "" }

// SetDefaults fills zero fields with their defaults.
func (c *RedisConfig) SetDefaults() {
	if c.Timeout == 0 {
		c.Timeout = DefaultRedisTimeout
	}
	if c.Prefix == "" {
		c.Prefix = DefaultRedisPrefix
	}
}

// Validate reports every problem in c, each with its path under
// "access.redis". Zero Timeout and Prefix are valid (their defaults).
// A PasswordEnv naming an unset variable is a problem: Redis would refuse
// every call, and better the config check says why than the first
// request.
func (c *RedisConfig) Validate() []error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("access.redis.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if c.Addr != "" {
		if _, port, err := net.SplitHostPort(c.Addr); err != nil {
			bad("addr", "must be host:port (such as localhost:6379), got %q", c.Addr)
		} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			bad("addr", "the port must be a number from 1 to 65535, got %q", port)
		}
	}
	if c.PasswordEnv != "" {
		if v, ok := os.LookupEnv(c.PasswordEnv); !ok {
			bad("password_env", "environment variable %s is not set", c.PasswordEnv)
		} else if v == "" {
			bad("password_env", "environment variable %s is empty", c.PasswordEnv)
		}
	}
	if c.DB < 0 {
		bad("db", "must not be negative, got %d", c.DB)
	}
	if _, tlsErrs := c.TLS.config(); len(tlsErrs) > 0 {
		errs = append(errs, tlsErrs...)
	}
	switch {
	case c.Timeout < 0:
		bad("timeout", "must not be negative, got %s", c.Timeout)
	case c.Timeout > MaxRedisTimeout:
		bad("timeout", "must be at most %s (every call waits this long on a Redis that does not answer), got %s", MaxRedisTimeout, c.Timeout)
	}
	return errs
}

// RedisStore keeps limit and budget counts in Redis, shared by the gateway
// replicas that use the same Redis. Each method is one round trip (two
// when Redis has lost a script: EVALSHA, then EVAL), bounded by Timeout;
// none retries, none blocks for longer. It does I/O, so it is for a
// background loop that leases admissions and reconciles budgets, never for
// the request path.
//
// It only reports: a failed call returns an error and makes Healthy false
// until a call succeeds; whether to fail open or closed is the caller's
// (RedisConfig.FailClosed). It is safe for concurrent use.
type RedisStore struct {
	client  *redis.Client
	timeout time.Duration
	prefix  string
	log     *slog.Logger
	addr    string

	healthy   atomic.Bool
	calls     atomic.Uint64
	errs      atomic.Uint64
	lastErrNs atomic.Int64 // UnixNano of the last failure; 0: none
}

// RedisStats are a RedisStore's counts, for metrics.
type RedisStats struct {
	Calls     uint64    // calls made, NewRedisStore's ping included (one each, whatever its round trips)
	Errors    uint64    // calls that failed
	LastError time.Time // when the last failure was; zero: none yet
	Healthy   bool      // whether the last call succeeded
}

// NewRedisStore connects to the Redis cfg names. It fails only for a bad
// config (or Redis off): a Redis that does not answer is not an error, for
// the gateway must start without it. It pings Redis once, within Timeout,
// and logs the outcome; the store starts healthy if the ping succeeded,
// and go-redis connects whenever Redis answers later. log may be nil.
func NewRedisStore(cfg RedisConfig, log *slog.Logger) (*RedisStore, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if !cfg.Enabled() {
		return nil, errors.New("access.redis.addr: empty: Redis is off")
	}
	cfg.SetDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var password string
	if cfg.PasswordEnv != "" {
		password = os.Getenv(cfg.PasswordEnv)
	}
	t := cfg.Timeout
	tlsConfig, tlsErrs := cfg.TLS.config()
	if len(tlsErrs) > 0 {
		return nil, errors.Join(tlsErrs...)
	}
	client := redis.NewClient(&redis.Options{
		Addr:     cfg.Addr,
		Username: cfg.Username,
		Password: password,
		DB:       cfg.DB,
		// Nil unless access.redis.tls.enabled.
		TLSConfig: tlsConfig,
		// RESP2: the commands used need nothing of RESP3, and every
		// Redis-compatible server speaks it.
		Protocol:     2,
		DialTimeout:  t,
		ReadTimeout:  t,
		WriteTimeout: t,
		PoolTimeout:  t,
		// Honour the context's deadline (each method sets one) over the
		// whole call, handshake and NOSCRIPT fallback included.
		ContextTimeoutEnabled: true,
		// No retries: a retry would double the bound, and the caller's
		// next round comes soon anyway. go-redis reads 0 as its default
		// (3); -1 is none.
		MaxRetries: -1,
		// One dial per call: the default (5, 100ms apart) outlasts any
		// Timeout.
		DialerRetries: 1,
		PoolSize:      redisPoolSize,
		// No CLIENT SETINFO or CLIENT MAINT_NOTIFICATIONS: each is one
		// more round trip per new connection (after a restart, within the
		// first call's Timeout), and neither is of use here.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	s := &RedisStore{client: client, timeout: t, prefix: cfg.Prefix, log: log, addr: cfg.Addr}

	ctx, cancel := context.WithTimeout(context.Background(), t)
	defer cancel()
	start := time.Now()
	s.calls.Add(1)
	if err := client.Ping(ctx).Err(); err != nil {
		s.failed()
		log.Warn("redis is not answering; calls fail until it does", "addr", cfg.Addr, "db", cfg.DB, "err", err, "fail_closed", cfg.FailClosed)
	} else {
		s.healthy.Store(true)
		log.Info("redis connected", "addr", cfg.Addr, "db", cfg.DB, "ping", time.Since(start).Round(time.Microsecond))
	}
	return s, nil
}

// gcraScript is GCRA for up to n requests at once, at Redis's clock, so
// that replicas whose clocks disagree still agree on the count.
//
// KEYS[1] holds the theoretical arrival time (TAT): microseconds since the
// Unix epoch, by Redis's TIME, up to which the budget is spent. ARGV: the
// interval between requests at the sustained rate (µs, 60s/limit), the
// limit, and n. A request is admitted when the TAT, one interval on,
// stays within the window (interval × limit) of now, so as many of the n
// are granted as fit, and the TAT moves on by as many intervals. The key
// expires when the TAT passes (at most a window on): by then it says only
// "whole", as no key does.
//
// A call may be made idempotent (ARGV[4], the replica id, not empty): a
// replica names each call by its id and a sequence number (ARGV[5]) that
// grows with every call it makes, and sends a call that failed (timed
// out) again, unchanged, until it is answered. The first of the copies to
// run takes from the budget and records its answer in KEYS[2] (a hash:
// the replica id to "seq granted remaining reset", living ARGV[6] ms); a
// later copy of the same call returns that answer and takes nothing, and
// a copy older than the last recorded call (a write held up in a stalled
// Redis's socket buffer, run on resume) takes nothing either. So a Redis
// that stalls, then runs what it was sent meanwhile, never counts one
// lease twice.
//
// It returns granted, the requests left, the µs until the budget is
// whole, and 0 (taken now), 1 (the answer recorded before) or 2 (an old
// copy: nothing taken, nothing to answer). Numbers are Lua doubles, exact
// to 2^53: µs since the epoch are under 2^51. The TAT is written with
// %.0f, as tostring would shorten it to 14 digits. replicate_commands
// lets a script write after TIME on Redis before 5 (where it exists and is
// needed; later it is a no-op).
var gcraScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local replica, seq = ARGV[4], tonumber(ARGV[5])
if replica ~= '' then
  local rec = redis.call('HGET', KEYS[2], replica)
  if rec then
    local s, g, r, w = string.match(rec, '^(%d+) (%d+) (%d+) (%d+)$')
    s = tonumber(s)
    if s == seq then return {tonumber(g), tonumber(r), tonumber(w), 1} end
    if s > seq then return {0, 0, 0, 2} end
  end
end
local interval = tonumber(ARGV[1])
local window = interval * tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local granted = math.floor((now + window - tat) / interval)
if granted > n then granted = n end
if granted < 0 then granted = 0 end
if granted > 0 then
  tat = tat + granted * interval
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', string.format('%.0f', math.ceil((tat - now) / 1000)))
end
local remaining = math.floor((now + window - tat) / interval)
if remaining < 0 then remaining = 0 end
if replica ~= '' then
  redis.call('HSET', KEYS[2], replica, string.format('%.0f %d %d %.0f', seq, granted, remaining, tat - now))
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return {granted, remaining, tat - now, 0}
`)

// opRecordTTL is how long Redis keeps a replica's last answer to an
// idempotent lease call (gcraScript): longer than any stall after which
// a held-up copy could still run, within reason. A copy run later than
// this takes again (a lease's worth counted twice: stricter, never
// looser).
const opRecordTTL = time.Hour

// TakeRequests leases up to n admissions from the requests-per-minute
// budget of scope (a limit counter's scope, as the Limiter names them),
// counted in Redis for every replica together: it grants as many of the n
// as the budget holds now (0 to n), and returns them with the requests
// left after and the time until the budget is whole again. n 0 only
// reads. When none remain, the next is admitted in
// reset − (perMinute−1)·interval, interval being 60s/perMinute.
//
// The count is GCRA's, as the Limiter's: perMinute at once from a whole
// budget, then one every 60s/perMinute. It runs as one Lua script, so
// replicas' calls are atomic with respect to each other. A call that
// times out may still run later: TakeRequestsOnce is the one to send
// again.
func (s *RedisStore) TakeRequests(ctx context.Context, scope string, perMinute, n int) (granted, remaining int, reset time.Duration, err error) {
	granted, remaining, reset, _, err = s.TakeRequestsOnce(ctx, scope, perMinute, n, "", 0)
	return granted, remaining, reset, err
}

// TakeRequestsOnce is TakeRequests made idempotent (see gcraScript):
// replica names this replica (unique among those sharing the Redis; ""
// makes the call a plain TakeRequests) and seq this call, greater than
// every seq replica used before; a call that failed is sent again with
// the same arguments. again reports that the answer is one recorded
// before (the failed call had run after all), or that the call is older
// than one answered already (granted is 0).
func (s *RedisStore) TakeRequestsOnce(ctx context.Context, scope string, perMinute, n int, replica string, seq uint64) (granted, remaining int, reset time.Duration, again bool, err error) {
	if perMinute < 1 || perMinute > maxRedisPerMinute {
		return 0, 0, 0, false, fmt.Errorf("access: redis: requests per minute must be from 1 to %d, got %d", maxRedisPerMinute, perMinute)
	}
	if n < 0 {
		return 0, 0, 0, false, fmt.Errorf("access: redis: cannot take %d requests", n)
	}
	interval := int64(time.Minute/time.Microsecond) / int64(perMinute)
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	r, err := gcraScript.Run(cctx, s.client, []string{s.prefix + "rl:" + scope, s.prefix + "rlop:" + scope},
		interval, perMinute, n, replica, seq, opRecordTTL.Milliseconds()).Int64Slice()
	if err == nil && len(r) != 4 {
		err = fmt.Errorf("the script returned %d values, not 4", len(r))
	}
	if err = s.done(ctx, "take requests", err); err != nil {
		return 0, 0, 0, false, err
	}
	return int(r[0]), int(r[1]), time.Duration(r[2]) * time.Microsecond, r[3] != 0, nil
}

// reportScript records what one replica has counted in total at KEYS[1]
// (a hash: the replica id to "seq count") and returns every replica's
// count, as a flat array of ids and counts. A replica sends its whole count each time, never a delta, so
// a report that timed out and ran later anyway, or was sent twice, counts
// once; a report older than the one recorded (seq not greater) changes
// nothing, so a copy held up in a stalled Redis cannot roll a count back.
// A Redis restarted empty gets each replica's count back at its next
// report. A new hash expires after ARGV[4] ms (0: never); a report does
// not extend it. A new hash also takes over, as the field "legacy", the
// count that versions before kept at KEYS[2] (a plain integer, added to
// with INCRBY), so an upgrade forgets no spending.
var reportScript = redis.NewScript(`
local seq = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local legacy = redis.call('GET', KEYS[2])
  if legacy then redis.call('HSET', KEYS[1], 'legacy', '0 ' .. legacy) end
end
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec or tonumber(string.match(rec, '^(%d+)')) < seq then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
end
local ttl = tonumber(ARGV[4])
if ttl > 0 and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  out[#out + 1] = all[i]
  out[#out + 1] = tonumber(string.match(all[i + 1], ' (%-?%d+)$'))
end
return out
`)

// Report records count as what replica has counted in total at key (a
// budget's tokens or microdollars in its period, a tokens-per-minute
// limit's tokens in its hour), and returns the total of every replica's
// counts there. seq must grow with each report replica makes. It is
// idempotent (see reportScript): send it again after a failure, or
// every round, without counting anything twice. A new count expires
// after ttl (<= 0: never).
func (s *RedisStore) Report(ctx context.Context, key, replica string, seq uint64, count int64, ttl time.Duration) (total int64, err error) {
	counts, err := s.ReportEach(ctx, key, replica, seq, count, ttl)
	for _, n := range counts {
		total += n
	}
	return total, err
}

// ReportEach is Report, returning each replica's count (by the replica
// ids reports name; "legacy" for a count kept by versions before) rather
// than their total: a replica missing from it is one Redis no longer
// holds (restarted empty), not one that spent nothing.
func (s *RedisStore) ReportEach(ctx context.Context, key, replica string, seq uint64, count int64, ttl time.Duration) (map[string]int64, error) {
	ms := int64(0)
	if ttl > 0 {
		ms = max(int64((ttl+time.Millisecond-1)/time.Millisecond), 1)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := reportScript.Run(cctx, s.client, []string{s.prefix + "spent:" + key, s.prefix + "budget:" + key}, replica, seq, count, ms).Slice()
	if err = s.done(ctx, "report", err); err != nil {
		return nil, err
	}
	counts := make(map[string]int64, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		id, _ := res[i].(string)
		n, _ := res[i+1].(int64)
		counts[id] = n
	}
	return counts, nil
}

// Healthy reports whether the last call succeeded (for a new store, the
// ping NewRedisStore made).
func (s *RedisStore) Healthy() bool { return s.healthy.Load() }

// Stats returns the store's counts.
func (s *RedisStore) Stats() RedisStats {
	st := RedisStats{Calls: s.calls.Load(), Errors: s.errs.Load(), Healthy: s.healthy.Load()}
	if ns := s.lastErrNs.Load(); ns != 0 {
		st.LastError = time.Unix(0, ns)
	}
	return st
}

// Close closes the connections; calls after it fail.
func (s *RedisStore) Close() error { return s.client.Close() }

// done counts a call that ended with err (nil: success), updates the
// health and returns err with what failed. A call the caller canceled
// says nothing of Redis: it is counted, but neither as a failure nor as a
// success. (A deadline of the caller's, shorter than Timeout, that passed
// is a failure: Redis did not answer in the time it had.)
func (s *RedisStore) done(ctx context.Context, op string, err error) error {
	s.calls.Add(1)
	switch {
	case err == nil:
		if !s.healthy.Swap(true) {
			s.log.Info("redis answering again", "addr", s.addr)
		}
		return nil
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("access: redis %s: %w", op, err)
	}
	if s.failed() {
		s.log.Warn("redis not answering; calls fail until it does", "addr", s.addr, "op", op, "err", err)
	}
	return fmt.Errorf("access: redis %s: %w", op, err)
}

// failed records a failure and reports whether the store was healthy
// until then.
func (s *RedisStore) failed() bool {
	s.errs.Add(1)
	s.lastErrNs.Store(time.Now().UnixNano())
	return s.healthy.Swap(false)
}

// LogRedisTo sends go-redis's own messages (a dial that failed, a pool
// that stopped dialing) to log at debug level, instead of stderr: the
// store reports Redis's state itself, once per change. go-redis's logger
// is process-wide, so the binary sets it once.
func LogRedisTo(log *slog.Logger) { redis.SetLogger(redisLog{log}) }

type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

// Append adds msg to the stream topic (under the store's prefix), within
// Timeout. The stream keeps about the latest keep entries: older ones are
// trimmed as new ones come.
func (s *RedisStore) Append(ctx context.Context, topic string, msg []byte, keep int64) error {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := s.client.XAdd(cctx, &redis.XAddArgs{Stream: s.prefix + topic, MaxLen: keep, Approx: true, Values: []any{"m", msg}}).Err()
	return s.done(ctx, "append", err)
}

// How Follow reads a stream: a page of entries per call, a read that
// waits at most followBlock for new ones, and the pause after a call
// that failed, doubling from followRetry up to followRetryMax. go-redis
// does not end a blocked read when its context is canceled, so
// followBlock is also how long Follow may outlast its context: short, at
// the cost of five idle reads a second.
const (
	followPage     = 1024
	followBlock    = 200 * time.Millisecond
	followRetry    = 50 * time.Millisecond
	followRetryMax = 100 * time.Millisecond
)

// Follow calls fn with the stream topic's latest backlog entries (under
// the store's prefix), oldest first, then with every entry appended after
// them, in order, until ctx is done. fn runs on Follow's goroutine.
// caughtUp, when not nil, runs once the backlog has been read. Delivery
// is at least once for as long as Redis keeps the entries: after a call
// that failed (Redis down, stalled, restarted) Follow reads on from the
// last entry it gave fn, so an entry appended meanwhile is not missed; a
// Redis restarted empty has only what was appended since. Each call is
// bounded: Timeout, or followBlock plus Timeout for the read that waits.
func (s *RedisStore) Follow(ctx context.Context, topic string, backlog int64, caughtUp func(), fn func(msg []byte)) {
	key := s.prefix + topic
	last := "" // the last entry given to fn; "" until the backlog is read
	wait := followRetry
	for ctx.Err() == nil {
		var err error
		if last == "" {
			last, err = s.backlog(ctx, key, backlog, fn)
			if err == nil && caughtUp != nil {
				caughtUp()
				caughtUp = nil
			}
		} else {
			last, err = s.readOn(ctx, key, last, fn)
		}
		if err == nil {
			wait = followRetry
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, followRetryMax)
	}
}

// backlog gives fn the stream's latest n entries, oldest first, read
// newest first a page at a time, and returns the id of the newest ("0-0"
// for an empty stream: every entry is newer).
func (s *RedisStore) backlog(ctx context.Context, key string, n int64, fn func([]byte)) (string, error) {
	var pages [][]redis.XMessage
	end, got := "+", int64(0)
	for got < n {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		page, err := s.client.XRevRangeN(cctx, key, end, "-", min(followPage, n-got)).Result()
		cancel()
		if err = s.done(ctx, "read", err); err != nil {
			return "", err
		}
		if len(page) == 0 {
			break
		}
		pages = append(pages, page)
		got += int64(len(page))
		end = "(" + page[len(page)-1].ID
	}
	if len(pages) == 0 {
		return "0-0", nil
	}
	for i := len(pages) - 1; i >= 0; i-- {
		for j := len(pages[i]) - 1; j >= 0; j-- {
			give(pages[i][j], fn)
		}
	}
	return pages[0][0].ID, nil
}

// readOn gives fn the entries after last, waiting up to followBlock for
// one, and returns the id of the last it gave.
func (s *RedisStore) readOn(ctx context.Context, key, last string, fn func([]byte)) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, followBlock+s.timeout)
	defer cancel()
	res, err := s.client.XRead(cctx, &redis.XReadArgs{Streams: []string{key, last}, Count: followPage, Block: followBlock}).Result()
	if errors.Is(err, redis.Nil) {
		return last, s.done(ctx, "read", nil) // nothing new within followBlock
	}
	if err = s.done(ctx, "read", err); err != nil {
		return last, err
	}
	for _, st := range res {
		for _, m := range st.Messages {
			give(m, fn)
			last = m.ID
		}
	}
	return last, nil
}

// give calls fn with an entry's message (field "m", as Append writes it).
func give(m redis.XMessage, fn func([]byte)) {
	if v, ok := m.Values["m"].(string); ok {
		fn([]byte(v))
	}
}
