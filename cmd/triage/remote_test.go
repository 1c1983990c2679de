package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// embeddingsServer serves POST /v1/embeddings as an OpenAI-compatible
// engine does, its vectors from the local ONNX encoder m: the remote
// encoder's engine, with the very encoder the heads were trained on. fail,
// when it returns true, makes the engine answer 503; hang, when it returns
// true, makes it answer nothing until the client has gone.
func embeddingsServer(t *testing.T, m *onnx.Model, fail, hang func() bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if r.URL.Path != "/v1/embeddings" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Model != m.Manifest().Name {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		if hang != nil && hang() {
			<-r.Context().Done()
			return
		}
		if fail != nil && fail() {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		out := struct {
			Object string `json:"object"`
			Data   []item `json:"data"`
		}{Object: "list"}
		for i, text := range req.Input {
			v, err := m.Features(r.Context(), text, nil)
			if err != nil {
				http.Error(w, `{"error":{"message":"encoder failed"}}`, http.StatusInternalServerError)
				return
			}
			out.Data = append(out.Data, item{i, v})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// remoteSetup loads the default heads' tier-2 encoder locally, serves it
// as an engine, and writes a gateway config whose rules (the repository's
// rules.yaml) take tier 2 from that engine; local is the same config with
// tier 2 in process.
func remoteSetup(t *testing.T, fail, hang func() bool, tier2 string) (local, remote *config.Config) {
	t.Helper()
	heads, models := defaultHeadsOrSkip(t)
	if !onnx.Available() {
		t.Skip("a build without the ONNX runtime (the ort tag): no local encoder to compare with")
	}
	testenv.Models(t, "use-int8/encoder.json", "ort/libonnxruntime.so.1")
	h, err := classifier.LoadHeads(heads)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := onnx.Load(h, models, onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { enc.Close() })
	srv := embeddingsServer(t, enc.Model, fail, hang)
	return remoteConfigs(t, heads, models, srv.URL, enc.Manifest().Name, tier2)
}

// remoteConfigs writes two gateway configs on the repository's
// triage.yaml and rules.yaml with the given heads: local has tier 2 in
// process, remote takes it from the engine at url serving model; tier2,
// when set, replaces the rules' tier2 line first.
func remoteConfigs(t *testing.T, heads, models, url, model, tier2 string) (local, remote *config.Config) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(), "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	base := strings.Replace(string(src), "heads: models/heads/subjects", "heads: "+heads, 1)
	if tier2 != "" {
		base = replaceLine(t, base, "tier2:", tier2)
	}
	remoteRules := replaceLine(t, base, "tier2:", strings.Replace(lineOf(base, "tier2:"), "tier2: {",
		"tier2: {encoder: {url: "+url+", model: "+model+", dims: 512, pooling: none}, ", 1))
	dir := t.TempDir()
	gw, err := os.ReadFile(filepath.Join(repoRoot(), "triage.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	load := func(name, rulesText string) *config.Config {
		if err := os.WriteFile(filepath.Join(dir, name+".rules.yaml"), []byte(rulesText), 0o644); err != nil {
			t.Fatal(err)
		}
		g := strings.Replace(string(gw), "rules: rules.yaml", "rules: "+name+".rules.yaml", 1) + "\nmodels_dir: " + models + "\n"
		p := filepath.Join(dir, name+".triage.yaml")
		if err := os.WriteFile(p, []byte(g), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	return load("local", base), load("remote", remoteRules)
}

func lineOf(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func replaceLine(t *testing.T, s, prefix, with string) string {
	t.Helper()
	l := lineOf(s, prefix)
	if l == "" {
		t.Fatalf("no line starting %q", prefix)
	}
	return strings.Replace(s, l, with, 1)
}

// TestRemoteTier2SameDecisions: on a sample of dev, the rules decide the
// same with tier 2 served by an engine over /v1/embeddings as with it in
// process, for every text: same encoder, same heads.
func TestRemoteTier2SameDecisions(t *testing.T) {
	localCfg, remoteCfg := remoteSetup(t, nil, nil, "")
	sameDecisions(t, localCfg, remoteCfg, 8)
}

// sameDecisions checks that the two configs' rules decide the same on
// every every-th line of dev.
func sameDecisions(t *testing.T, localCfg, remoteCfg *config.Config, every int) {
	t.Helper()
	local, err := (&lifecycle.Models{Budget: rules.Offline}).Load(localCfg)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := (&lifecycle.Models{Budget: rules.Offline}).Load(remoteCfg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(devSet(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n, tier2 := 0, 0
	for i := 0; sc.Scan(); i++ {
		if i%every != 0 { // every 8th: 559 of dev's 4472
			continue
		}
		var ex struct{ Text string }
		if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		dl := local.Set.Decide(ctx, askAbout(local.Set, "auto", ex.Text, nil))
		dr := remote.Set.Decide(ctx, askAbout(remote.Set, "auto", ex.Text, nil))
		if dl.Route != dr.Route || dl.Pool != dr.Pool || dl.Reason != dr.Reason || dl.Tier != dr.Tier {
			t.Errorf("dev line %d: remote tier 2 decided %s/%s (%s, tier %d), local %s/%s (%s, tier %d)",
				i+1, dr.Route, dr.Pool, dr.Reason, dr.Tier, dl.Route, dl.Pool, dl.Reason, dl.Tier)
		}
		n++
		if dl.Tier == 2 {
			tier2++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if tier2 < 10 {
		t.Fatalf("only %d of %d decisions were tier 2's: the comparison says little", tier2, n)
	}
	t.Logf("%d texts, %d decided by tier 2: the same routes remote and local", n, tier2)
}

// TestRemoteTier2Faults: under the gateway's budget, an engine that
// answers nothing gives tier2_timeout when the budget ends; one that
// fails gives tier2_error, counted, and after the breaker's run of
// failures tier2_encoder_down without a call; the request goes on as the
// rules say for a tier-2 failure.
func TestRemoteTier2Faults(t *testing.T) {
	var failing, hanging atomic.Bool
	var calls atomic.Int64
	_, remoteCfg := remoteSetup(t, func() bool { calls.Add(1); return failing.Load() }, hanging.Load,
		"tier2: {enabled: true, budget: 500ms, escalate_at: 0.1, mix: 0.5, fallback_floor: 0.786, cache: 0}")
	rt, err := (&lifecycle.Models{}).Load(remoteCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Set.LoadTier2(); err != nil {
		t.Fatal(err)
	}
	// A text of dev tier 1 is unsure of: it escalates, and tier 2 decides.
	ctx := context.Background()
	text := ""
	f, err := os.Open(devSet(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); text == "" && sc.Scan(); {
		var ex struct{ Text string }
		if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
			t.Fatal(err)
		}
		if d := rt.Set.Decide(ctx, askAbout(rt.Set, "auto", ex.Text, nil)); d.Tier == 2 {
			text = ex.Text
		}
	}
	if text == "" {
		t.Fatal("no text of dev was decided by tier 2")
	}

	// Slow: the decision goes on at the budget's end.
	hanging.Store(true)
	slow, err := (&lifecycle.Models{}).Load(remoteCfg) // its own encoder and breaker
	if err != nil {
		t.Fatal(err)
	}
	if d := slow.Set.Decide(ctx, askAbout(slow.Set, "auto", text, nil)); d.Reason != rules.ReasonTier2Timeout || d.Pool == "" {
		t.Fatalf("engine answering nothing: Decide = %+v, want reason %s and a pool", d, rules.ReasonTier2Timeout)
	}
	hanging.Store(false)

	failing.Store(true)
	for i := range 5 { // the breaker's default run
		d := rt.Set.Decide(ctx, askAbout(rt.Set, "auto", text, nil))
		if d.Reason != rules.ReasonTier2Error || d.Pool == "" {
			t.Fatalf("failure %d: Decide = %+v, want reason %s and a pool", i, d, rules.ReasonTier2Error)
		}
	}
	before := calls.Load()
	d := rt.Set.Decide(ctx, askAbout(rt.Set, "auto", text, nil))
	if d.Reason != rules.ReasonTier2EncoderDown || d.Pool == "" {
		t.Fatalf("after 5 failures: Decide = %+v, want reason %s and a pool", d, rules.ReasonTier2EncoderDown)
	}
	if calls.Load() != before {
		t.Error("the engine was called while its breaker was open")
	}
	rs, ok, _, _ := rt.Set.Tier2Stats()
	if !ok || rs.Failed != 5 || rs.Refused != 1 || !rs.Down {
		t.Errorf("tier 2's stats = %+v (%v), want 5 failed, 1 refused, down", rs, ok)
	}
}
