// Package pool owns the upstream replicas of a named pool: their
// configuration, balancing, active health checks, passive ejection through
// a circuit breaker with half-open probing, the scraping of each replica's
// own /metrics, and the client TLS config of replicas served over https
// (New reads the pool's TLS files once).
//
// # Balancing
//
// Config.Balance picks the policy: weighted least-in-flight with
// power-of-two choices (p2c, the default), round robin, or prefix-cache
// affinity (prefix). With prefix, Pool.Key hashes a request's serialised
// conversation in blocks of Prefix.BlockBytes with CRC-32C, each block's
// hash chained to the ones before, so that a conversation's next turn
// extends its previous key; the hash up to the end of its first user
// message identifies the conversation. Each Backend keeps an index of the
// blocks sent to it: a set-associative table of eight-entry buckets (one
// cache line; an entry is a block's key and a 16-bit stamp in one word)
// with least-recently-used replacement, bounded by Prefix.IndexBlocks,
// looked up by binary search over the chained blocks, never allocating;
// a block sent again is restamped only when its stamp is old, so the hit
// path is loads.
// PickKey's choice is numbered in choosePrefix's comment: the longest
// match that goes beyond the blocks conversations share, within the load
// bound of consistent hashing with bounded loads (Prefix.LoadFactor);
// otherwise the conversation's rendezvous home, the first replica within
// the bound in the order of rendezvous scores of its identity, which
// every gateway with the same replica URLs computes alike. A replica that
// is down or ejected has its index cleared; only its conversations move.
// Load is Backend.Load: in-flight requests, or the replica's scraped
// running and waiting requests while fresh.
//
// The hit path (BenchmarkPickPrefixHit, four replicas) allocates nothing
// and took 0.5-0.95 µs on a quiet 2-core machine, 1,600-3,800
// instructions for conversations of 2-24 blocks against P2C's 770
// (bench/results/2026-12-07-pick-prefix.txt); keying a request
// (BenchmarkKey) runs at the CRC-32C instruction's speed, over 10 GB/s.
//
// # Concurrency and goroutines
//
// A Pool is immutable once built except for per-backend counters and
// indexes, which are atomics (racing updates of an index may lose an
// entry, which costs a cache hit, never a wrong answer); Pick, PickKey,
// Report and the accessors are safe for concurrent use and do no I/O. Run
// starts the active health checks, one goroutine per backend, and, when
// the pool scrapes its replicas' metrics, one scraping goroutine per
// backend; they all exit when its context is done, and Run returns after
// they have. A scrape that fails is reported to Run's callback once per
// replica (Transition.Metrics), not per scrape.
package pool
