package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Record is one measured run. Latencies are in milliseconds, of 2xx
// answers only; rates are shares of the answered requests (2xx or not).
type Record struct {
	Arm            string  `json:"arm,omitempty"`
	Config         string  `json:"config,omitempty"`
	Round          int     `json:"round,omitempty"`
	Conc           int     `json:"conc"`
	Rate           float64 `json:"rate,omitempty"` // open loop: requests a second started (0: closed loop)
	URL            string  `json:"url"`
	StartUnix      int64   `json:"start_unix"`
	DurationS      float64 `json:"duration_s"`
	Bodies         int     `json:"bodies"`          // bodies in the set
	DistinctBodies int     `json:"distinct_bodies"` // distinct among them
	BudgetMS       float64 `json:"budget_ms,omitempty"`

	Answered  int64   `json:"answered"` // responses with a status, 2xx or not
	OK        int64   `json:"ok"`       // 2xx: the latency samples
	Non2xx    int64   `json:"non_2xx"`
	Errors    int64   `json:"errors"` // transport errors and timeouts: no status
	ErrSample string  `json:"err_sample,omitempty"`
	RPS       float64 `json:"rps"` // 2xx per second
	// Tier2RPS is the 2xx answers tier 2 decided (X-Triage-Tier: 2) per
	// second: escalations that came back within the budget. At 100%
	// escalation it is tier 2's useful throughput, where RPS also counts
	// the requests that went on without it.
	Tier2RPS     float64 `json:"tier2_rps"`
	Tier2Decided int64   `json:"tier2_decided"`

	All          *Dist `json:"all"`
	Escalated    *Dist `json:"escalated"`
	NotEscalated *Dist `json:"not_escalated"`

	EscalationRate float64          `json:"escalation_rate"`  // tier 2 consulted
	ShedRate       float64          `json:"shed_rate"`        // reason tier2_shed
	TimeoutRate    float64          `json:"timeout_rate"`     // reason tier2_timeout
	Tier2ErrorRate float64          `json:"tier2_error_rate"` // tier2_error and tier2_unavailable
	ByReason       map[string]int64 `json:"by_reason"`
	ByTier         map[string]int64 `json:"by_tier"`
	ByRoute        map[string]int64 `json:"by_route"`
	ByStatus       map[string]int64 `json:"by_status"`
	GwCPUSec       float64          `json:"gw_cpu_s,omitempty"`
	GwCPUUsPerReq  float64          `json:"gw_cpu_us_per_req,omitempty"`
	GwRSSBeforeKB  int64            `json:"gw_rss_before_kb,omitempty"`
	GwRSSMaxKB     int64            `json:"gw_rss_max_kb,omitempty"`
	DriverCPUSec   float64          `json:"driver_cpu_s"`
	// The encoder service's side (triage encode serve, with -enc-pid and
	// -enc-metrics): texts it encoded and shed in the window, its CPU,
	// and texts per CPU-second (per core fully used).
	EncTexts           int64   `json:"enc_texts,omitempty"`
	EncShed            int64   `json:"enc_shed,omitempty"`
	EncTextsPerSec     float64 `json:"enc_texts_per_s,omitempty"`
	EncCPUSec          float64 `json:"enc_cpu_s,omitempty"`
	EncTextsPerCoreSec float64 `json:"enc_texts_per_core_s,omitempty"`
	EncRSSMaxKB        int64   `json:"enc_rss_max_kb,omitempty"`
	EscalatedOK        int64   `json:"escalated_ok"`     // 2xx escalated answers
	NotEscalatedOK     int64   `json:"not_escalated_ok"` // 2xx answers tier 1 (or no rules) decided
}

