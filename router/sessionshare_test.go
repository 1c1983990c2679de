package router

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/tenancy"
)

// TestSessionsSharedAcrossReplicas: three gateway replicas share a real
// Redis; a conversation whose first turn one replica routed with
// confidence keeps that route on whichever replica takes its vaguer later
// turns, as it would on one replica.
func TestSessionsSharedAcrossReplicas(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	gen := newReplica(t, "llama", "gen")
	code := newReplica(t, "coder", "code")
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "HTTP server", Class: "code", Score: 0.95}},
		Default: classifier.Scored{Class: "other", Score: 0.5}}
	var gws []*harness
	for range 3 {
		cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL))
		cfg.Access.Redis = tenancy.RedisConfig{Addr: addr, Timeout: 200 * time.Millisecond}
		set := compileRules(t, cfg, tier1, "window: {user_turns: 1}\nroutes: [{name: coding, when: {class: code}, pool: code}]\ndefault: general\nsession: {turns: 5}\n")
		h := newHarness(t, cfg)
		if err := h.gw.Apply(cfg, set); err != nil {
			t.Fatal(err)
		}
		gws = append(gws, h)
	}
	// Every replica caught up before the first turn is recorded.
	waitCaughtUp(t, gws)

	for c := range 5 { // five conversations, each turn on the next replica
		msgs := `{"role":"system","content":"conversation ` + string(rune('a'+c)) + `"},{"role":"user","content":"Write a Go HTTP server"}`
		for i, next := range []string{"", "now add TLS", "and tests?", "thanks, and a Dockerfile?"} {
			if next != "" {
				msgs += `,{"role":"assistant","content":"Here you go."},{"role":"user","content":"` + next + `"}`
			}
			h := gws[(c+i)%3]
			var r reply
			// The turn before was recorded by another replica a Redis
			// round trip ago: a client's next turn comes far later.
			testenv.Wait(t, func() bool {
				r = h.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[`+msgs+`]}`)
				return r.header.Get("X-Sim-Replica") == "code" || i == 0
			}, "the session learned")
			if r.status != 200 || r.header.Get("X-Sim-Replica") != "code" {
				t.Fatalf("conversation %d turn %d (%q) on replica %d: %d from %q, reason %q", c, i+1, next, (c+i)%3, r.status, r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Reason"))
			}
			if i > 0 && r.header.Get("X-Triage-Reason") != "session" {
				t.Fatalf("turn %d: reason %q", i+1, r.header.Get("X-Triage-Reason"))
			}
		}
	}
	learned := uint64(0)
	for _, h := range gws {
		learned += h.gw.share.learned.Load()
	}
	if learned == 0 {
		t.Fatal("no replica learned a session from another")
	}
	// A conversation no replica routed with confidence is not held.
	if r := gws[1].do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"and tests?"}]}`); r.header.Get("X-Sim-Replica") != "gen" {
		t.Fatalf("a new conversation went to %q", r.header.Get("X-Sim-Replica"))
	}
}

// TestResponsesSharedAcrossReplicas: a Responses answer made through one
// gateway replica is read, and its chain continued, through another: the
// replicas share where each answer lives.
func TestResponsesSharedAcrossReplicas(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	gen0 := newReplica(t, "llama", "gen-0")
	gen1 := newReplica(t, "llama", "gen-1")
	var gws []*harness
	for range 2 {
		cfg := newConfig("general", poolCfg("general", "llama", gen0.URL, gen1.URL))
		cfg.Access.Redis = tenancy.RedisConfig{Addr: addr, Timeout: 200 * time.Millisecond}
		gws = append(gws, newHarness(t, cfg))
	}
	waitCaughtUp(t, gws)
	for i := range 4 {
		r := gws[0].do(t, "POST", "/v1/responses", `{"model":"llama","input":"hi"}`)
		id := responseID([]byte(r.body))
		if r.status != 200 || id == "" {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		made := r.header.Get("X-Sim-Replica")
		var got reply
		testenv.Wait(t, func() bool {
			got = gws[1].do(t, "GET", "/v1/responses/"+id, "")
			return got.status == 200
		}, "the other gateway learning the response")
		if got.header.Get("X-Sim-Replica") != made {
			t.Fatalf("turn %d: read from %q, made on %q", i, got.header.Get("X-Sim-Replica"), made)
		}
		next := gws[1].do(t, "POST", "/v1/responses", `{"model":"llama","input":"more","previous_response_id":"`+id+`"}`)
		if next.status != 200 || next.header.Get("X-Sim-Replica") != made {
			t.Fatalf("turn %d: the chain went to %q (made on %q): %d %s", i, next.header.Get("X-Sim-Replica"), made, next.status, next.body)
		}
	}
}

// TestShareReachesReplicaStartedLater: a gateway replica started after
// a session was recorded and a Responses answer made on another (a
// replica restarted, a rolling deploy, a scale-up) knows both once it has
// caught up, without a turn of either passing through it first.
func TestShareReachesReplicaStartedLater(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	gen := newReplica(t, "llama", "gen")
	code := newReplica(t, "coder", "code")
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "HTTP server", Class: "code", Score: 0.95}},
		Default: classifier.Scored{Class: "other", Score: 0.5}}
	start := func() *harness {
		cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL))
		cfg.Access.Redis = tenancy.RedisConfig{Addr: addr, Timeout: 200 * time.Millisecond}
		set := compileRules(t, cfg, tier1, "window: {user_turns: 1}\nroutes: [{name: coding, when: {class: code}, pool: code}]\ndefault: general\nsession: {header: x-session-id, turns: 5}\n")
		h := newHarness(t, cfg)
		if err := h.gw.Apply(cfg, set); err != nil {
			t.Fatal(err)
		}
		return h
	}
	first := start()
	waitCaughtUp(t, []*harness{first})
	if r := first.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"Write a Go HTTP server"}]}`, "X-Session-Id", "s-1"); r.header.Get("X-Sim-Replica") != "code" {
		t.Fatalf("the session's first turn went to %q", r.header.Get("X-Sim-Replica"))
	}
	r := first.do(t, "POST", "/v1/responses", `{"model":"llama","input":"hi"}`)
	id := responseID([]byte(r.body))
	if r.status != 200 || id == "" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	// Both are in Redis before the second replica starts.
	testenv.Wait(t, func() bool { return len(first.gw.share.out) == 0 && first.gw.share.appended.Load() >= 2 }, "the first replica's share written")

	later := start()
	waitCaughtUp(t, []*harness{later})
	if loc, ok := later.gw.responses.get(id); !ok || loc.replica == "" {
		t.Fatalf("a replica started later does not know response %s: %+v", id, loc)
	}
	if r := later.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"and tests?"}]}`, "X-Session-Id", "s-1"); r.header.Get("X-Sim-Replica") != "code" || r.header.Get("X-Triage-Reason") != "session" {
		t.Fatalf("the session's next turn on a replica started later: %q, reason %q", r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Reason"))
	}
}

