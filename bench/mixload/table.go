package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// The configs mixed.sh runs, by the labels it gives them.
const (
	cfgPlain   = "plain"
	cfgNatural = "natural"
	cfg30      = "escalate-30"
	cfgAll     = "all-escalate"
	// Tier 2 served by an encoder service (triage encode serve) in its
	// own process: 30% escalation, and every request escalated.
	cfgRemote30  = "remote-30"
	cfgRemoteAll = "remote-all"
	// The 30% rules with tier 2 refused at once: the gateway's cost of
	// the rules without tier 2's work.
	cfgTier1of30 = "tier1-30"
)

// mixedConfigs are the configs whose not-escalated p99 is held against
// the plain gateway's, with the words the targets name them by.
var mixedConfigs = []struct{ cfg, words string }{
	{cfgNatural, "natural escalation"},
	{cfg30, "30% escalation"},
	{cfgRemote30, "30% escalation, tier 2 remote"},
}

func cmdTable(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("table", flag.ExitOnError)
	in := fs.String("in", "", "the run records (JSONL, as mixload run -out appends them)")
	fs.Parse(args)
	if *in == "" {
		return errors.New("table: -in is required")
	}
	recs, err := readRecords(*in)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("table: no records in %s", *in)
	}
	writeTable(w, recs)
	return nil
}

type groupKey struct {
	arm, config string
	conc        int
}

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func configRank(c string) int {
	switch c {
	case cfgPlain:
		return 0
	case cfgNatural:
		return 1
	case cfg30:
		return 2
	case cfgAll:
		return 3
	case cfgRemote30:
		return 4
	case cfgRemoteAll:
		return 5
	case cfgTier1of30:
		return 6
	}
	return 7
}

