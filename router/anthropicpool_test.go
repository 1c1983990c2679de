package router

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/sim"

	"github.com/triagegw/triage/internal/testenv"
)

// anthropicReplica is triage sim speaking Anthropic's Messages API, as
// api.anthropic.com does, requiring key.
func anthropicReplica(t *testing.T, model, name, key string) *replica {
	t.Helper()
	s, err := sim.New(sim.Options{Model: model, Name: name, Chunks: 4, API: "anthropic", APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &replica{Server: s, URL: srv.URL}
}

// TestChatThroughAnthropicPool: an OpenAI client's chat completions, routed
// to a kind: anthropic pool, are translated to Messages and back, streams
// and tool calls included; the provider key comes from the environment.
func TestChatThroughAnthropicPool(t *testing.T) {
	t.Setenv("TEST_ANTHROPIC_KEY", "sk-ant-test")
	hosted := anthropicReplica(t, "claude-sonnet-4-5", "hosted", "sk-ant-test")
	pc := poolCfg("hosted", "claude-sonnet-4-5", hosted.URL)
	pc.Kind = pool.KindAnthropic
	pc.Replicas[0].APIKeyEnv = "TEST_ANTHROPIC_KEY"
	pc.ResolveSecrets()
	pc.Aliases = []string{"gpt-4o"}
	h := newHarness(t, newConfig("hosted", pc))
	client := openai.NewClient(option.WithBaseURL(h.URL+"/v1/"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello there")}

	t.Run("chat", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Message.Content == "" || c.Choices[0].FinishReason != "stop" || c.Usage.PromptTokens == 0 || c.Usage.CompletionTokens == 0 {
			t.Fatalf("completion %+v", c)
		}
		last := hosted.LastRequest()
		if last.Path != "/v1/messages" || last.Header.Get("X-Api-Key") != "sk-ant-test" || last.Header.Get("Anthropic-Version") == "" || last.Header.Get("Authorization") != "" {
			t.Fatalf("upstream got %s %v", last.Path, last.Header)
		}
		if b := string(last.Body); !strings.Contains(b, `"system":`) || !strings.Contains(b, `"max_tokens":4096`) || !strings.Contains(b, `"model":"claude-sonnet-4-5"`) {
			t.Fatalf("upstream body %s", b)
		}
		// Counted once the handler returns, which may be just after the
		// client has its answer: the next test reads the counter from here.
		testenv.Wait(t, func() bool { return promptTokens(t, h) >= float64(c.Usage.PromptTokens) }, "the completion's tokens counted")
	})

	t.Run("stream", func(t *testing.T) {
		before := promptTokens(t, h)
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: msgs,
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		stream.Close()
		if acc.Choices[0].Message.Content == "" || acc.Choices[0].FinishReason != "stop" || acc.Usage.CompletionTokens == 0 || acc.Usage.PromptTokens == 0 {
			t.Fatalf("accumulated %+v", acc.ChatCompletion)
		}
		// The gateway counts the stream's prompt tokens too, which
		// Messages reports only in its first event.
		// Counted once the handler returns, which may be just after the
		// client has read the stream's end.
		var after float64
		testenv.Wait(t, func() bool { after = promptTokens(t, h); return after != before }, "the stream's tokens counted")
		if after-before != float64(acc.Usage.PromptTokens) {
			t.Fatalf("prompt tokens counted %v, the stream reported %d", after-before, acc.Usage.PromptTokens)
		}
	})

	t.Run("tool call", func(t *testing.T) {
		tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
		})}
		for _, streamed := range []bool{false, true} {
			p := openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather in Paris?")}, Tools: tools}
			var msg openai.ChatCompletionMessage
			var finish string
			if streamed {
				s := client.Chat.Completions.NewStreaming(ctx, p)
				var acc openai.ChatCompletionAccumulator
				for s.Next() {
					acc.AddChunk(s.Current())
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				s.Close()
				msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
			} else {
				c, err := client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				msg, finish = c.Choices[0].Message, c.Choices[0].FinishReason
			}
			if finish != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" || !strings.Contains(msg.ToolCalls[0].Function.Arguments, `"city"`) {
				t.Fatalf("streamed %v: finish %q message %+v", streamed, finish, msg)
			}
			// The tool's result goes back; the hosted model answers in text.
			p.Messages = append(p.Messages, msg.ToParam(), openai.ToolMessage("18°C", msg.ToolCalls[0].ID))
			c, err := client.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if c.Choices[0].FinishReason != "stop" || c.Choices[0].Message.Content == "" {
				t.Fatalf("after the result: %+v", c.Choices[0])
			}
		}
	})

	t.Run("errors in OpenAI's shape", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			opts   []option.RequestOption
			status int
		}{
			{"upstream 429", []option.RequestOption{option.WithHeader("X-Sim-Status", "429")}, 429},
			{"temperature out of Anthropic's range", []option.RequestOption{option.WithJSONSet("temperature", 1.5)}, 400},
		} {
			_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: msgs}, tc.opts...)
			var apiErr *openai.Error
			if !asError(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Message == "" {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
	})

	t.Run("embeddings have no counterpart", func(t *testing.T) {
		r := h.do(t, "POST", "/v1/embeddings", `{"model":"gpt-4o","input":"x"}`)
		if msg, _, _ := openAIError(t, r.body); r.status != 400 || !strings.Contains(msg, `"hosted"`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})

	t.Run("models list what each may use", func(t *testing.T) {
		r := h.do(t, "GET", "/v1/models", "")
		if !strings.Contains(r.body, `"id":"gpt-4o","object":"model"`) || !strings.Contains(r.body, `"triage_apis":["chat.completions","messages"]`) {
			t.Fatalf("%s", r.body)
		}
	})

	t.Run("messages pass through natively", func(t *testing.T) {
		r := h.do(t, "POST", "/v1/messages", `{"model":"gpt-4o","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`, "anthropic-version", "2023-06-01")
		if r.status != 200 || !strings.Contains(r.body, `"type":"message"`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if b := string(hosted.LastRequest().Body); b != `{"model":"claude-sonnet-4-5","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}` {
			t.Fatalf("upstream body %s", b)
		}
	})
}

// promptTokens is the gateway's count of prompt tokens served by its pools.
func promptTokens(t *testing.T, h *harness) float64 {
	t.Helper()
	sum := 0.0
	for _, l := range strings.Split(scrape(t, h), "\n") {
		if strings.HasPrefix(l, "triage_tokens_total{") && strings.Contains(l, `kind="prompt"`) {
			f, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			sum += f
		}
	}
	return sum
}