// TestShareLearnsWhateverTheRules: a replica learns the others' sessions
// into its own store whatever the rules in effect, so one whose rules keep
// no sessions yet (or none at all: a replica reads the backlog while it
// starts) keeps the conversation on its route once a reload turns them on.
func TestShareLearnsWhateverTheRules(t *testing.T) {
	addr, _, _ := testenv.Redis(t)
	gen := newReplica(t, "llama", "gen")
	code := newReplica(t, "coder", "code")
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "HTTP server", Class: "code", Score: 0.95}},
		Default: classifier.Scored{Class: "other", Score: 0.5}}
	const routes = "routes: [{name: coding, when: {class: code}, pool: code}]\ndefault: general\n"
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL))
	cfg.Access.Redis = tenancy.RedisConfig{Addr: addr, Timeout: 200 * time.Millisecond}
	start := func(rules string) *harness {
		h := newHarness(t, cfg)
		if err := h.gw.Apply(cfg, compileRules(t, cfg, tier1, rules)); err != nil {
			t.Fatal(err)
		}
		return h
	}
	first := start(routes + "session: {header: x-session-id}\n")
	waitCaughtUp(t, []*harness{first})
	if r := first.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"Write a Go HTTP server"}]}`, "X-Session-Id", "s-1"); r.header.Get("X-Sim-Replica") != "code" {
		t.Fatalf("the session's first turn went to %q", r.header.Get("X-Sim-Replica"))
	}
	testenv.Wait(t, func() bool { return len(first.gw.share.out) == 0 && first.gw.share.appended.Load() >= 1 }, "the first replica's session written")

	later := start(routes) // no sessions
	waitCaughtUp(t, []*harness{later})
	if err := later.gw.Apply(cfg, compileRules(t, cfg, tier1, routes+"session: {header: x-session-id}\n")); err != nil {
		t.Fatal(err)
	}
	if r := later.do(t, "POST", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"and tests?"}]}`, "X-Session-Id", "s-1"); r.header.Get("X-Sim-Replica") != "code" || r.header.Get("X-Triage-Reason") != "session" {
		t.Fatalf("the next turn, sessions turned on after the replica learned: %q, reason %q", r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Reason"))
	}
}

