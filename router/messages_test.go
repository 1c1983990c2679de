package router

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/tenancy"
)

// TestAnthropicSDK drives /v1/messages with the official Anthropic Go SDK,
// as a coding agent pointed at triage would: the gateway translates to chat
// completions for the vLLM pool (triage sim) and back.
func TestAnthropicSDK(t *testing.T) {
	rep := newReplica(t, "llama-3.1-8b", "gen-0")
	pc := poolCfg("general", "llama-3.1-8b", rep.URL)
	pc.Aliases = []string{"claude-sonnet-4-5"}
	h := newHarness(t, newConfig("general", pc))
	client := anthropic.NewClient(option.WithBaseURL(h.URL), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 64,
		System:   []anthropic.TextBlockParam{{Text: "be brief"}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello there"))},
	}

	t.Run("message", func(t *testing.T) {
		m, err := client.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Content) != 1 || !strings.HasPrefix(m.Content[0].Text, "[gen-0]") || m.StopReason != anthropic.StopReasonEndTurn ||
			m.Usage.InputTokens == 0 || m.Usage.OutputTokens == 0 || m.Model != "llama-3.1-8b" || !strings.HasPrefix(m.ID, "msg_") {
			t.Fatalf("message = %+v", m)
		}
		last := rep.LastRequest()
		if last.Path != "/v1/chat/completions" {
			t.Fatalf("the replica was asked %s", last.Path)
		}
		var chat struct {
			Model     string `json:"model"`
			MaxTokens int    `json:"max_tokens"`
			Messages  []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(last.Body, &chat); err != nil {
			t.Fatal(err)
		}
		if chat.Model != "llama-3.1-8b" || chat.MaxTokens != 64 || len(chat.Messages) != 2 || chat.Messages[0].Role != "system" || chat.Messages[1].Role != "user" {
			t.Fatalf("the replica got %s", last.Body)
		}
		for _, k := range []string{"X-Api-Key", "Authorization"} {
			if v := last.Header.Get(k); v != "" {
				t.Fatalf("the client's key reached the upstream as %s: %q", k, v)
			}
		}
	})

	t.Run("stream", func(t *testing.T) {
		stream := client.Messages.NewStreaming(ctx, params)
		var acc anthropic.Message
		kinds := map[string]int{}
		for stream.Next() {
			ev := stream.Current()
			kinds[ev.Type]++
			if err := acc.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		stream.Close()
		if kinds["message_start"] != 1 || kinds["content_block_start"] != 1 || kinds["content_block_delta"] < 2 ||
			kinds["content_block_stop"] != 1 || kinds["message_delta"] != 1 || kinds["message_stop"] != 1 {
			t.Fatalf("events %v", kinds)
		}
		if len(acc.Content) != 1 || !strings.HasPrefix(acc.Content[0].Text, "[gen-0]") || acc.StopReason != anthropic.StopReasonEndTurn || acc.Usage.OutputTokens == 0 {
			t.Fatalf("accumulated %+v", acc)
		}
	})

	t.Run("stream cut mid-way is an error", func(t *testing.T) {
		stream := client.Messages.NewStreaming(ctx, params, option.WithHeader("X-Sim-Drop-After", "2"))
		for stream.Next() {
		}
		if stream.Err() == nil {
			t.Fatal("the SDK saw a cut stream as complete")
		}
		stream.Close()
	})

	t.Run("tool use", func(t *testing.T) {
		tool := anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
			Properties: map[string]any{"city": map[string]any{"type": "string"}},
			Required:   []string{"city"},
		}, "get_weather")
		p := params
		p.Tools = []anthropic.ToolUnionParam{tool}
		p.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("weather in Paris?"))}
		for _, stream := range []bool{false, true} {
			var m anthropic.Message
			if stream {
				s := client.Messages.NewStreaming(ctx, p)
				for s.Next() {
					if err := m.Accumulate(s.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				s.Close()
			} else {
				got, err := client.Messages.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				m = *got
			}
			var use *anthropic.ToolUseBlock
			for _, b := range m.Content {
				if v, ok := b.AsAny().(anthropic.ToolUseBlock); ok {
					use = &v
				}
			}
			if use == nil || use.Name != "get_weather" || m.StopReason != anthropic.StopReasonToolUse {
				t.Fatalf("stream %v: %+v", stream, m)
			}
			var in map[string]any
			if err := json.Unmarshal(use.Input, &in); err != nil || in["city"] == nil {
				t.Fatalf("stream %v: tool input %s", stream, use.Input)
			}
			// The result goes back; the model answers in text.
			p2 := p
			p2.Messages = append(append([]anthropic.MessageParam{}, p.Messages...), m.ToParam(),
				anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "18°C, sunny", false)))
			r, err := client.Messages.New(ctx, p2)
			if err != nil {
				t.Fatal(err)
			}
			if r.StopReason != anthropic.StopReasonEndTurn || len(r.Content) == 0 || r.Content[0].Text == "" {
				t.Fatalf("after the tool result: %+v", r)
			}
			if body := string(rep.LastRequest().Body); !strings.Contains(body, `"role":"tool"`) || !strings.Contains(body, `"tool_call_id":"`+use.ID+`"`) {
				t.Fatalf("the replica got %s", body)
			}
		}
	})

	t.Run("errors come back in Anthropic's shape", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			opts   []option.RequestOption
			status int
			typ    string
		}{
			{"no max_tokens", []option.RequestOption{option.WithJSONDel("max_tokens")}, 400, "invalid_request_error"},
			{"unknown block", []option.RequestOption{option.WithJSONSet("messages.0.content.0.type", "hologram")}, 400, "invalid_request_error"},
			{"upstream 404", []option.RequestOption{option.WithHeader("X-Sim-Status", "404")}, 404, "not_found_error"},
			{"upstream 429", []option.RequestOption{option.WithHeader("X-Sim-Status", "429")}, 429, "rate_limit_error"},
			{"tool_result without its tool_use", []option.RequestOption{option.WithJSONSet("messages.0.content.0", map[string]any{"type": "tool_result", "tool_use_id": "toolu_x", "content": "x"})}, 400, "invalid_request_error"},
			{"upstream 503", []option.RequestOption{option.WithHeader("X-Sim-Status", "503")}, 503, "overloaded_error"},
			{"upstream 400", []option.RequestOption{option.WithHeader("X-Sim-Status", "400")}, 400, "invalid_request_error"},
			{"bad version", []option.RequestOption{option.WithHeader("anthropic-version", "latest")}, 400, "invalid_request_error"},
		} {
			_, err := client.Messages.New(ctx, params, tc.opts...)
			var ae *anthropic.Error
			if !errors.As(err, &ae) || ae.StatusCode != tc.status {
				t.Fatalf("%s: err = %v", tc.name, err)
			}
			var body struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			if json.Unmarshal([]byte(ae.RawJSON()), &body); body.Type != "error" || body.Error.Type != tc.typ || body.Error.Message == "" {
				t.Fatalf("%s: body %s", tc.name, ae.RawJSON())
			}
		}
	})
}

