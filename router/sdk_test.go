package router

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestOpenAISDK drives the gateway with the official OpenAI Go SDK, the way
// users will: unchanged client code, base URL pointed at triage.
func TestOpenAISDK(t *testing.T) {
	rep := newReplica(t, "llama-3.1-8b", "gen-0")
	pc := poolCfg("general", "llama-3.1-8b", rep.URL)
	pc.Aliases = []string{"gpt-4o-mini"}
	h := newHarness(t, newConfig("general", pc))
	client := openai.NewClient(option.WithBaseURL(h.URL+"/v1/"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello there")}

	t.Run("chat", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if c.Model != "llama-3.1-8b" || !strings.HasPrefix(c.Choices[0].Message.Content, "[gen-0]") || c.Usage.TotalTokens == 0 {
			t.Fatalf("completion = model %q content %q usage %+v", c.Model, c.Choices[0].Message.Content, c.Usage)
		}
		if auth := rep.LastRequest().Header.Get("Authorization"); auth != "" {
			t.Fatalf("the client's key reached the upstream: %q", auth)
		}
	})

	t.Run("chat stream", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-4o-mini", Messages: msgs,
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		stream.Close()
		if chunks < 4 || !strings.HasPrefix(acc.Choices[0].Message.Content, "[gen-0]") || acc.Usage.TotalTokens == 0 {
			t.Fatalf("stream: %d chunks, content %q, usage %+v", chunks, acc.Choices[0].Message.Content, acc.Usage)
		}
	})

	t.Run("chat stream without usage", func(t *testing.T) {
		// The gateway asks the replica for the usage and drops that
		// chunk: the SDK sees the stream it asked for, whole.
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			c := stream.Current()
			if len(c.Choices) == 0 || c.JSON.Usage.Valid() {
				t.Fatalf("a chunk the client did not ask for: %s", c.RawJSON())
			}
			acc.AddChunk(c)
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		stream.Close()
		if !strings.HasPrefix(acc.Choices[0].Message.Content, "[gen-0]") || acc.Choices[0].FinishReason != "stop" || acc.Usage.TotalTokens != 0 {
			t.Fatalf("content %q finish %q usage %+v", acc.Choices[0].Message.Content, acc.Choices[0].FinishReason, acc.Usage)
		}
		if body := string(rep.LastRequest().Body); !strings.Contains(body, `"include_usage":true`) {
			t.Fatalf("the replica was not asked for usage: %s", body)
		}
	})

	t.Run("stream cut mid-way is an error", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs},
			option.WithHeader("X-Sim-Drop-After", "2"))
		for stream.Next() {
		}
		if stream.Err() == nil {
			t.Fatal("the SDK saw a cut stream as complete")
		}
		stream.Close()
	})

	t.Run("completions", func(t *testing.T) {
		c, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:  "llama-3.1-8b",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Text == "" {
			t.Fatalf("completion = %+v", c)
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		e, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "llama-3.1-8b",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Data) != 2 || len(e.Data[0].Embedding) == 0 {
			t.Fatalf("embeddings = %+v", e)
		}
	})

	t.Run("models", func(t *testing.T) {
		var ids []string
		iter := client.Models.ListAutoPaging(ctx)
		for iter.Next() {
			ids = append(ids, iter.Current().ID)
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(ids, ",") != "gpt-4o-mini,llama-3.1-8b" {
			t.Fatalf("models = %v", ids)
		}
	})

	t.Run("errors surface as SDK errors", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs},
			option.WithJSONSet("stream", "yes"))
		var apiErr *openai.Error
		if err == nil || !asError(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "stream" {
			t.Fatalf("err = %v", err)
		}
	})
}
