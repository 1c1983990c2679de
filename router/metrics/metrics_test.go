package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPoolObserversAndBackendGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	p := m.Pool("legal")
	if m.Pool("legal") != p {
		t.Fatal("Pool did not return the cached observers")
	}
	p.Code(200).Inc()
	p.Code(200).Inc()
	p.Code(599).Inc()
	p.Code(700).Inc() // outside the cache: still counted
	p.Duration.Observe(0.2)
	m.Reload("invalid")
	RegisterBackends(reg, func(yield func(BackendState)) {
		yield(BackendState{Pool: "legal", Backend: "http://a:1", InFlight: 3, Healthy: true})
		yield(BackendState{Pool: "legal", Backend: "http://b:1", InFlight: 0, Healthy: false})
	}, nil)
	want := `
# HELP triage_requests_total Requests answered, by pool and HTTP status (499: the client left first).
# TYPE triage_requests_total counter
triage_requests_total{code="200",pool="legal"} 2
triage_requests_total{code="400",pool="legal"} 0
triage_requests_total{code="404",pool="legal"} 0
triage_requests_total{code="413",pool="legal"} 0
triage_requests_total{code="499",pool="legal"} 0
triage_requests_total{code="500",pool="legal"} 0
triage_requests_total{code="502",pool="legal"} 0
triage_requests_total{code="503",pool="legal"} 0
triage_requests_total{code="504",pool="legal"} 0
triage_requests_total{code="599",pool="legal"} 1
triage_requests_total{code="700",pool="legal"} 1
# HELP triage_upstream_inflight Requests in flight to each replica.
# TYPE triage_upstream_inflight gauge
triage_upstream_inflight{backend="http://a:1",pool="legal"} 3
triage_upstream_inflight{backend="http://b:1",pool="legal"} 0
# HELP triage_backend_healthy 1 when the replica passes its health checks and is not ejected, else 0.
# TYPE triage_backend_healthy gauge
triage_backend_healthy{backend="http://a:1",pool="legal"} 1
triage_backend_healthy{backend="http://b:1",pool="legal"} 0
# HELP triage_config_reloads_total Config reloads by result (success, invalid).
# TYPE triage_config_reloads_total counter
triage_config_reloads_total{result="invalid"} 1
triage_config_reloads_total{result="success"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"triage_requests_total", "triage_upstream_inflight", "triage_backend_healthy", "triage_config_reloads_total"); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkCode(b *testing.B) {
	p := New(prometheus.NewRegistry()).Pool("p")
	b.ReportAllocs()
	for b.Loop() {
		p.Code(200).Inc()
	}
}

// TestPoolTokens counts usage into the pool's series, by route: the
// unrouted counters the pool caches and a route's, which go through
// Metrics, land where Metrics.Tokens puts them.
func TestPoolTokens(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	p := m.Pool("code")
	p.Tokens(NoRoute, 10, 3)
	p.Tokens(NoRoute, 5, 0)
	p.Tokens("coding", 7, 2)
	m.Tokens("code", NoRoute, 1, 1)
	want := `
# HELP triage_tokens_total Tokens the replicas reported in their responses' usage, by pool, route ("none": the request named a pool's model) and kind (prompt, completion).
# TYPE triage_tokens_total counter
triage_tokens_total{kind="completion",pool="code",route="coding"} 2
triage_tokens_total{kind="completion",pool="code",route="none"} 4
triage_tokens_total{kind="prompt",pool="code",route="coding"} 7
triage_tokens_total{kind="prompt",pool="code",route="none"} 16
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "triage_tokens_total"); err != nil {
		t.Fatal(err)
	}
}

func TestReplicaScrapedState(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterBackends(reg, func(yield func(BackendState)) {
		yield(BackendState{Pool: "code", Backend: "http://a:1", InFlight: 2, Healthy: true,
			Scraped: true, Fresh: true, Running: 5, Waiting: 1, KVUsage: 0.25, PrefixQueries: 1000, PrefixHits: 800})
		yield(BackendState{Pool: "code", Backend: "http://b:1", InFlight: 1, Healthy: true}) // never read: no triage_replica_* series
	}, func(yield func(ChoiceCount)) {
		yield(ChoiceCount{Pool: "code", Choice: "prefix_hit", N: 7})
		yield(ChoiceCount{Pool: "code", Choice: "prefix_load", N: 1})
	})
	want := `
# HELP triage_pool_replica_choices_total Requests given a replica, by why: p2c, round_robin, prefix_hit (the replica holding the longest prefix), prefix_miss (no replica held it: the conversation's home), prefix_load (the holder was over the load bound), preferred (a Responses chain's replica), only (one replica could take it).
# TYPE triage_pool_replica_choices_total counter
triage_pool_replica_choices_total{choice="prefix_hit",pool="code"} 7
triage_pool_replica_choices_total{choice="prefix_load",pool="code"} 1
# HELP triage_replica_kv_cache_usage_ratio Fraction of the replica's KV cache in use, as its /metrics last reported (vllm:kv_cache_usage_perc).
# TYPE triage_replica_kv_cache_usage_ratio gauge
triage_replica_kv_cache_usage_ratio{backend="http://a:1",pool="code"} 0.25
# HELP triage_replica_prefix_cache_hits_tokens_total Prompt tokens the replica found in its prefix cache, as its /metrics last reported (vllm:prefix_cache_hits_total; resets when the replica restarts).
# TYPE triage_replica_prefix_cache_hits_tokens_total counter
triage_replica_prefix_cache_hits_tokens_total{backend="http://a:1",pool="code"} 800
# HELP triage_replica_requests_waiting Requests the replica queues, as its /metrics last reported (vllm:num_requests_waiting).
# TYPE triage_replica_requests_waiting gauge
triage_replica_requests_waiting{backend="http://a:1",pool="code"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "triage_pool_replica_choices_total",
		"triage_replica_kv_cache_usage_ratio", "triage_replica_prefix_cache_hits_tokens_total", "triage_replica_requests_waiting"); err != nil {
		t.Fatal(err)
	}
}
