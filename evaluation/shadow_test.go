package evaluation

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/shadow"
)

func shadowLine(t *testing.T, at time.Time, live, cand rules.Decision, us1, us2 float64) string {
	t.Helper()
	b, err := json.Marshal(shadow.Record{Time: at, RequestID: "r", Model: "auto",
		Live: shadow.Side{Decision: live, Version: "v1", Micros: us1}, Shadow: shadow.Side{Decision: cand, Version: "v2", Micros: us2}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestReadShadowLog(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	code := rules.Decision{Pool: "code", Route: "coding", Class: "code", Score: 0.9, Tier: 1, Reason: rules.ReasonTier1Confident}
	lawLow := rules.Decision{Pool: "general", Class: "law", Score: 0.55, Tier: 1, Reason: rules.ReasonBelowFloor}
	lawT2 := rules.Decision{Pool: "legal", Route: "legal", Class: "law", Score: 0.8, Tier: 2, Reason: rules.ReasonBelowFloor}
	explicit := rules.Decision{Pool: "general", Reason: rules.ReasonRule}
	var log strings.Builder
	log.WriteString(shadowLine(t, t0.Add(time.Second), code, code, 3, 4))
	log.WriteString(shadowLine(t, t0, lawLow, lawT2, 2, 9000))
	log.WriteString(shadowLine(t, t0.Add(2*time.Second), explicit, explicit, 1, 1))
	log.WriteString("\n{\"time\":\"2026-11-30T12:00:03Z\",\"live\":{\"po") // a torn last line
	r, err := ReadShadowLog(strings.NewReader(log.String()))
	if err != nil {
		t.Fatal(err)
	}
	if r.N != 3 || r.Skipped != 1 || !r.From.Equal(t0) || !r.To.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("n %d skipped %d from %v to %v", r.N, r.Skipped, r.From, r.To)
	}
	if r.Differ != 1 || r.PoolAgreement != 2.0/3 || r.ClassAgreement != 1 {
		t.Fatalf("differ %d pool agreement %v class agreement %v", r.Differ, r.PoolAgreement, r.ClassAgreement)
	}
	if r.Live.Escalation != 1.0/3 || r.Shadow.Tier2Rate != 1.0/3 || r.Live.Tier2Rate != 0 || r.Live.Versions["v1"] != 3 || r.Shadow.Reasons[rules.ReasonBelowFloor] != 1 {
		t.Fatalf("sides %+v %+v", r.Live, r.Shadow)
	}
	if r.Shadow.Latency.P99 != 9000 || r.Live.Latency.P50 != 2 {
		t.Fatalf("latency %+v %+v", r.Live.Latency, r.Shadow.Latency)
	}
	c := r.Counterfactual
	at := func(a, b string) int {
		i, j := -1, -1
		for k, l := range c.Labels {
			if l == a {
				i = k
			}
			if l == b {
				j = k
			}
		}
		return c.Counts[i][j]
	}
	if strings.Join(c.Labels, ",") != "code,general,legal" || at("general", "legal") != 1 || at("general", "general") != 1 || at("code", "code") != 1 {
		t.Fatalf("counterfactual %+v", c)
	}
	var page bytes.Buffer
	if err := WriteShadowHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "Routing counterfactual", "0.667", "below_floor"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if _, err := ReadShadowLog(strings.NewReader("not json\n")); err == nil || !strings.Contains(err.Error(), "no shadow decisions") {
		t.Fatalf("a log of garbage: %v", err)
	}
}
