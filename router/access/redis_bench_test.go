package access

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

// BenchmarkRedisAddTokens is one budget update (INCRBY and the expiry
// check, one script), as reconciling a request's usage costs.
func BenchmarkRedisAddTokens(b *testing.B) {
	addr, _, _ := testenv.Redis(b)
	s := newTestRedisStore(b, addr, RedisConfig{})
	ctx := context.Background()
	b.ReportAllocs()
	lat := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.AddTokens(ctx, "bench", 100, time.Hour); err != nil {
			b.Fatal(err)
		}
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(t0))
		}
	}
	reportPercentiles(b, lat)
}
