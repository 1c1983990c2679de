package tenancy

import (
	"context"
	"time"
)

// Store is the state replicas share, behind one interface for all its
// users: leases of request counts and each replica's reported spending
// (the limits and budgets of a Limiter that Shares it), and an
// append-only log of messages every replica follows (sessions and the
// Responses index, router's share). RedisStore is the implementation for
// many replicas; one replica alone shares nothing and needs none (nil).
//
// What a user does while the store does not answer is stated where it is
// used: limits and budgets fail open (admitted on the replica's own
// counts, marked degraded) or closed (503), by access.redis.fail_closed,
// within Timeout; sessions are decided by the replica alone; a Responses
// chain the replica does not know waits a bounded time, then is told to
// retry (503). Every call ends by its context.
type Store interface {
	// TakeRequestsOnce leases up to n of scope's perMinute requests,
	// idempotently for the replica's sequence number seq: a call resent
	// after a timeout is answered from the first one's record.
	TakeRequestsOnce(ctx context.Context, scope string, perMinute, n int, replica string, seq uint64) (granted, remaining int, reset time.Duration, again bool, err error)
	// ReportEach sets replica's whole count at key (not a delta: a resent
	// report counts once) and returns every replica's count there.
	ReportEach(ctx context.Context, key, replica string, seq uint64, count int64, ttl time.Duration) (map[string]int64, error)
	// Append adds msg to topic's log, which keeps the latest keep.
	Append(ctx context.Context, topic string, msg []byte, keep int64) error
	// Follow calls fn with topic's messages, the last backlog of them
	// first, until ctx ends; caughtUp is called once the backlog is read.
	Follow(ctx context.Context, topic string, backlog int64, caughtUp func(), fn func(msg []byte))
	// Healthy reports whether the store answered its last call.
	Healthy() bool
	// Timeout is how long a request may wait on the store before its
	// user's rule for a store that does not answer applies.
	Timeout() time.Duration
	Close() error
}

var _ Store = (*RedisStore)(nil)

// Timeout is access.redis.timeout.
func (s *RedisStore) Timeout() time.Duration { return s.timeout }
