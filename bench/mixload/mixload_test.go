package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestEscalated(t *testing.T) {
	c := newClassifier("client_gone, other_reason")
	for _, tc := range []struct {
		tier, reason string
		want         bool
	}{
		{"2", "below_floor", true},
		{"2", "class_requires_tier2", true},
		{"1", "tier2_timeout", true},
		{"1", "tier2_shed", true},
		{"", "tier2_unavailable", true},
		{"1", "tier2_error", true},
		{"1", "client_gone", true}, // named by -escalated-reasons
		{"1", "tier1_confident", false},
		{"1", "default", false},
		{"1", "below_floor", false}, // tier 2 off: decided by tier 1
		{"", "", false},             // no rules
	} {
		if got := c.escalated(tc.tier, tc.reason); got != tc.want {
			t.Errorf("escalated(%q, %q) = %v, want %v", tc.tier, tc.reason, got, tc.want)
		}
	}
}

func TestDistNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 1000; i >= 1; i-- { // out of order on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	d := distOf(s)
	if d.N != 1000 || d.P50 != 500 || d.P99 != 990 || d.P999 != 999 || d.Max != 1000 || d.Mean != 500.5 {
		t.Errorf("distOf(1..1000 ms) = %+v, want n 1000, p50 500, p99 990, p99.9 999, max 1000, mean 500.5", d)
	}
	if d := distOf([]time.Duration{3 * time.Millisecond}); d.P50 != 3 || d.P999 != 3 {
		t.Errorf("distOf(one sample) = %+v", d)
	}
	if distOf(nil) != nil {
		t.Error("distOf(nil) is not nil")
	}
}

func TestGenDeterministicDeduplicated(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.jsonl")
	b := filepath.Join(dir, "b.jsonl")
	write(t, a, `{"text":"one <b>&</b>","label":"x"}`+"\n"+`{"text":"two"}`+"\n\n"+`{"text":"one <b>&</b>"}`+"\n")
	write(t, b, `{"text":"two"}`+"\n"+`{"text":"three \"quoted\"\nline"}`+"\n"+`{"text":"  "}`+"\n")
	gen := func(seed string) (string, string) {
		var out, errb bytes.Buffer
		if err := cmdGen([]string{"-seed", seed, "-model", "m", "-max-tokens", "8", a, b}, &out, &errb); err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String()
	}
	out1, msg := gen("7")
	out2, _ := gen("7")
	if out1 != out2 {
		t.Fatalf("same seed, different output:\n%s\n%s", out1, out2)
	}
	if !strings.Contains(msg, "3 distinct texts") {
		t.Errorf("gen said %q, want 3 distinct texts", msg)
	}
	lines := strings.Split(strings.TrimSpace(out1), "\n")
	got := map[string]bool{}
	for _, l := range lines {
		var body chatBody
		if err := json.Unmarshal([]byte(l), &body); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if body.Model != "m" || body.MaxTokens != 8 || len(body.Messages) != 1 || body.Messages[0].Role != "user" {
			t.Errorf("body %q is not the chat completion asked for", l)
		}
		got[body.Messages[0].Content] = true
	}
	if len(lines) != 3 || !got["one <b>&</b>"] || !got["two"] || !got["three \"quoted\"\nline"] {
		t.Errorf("gen wrote %q, want the three distinct texts once each", out1)
	}
	if strings.Contains(out1, `\u003c`) {
		t.Errorf("gen escaped HTML: %q", out1)
	}
}

// TestRunGroups drives a fake gateway that answers each body with the
// decision it names, and checks the groups, counts and rates.
func TestRunGroups(t *testing.T) {
	decisions := map[string][2]string{ // body text → tier, reason
		"a": {"1", "tier1_confident"},
		"b": {"2", "below_floor"},
		"c": {"1", "tier2_timeout"},
		"d": {"1", "tier2_shed"},
		"e": {"", ""},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body chatBody
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil || r.Header.Get("Authorization") != "Bearer k" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		d := decisions[body.Messages[0].Content]
		if d[1] != "" {
			w.Header().Set("X-Triage-Tier", d[0])
			w.Header().Set("X-Triage-Reason", d[1])
		}
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	bodies := filepath.Join(dir, "bodies.jsonl")
	var buf bytes.Buffer
	for _, text := range []string{"a", "b", "c", "d", "e"} {
		b, _ := json.Marshal(chatBody{Model: "m", Messages: []message{{Role: "user", Content: text}}})
		buf.Write(append(b, '\n'))
	}
	write(t, bodies, buf.String())
	out := filepath.Join(dir, "runs.jsonl")
	var stdout bytes.Buffer
	// The run ends at 500 answers (-max-samples), not on the clock: -d
	// only bounds it, so a loaded machine (CI runs packages side by side,
	// under -race) answers as many as an idle one.
	err := cmdRun([]string{"-url", srv.URL, "-bodies", bodies, "-c", "5", "-d", "60s", "-warmup", "0",
		"-H", "Authorization: Bearer k", "-max-samples", "500", "-out", out, "-gw-pid", strconv.Itoa(os.Getpid()), "-config", "natural"}, &stdout)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := readRecords(out)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v, %v", recs, err)
	}
	r := recs[0]
	if r.OK < 500 || r.Non2xx != 0 || r.Errors != 0 || r.Bodies != 5 || r.DistinctBodies != 5 {
		t.Fatalf("record %+v: want at least 500 2xx answers, no failures, 5 distinct bodies", r)
	}
	// The shared cursor sends the five bodies in turn: each is a fifth.
	for reason, n := range map[string]int64{"tier1_confident": r.OK / 5, "below_floor": r.OK / 5, "none": r.OK / 5} {
		if d := r.ByReason[reason] - n; d < -1 || d > 1 {
			t.Errorf("reason %s: %d answers of %d, want about %d", reason, r.ByReason[reason], r.OK, n)
		}
	}
	if want := float64(r.EscalatedOK) / float64(r.OK); r.EscalationRate < 0.59 || r.EscalationRate > 0.61 || r.EscalationRate != round3(want) {
		t.Errorf("escalation rate %v (escalated %d of %d), want 0.6: tier 2, tier2_timeout, tier2_shed", r.EscalationRate, r.EscalatedOK, r.OK)
	}
	if r.ShedRate < 0.19 || r.ShedRate > 0.21 || r.TimeoutRate < 0.19 || r.TimeoutRate > 0.21 {
		t.Errorf("shed %v, timeout %v, want 0.2 each", r.ShedRate, r.TimeoutRate)
	}
	if r.Escalated == nil || r.NotEscalated == nil || r.Escalated.N+r.NotEscalated.N != int(r.OK) || r.All.N != int(r.OK) {
		t.Errorf("groups %+v / %+v do not add up to %d", r.Escalated, r.NotEscalated, r.OK)
	}
	if r.Tier2Decided < r.OK/5-1 || r.Tier2Decided > r.OK/5+1 {
		t.Errorf("decided by tier 2: %d of %d, want a fifth", r.Tier2Decided, r.OK)
	}
	if r.DriverCPUSec <= 0 || r.GwRSSMaxKB <= 0 {
		t.Errorf("driver CPU %v s, watched process peak RSS %d KiB: want both measured", r.DriverCPUSec, r.GwRSSMaxKB)
	}
	if !strings.Contains(stdout.String(), "escalated") || !strings.Contains(stdout.String(), "tier2_shed=") {
		t.Errorf("report:\n%s", stdout.String())
	}
}