// Dist is a latency distribution in milliseconds, its percentiles exact
// (nearest rank over every sample kept).
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func distOf(samples []time.Duration) *Dist {
	if len(samples) == 0 {
		return nil
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum float64
	for _, d := range s {
		sum += float64(d)
	}
	pct := func(p float64) float64 {
		// nearest rank: the least sample with at least p% of them at or
		// below it (less a hair, so 99.9% of 1000 is rank 999, not 1000)
		rank := int(math.Ceil(p*float64(len(s))/100 - 1e-9))
		rank = min(max(rank, 1), len(s))
		return ms(s[rank-1])
	}
	return &Dist{
		N:    len(s),
		Mean: round3(sum / float64(len(s)) / 1e6),
		P50:  pct(50),
		P90:  pct(90),
		P99:  pct(99),
		P999: pct(99.9),
		Max:  ms(s[len(s)-1]),
	}
}

func ms(d time.Duration) float64 { return round3(float64(d) / 1e6) }
func round2(x float64) float64   { return math.Round(x*100) / 100 }
func round3(x float64) float64   { return math.Round(x*1000) / 1000 }

// record summarises a run.
func (p *part) record(elapsed time.Duration) *Record {
	ok := int64(len(p.esc) + len(p.plain))
	r := &Record{
		DurationS: round3(elapsed.Seconds()),
		OK:        ok, Non2xx: p.non2xx, Errors: p.errs, ErrSample: p.errSample,
		Answered:       ok + p.non2xx,
		RPS:            round2(float64(ok) / elapsed.Seconds()),
		Tier2RPS:       round2(float64(p.tier2OK) / elapsed.Seconds()),
		Tier2Decided:   p.tier2OK,
		All:            distOf(append(slices.Clone(p.esc), p.plain...)),
		Escalated:      distOf(p.esc),
		NotEscalated:   distOf(p.plain),
		ByReason:       p.reasons,
		ByTier:         p.tiers,
		ByRoute:        p.routes,
		ByStatus:       map[string]int64{},
		EscalatedOK:    int64(len(p.esc)),
		NotEscalatedOK: int64(len(p.plain)),
	}
	for code, n := range p.status {
		r.ByStatus[fmt.Sprint(code)] = n
	}
	if r.Answered > 0 {
		n := float64(r.Answered)
		r.EscalationRate = round3(float64(p.escAll) / n)
		r.ShedRate = round3(float64(p.reasons["tier2_shed"]) / n)
		r.TimeoutRate = round3(float64(p.reasons["tier2_timeout"]) / n)
		r.Tier2ErrorRate = round3(float64(p.reasons["tier2_error"]+p.reasons["tier2_unavailable"]) / n)
	}
	return r
}

func appendRecord(path string, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readRecords reads the JSON lines mixload run appended.
func readRecords(path string) ([]*Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*Record
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		r := new(Record)
		if err := json.Unmarshal([]byte(line), r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func pcts(d *Dist) string {
	if d == nil {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s", fmtMS(d.P50), fmtMS(d.P99), fmtMS(d.P999))
}

// fmtMS prints milliseconds with three significant digits or so.
func fmtMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

func (r *Record) label() string {
	var parts []string
	for _, s := range []string{r.Arm, r.Config} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	parts = append(parts, fmt.Sprintf("c=%d", r.Conc))
	if r.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate=%g/s", r.Rate))
	}
	return strings.Join(parts, " ")
}

// brief is one line: what mixed.sh prints as each run ends.
func (r *Record) brief() string {
	s := fmt.Sprintf("%s: %.0f req/s, escalated %s (p50/p99/p999 %s ms), not escalated p50/p99/p999 %s ms",
		r.label(), r.RPS, pct(r.EscalationRate), pcts(r.Escalated), pcts(r.NotEscalated))
	if r.EscalatedOK > 0 {
		s += fmt.Sprintf(", decided by tier 2 %.0f/s", r.Tier2RPS)
	}
	if r.ShedRate > 0 || r.TimeoutRate > 0 || r.Tier2ErrorRate > 0 {
		s += fmt.Sprintf(", timeouts %s, shed %s, tier-2 errors %s", pct(r.TimeoutRate), pct(r.ShedRate), pct(r.Tier2ErrorRate))
	}
	if r.GwCPUUsPerReq > 0 {
		s += fmt.Sprintf(", gateway CPU %.0f µs/req", r.GwCPUUsPerReq)
	}
	if r.EncCPUSec > 0 || r.EncTexts > 0 {
		s += fmt.Sprintf(", encoder %.0f texts/s on %.2f cores (%.0f texts per core-second), shed %d, RSS %d MiB",
			r.EncTextsPerSec, r.EncCPUSec/r.DurationS, r.EncTextsPerCoreSec, r.EncShed, r.EncRSSMaxKB>>10)
	}
	if r.Non2xx > 0 || r.Errors > 0 {
		s += fmt.Sprintf(", non-2xx %d, errors %d (%s)", r.Non2xx, r.Errors, r.ErrSample)
	}
	return s
}

// report is the whole record as text.
func (r *Record) report(w io.Writer) {
	fmt.Fprintf(w, "%s, %.1f s, %d bodies (%d distinct), cycled in one order shared by the workers\n", r.label(), r.DurationS, r.Bodies, r.DistinctBodies)
	fmt.Fprintf(w, "throughput      %.1f req/s (2xx), %.1f/s decided by tier 2; answered %d, non-2xx %d, transport errors %d\n", r.RPS, r.Tier2RPS, r.Answered, r.Non2xx, r.Errors)
	if r.ErrSample != "" {
		fmt.Fprintf(w, "first error     %s\n", r.ErrSample)
	}
	fmt.Fprintf(w, "%-15s %8s %9s %9s %9s %9s %9s\n", "latency, ms", "n", "p50", "p90", "p99", "p99.9", "max")
	for _, g := range []struct {
		name string
		d    *Dist
	}{{"all", r.All}, {"escalated", r.Escalated}, {"not escalated", r.NotEscalated}} {
		if g.d == nil {
			fmt.Fprintf(w, "%-15s %8d\n", g.name, 0)
			continue
		}
		fmt.Fprintf(w, "%-15s %8d %9s %9s %9s %9s %9s\n", g.name, g.d.N, fmtMS(g.d.P50), fmtMS(g.d.P90), fmtMS(g.d.P99), fmtMS(g.d.P999), fmtMS(g.d.Max))
	}
	fmt.Fprintf(w, "rates           escalated %s, tier2_timeout %s, tier2_shed %s, tier2_error/unavailable %s\n",
		pct(r.EscalationRate), pct(r.TimeoutRate), pct(r.ShedRate), pct(r.Tier2ErrorRate))
	fmt.Fprintf(w, "by reason       %s\n", counts(r.ByReason))
	fmt.Fprintf(w, "by tier         %s\n", counts(r.ByTier))
	fmt.Fprintf(w, "by route        %s\n", counts(r.ByRoute))
	fmt.Fprintf(w, "by status       %s\n", counts(r.ByStatus))
	if r.GwCPUSec > 0 {
		fmt.Fprintf(w, "gateway CPU     %.2f s, %.1f µs per 2xx request; RSS %d KiB before, %d KiB at most\n", r.GwCPUSec, r.GwCPUUsPerReq, r.GwRSSBeforeKB, r.GwRSSMaxKB)
	}
	fmt.Fprintf(w, "driver CPU      %.2f s\n", r.DriverCPUSec)
}

func counts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
