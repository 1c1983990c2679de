package proxy

import (
	"time"

	"github.com/triagegw/triage/router/pool"
)

// Policy is how requests to one pool are forwarded: how long each step may
// take, when a failed attempt is tried again, and how many idle
// connections to keep. The gateway builds one per pool when a config is
// applied; Forward reads nothing else of the pool's config.
type Policy struct {
	// Connect bounds dialing and the TLS handshake.
	Connect time.Duration
	// FirstByte bounds the wait for the response head once the request is
	// written.
	FirstByte time.Duration
	// Idle bounds the gap between two reads of the response body.
	Idle time.Duration
	// Total bounds the whole request, retries included.
	Total time.Duration
	// Attempts is the attempts in all, the first included.
	Attempts int
	// Budget is the time from the request's start after which no attempt
	// starts.
	Budget time.Duration
	// Hurry, when set, abandons a streamed request whose head is this late
	// and tries another replica.
	Hurry time.Duration
	// MaxIdle caps the idle connections kept per replica.
	MaxIdle int
}

// PolicyOf is the policy a pool's config asks for.
func PolicyOf(c *pool.Config) Policy {
	return Policy{
		Connect: c.Timeouts.Connect, FirstByte: c.Timeouts.FirstByte, Idle: c.Timeouts.Idle, Total: c.Timeouts.Total,
		Attempts: c.Retry.Attempts, Budget: c.Retry.Budget, Hurry: c.Retry.FirstByteTimeout,
		MaxIdle: c.MaxIdleConns,
	}
}
