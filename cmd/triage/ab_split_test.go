package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/split"
)

// TestABLogSplit: triage ab --log tells a split log from a shadow log and
// reports each arm: requests, routes, error rate, latency, tokens.
func TestABLogSplit(t *testing.T) {
	t0 := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range 10 {
		rec := split.Record{Time: t0.Add(time.Duration(i) * time.Second), Arm: "a", By: "principal", RequestID: "r", Version: "v1",
			Route: "coding", Pool: "code", Reason: "tier1_confident", Tier: 1, Class: "code", Status: 200,
			DurationMS: float64(10 + i), PromptTokens: 10, CompletionTokens: 20}
		if i%2 == 1 {
			rec.Arm, rec.Version, rec.Pool, rec.DurationMS = "b", "v2", "legal", float64(100+i)
			if i == 9 {
				rec.Status, rec.Route, rec.Pool = 502, "default", "general"
			}
		}
		if err := enc.Encode(&rec); err != nil {
			t.Fatal(err)
		}
	}
	b.WriteString("torn line\n")
	p := filepath.Join(t.TempDir(), "split.jsonl")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := runABLog(p, false, "", &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10 split requests", "(1 lines skipped)", "requests", "5 (50.0%)", "error rate (5xx)", "0.000", "0.200",
		"latency p50/p99 ms", "14.0/18.0", "105.0/109.0", "50/100", "coding 5", "coding 4, default 1", "legal 4, general 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("triage ab --log output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := runABLog(p, true, "", &out); err != nil {
		t.Fatal(err)
	}
	var rep evaluation.SplitReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	if rep.N != 10 || len(rep.Arms) != 2 || rep.Arms[0].Name != "a" || rep.Arms[1].ErrorRate != 0.2 || rep.Arms[1].Routes["default"] != 1 ||
		rep.Arms[0].TokensPerRequest != 30 || rep.Arms[1].LatencyMS.P50 != 105 {
		t.Fatalf("--json report %+v", rep)
	}
	if err := runABLog(p, false, filepath.Join(t.TempDir(), "x.html"), &out); err == nil || !strings.Contains(err.Error(), "--html") {
		t.Fatalf("--html on a split log: %v", err)
	}
}
