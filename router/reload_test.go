package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/pool"
)

func asError[T error](err error, target *T) bool { return errors.As(err, target) }

// TestReloadUnderLoad swaps configs while clients send a steady mix of
// JSON and streamed requests: no request may fail, streams begun on the old
// snapshot finish on it, and pools kept across reloads keep their state.
func TestReloadUnderLoad(t *testing.T) {
	a0 := newReplica(t, "m", "a0")
	a1 := newReplica(t, "m", "a1")
	b0 := newReplica(t, "m", "b0")
	cfgA := newConfig("", poolCfg("p", "m", a0.URL, a1.URL), poolCfg("keep", "k", a0.URL))
	cfgB := newConfig("", poolCfg("p", "m", b0.URL), poolCfg("keep", "k", a0.URL))
	h := newHarness(t, cfgA)
	keptPool := h.gw.snap.Load().byName["keep"].pool

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				stream := (w+i)%2 == 0
				body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
				req, _ := http.NewRequest("POST", h.URL+"/v1/chat/completions", strings.NewReader(body))
				if stream {
					req.Header.Set("X-Sim-Chunk-Delay", "2ms") // streams span reloads
				}
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || (stream && !strings.HasSuffix(string(b), "data: [DONE]\n\n")) {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d err %v body %.200s", resp.StatusCode, err, b))
					continue
				}
				ok.Add(1)
			}
		})
	}
	// At least 40 reloads, and on until 100 requests went through them: a
	// loaded machine serves fewer per reload.
	reloads := 0
	for deadline := time.Now().Add(30 * time.Second); reloads < 40 || ok.Load() < 100 && time.Now().Before(deadline); reloads++ {
		cfg := cfgA
		if reloads%2 == 0 {
			cfg = cfgB
		}
		served := ok.Load()
		if err := h.gw.Apply(cfg, nil); err != nil {
			t.Fatal(err)
		}
		// A request is served on the new config before the next reload.
		testenv.Wait(t, func() bool { return ok.Load() > served || failed.Load() > 0 }, "a request served after a reload")
	}
	// An invalid config is rejected and changes nothing.
	bad := newConfig("nope", poolCfg("p", "m", b0.URL))
	v := h.gw.Version()
	if err := h.gw.Apply(bad, nil); err == nil || h.gw.Version() != v {
		t.Fatalf("Apply(invalid) = %v, version %d -> %d", err, v, h.gw.Version())
	}
	// Requests go on after the rejected config.
	served := ok.Load()
	testenv.Wait(t, func() bool { return ok.Load() >= served+5 || failed.Load() > 0 }, "five requests served after the rejected config")
	stop()
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed across reloads; first: %v", failed.Load(), ok.Load()+failed.Load(), firstErr.Load())
	}
	if ok.Load() < 100 {
		t.Fatalf("only %d requests completed; the test did not exercise reloads", ok.Load())
	}
	if a0.Stats().Completed == 0 || b0.Stats().Completed == 0 {
		t.Fatalf("traffic did not follow the swaps: a0 %d b0 %d", a0.Stats().Completed, b0.Stats().Completed)
	}
	if h.gw.Version() != uint64(reloads+1) {
		t.Fatalf("version = %d after %d reloads, want %d", h.gw.Version(), reloads, reloads+1)
	}
	if got := h.gw.snap.Load().byName["keep"].pool; got != keptPool {
		t.Fatalf("an unchanged pool was rebuilt on reload, losing its health and breaker state")
	}
}

func TestApplyKeepsUnchangedPoolsAndRebuildsChanged(t *testing.T) {
	r := newReplica(t, "m", "r")
	h := newHarness(t, newConfig("", poolCfg("p", "m", r.URL)))
	p1 := h.gw.snap.Load().byName["p"].pool
	p1.Report(p1.Backends()[0], pool.Failure) // state that must survive an unrelated reload
	same := newConfig("", poolCfg("p", "m", r.URL), poolCfg("q", "n", r.URL))
	if err := h.gw.Apply(same, nil); err != nil {
		t.Fatal(err)
	}
	if h.gw.snap.Load().byName["p"].pool != p1 {
		t.Fatal("unchanged pool p was rebuilt")
	}
	changed := newConfig("", func() pool.Config { c := poolCfg("p", "m", r.URL); c.Retry.Attempts = 1; return c }())
	if err := h.gw.Apply(changed, nil); err != nil {
		t.Fatal(err)
	}
	if h.gw.snap.Load().byName["p"].pool == p1 {
		t.Fatal("pool p kept its old object although its config changed")
	}
}

// Sessions are the gateway's, not a snapshot's: a conversation keeps its
// route across reloads, whatever they change of the session settings, and
// goes where its route goes now; a reload that removes the route ends the
// session (the next turn is decided on its own), and one that turns
// sessions off and on again finds it still there.
func TestReloadKeepsSessions(t *testing.T) {
	gen := newReplica(t, "llama", "gen")
	code := newReplica(t, "coder", "code")
	code2 := newReplica(t, "coder2", "code2")
	both := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL), poolCfg("code2", "coder2", code2.URL))
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "rebase", Class: "code", Score: 0.95}},
		Default: classifier.Scored{Class: "other", Score: 0.4}}
	const body = "routes: [{name: coding, when: {class: code}, pool: code}]\ndefault: general\nsession: {header: x-session-id, turns: 5}\nexplain: true\n"
	h := newHarness(t, both)
	apply := func(cfg *config.Config, rules string) {
		t.Helper()
		if err := h.gw.Apply(cfg, compileRules(t, cfg, tier1, rules)); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(text, want, reason string) {
		t.Helper()
		r := h.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"`+text+`"}]}`, "X-Session-Id", "conv-1")
		if r.status != 200 || r.header.Get("X-Sim-Replica") != want || r.header.Get("X-Triage-Reason") != reason {
			t.Fatalf("%q: %d from %q, reason %q; want %q, %q (%s)", text, r.status, r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Reason"), want, reason, r.body)
		}
	}
	apply(both, body)
	ask("how do I rebase", "code", "tier1_confident")
	apply(both, body+"# an edit\n") // nothing about sessions
	ask("now add tests", "code", "session")
	// Other settings, and the route's pool moved: the conversation
	// follows its route.
	apply(both, strings.NewReplacer("turns: 5", "turns: 6, size: 100", "pool: code", "pool: code2").Replace(body))
	ask("and docs?", "code2", "session")
	// Sessions off, then on again: still there.
	apply(both, strings.Replace(body, "session: {header: x-session-id, turns: 5}\n", "", 1))
	ask("and a changelog?", "gen", "default")
	apply(both, body)
	ask("and a release?", "code", "session")
	// The route and its pool gone: decided on its own, and the session
	// ended, so that the route coming back does not revive it.
	gone := newConfig("general", poolCfg("general", "llama", gen.URL))
	apply(gone, "routes: [{name: legal, when: {class: law}, pool: general}]\ndefault: general\nsession: {header: x-session-id, turns: 5}\nexplain: true\n")
	ask("and then?", "gen", "default")
	apply(both, body)
	ask("and now?", "gen", "default")
}