func TestTableTargets(t *testing.T) {
	rec := func(arm, cfg string, round int, rps, t2rps, esc99, plain99 float64) *Record {
		r := &Record{Arm: arm, Config: cfg, Round: round, Conc: 64, RPS: rps, Tier2RPS: t2rps, BudgetMS: 50, GwCPUUsPerReq: 100}
		if esc99 > 0 {
			r.Escalated = &Dist{P50: esc99 / 2, P99: esc99, P999: esc99}
		}
		if plain99 > 0 {
			r.NotEscalated = &Dist{P50: plain99 / 2, P99: plain99, P999: plain99}
			r.All = r.NotEscalated
		}
		return r
	}
	var recs []*Record
	for round := 1; round <= 3; round++ {
		recs = append(recs,
			rec("before", cfgPlain, round, 10000, 0, 0, 10),
			rec("before", cfgNatural, round, 3000, 300, 80, 20),
			rec("before", cfgAll, round, 1000, 5, 100, 0),
			rec("after", cfgPlain, round, 10000, 0, 0, 10),
			rec("after", cfgNatural, round, 6000, 600, 55, 11),
			rec("after", cfg30, round, 4000, 900, 56, 13),
			rec("after", cfgAll, round, 2500, 1500, 58, 0),
		)
	}
	var b bytes.Buffer
	writeTable(&b, recs)
	out := b.String()
	for _, want := range []string{
		"| before | plain | 64 | 3 | 10000 |",
		"before, 100% escalation, c=64: escalated p99 **100 ms** against budget + 10 = 60.0 ms: not met",
		"after, 100% escalation, c=64: escalated p99 **58.0 ms** against budget + 10 = 60.0 ms: met",
		"before, natural escalation, c=64: not-escalated p99 / plain p99 in the same round **2.00×** (at most 1.20: not met",
		"after, natural escalation, c=64: not-escalated p99 / plain p99 in the same round **1.10×** (at most 1.20: met",
		"after, 30% escalation, c=64: not-escalated p99 / plain p99 in the same round **1.30×** (at most 1.20: not met",
		"| after | escalate-30 | 64 | 3 | 4000 |",
		"all-escalate, c=64, after against before: tier-2 throughput (answers decided by tier 2 per second) **300.00×** (at least 2: met; rounds: 300.00, 300.00, 300.00); requests/s 2.50×",
		"natural, c=64, after against before: throughput **2.00×** (rounds: 2.00, 2.00, 2.00), decided by tier 2 per second 2.00×",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// An open loop starts requests on its clock, whatever the answers: a
// server that takes 20 ms an answer still gets -rate requests a second
// from enough workers, and each is timed from when it was due.
func TestRunOpenLoop(t *testing.T) {
	const answer = 20 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(answer) // the slow server the open loop must not wait for
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	bodies := filepath.Join(dir, "bodies.jsonl")
	b, _ := json.Marshal(chatBody{Model: "m", Messages: []message{{Role: "user", Content: "x"}}})
	write(t, bodies, string(b)+"\n")
	out := filepath.Join(dir, "runs.jsonl")
	var stdout bytes.Buffer
	// 200 a second for a second, 16 workers: 4 busy at a time on average.
	if err := cmdRun([]string{"-url", srv.URL, "-bodies", bodies, "-c", "16", "-rate", "200", "-d", "1s", "-warmup", "0", "-out", out}, &stdout); err != nil {
		t.Fatal(err)
	}
	recs, err := readRecords(out)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v, %v", recs, err)
	}
	r := recs[0]
	if r.OK < 170 || r.OK > 210 || r.Rate != 200 {
		t.Errorf("%d answers at rate %v in 1 s, want about 200", r.OK, r.Rate)
	}
	if p50, ms := r.All.P50, float64(answer.Milliseconds()); p50 < ms || p50 > 10*ms {
		t.Errorf("p50 %v ms, want the server's %v and a little", p50, answer)
	}
}