// TestMessagesRouteBySubject: model "auto" on /v1/messages is decided by
// the same rules as chat completions, with the same explanation headers.
func TestMessagesRouteBySubject(t *testing.T) {
	gen := newReplica(t, "llama", "gen")
	code := newReplica(t, "coder", "code")
	legal := newReplica(t, "saul", "legal")
	cfg := newConfig("general", poolCfg("general", "llama", gen.URL), poolCfg("code", "coder", code.URL), poolCfg("legal", "saul", legal.URL))
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "rebase", Class: "code", Score: 0.93},
		{Contains: "deposit", Class: "law", Score: 0.9},
	}, Default: classifier.Scored{Class: "other", Score: 0.8}}
	set := compileRules(t, cfg, tier1, gatewayRules)
	h := newHarness(t, cfg)
	if err := h.gw.Apply(cfg, set); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ text, replica, route string }{
		{"how do I rebase onto main", "code", "coding"},
		{"my deposit was kept", "legal", "legal"},
		{"banana bread", "gen", "default"},
	} {
		for _, stream := range []string{"false", "true"} {
			r := h.do(t, "POST", "/v1/messages", `{"model":"auto","max_tokens":32,"stream":`+stream+`,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"`+tc.text+`"}]}]}`,
				"anthropic-version", "2023-06-01")
			if r.status != 200 || r.header.Get("X-Sim-Replica") != tc.replica || r.header.Get("X-Triage-Route") != tc.route {
				t.Fatalf("%q stream %s: status %d replica %q route %q: %s", tc.text, stream, r.status, r.header.Get("X-Sim-Replica"), r.header.Get("X-Triage-Route"), r.body)
			}
			if r.header.Get("Request-Id") == "" || r.header.Get("Request-Id") != r.header.Get("X-Request-Id") {
				t.Fatalf("request ids %v", r.header)
			}
			if stream == "true" {
				if !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") || !strings.HasPrefix(r.body, "event: message_start\n") ||
					!strings.HasSuffix(r.body, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") || strings.Contains(r.body, "[DONE]") {
					t.Fatalf("stream %q", r.body)
				}
			} else if !strings.Contains(r.body, `"type":"message"`) || r.header.Get("Content-Length") == "" {
				t.Fatalf("body %s, header %v", r.body, r.header)
			}
		}
	}
}

