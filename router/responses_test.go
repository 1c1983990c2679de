package router

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/router/pool"
)

// TestResponsesSDK drives /v1/responses with the official OpenAI SDK's
// Responses client: routed by the subject of its input, passed through to
// vLLM's (here triage sim's) Responses API, and chained, read and deleted
// on the replica that holds the response.
func TestResponsesSDK(t *testing.T) {
	gen0 := newReplica(t, "llama", "gen-0")
	gen1 := newReplica(t, "llama", "gen-1")
	code := newReplica(t, "coder", "code")
	legal := newReplica(t, "saul", "legal")
	cfg := newConfig("general", poolCfg("general", "llama", gen0.URL, gen1.URL), poolCfg("code", "coder", code.URL), poolCfg("legal", "saul", legal.URL))
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "rebase", Class: "code", Score: 0.93},
		{Contains: "deposit", Class: "law", Score: 0.9},
	}, Default: classifier.Scored{Class: "other", Score: 0.8}}
	set := compileRules(t, cfg, tier1, gatewayRules)
	h := newHarness(t, cfg)
	if err := h.gw.Apply(cfg, set); err != nil {
		t.Fatal(err)
	}
	client := openai.NewClient(option.WithBaseURL(h.URL+"/v1/"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	ctx := context.Background()
	input := func(s string) responses.ResponseNewParamsInputUnion {
		return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
	}

	t.Run("create routes by subject", func(t *testing.T) {
		for _, tc := range []struct{ text, replica string }{
			{"how do I rebase onto main", "code"},
			{"my deposit was kept", "legal"},
		} {
			var hdr httpHeader
			r, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "auto", Input: input(tc.text)}, option.WithResponseInto(&hdr.resp))
			if err != nil {
				t.Fatal(err)
			}
			if got := hdr.resp.Header.Get("X-Sim-Replica"); got != tc.replica || !strings.HasPrefix(r.ID, "resp") || r.OutputText() == "" || r.Usage.InputTokens == 0 {
				t.Fatalf("%q: replica %q, response %+v", tc.text, got, r)
			}
			if hdr.resp.Header.Get("X-Triage-Route") == "" {
				t.Fatalf("no explanation headers: %v", hdr.resp.Header)
			}
		}
	})

	t.Run("stream, chain, retrieve, delete", func(t *testing.T) {
		stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "auto", Input: input("how do I rebase onto main")})
		var id, text string
		completed := false
		for stream.Next() {
			ev := stream.Current()
			switch ev.Type {
			case "response.created":
				id = ev.Response.ID
			case "response.output_text.delta":
				text += ev.Delta
			case "response.completed":
				completed = true
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		stream.Close()
		if id == "" || text == "" || !completed {
			t.Fatalf("stream: id %q text %q completed %v", id, text, completed)
		}
		// A follow-up about another subject stays with the chain's pool.
		var hdr httpHeader
		next, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "auto", Input: input("banana bread, and a deposit"),
			PreviousResponseID: openai.String(id)}, option.WithResponseInto(&hdr.resp))
		if err != nil {
			t.Fatal(err)
		}
		if hdr.resp.Header.Get("X-Sim-Replica") != "code" || hdr.resp.Header.Get("X-Triage-Reason") != "previous_response" {
			t.Fatalf("chained turn went to %q (%v)", hdr.resp.Header.Get("X-Sim-Replica"), hdr.resp.Header)
		}
		got, err := client.Responses.Get(ctx, next.ID, responses.ResponseGetParams{})
		if err != nil || got.ID != next.ID || got.OutputText() != next.OutputText() {
			t.Fatalf("retrieve: %v %+v", err, got)
		}
		if err := client.Responses.Delete(ctx, next.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Responses.Get(ctx, next.ID, responses.ResponseGetParams{}); !isStatus(err, 404) {
			t.Fatalf("after delete: %v", err)
		}
	})

	t.Run("a chain stays on its replica", func(t *testing.T) {
		// Two replicas serve the default pool; each keeps its own
		// responses, so every turn of a chain must reach the same one.
		prev := ""
		replica := ""
		for i := range 6 {
			p := responses.ResponseNewParams{Model: "llama", Input: input("banana bread")}
			if prev != "" {
				p.PreviousResponseID = openai.String(prev)
			}
			var hdr httpHeader
			r, err := client.Responses.New(ctx, p, option.WithResponseInto(&hdr.resp))
			if err != nil {
				t.Fatalf("turn %d: %v", i, err)
			}
			got := hdr.resp.Header.Get("X-Sim-Replica")
			if replica == "" {
				replica = got
			} else if got != replica {
				t.Fatalf("turn %d went to %s, the chain lives on %s", i, got, replica)
			}
			prev = r.ID
		}
	})

	t.Run("unknown id", func(t *testing.T) {
		if _, err := client.Responses.Get(ctx, "resp_unknown", responses.ResponseGetParams{}); !isStatus(err, 404) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestResponsesOwnedByTheirPrincipal: with access control, one tenant
// cannot read or delete another's stored response.
func TestResponsesOwnedByTheirPrincipal(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "alice", "bob")
	cfg := accessConfig(t, keys)
	h := newHarness(t, cfg)
	as := func(who string) *openai.Client {
		c := openai.NewClient(option.WithBaseURL(h.URL+"/v1/"), option.WithAPIKey(secrets[who]), option.WithMaxRetries(0))
		return &c
	}
	ctx := context.Background()
	r, err := as("alice").Responses.New(ctx, responses.ResponseNewParams{Model: "llama", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as("bob").Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); !isStatus(err, 404) {
		t.Fatalf("bob read alice's response: %v", err)
	}
	if err := as("bob").Responses.Delete(ctx, r.ID); !isStatus(err, 404) {
		t.Fatalf("bob deleted alice's response: %v", err)
	}
	if got, err := as("alice").Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); err != nil || got.ID != r.ID {
		t.Fatalf("alice: %v", err)
	}
}

// TestResponsesRefusedByAnthropicPools: a pool that speaks Messages has no
// Responses API; the client is told which pool, in OpenAI's shape.
func TestResponsesRefusedByAnthropicPools(t *testing.T) {
	rep := newReplica(t, "claude", "c")
	pc := poolCfg("hosted", "claude", rep.URL)
	pc.Kind = pool.KindAnthropic
	h := newHarness(t, newConfig("hosted", pc))
	r := h.do(t, "POST", "/v1/responses", `{"model":"claude","input":"hi"}`)
	msg, typ, _ := openAIError(t, r.body)
	if r.status != 400 || typ != "invalid_request_error" || !strings.Contains(msg, `"hosted"`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

func TestResponseIndexIsBounded(t *testing.T) {
	x := newResponseIndex(3)
	for _, id := range []string{"a", "b", "c", "d"} {
		x.add(id, responseLoc{pool: "p" + id})
	}
	if _, ok := x.get("a"); ok {
		t.Fatal("the oldest id was kept past the bound")
	}
	for _, id := range []string{"b", "c", "d"} {
		if loc, ok := x.get(id); !ok || loc.pool != "p"+id {
			t.Fatalf("%s: %v %v", id, loc, ok)
		}
	}
	x.remove("c")
	if _, ok := x.get("c"); ok || len(x.m) != 2 {
		t.Fatal("remove")
	}
	for _, id := range []string{"e", "f", "g", "h"} {
		x.add(id, responseLoc{pool: "p" + id})
	}
	for _, id := range []string{"b", "c", "d", "e"} {
		if _, ok := x.get(id); ok {
			t.Fatalf("%s was kept past the bound after the ring wrapped", id)
		}
	}
	if len(x.m) != 3 || len(x.ring) != 3 {
		t.Fatalf("%d ids indexed, %d slots: want 3 and 3", len(x.m), len(x.ring))
	}
	if cap(newResponseIndex(responseIndexSize).ring) != 0 {
		t.Fatal("an unused index holds slots")
	}
	if responseID([]byte(`{"id":"resp_abc","object":"response"`)) != "resp_abc" ||
		responseID([]byte("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\": \"resp_1\"")) != "resp_1" ||
		responseID([]byte(`{"id":"msg_1"}`)) != "" || responseID([]byte(`{"id":"resp_`)) != "" {
		t.Fatal("responseID")
	}
}

// An id removed and then added again lives in its new slot: the eviction
// of the slot that still names it must leave the new entry alone.
func TestResponseIndexReaddedIDKeepsItsNewSlot(t *testing.T) {
	x := newResponseIndex(3)
	for _, id := range []string{"a", "b", "c"} { // slots 0, 1, 2
		x.add(id, responseLoc{pool: "old"})
	}
	x.remove("b")                        // slot 1 still names "b"
	x.add("b", responseLoc{pool: "new"}) // "b" again: slot 0, evicting "a"
	x.add("d", responseLoc{pool: "pd"})  // slot 1, which names the old "b"
	if loc, ok := x.get("b"); !ok || loc.pool != "new" {
		t.Fatalf("b, added again, was dropped with its old slot: %v %v", loc, ok)
	}
	x.add("e", responseLoc{pool: "pe"}) // slot 2: evicts "c"
	if _, ok := x.get("b"); !ok {
		t.Fatal("b was dropped before its own slot came round")
	}
	x.add("f", responseLoc{pool: "pf"}) // slot 0: b's own
	if _, ok := x.get("b"); ok {
		t.Fatal("b outlived its own slot")
	}
	if len(x.m) != 3 {
		t.Fatalf("%d ids indexed, want 3", len(x.m))
	}
	// Removed, then added again while the ring's next slot still names it.
	x.remove("d")                        // slot 1 names "d", and is next
	x.add("d", responseLoc{pool: "new"}) // slot 1 again
	if loc, ok := x.get("d"); !ok || loc.pool != "new" {
		t.Fatalf("d, added again into the slot that named it, was dropped: %v %v", loc, ok)
	}
}

// httpHeader receives the raw response of an SDK call.
type httpHeader struct{ resp *http.Response }

func isStatus(err error, code int) bool {
	var e *openai.Error
	return errors.As(err, &e) && e.StatusCode == code
}
