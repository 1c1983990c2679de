// Package tenancy decides who is calling and what they may do: API keys
// (sha256 hashes in a keys file, compared in constant time) and JWTs name
// a Principal; the policy (by principal and group) says which models,
// pools, routes and classes it may use and whether it may name a model
// directly; limits (requests and tokens per minute, concurrent requests)
// and budgets (tokens and dollars per day and month) admit or refuse it.
//
// The gateway builds a Snapshot from its configuration and swaps it on
// reload; a request reads only memory. The limit counters outlive
// snapshots: a Limiter owns them and a reload keeps them for the tenants
// that remain. A reload that finds the keys file empty where the keys in
// effect had some keeps them (ReloadKeys), unless the file says
// "# no keys".
//
// Tokens are admitted as an estimate (Caller.Estimate: the body's bytes
// over four, plus max_tokens or, without it, Config.ReserveTokens) and
// settled with the usage the response reports; a limit or budget is
// overshot by at most what completions in flight run past that.
//
// With Redis (Limiter.Share, shared.go), requests- and tokens-per-minute
// limits and budgets count every replica's traffic; concurrent-request
// limits stay each replica's (Limits.PerReplica says so). The request
// path still does no I/O: Limiter.Run's two loops, a lease loop and a sync
// loop, talk to Redis, and a request whose lease is empty waits for the
// lease loop at most the store's Timeout (default 50 ms). Past it, or
// while Redis does not answer, it is admitted marked degraded (fail open)
// or refused with 503 limits_unavailable (fail closed). Every call to
// Redis is idempotent (a sequence number per replica, whole counts rather
// than deltas), so a Redis that stalls and then runs what it was sent
// counts nothing twice, and a Redis restarted empty gets the running
// replicas' spending back. The bounds are stated in shared.go.
//
// Snapshots, Callers, Admissions (each used by one request) and the
// Limiter are safe for concurrent use. Limiter.Run returns when its
// context ends, after a last round of each loop bounded by the store's
// Timeout; JWT.Run returns when its context ends.
package tenancy
