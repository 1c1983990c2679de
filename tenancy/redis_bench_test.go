package tenancy

import (
	"context"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// BenchmarkRedisTakeRequests is one lease call to a redis-server on
// loopback: a round trip and the GCRA script (EVALSHA), what the
// background loop pays per scope it refreshes. The limit is the largest,
// so every call is granted and writes, as a lease does. Each call is
// timed for the percentiles (a clock read each, small beside a round
// trip).
func BenchmarkRedisTakeRequests(b *testing.B) {
	addr, _, _ := testenv.Redis(b)
	s := newTestRedisStore(b, addr, RedisConfig{})
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		n    int
	}{{"one", 1}, {"batch64", 64}} {
		n := bc.n
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			lat := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				t0 := time.Now()
				g, _, _, err := s.TakeRequests(ctx, "bench", maxRedisPerMinute, n)
				if err != nil {
					b.Fatal(err)
				}
				if g != n {
					b.Fatalf("granted %d of %d", g, n)
				}
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(t0))
				}
			}
			reportPercentiles(b, lat)
		})
	}
}

// BenchmarkRedisReport is one budget report (this replica's count, the
// expiry check and the sum over replicas, one script), as a sync round
// costs per budget.
func BenchmarkRedisReport(b *testing.B) {
	addr, _, _ := testenv.Redis(b)
	s := newTestRedisStore(b, addr, RedisConfig{})
	ctx := context.Background()
	b.ReportAllocs()
	lat := make([]time.Duration, 0, 1<<16)
	var seq uint64
	for b.Loop() {
		t0 := time.Now()
		seq++
		if _, err := s.Report(ctx, "bench", "a", seq, int64(seq)*100, time.Hour); err != nil {
			b.Fatal(err)
		}
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(t0))
		}
	}
	reportPercentiles(b, lat)
}
