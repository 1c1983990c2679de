package router

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/internal/logsink"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/sample"
)

// TestSampling: with sample.path set, routed requests are recorded off
// the request path into a file only its owner can read: the classifier's
// text redacted, the decision, the route's classes and tier 1's verdict,
// the rules version, no principal; the hourly cap holds, and requests not
// routed by subject are never sampled.
func TestSampling(t *testing.T) {
	gen := newReplica(t, "llama", "gen")
	code := newReplica(t, "coder", "code")
	legal := newReplica(t, "saul", "legal")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL), poolCfg("legal", "saul", legal.URL))
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "rebase", Class: "code", Score: 0.93},
		{Contains: "deposit", Class: "law", Score: 0.9},
	}, Default: classifier.Scored{Class: "other", Score: 0.8}}
	set := compileRules(t, cfg, tier1, gatewayRules)

	dir := t.TempDir()
	path := filepath.Join(dir, "samples", "prompts.jsonl")
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, nil, 0o644); err != nil { // made wider by hand: narrowed when opened
		t.Fatal(err)
	}
	cfg.Sample.Path, cfg.Sample.Rate, cfg.Sample.MaxPerHour = path, 1, 2

	hs := newHarness(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	files := logsink.NewFiles(ctx)
	t.Cleanup(func() { cancel(); files.Close() })
	hs.gw.sampleLog = files.OpenPrivate
	if err := hs.gw.Apply(cfg, set); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Errorf("sample file mode %v, want 0600", m)
	}

	for _, tc := range []struct{ model, text, replica string }{
		{"coder", "how do I rebase onto main", "code"}, // a pool's model: not routed by subject, not sampled
		{"auto", "my deposit, write to jane.doe@example.com or +44 20 7946 0958", "legal"},
		{"auto", "how do I rebase onto main", "code"},
		{"auto", "banana bread with my deposit", "legal"}, // past the hour's cap of 2
	} {
		r := hs.do(t, "POST", "/v1/chat/completions", `{"model":"`+tc.model+`","messages":[{"role":"user","content":"`+tc.text+`"}]}`)
		if r.status != 200 || r.header.Get("X-Sim-Replica") != tc.replica {
			t.Fatalf("%q: status %d replica %q, want %s", tc.text, r.status, r.header.Get("X-Sim-Replica"), tc.replica)
		}
	}
	var data []byte
	testenv.Wait(t, func() bool {
		data, _ = os.ReadFile(path)
		return strings.Count(string(data), "\n") >= 2
	}, "two sample records in the file")
	if strings.Contains(string(data), "jane") || strings.Contains(string(data), "7946") {
		t.Errorf("the sample file holds what redaction removes:\n%s", data)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records, want 2 (the cap):\n%s", len(lines), data)
	}
	var recs []sample.Record
	for _, l := range lines {
		var r sample.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		recs = append(recs, r)
	}
	if r := recs[0]; r.Text != "my deposit, write to [email] or [phone]" || r.Decision.Route != "legal" || r.Decision.Class != "law" ||
		strings.Join(r.RouteClasses, ",") != "law" || len(r.Tiers["1"]) == 0 || r.Tiers["1"][0].Class != "law" ||
		r.RulesVersion != set.Version() || r.Principal != "" || r.Time.Minute() != 0 {
		t.Errorf("first record %+v", r)
	}
	if r := recs[1]; r.Text != "how do I rebase onto main" || r.Decision.Route != "coding" {
		t.Errorf("second record %+v", r)
	}
	if c := hs.gw.sampler.Counts(); c.Written != 2 || c.Dropped != 0 || c.Capped != 1 {
		t.Errorf("counts %+v, want 2 written, 0 dropped, 1 capped", c)
	}
	m := hs.do(t, "GET", "/metrics", "")
	if !strings.Contains(m.body, `triage_samples_total{outcome="capped"} 1`) || !strings.Contains(m.body, `triage_samples_total{outcome="written"} 2`) {
		t.Errorf("/metrics lacks the sample counts:\n%s", grepLines(m.body, "triage_samples"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
