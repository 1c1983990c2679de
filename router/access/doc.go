// Package access decides who is calling and what they may do: API keys
// (sha256 hashes in a keys file, compared in constant time) and JWTs name
// a Principal; the policy (by principal and group) says which models,
// pools, routes and classes it may use and whether it may name a model
// directly; limits (requests and tokens per minute, concurrent requests)
// admit or refuse it.
//
// The gateway builds a Snapshot from its configuration and swaps it on
// reload; a request reads only memory. The limit counters outlive
// snapshots: a Limiter owns them and a reload keeps them for the tenants
// that remain.
package access
