package sim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const weatherTool = `{"type":"function","function":{"name":"get_weather","description":"the weather",
	"parameters":{"type":"object","properties":{"unit":{"type":"string","enum":["celsius","fahrenheit"]},"city":{"type":"string"},"days":{"type":"integer"}},"required":["city","unit"]}}}`
const timeTool = `{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"},"precise":{"type":"boolean"}}}}}`

type chatToolReply struct {
	ID      string `json:"id"`
	Choices []struct {
		Message struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// TestChatToolCall: a chat request with tools is answered with a call to
// the named function, else the first, whose arguments follow its schema;
// with text when tool_choice is none or the last message is a tool result.
func TestChatToolCall(t *testing.T) {
	const user = `{"role":"user","content":"what is the weather"}`
	tests := []struct {
		name     string
		body     string
		function string // "": a text answer
		args     string
	}{
		{"first tool", `{"tools":[` + weatherTool + `,` + timeTool + `],"messages":[` + user + `]}`, "get_weather", `{"city":"sim","unit":"celsius"}`},
		{"auto", `{"tool_choice":"auto","tools":[` + weatherTool + `],"messages":[` + user + `]}`, "get_weather", `{"city":"sim","unit":"celsius"}`},
		{"required", `{"tool_choice":"required","tools":[` + timeTool + `,` + weatherTool + `],"messages":[` + user + `]}`, "get_time", `{"zone":"sim","precise":true}`},
		{"named", `{"tool_choice":{"type":"function","function":{"name":"get_time"}},"tools":[` + weatherTool + `,` + timeTool + `],"messages":[` + user + `]}`, "get_time", `{"zone":"sim","precise":true}`},
		{"no parameters", `{"tools":[{"type":"function","function":{"name":"ping"}}],"messages":[` + user + `]}`, "ping", `{}`},
		{"none", `{"tool_choice":"none","tools":[` + weatherTool + `],"messages":[` + user + `]}`, "", ""},
		{"null choice", `{"tool_choice":null,"tools":[` + weatherTool + `],"messages":[` + user + `]}`, "", ""},
		{"empty tools", `{"tools":[],"messages":[` + user + `]}`, "", ""},
		{"required without tools", `{"tool_choice":"required","tools":[],"messages":[` + user + `]}`, "", ""},
		{"after a tool result", `{"tools":[` + weatherTool + `],"messages":[` + user + `,
			{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"sunny"}]}`, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ts := newSim(t, Options{Name: "r1", Chunks: 5})
			resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", tc.body, nil)
			b := readAll(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var out chatToolReply
			if err := json.Unmarshal(b, &out); err != nil || len(out.Choices) != 1 {
				t.Fatalf("%v: %s", err, b)
			}
			c := out.Choices[0]
			if tc.function == "" {
				if c.FinishReason != "stop" || string(c.Message.Content) != `"[r1] lorem ipsum dolor sit"` || len(c.Message.ToolCalls) != 0 ||
					!strings.Contains(string(b), `"tool_calls":[]`) {
					t.Fatalf("want a text answer, got %s", b)
				}
				return
			}
			if c.FinishReason != "tool_calls" || string(c.Message.Content) != "null" || c.Message.Role != "assistant" || len(c.Message.ToolCalls) != 1 {
				t.Fatalf("want one tool call, content null, finish_reason tool_calls; got %s", b)
			}
			call := c.Message.ToolCalls[0]
			if !strings.HasPrefix(call.ID, "chatcmpl-tool-") || call.Type != "function" || call.Function.Name != tc.function || call.Function.Arguments != tc.args {
				t.Errorf("tool call %+v, want %s(%s)", call, tc.function, tc.args)
			}
			if k := min(5, len(tc.args)); out.Usage.CompletionTokens != k || out.Usage.TotalTokens != out.Usage.PromptTokens+k {
				t.Errorf("usage %+v, want %d completion tokens (the argument fragments)", out.Usage, k)
			}
			if st := s.Stats(); st != (Stats{Requests: 1, Completed: 1}) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestChatToolCallStream: as vLLM streams a call: the role chunk, a chunk
// naming the function with empty arguments, the arguments in fragments,
// the finish chunk, the usage chunk.
func TestChatToolCallStream(t *testing.T) {
	_, ts := newSim(t, Options{Chunks: 4})
	body := `{"stream":true,"stream_options":{"include_usage":true},"tools":[` + weatherTool + `],"messages":[{"role":"user","content":"weather?"}]}`
	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", body, nil)
	defer resp.Body.Close()
	events, err := readEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// role, name, 4 fragments, finish, usage, [DONE]
	if len(events) != 9 || events[8] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	if !strings.Contains(events[0], `"delta":{"role":"assistant","content":""}`) {
		t.Errorf("role chunk %s", events[0])
	}
	type chunk struct {
		ID      string `json:"id"`
		Choices []struct {
			Delta        map[string]json.RawMessage `json:"delta"`
			FinishReason *string                    `json:"finish_reason"`
		} `json:"choices"`
	}
	var head chunk
	if err := json.Unmarshal([]byte(events[1]), &head); err != nil || len(head.Choices) != 1 {
		t.Fatalf("%s: %v", events[1], err)
	}
	var calls []map[string]any
	if err := json.Unmarshal(head.Choices[0].Delta["tool_calls"], &calls); err != nil || len(calls) != 1 || len(head.Choices[0].Delta) != 1 {
		t.Fatalf("name chunk %s: want a delta with tool_calls only", events[1])
	}
	id, _ := calls[0]["id"].(string)
	fn, _ := calls[0]["function"].(map[string]any)
	if !strings.HasPrefix(id, "chatcmpl-tool-") || calls[0]["type"] != "function" || calls[0]["index"] != float64(0) ||
		fn["name"] != "get_weather" || fn["arguments"] != "" || len(fn) != 2 {
		t.Errorf("name chunk %s", events[1])
	}
	var args strings.Builder
	for _, ev := range events[2:6] {
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason != nil {
			t.Fatalf("fragment %s: %v", ev, err)
		}
		var frag []struct {
			ID       *string        `json:"id"`
			Index    *int           `json:"index"`
			Function map[string]any `json:"function"`
		}
		if err := json.Unmarshal(c.Choices[0].Delta["tool_calls"], &frag); err != nil || len(frag) != 1 ||
			frag[0].ID != nil || frag[0].Index == nil || *frag[0].Index != 0 || len(frag[0].Function) != 1 {
			t.Fatalf("fragment %s: want tool_calls [{index 0, function {arguments}}]", ev)
		}
		args.WriteString(frag[0].Function["arguments"].(string))
	}
	if args.String() != `{"city":"sim","unit":"celsius"}` {
		t.Errorf("arguments %q", args.String())
	}
	if !strings.Contains(events[6], `"delta":{},"logprobs":null,"finish_reason":"tool_calls"`) {
		t.Errorf("finish chunk %s", events[6])
	}
	if !strings.Contains(events[7], `"choices":[]`) || !strings.Contains(events[7], `"completion_tokens":4`) {
		t.Errorf("usage chunk %s", events[7])
	}

	// A drop counts the fragments: after one, the stream is cut.
	resp = post(t, context.Background(), ts.URL+"/v1/chat/completions", body, map[string]string{"X-Sim-Drop-After": "1"})
	defer resp.Body.Close()
	events, err = readEvents(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(events) != 3 {
		t.Fatalf("dropped stream: events %q (%v), want role, name and one fragment", events, err)
	}
}

func TestChatToolValidation(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"x"}]`
	tests := []struct {
		name, body, msg string
	}{
		{"function without name", `{"tools":[{"type":"function","function":{"parameters":{}}}],` + user + `}`, "tools.0.function.name: Field required"},
		{"name not a string", `{"tools":[{"type":"function","function":{"name":5}}],` + user + `}`, "tools.0.function.name"},
		{"tool without function", `{"tools":[{"type":"function"}],` + user + `}`, "tools.0.function: Field required"},
		{"tool of another type", `{"tools":[{"type":"retrieval","function":{"name":"f"}}],` + user + `}`, "tools.0.type"},
		{"tools not a list", `{"tools":{"type":"function"},` + user + `}`, "tools: Input should be a valid list"},
		{"parameters not an object", `{"tools":[{"type":"function","function":{"name":"f","parameters":[]}}],` + user + `}`, "tools.0.function.parameters"},
		{"choice without tools", `{"tool_choice":"auto",` + user + `}`, "When using `tool_choice`, `tools` must be set."},
		{"unknown choice", `{"tool_choice":"always","tools":[` + weatherTool + `],` + user + `}`, "Invalid value for `tool_choice`"},
		{"named choice without name", `{"tool_choice":{"type":"function","function":{}},"tools":[` + weatherTool + `],` + user + `}`, "Expected field `name`"},
		{"named choice not a tool", `{"tool_choice":{"type":"function","function":{"name":"nope"}},"tools":[` + weatherTool + `],` + user + `}`, "does not match any of the specified `tools`"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ts := newSim(t, Options{})
			resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", tc.body, nil)
			checkAPIError(t, resp, 400, "BadRequestError", tc.msg)
			if st := s.Stats(); st != (Stats{Requests: 1}) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestArguments(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{``, `{}`},
		{`{}`, `{}`},
		{`{"type":"object"}`, `{}`},
		// Every property, in the schema's order, when none is required.
		{`{"type":"object","properties":{"s":{"type":"string"},"n":{"type":"number"},"i":{"type":"integer"},"b":{"type":"boolean"},"a":{"type":"array","items":{"type":"string"}},"o":{"type":"object"},"z":{"type":"null"}}}`,
			`{"s":"sim","n":1,"i":1,"b":true,"a":[],"o":{},"z":null}`},
		// The required ones, in the order required lists them.
		{`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"boolean"}},"required":["c","a","c"]}`, `{"c":true,"a":"sim"}`},
		{`{"properties":{"e":{"enum":[ "x", "y" ]},"k":{"const":{ "v": 2 }},"t":{"type":["null","integer"]},"u":{"anyOf":[{"type":"boolean"},{"type":"null"}]},"w":{}}}`,
			`{"e":"x","k":{"v":2},"t":1,"u":true,"w":"sim"}`},
		{`{"properties":{"quote\"d <name>":{"type":"string"}}}`, `{"quote\"d \u003cname\u003e":"sim"}`},
	} {
		got := arguments(json.RawMessage(tc.schema))
		if got != tc.want {
			t.Errorf("arguments(%s) = %s, want %s", tc.schema, got, tc.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("arguments(%s) = %s is not JSON", tc.schema, got)
		}
	}
	c := call{args: `{"ü":"sim"}`}
	for n := 1; n <= 13; n++ {
		frags := c.fragments(n)
		if len(frags) != min(n, 11) || strings.Join(frags, "") != c.args {
			t.Errorf("fragments(%d) = %q", n, frags)
		}
	}
}

// TestChatToolCallSDK: the OpenAI Go SDK reads the call, whole and
// streamed (its accumulator joins the fragments).
func TestChatToolCallSDK(t *testing.T) {
	_, ts := newSim(t, Options{Chunks: 3})
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what time is it in Paris")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name: "get_time",
			Parameters: openai.FunctionParameters{
				"type":       "object",
				"properties": map[string]any{"zone": map[string]any{"type": "string"}},
				"required":   []string{"zone"},
			},
		})},
	}
	c, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	calls := c.Choices[0].Message.ToolCalls
	if c.Choices[0].FinishReason != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_time" || calls[0].Function.Arguments != `{"zone":"sim"}` {
		t.Fatalf("completion %s", c.RawJSON())
	}

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	var finished *openai.FinishedChatCompletionToolCall
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = &tc
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	calls = acc.Choices[0].Message.ToolCalls
	if acc.Choices[0].FinishReason != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_time" ||
		calls[0].Function.Arguments != `{"zone":"sim"}` || !strings.HasPrefix(calls[0].ID, "chatcmpl-tool-") {
		t.Fatalf("accumulated %+v", acc.Choices[0])
	}
	if finished == nil || finished.Name != "get_time" || finished.Arguments != `{"zone":"sim"}` {
		t.Errorf("JustFinishedToolCall %+v", finished)
	}

	// Answering the call's result gets text.
	params.Messages = append(params.Messages, c.Choices[0].Message.ToParam(), openai.ToolMessage("12:00", calls[0].ID))
	c, err = client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if c.Choices[0].FinishReason != "stop" || len(c.Choices[0].Message.ToolCalls) != 0 || !strings.HasPrefix(c.Choices[0].Message.Content, "[test-model]") {
		t.Fatalf("after the tool result: %s", c.RawJSON())
	}
}
