package router

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/triagegw/triage/router/pool"
)

// TestMessagesFieldsWithoutEquivalent drives /v1/messages with the official
// Anthropic SDK toward vllm and openai pools: what a pool has no
// equivalent for is refused with a 400 in Anthropic's shape naming the
// field, unless the pool sets drop_unsupported; a prefill is continued by
// vLLM (continue_final_message) and refused toward an openai pool even
// so; a stop sequence that matched comes back as stop_reason
// stop_sequence from vLLM, which names it.
func TestMessagesFieldsWithoutEquivalent(t *testing.T) {
	type target struct {
		alias, kind string
		drop        bool
		rep         *replica
	}
	var pools []pool.Config
	targets := map[string]*target{}
	for _, tg := range []*target{
		{alias: "claude-vllm", kind: pool.KindVLLM},
		{alias: "claude-vllm-drop", kind: pool.KindVLLM, drop: true},
		{alias: "claude-openai", kind: pool.KindOpenAI},
		{alias: "claude-openai-drop", kind: pool.KindOpenAI, drop: true},
	} {
		tg.rep = newReplica(t, "m-"+tg.alias, tg.alias)
		pc := poolCfg(tg.alias, "m-"+tg.alias, tg.rep.URL)
		pc.Kind, pc.DropUnsupported, pc.Aliases = tg.kind, tg.drop, []string{tg.alias}
		pools = append(pools, pc)
		targets[tg.alias] = tg
	}
	h := newHarness(t, newConfig("claude-vllm", pools...))
	client := anthropic.NewClient(aoption.WithBaseURL(h.URL), aoption.WithAPIKey("sk-client"), aoption.WithMaxRetries(0))
	ctx := context.Background()
	hello := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello there"))}
	prefill := append(hello[:1:1], anthropic.NewAssistantMessage(anthropic.NewTextBlock("The answer is")))

	// upstream is the chat request the pool's replica got last.
	upstream := func(t *testing.T, alias string) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(targets[alias].rep.LastRequest().Body, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		params anthropic.MessageNewParams
		opts   []aoption.RequestOption
		// refused is the field each alias refuses ("" serves it).
		refused map[string]string
		// sent is a field each alias that serves it gets, nil: none.
		sent map[string]any
	}{
		{
			name:    "thinking",
			params:  anthropic.MessageNewParams{MaxTokens: 2048, Messages: hello, Thinking: anthropic.ThinkingConfigParamOfEnabled(1024)},
			refused: map[string]string{"claude-vllm": "thinking", "claude-openai": "thinking"},
			sent:    map[string]any{"thinking": nil},
		},
		{
			name:    "top_k",
			params:  anthropic.MessageNewParams{MaxTokens: 64, Messages: hello},
			opts:    []aoption.RequestOption{aoption.WithJSONSet("top_k", 40)},
			refused: map[string]string{"claude-openai": "top_k"},
			sent:    map[string]any{"claude-vllm:top_k": 40.0, "claude-vllm-drop:top_k": 40.0, "claude-openai-drop:top_k": nil},
		},
		{
			name:    "stop_sequences",
			params:  anthropic.MessageNewParams{MaxTokens: 64, Messages: hello, StopSequences: []string{"ipsum"}},
			refused: map[string]string{"claude-openai": "stop_sequences"},
		},
		{
			name:    "server tool",
			params:  anthropic.MessageNewParams{MaxTokens: 64, Messages: hello},
			opts:    []aoption.RequestOption{aoption.WithJSONSet("tools", []any{map[string]any{"type": "web_search_20250305", "name": "web_search"}})},
			refused: map[string]string{"claude-vllm": "tools", "claude-vllm-drop": "tools", "claude-openai": "tools", "claude-openai-drop": "tools"},
		},
		{
			name:    "prefill",
			params:  anthropic.MessageNewParams{MaxTokens: 64, Messages: prefill},
			refused: map[string]string{"claude-openai": "messages", "claude-openai-drop": "messages"},
			sent:    map[string]any{"claude-vllm:continue_final_message": true, "claude-vllm:add_generation_prompt": false},
		},
	} {
		for _, alias := range []string{"claude-vllm", "claude-vllm-drop", "claude-openai", "claude-openai-drop"} {
			t.Run(tc.name+"/"+alias, func(t *testing.T) {
				p := tc.params
				p.Model = anthropic.Model(alias)
				m, err := client.Messages.New(ctx, p, tc.opts...)
				if field := tc.refused[alias]; field != "" {
					var ae *anthropic.Error
					if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.RawJSON(), `"invalid_request_error"`) ||
						!strings.Contains(ae.RawJSON(), `"message":"`+field+`: `) {
						t.Fatalf("err = %v, want a 400 invalid_request_error naming %s", err, field)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(m.Content) != 1 || m.Content[0].Text == "" {
					t.Fatalf("message %+v", m)
				}
				got := upstream(t, alias)
				for k, want := range tc.sent {
					a, field, scoped := strings.Cut(k, ":")
					if !scoped {
						field = a
					} else if a != alias {
						continue
					}
					if v, ok := got[field]; want == nil && ok || want != nil && v != want {
						t.Errorf("upstream %s = %v (present %v), want %v", field, v, ok, want)
					}
				}
				if tc.name == "stop_sequences" {
					if stop, _ := got["stop"].([]any); len(stop) != 1 || stop[0] != "ipsum" {
						t.Errorf("upstream stop = %v", got["stop"])
					}
					if strings.Contains(m.Content[0].Text, "ipsum") {
						t.Errorf("text %q holds the stop sequence", m.Content[0].Text)
					}
					// vLLM names the match; a real OpenAI server does not
					// (the sim standing in for one here does, being vLLM's).
					if targets[alias].kind == pool.KindVLLM && (m.StopReason != anthropic.StopReasonStopSequence || m.StopSequence != "ipsum") {
						t.Errorf("stop_reason %q stop_sequence %q, want stop_sequence ipsum", m.StopReason, m.StopSequence)
					}
				}
			})
		}
	}
}

// TestMessagesServerSideToAnthropicPool: what only Anthropic runs (here
// mcp_servers) is refused toward a chat-completions pool but reaches a
// kind: anthropic pool as the client sent it.
func TestMessagesServerSideToAnthropicPool(t *testing.T) {
	hosted := anthropicReplica(t, "claude-sonnet-4-5", "hosted", "")
	pa := poolCfg("hosted", "claude-sonnet-4-5", hosted.URL)
	pa.Kind = pool.KindAnthropic
	gen := newReplica(t, "llama", "gen")
	pv := poolCfg("general", "llama", gen.URL)
	h := newHarness(t, newConfig("general", pa, pv))
	client := anthropic.NewClient(aoption.WithBaseURL(h.URL), aoption.WithAPIKey("sk-client"), aoption.WithMaxRetries(0))
	mcp := aoption.WithJSONSet("mcp_servers", []any{map[string]any{"type": "url", "url": "https://mcp.example/sse", "name": "docs"}})
	p := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello there"))}}
	if _, err := client.Messages.New(context.Background(), p, mcp); err != nil {
		t.Fatalf("to the anthropic pool: %v", err)
	}
	if b := string(hosted.LastRequest().Body); !strings.Contains(b, `"mcp_servers"`) {
		t.Fatalf("the anthropic pool got %s, without mcp_servers", b)
	}
	p.Model = "llama"
	_, err := client.Messages.New(context.Background(), p, mcp)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.RawJSON(), `"message":"tools: `) {
		t.Fatalf("to the vllm pool: %v, want a 400 naming tools", err)
	}
}