// writeTable prints medians over rounds per arm, config and concurrency,
// then the targets: at 100% escalation p99 within budget + 10 ms and, with
// two arms, throughput B/A; at the natural rate the non-escalated p99
// against the plain gateway's in the same round.
func writeTable(w io.Writer, recs []*Record) {
	var arms []string
	groups := map[groupKey][]*Record{}
	for _, r := range recs {
		if !slices.Contains(arms, r.Arm) {
			arms = append(arms, r.Arm)
		}
		k := groupKey{r.Arm, r.Config, r.Conc}
		groups[k] = append(groups[k], r)
	}
	keys := make([]groupKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.conc != b.conc {
			return a.conc > b.conc
		}
		if ra, rb := configRank(a.config), configRank(b.config); ra != rb {
			return ra < rb
		}
		if a.config != b.config {
			return a.config < b.config
		}
		return slices.Index(arms, a.arm) < slices.Index(arms, b.arm)
	})

	fmt.Fprintln(w, "Medians over rounds; latencies in ms (p50 / p99 / p99.9, 2xx answers); rates of the answered requests; CPU is the gateway process's per 2xx request.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| arm | config | c | rounds | req/s | tier-2 decided/s | escalated | timeout | shed | escalated p50 / p99 / p99.9 | not escalated p50 / p99 / p99.9 | CPU µs/req | non-2xx + errors |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, k := range keys {
		g := groups[k]
		med := func(f func(*Record) float64) float64 {
			xs := make([]float64, 0, len(g))
			for _, r := range g {
				xs = append(xs, f(r))
			}
			return median(xs)
		}
		dist := func(f func(*Record) *Dist) string {
			var p50, p99, p999 []float64
			for _, r := range g {
				if d := f(r); d != nil {
					p50, p99, p999 = append(p50, d.P50), append(p99, d.P99), append(p999, d.P999)
				}
			}
			if len(p50) == 0 {
				return "-"
			}
			return fmt.Sprintf("%s / %s / %s", fmtMS(median(p50)), fmtMS(median(p99)), fmtMS(median(p999)))
		}
		var bad int64
		for _, r := range g {
			bad += r.Non2xx + r.Errors
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %.0f | %.0f | %s | %s | %s | %s | %s | %.0f | %d |\n",
			orDash(k.arm), k.config, k.conc, len(g),
			med(func(r *Record) float64 { return r.RPS }),
			med(func(r *Record) float64 { return r.Tier2RPS }),
			pct(med(func(r *Record) float64 { return r.EscalationRate })),
			pct(med(func(r *Record) float64 { return r.TimeoutRate })),
			pct(med(func(r *Record) float64 { return r.ShedRate })),
			dist(func(r *Record) *Dist { return r.Escalated }),
			dist(func(r *Record) *Dist { return r.NotEscalated }),
			med(func(r *Record) float64 { return r.GwCPUUsPerReq }),
			bad)
	}

	encoderTable(w, keys, groups)

	var concs []int
	for _, k := range keys {
		if !slices.Contains(concs, k.conc) {
			concs = append(concs, k.conc)
		}
	}
	var lines []string
	for _, c := range concs {
		for _, arm := range arms {
			for _, allCfg := range []struct{ cfg, words string }{{cfgAll, "100% escalation"}, {cfgRemoteAll, "100% escalation, tier 2 remote"}, {cfgRemote30, "30% escalation, tier 2 remote"}} {
				all := groups[groupKey{arm, allCfg.cfg, c}]
				if len(all) > 0 {
					var p99s []float64
					budget := 0.0
					for _, r := range all {
						if r.Escalated != nil {
							p99s = append(p99s, r.Escalated.P99)
						}
						budget = max(budget, r.BudgetMS)
					}
					if len(p99s) > 0 && budget > 0 {
						m := median(p99s)
						lines = append(lines, fmt.Sprintf("- %s, %s, c=%d: escalated p99 **%s ms** against budget + 10 = %s ms: %s (rounds: %s)",
							orDash(arm), allCfg.words, c, fmtMS(m), fmtMS(budget+10), verdict(m <= budget+10), list(p99s, fmtMS)))
					}
				}
			}
			plain := byRound(groups[groupKey{arm, cfgPlain, c}])
			for _, mc := range mixedConfigs {
				mixed := byRound(groups[groupKey{arm, mc.cfg, c}])
				var ratios []float64
				for _, round := range rounds(mixed) {
					n := mixed[round]
					if p, ok := plain[round]; ok && p.All != nil && n.NotEscalated != nil && p.All.P99 > 0 {
						ratios = append(ratios, n.NotEscalated.P99/p.All.P99)
					}
				}
				if len(ratios) > 0 {
					m := median(ratios)
					lines = append(lines, fmt.Sprintf("- %s, %s, c=%d: not-escalated p99 / plain p99 in the same round **%.2f×** (at most 1.20: %s; rounds: %s)",
						orDash(arm), mc.words, c, m, verdict(m <= 1.2), list(ratios, ratio)))
				}
				if mc.cfg != cfgRemote30 {
					continue
				}
				// Tier 2 out of the gateway's process: what it costs the
				// gateway is the call, not the encoder.
				for _, base := range []struct {
					recs  map[int]*Record
					words string
				}{{plain, "plain's"}, {byRound(groups[groupKey{arm, cfgTier1of30, c}]), "tier1-30's (the same rules, tier 2 refused at once)"}} {
					var cpu []float64
					for _, round := range rounds(mixed) {
						if p, ok := base.recs[round]; ok && p.GwCPUUsPerReq > 0 && mixed[round].GwCPUUsPerReq > 0 {
							cpu = append(cpu, mixed[round].GwCPUUsPerReq/p.GwCPUUsPerReq)
						}
					}
					if len(cpu) > 0 {
						m := median(cpu)
						lines = append(lines, fmt.Sprintf("- %s, %s, c=%d: gateway CPU per request / %s in the same round **%.2f×** (at most 1.10: %s; rounds: %s)",
							orDash(arm), mc.words, c, base.words, m, verdict(m <= 1.1), list(cpu, ratio)))
					}
				}
			}
		}
		if len(arms) >= 2 {
			a, b := arms[0], arms[len(arms)-1]
			for _, cfg := range []string{cfgAll, cfg30, cfgNatural, cfgPlain} {
				ga, gb := byRound(groups[groupKey{a, cfg, c}]), byRound(groups[groupKey{b, cfg, c}])
				var rps, t2, cpu []float64
				for _, round := range rounds(ga) {
					ra := ga[round]
					if rb, ok := gb[round]; ok && ra.RPS > 0 {
						rps = append(rps, rb.RPS/ra.RPS)
						if ra.Tier2RPS > 0 {
							t2 = append(t2, rb.Tier2RPS/ra.Tier2RPS)
						}
						if ra.GwCPUUsPerReq > 0 {
							cpu = append(cpu, rb.GwCPUUsPerReq/ra.GwCPUUsPerReq)
						}
					}
				}
				if len(rps) == 0 {
					continue
				}
				s := fmt.Sprintf("- %s, c=%d, %s against %s: throughput **%.2f×** (rounds: %s)", cfg, c, orDash(b), orDash(a), median(rps), list(rps, ratio))
				if len(t2) > 0 {
					if cfg == cfgAll {
						// Tier 2's throughput is the answers it gives within
						// the budget: when it cannot keep up, requests/s is
						// about c / budget whatever it does.
						s = fmt.Sprintf("- %s, c=%d, %s against %s: tier-2 throughput (answers decided by tier 2 per second) **%.2f×** (at least 2: %s; rounds: %s); requests/s %.2f× (rounds: %s)",
							cfg, c, orDash(b), orDash(a), median(t2), verdict(median(t2) >= 2), list(t2, ratio), median(rps), list(rps, ratio))
					} else {
						s += fmt.Sprintf(", decided by tier 2 per second %.2f× (rounds: %s)", median(t2), list(t2, ratio))
					}
				}
				if len(cpu) > 0 {
					s += fmt.Sprintf(", CPU per request %.2f×", median(cpu))
				}
				lines = append(lines, s)
			}
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Targets (paired within rounds, medians):")
		fmt.Fprintln(w)
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
}

// byRound indexes a group's records by round (the last one of a round wins).
func byRound(g []*Record) map[int]*Record {
	m := make(map[int]*Record, len(g))
	for _, r := range g {
		m[r.Round] = r
	}
	return m
}

func rounds(m map[int]*Record) []int {
	out := make([]int, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

func ratio(x float64) string { return fmt.Sprintf("%.2f", x) }

func list(xs []float64, f func(float64) string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = f(x)
	}
	return strings.Join(s, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// encoderTable prints the encoder service's side of the runs that
// measured it: texts encoded a second, the cores it used, texts per
// core-second, what it shed, its peak RSS.
func encoderTable(w io.Writer, keys []groupKey, groups map[groupKey][]*Record) {
	header := false
	for _, k := range keys {
		g := groups[k]
		med := func(f func(*Record) float64) float64 {
			xs := make([]float64, 0, len(g))
			for _, r := range g {
				xs = append(xs, f(r))
			}
			return median(xs)
		}
		if med(func(r *Record) float64 { return r.EncCPUSec }) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "The encoder service (medians over rounds): texts it encoded a second, the cores it used (CPU-seconds a second), texts per core-second, texts it refused (shed, 429) in the window, peak RSS.")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| arm | config | c | texts/s | cores used | texts per core-second | shed | RSS MiB |")
			fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
			header = true
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %.2f | %.0f | %.0f | %.0f |\n", orDash(k.arm), k.config, k.conc,
			med(func(r *Record) float64 { return r.EncTextsPerSec }),
			med(func(r *Record) float64 { return r.EncCPUSec / r.DurationS }),
			med(func(r *Record) float64 { return r.EncTextsPerCoreSec }),
			med(func(r *Record) float64 { return float64(r.EncShed) }),
			med(func(r *Record) float64 { return float64(r.EncRSSMaxKB) / 1024 }))
	}
}
