// Package pool owns the upstream replicas of a named pool: their
// configuration, weighted least-in-flight balancing with power-of-two
// choices, active health checks, passive ejection through a circuit
// breaker with half-open probing, and the client TLS config of replicas
// served over https (New reads the pool's TLS files once).
//
// A Pool is immutable once built except for per-backend counters, which are
// atomics; Pick, Report and the accessors are safe for concurrent use and do
// no I/O. Run starts the active health checks, one goroutine per backend,
// which all exit when its context is done; Run returns after they have.
package pool
