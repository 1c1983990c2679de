package rules_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/rules"
)

// BenchmarkDecideTier1 is the decision as the gateway makes it on every
// request naming an alias, with the real tier 1 (the default heads) and a
// rule set of five class routes: tier 1's classification, the route
// masses, the policy. Texts of about 30 and 500 tokens; none escalates
// (tier 2 off), so this is the cost every routed request pays.
//
//	go test ./rules -run '^$' -bench DecideTier1 -benchmem -count 6
func BenchmarkDecideTier1(b *testing.B) {
	models := testenv.Models(b, "tables")
	h, err := classifier.LoadHeads(filepath.Join(testenv.Root(), "models", "heads", "subjects"))
	if err != nil {
		b.Fatal(err)
	}
	t1, err := static.Load(h, models)
	if err != nil {
		b.Fatal(err)
	}
	f, err := rules.Parse("bench.yaml", []byte(`alias: auto
routes:
  - {name: coding, when: {class: computer science}, pool: code}
  - {name: legal, when: {class: law}, pool: legal}
  - {name: medical, when: {classes: [health, biology, psychology]}, pool: medical}
  - {name: stem, when: {classes: [math, physics, chemistry, engineering]}, pool: stem}
  - {name: humanities, when: {classes: [history, philosophy, business, economics]}, pool: humanities}
default: general
`))
	if err != nil {
		b.Fatal(err)
	}
	pools := map[string]bool{"code": true, "legal": true, "medical": true, "stem": true, "humanities": true, "general": true}
	set, err := rules.Compile(f, rules.Env{Pools: pools, Heads: h, Tier1: t1})
	if err != nil {
		b.Fatal(err)
	}
	short := "How do I rebase my feature branch onto main without losing my commits in git?"
	long := strings.Repeat("My landlord says he can keep the whole deposit because of normal wear and tear on the carpet and walls, and I want to know what the law says about that. ", 16)
	for _, tc := range []struct{ name, text string }{{"30tokens", short}, {"500tokens", long}} {
		b.Run(tc.name, func(b *testing.B) {
			sig := rules.Signals{Model: "auto", Text: tc.text}
			ctx := context.Background()
			b.ReportAllocs()
			// Each call is timed too, for the percentiles the gateway's
			// requests see (the clock reads add about 50 ns to each).
			lat := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				t0 := time.Now()
				set.Decide(ctx, sig)
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(t0))
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
