package tenancy

import (
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRequestPath is what access control adds to one request, on one
// goroutine: authenticate an API key, check the model and the route
// against the principal's policy, admit it against a requests-per-minute
// and a concurrency limit (a principal's and a group's), release it.
func BenchmarkRequestPath(b *testing.B) {
	secret, k := mustKey(b, "alice", "eng")
	cfg := Config{KeysFile: "k", Policies: []Policy{
		{Principal: "alice", Models: []string{"auto", "llama"}, Pools: []string{"general", "code"}, Limits: Limits{RequestsPerMinute: 1 << 30, Concurrent: 64}},
		{Group: "eng", Limits: Limits{RequestsPerMinute: 1 << 30, Per: "group"}},
	}}
	s := compile(b, cfg, k)
	h := http.Header{"Authorization": {"Bearer " + secret}, "Content-Type": {"application/json"}}
	now := time.Now()
	one := func() {
		c, d := s.Authenticate(h, now)
		if d != nil {
			b.Fatal(d)
		}
		if d := c.AllowModel("auto", true); d != nil {
			b.Fatal(d)
		}
		a, d := c.Admit(now, 0)
		if d != nil {
			b.Fatal(d)
		}
		if d := c.AllowRoute("code", "coding", "computer science"); d != nil {
			b.Fatal(d)
		}
		a.Release()
	}
	b.Run("mean", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			one()
		}
	})
	// Each call timed: the percentiles include a clock read (tens of ns
	// on bare metal, hundreds on some VMs' clocks).
	b.Run("percentiles", func(b *testing.B) {
		lat := make([]time.Duration, 0, 1<<16)
		for b.Loop() {
			t0 := time.Now()
			one()
			if len(lat) < cap(lat) {
				lat = append(lat, time.Since(t0))
			}
		}
		reportPercentiles(b, lat)
	})
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sorted := append([]time.Duration(nil), lat...)
	slices.Sort(sorted)
	b.ReportMetric(float64(sorted[len(sorted)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(sorted[len(sorted)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkAdmitParallel admits requests of many tenants at once, each
// goroutine its own tenant: with counters padded to a cache line (as the
// gateway keeps them) and packed next to each other (two tenants a line
// and more), the false sharing the padding avoids.
func BenchmarkAdmitParallel(b *testing.B) {
	const tenants = 64
	iv := int64(time.Minute) / (1 << 30)
	window := iv * (1 << 30)
	b.Run("padded", func(b *testing.B) {
		cs := make([]counter, tenants)
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			c := &cs[next.Add(1)%tenants]
			now := time.Now().UnixNano()
			for pb.Next() {
				now++
				gcra(&c.tat, now, iv, window)
			}
		})
	})
	b.Run("packed", func(b *testing.B) {
		cs := make([]struct{ tat atomic.Int64 }, tenants)
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			c := &cs[next.Add(1)%tenants]
			now := time.Now().UnixNano()
			for pb.Next() {
				now++
				gcra(&c.tat, now, iv, window)
			}
		})
	})
}