// TestShareOutlastsRedisOutage: what a replica records while Redis is
// down (restarting) reaches the other replicas once it is back, instead
// of being dropped with the call that failed.
func TestShareOutlastsRedisOutage(t *testing.T) {
	addr, stop, start := testenv.Redis(t)
	gen0 := newReplica(t, "llama", "gen-0")
	var gws []*harness
	for range 2 {
		cfg := newConfig("general", poolCfg("general", "llama", gen0.URL))
		cfg.Access.Redis = tenancy.RedisConfig{Addr: addr, Timeout: 50 * time.Millisecond}
		gws = append(gws, newHarness(t, cfg))
	}
	waitCaughtUp(t, gws)
	stop()
	errs := gws[0].gw.redis.(*tenancy.RedisStore).Stats().Errors
	r := gws[0].do(t, "POST", "/v1/responses", `{"model":"llama","input":"hi"}`)
	id := responseID([]byte(r.body))
	if r.status != 200 || id == "" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	testenv.Wait(t, func() bool {
		return gws[0].gw.redis.(*tenancy.RedisStore).Stats().Errors > errs && len(gws[0].gw.share.out) == 0
	}, "the share's write to the stopped Redis failing")
	start()
	testenv.Wait(t, func() bool { _, ok := gws[1].gw.responses.get(id); return ok }, "the other replica learning the response made while Redis was down")
}

// waitCaughtUp waits until every gateway's share has read what Redis
// held when it started.
func waitCaughtUp(t *testing.T, gws []*harness) {
	t.Helper()
	for i, h := range gws {
		if h.gw.share == nil {
			t.Fatalf("gateway %d shares no sessions", i)
		}
		testenv.Receive(t, h.gw.share.caughtUp, "the share caught up with Redis")
	}
}

// TestChainWaitsForItsShare: with access control, a Responses chain
// continued through another replica before the answer's share has
// arrived (here: Redis stalled while it was made) waits for it rather
// than being refused as not found; one still unknown when Redis does not
// answer is refused with a 503 the client may retry, not a 404 that says
// the chain is gone; once Redis answers, the retry continues it.
func TestChainWaitsForItsShare(t *testing.T) {
	addr, pause, resume := testenv.RedisStalls(t)
	gen0 := newReplica(t, "llama", "gen-0")
	gen1 := newReplica(t, "llama", "gen-1")
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	auth := []string{"Authorization", "Bearer " + writeKeys(t, keys, "bravo")["bravo"]}
	var gws []*harness
	for range 2 {
		cfg := newConfig("general", poolCfg("general", "llama", gen0.URL, gen1.URL))
		cfg.Access = tenancy.Config{KeysFile: keys, Redis: tenancy.RedisConfig{Addr: addr, Timeout: 50 * time.Millisecond}}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		gws = append(gws, newHarness(t, cfg))
	}
	waitCaughtUp(t, gws)
	stalled := true
	defer func() {
		if stalled {
			resume()
		}
	}()
	create := func() (id, made string) {
		t.Helper()
		r := gws[0].do(t, "POST", "/v1/responses", `{"model":"llama","input":"hi"}`, auth...)
		id = responseID([]byte(r.body))
		if r.status != 200 || id == "" {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		return id, r.header.Get("X-Sim-Replica")
	}
	next := func(id string) reply {
		return gws[1].do(t, "POST", "/v1/responses", `{"model":"llama","input":"more","previous_response_id":"`+id+`"}`, auth...)
	}

	// Made while Redis is stalled, continued through the other replica,
	// which waits; Redis answers again meanwhile.
	pause()
	id, made := create()
	got := make(chan reply, 1)
	go func() { got <- next(id) }()
	testenv.Wait(t, func() bool { return gws[1].gw.responses.waiters() == 1 }, "the next turn waiting for the chain's share")
	resume()
	stalled = false
	if r := testenv.Receive(t, got, "the next turn"); r.status != 200 || r.header.Get("X-Sim-Replica") != made {
		t.Fatalf("the chain's next turn, continued while its share arrived: %d from %q (made on %q): %s", r.status, r.header.Get("X-Sim-Replica"), made, r.body)
	}

	// Redis stays stalled past the wait: 503 with Retry-After, in
	// OpenAI's shape; the retry once it answers continues the chain.
	pause()
	stalled = true
	id, made = create()
	r := next(id)
	if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, `"code":"responses_index_unavailable"`) {
		t.Fatalf("the next turn while Redis is stalled: %d, Retry-After %q: %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	resume()
	stalled = false
	testenv.Wait(t, func() bool { _, ok := gws[1].gw.responses.get(id); return ok }, "the share arriving once Redis answers")
	if r := next(id); r.status != 200 || r.header.Get("X-Sim-Replica") != made {
		t.Fatalf("the retry once Redis answers: %d from %q (made on %q): %s", r.status, r.header.Get("X-Sim-Replica"), made, r.body)
	}
}
