package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/shadow"
	"github.com/triagegw/triage/split"
)

// TestSplitEndToEnd: triage serve loads a split's candidate rules and
// routes real requests on both arms, each conversation keeping its arm; a
// shadow beside the split names, in each record, the arm that served the
// request and that arm's rules version; a request with nothing sticky to
// assign it by stays outside the split until split.by_request opts into
// drawing it by request id, which the gateway warns about when it loads.
func TestSplitEndToEnd(t *testing.T) {
	root := repoRoot()
	models := testenv.Models(t, "tables/subjects-tier1.tbl") // the default heads' table, built by setup
	t.Parallel()
	gen := startSim(t, "m-gen", "gen")
	code := startSim(t, "m-code", "code")
	legal := startSim(t, "m-legal", "legal")
	dir := t.TempDir()
	rules := func(floor, pool, extra string) string {
		return "alias: auto\nheads: " + filepath.Join(root, "models", "heads", "subjects") + "\nclasses: {computer science: {floors: {tier1: " + floor + "}}}\n" +
			"routes:\n  - {name: coding, when: {class: computer science}, pool: " + pool + "}\ndefault: general\nsession: {header: x-session-id}\n" + extra
	}
	live := func(splitExtra string) string {
		return rules("0.6", "code", "split: {rules: candidate.yaml, weight: 0.5, log: split.jsonl, names: [control, next]"+splitExtra+"}\n"+
			"shadow: {rules: shadow.yaml, log: shadow.jsonl}\n")
	}
	rulesPath := filepath.Join(dir, "rules.yaml")
	writeFile(t, rulesPath, live(""))
	// The candidate sends computer science to legal; the shadow never
	// trusts tier 1 on it, so it would send it to general.
	writeFile(t, filepath.Join(dir, "candidate.yaml"), rules("0.6", "legal", ""))
	writeFile(t, filepath.Join(dir, "shadow.yaml"), rules("0.99999", "code", ""))
	cfgPath := filepath.Join(dir, "triage.yaml")
	writeFile(t, cfgPath, "models_dir: "+models+"\nrules: rules.yaml\n"+gatewayConfig("",
		poolSpec{name: "general", model: "m-gen", replicas: []*proc{gen}},
		poolSpec{name: "code", model: "m-code", replicas: []*proc{code}},
		poolSpec{name: "legal", model: "m-legal", replicas: []*proc{legal}}))
	gw := startGateway(t, cfgPath)
	c := newClient(t)
	if log := gw.stderr.String(); strings.Contains(log, "split.by_request") {
		t.Fatalf("a warning about split.by_request with it off:\n%s", log)
	}
	versionA := readyz(t, c, gw).RulesVersion

	const python = "Why does my Python list comprehension raise a TypeError?"
	send := func(path, body string, header map[string]string) reply {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.url(path), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{status: resp.StatusCode, header: resp.Header, body: b}
	}
	chatBody, _ := json.Marshal(map[string]any{"model": "auto", "messages": []map[string]string{{"role": "user", "content": python}}})
	completion, _ := json.Marshal(map[string]any{"model": "auto", "prompt": python})

	// Sixteen conversations, two requests each: each keeps its arm, and
	// each arm routes by its own rules.
	served := map[string]string{} // request id → arm
	arms := map[string]int{}
	for i := range 16 {
		sess := fmt.Sprintf("conversation-%d", i)
		first := ""
		for range 2 {
			r := send("/v1/chat/completions", string(chatBody), map[string]string{"X-Session-Id": sess})
			arm := r.header.Get("X-Triage-Arm")
			if first == "" {
				first = arm
			}
			want := map[string]string{"control": "code", "next": "legal"}[arm]
			if r.status != 200 || arm != first || want == "" || r.header.Get("X-Sim-Replica") != want || r.header.Get("X-Triage-Route") != "coding" {
				t.Fatalf("%s: status %d arm %q (first %q) replica %q route %q", sess, r.status, arm, first, r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Route"))
			}
			served[r.header.Get("X-Request-Id")] = arm
		}
		arms[first]++
	}
	if arms["control"] == 0 || arms["next"] == 0 {
		t.Fatalf("16 conversations all on one arm: %v", arms)
	}
	// A completion has no conversation: outside the split, on A's rules.
	r := send("/v1/completions", string(completion), nil)
	if r.status != 200 || r.header.Get("X-Triage-Arm") != "" || r.header.Get("X-Sim-Replica") != "code" {
		t.Fatalf("completion: status %d arm %q replica %q, want 200 on no arm, served by code", r.status, r.header.Get("X-Triage-Arm"), r.header.Get("X-Sim-Replica"))
	}
	unassigned := r.header.Get("X-Request-Id")

	readLines := func(name string, n int) [][]byte {
		t.Helper()
		var b []byte
		testenv.WaitWithin(t, 10*time.Second, fmt.Sprintf("%d lines in %s", n, name), func() (bool, string) {
			b, _ = os.ReadFile(filepath.Join(dir, name))
			return bytes.Count(b, []byte("\n")) >= n, string(b)
		})
		return bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	}
	// The split log: one line per request on an arm, with its arm's
	// rules version; A's is the version /readyz reports.
	version := map[string]string{} // arm → rules version
	for _, l := range readLines("split.jsonl", 32) {
		var rec split.Record
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatalf("split line %q: %v", l, err)
		}
		if served[rec.RequestID] != rec.Arm || rec.By != "session" || rec.Status != 200 {
			t.Fatalf("split record %+v; the response said arm %q", rec, served[rec.RequestID])
		}
		if v, ok := version[rec.Arm]; ok && v != rec.Version {
			t.Fatalf("arm %s logged rules versions %s and %s", rec.Arm, v, rec.Version)
		}
		version[rec.Arm] = rec.Version
	}
	if version["control"] != versionA || version["next"] == "" || version["next"] == versionA {
		t.Fatalf("split log versions %v; /readyz says A's is %s", version, versionA)
	}
	// The shadow log: every request, the live side named by the arm that
	// served it and its version.
	n := 0
	for _, l := range readLines("shadow.jsonl", 33) {
		var rec shadow.Record
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatalf("shadow line %q: %v", l, err)
		}
		wantArm, wantVersion, wantPool := served[rec.RequestID], version[served[rec.RequestID]], map[string]string{"control": "code", "next": "legal"}[served[rec.RequestID]]
		if rec.RequestID == unassigned {
			wantArm, wantVersion, wantPool = "", versionA, "code"
		}
		if rec.Arm != wantArm || rec.Live.Version != wantVersion || rec.Live.Pool != wantPool || rec.Shadow.Pool != "general" {
			t.Fatalf("shadow record %s: arm %q live version %s pool %s, shadow pool %s; want arm %q version %s pool %s, shadow general",
				rec.RequestID, rec.Arm, rec.Live.Version, rec.Live.Pool, rec.Shadow.Pool, wantArm, wantVersion, wantPool)
		}
		n++
	}
	if n != 33 {
		t.Fatalf("%d shadow records, want 33", n)
	}
	if m := scrape(t, c, gw); !strings.Contains(m, "\ntriage_split_unassigned_total 1\n") {
		t.Fatalf("metrics lack triage_split_unassigned_total 1:\n%s", m)
	}

	// by_request on: the gateway warns, and completions are drawn anew,
	// landing on both arms.
	replaceFile(t, rulesPath, live(", by_request: true"))
	testenv.WaitWithin(t, 10*time.Second, "a warning that split.by_request is not sticky", func() (bool, string) {
		log := gw.stderr.String()
		return strings.Contains(log, "split.by_request") && strings.Contains(log, "not sticky"), ""
	})
	drawn := map[string]int{}
	for range 32 {
		r := send("/v1/completions", string(completion), nil)
		arm := r.header.Get("X-Triage-Arm")
		if want := map[string]string{"control": "code", "next": "legal"}[arm]; r.status != 200 || want == "" || r.header.Get("X-Sim-Replica") != want {
			t.Fatalf("completion with by_request: status %d arm %q replica %q", r.status, arm, r.header.Get("X-Sim-Replica"))
		}
		drawn[arm]++
	}
	if drawn["control"] == 0 || drawn["next"] == 0 {
		t.Fatalf("32 completions drawn by request id all on one arm: %v", drawn)
	}
}