// TestChatFieldsWithoutEquivalent drives a kind: anthropic pool with the
// official OpenAI SDK: vLLM's sampling extensions Messages lacks
// (repetition_penalty, min_p) are refused with a 400 in OpenAI's shape
// naming the field, unless the pool sets drop_unsupported; a stop string
// and an assistant prefill go through as Messages' own.
func TestChatFieldsWithoutEquivalent(t *testing.T) {
	strict := anthropicReplica(t, "claude-sonnet-4-5", "strict", "")
	lenient := anthropicReplica(t, "claude-haiku-4-5", "lenient", "")
	ps := poolCfg("strict", "claude-sonnet-4-5", strict.URL)
	ps.Kind, ps.Aliases = pool.KindAnthropic, []string{"gpt-strict"}
	pl := poolCfg("lenient", "claude-haiku-4-5", lenient.URL)
	pl.Kind, pl.Aliases, pl.DropUnsupported = pool.KindAnthropic, []string{"gpt-lenient"}, true
	h := newHarness(t, newConfig("strict", ps, pl))
	client := openai.NewClient(option.WithBaseURL(h.URL+"/v1/"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")}

	for _, field := range []string{"repetition_penalty", "min_p", "min_tokens"} {
		t.Run(field, func(t *testing.T) {
			v := any(1.3)
			if field != "repetition_penalty" {
				v = map[string]any{"min_p": 0.1, "min_tokens": 8}[field]
			}
			_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-strict", Messages: msgs}, option.WithJSONSet(field, v))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.HasPrefix(apiErr.Message, field+": ") || apiErr.Type != "invalid_request_error" {
				t.Fatalf("err = %v, want a 400 invalid_request_error naming %s", err, field)
			}
			c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-lenient", Messages: msgs}, option.WithJSONSet(field, v))
			if err != nil || c.Choices[0].Message.Content == "" {
				t.Fatalf("drop_unsupported: %v", err)
			}
			if b := string(lenient.LastRequest().Body); strings.Contains(b, field) {
				t.Fatalf("drop_unsupported: the upstream got %s", b)
			}
		})
	}

	t.Run("neutral values ask nothing", func(t *testing.T) {
		if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-strict", Messages: msgs},
			option.WithJSONSet("repetition_penalty", 1), option.WithJSONSet("min_p", 0)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stop", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-strict", Messages: msgs,
			Stop: openai.ChatCompletionNewParamsStopUnion{OfString: openai.String("ipsum")}})
		if err != nil {
			t.Fatal(err)
		}
		if c.Choices[0].FinishReason != "stop" || strings.Contains(c.Choices[0].Message.Content, "ipsum") || c.Choices[0].Message.Content == "" {
			t.Fatalf("finish %q content %q, want stop before the sequence", c.Choices[0].FinishReason, c.Choices[0].Message.Content)
		}
		var up struct {
			StopSequences []string `json:"stop_sequences"`
		}
		if err := json.Unmarshal(strict.LastRequest().Body, &up); err != nil || len(up.StopSequences) != 1 || up.StopSequences[0] != "ipsum" {
			t.Fatalf("upstream stop_sequences %v (%v)", up.StopSequences, err)
		}
	})

	t.Run("prefill", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-strict",
			Messages: append(msgs[:1:1], openai.AssistantMessage("The answer is"))})
		if err != nil || c.Choices[0].Message.Content == "" {
			t.Fatalf("prefill: %v", err)
		}
		var up struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(strict.LastRequest().Body, &up); err != nil || len(up.Messages) != 2 || up.Messages[1].Role != "assistant" {
			t.Fatalf("upstream messages %+v (%v): want the assistant turn last, for Messages to continue", up.Messages, err)
		}
	})
}