// TestMessagesAccess: x-api-key is the client's credential on
// /v1/messages, it never reaches the replica, and refusals come back in
// Anthropic's shape.
func TestMessagesAccess(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.jsonl")
	secrets := writeKeys(t, keys, "agent")
	cfg := accessConfig(t, keys, tenancy.Policy{Group: "*", Models: []string{"llama"}})
	h := newHarness(t, cfg)
	body := `{"model":"llama","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	if r := h.do(t, "POST", "/v1/messages", body, "x-api-key", secrets["agent"], "anthropic-version", "2023-06-01"); r.status != 200 || !strings.Contains(r.body, `"type":"message"`) {
		t.Fatalf("with x-api-key: %d %s", r.status, r.body)
	}
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	for _, tc := range []struct {
		body, key string
		status    int
		typ       string
	}{
		{body, "sk-triage-wrong", http.StatusUnauthorized, "authentication_error"},
		{body, "", http.StatusUnauthorized, "authentication_error"},
		{strings.Replace(body, "llama", "coder", 1), secrets["agent"], http.StatusForbidden, "permission_error"},
	} {
		r := h.do(t, "POST", "/v1/messages", tc.body, "x-api-key", tc.key, "anthropic-version", "2023-06-01")
		if e = struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}{}; json.Unmarshal([]byte(r.body), &e) != nil || r.status != tc.status || e.Type != "error" || e.Error.Type != tc.typ || e.Error.Message == "" {
			t.Fatalf("key %q: %d %s", tc.key, r.status, r.body)
		}
	}
}

// TestMessagesUntranslatableAnswer: a replica's answer that cannot become
// a Messages answer (a tool call whose arguments are not JSON) ends a
// stream with an error event, and a body with a 502 in Anthropic's shape;
// never a hang, a silent cut or a half message.
func TestMessagesUntranslatableAnswer(t *testing.T) {
	const badArgs = `{"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{not json"}}]}}]}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: "+badArgs+"\n\n")
			io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`+"\n\n")
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{not json"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, newConfig("general", poolCfg("general", "m", up.URL)))
	client := anthropic.NewClient(option.WithBaseURL(h.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: "m", MaxTokens: 16, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}

	_, err := client.Messages.New(context.Background(), params)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadGateway || !strings.Contains(ae.RawJSON(), `"api_error"`) {
		t.Fatalf("body: %v", err)
	}
	stream := client.Messages.NewStreaming(context.Background(), params)
	for stream.Next() {
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "JSON") {
		t.Fatalf("stream: %v", err)
	}
	stream.Close()
}
