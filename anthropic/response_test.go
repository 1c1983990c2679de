package anthropic

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestFromChat(t *testing.T) {
	for _, tc := range []struct {
		name, model, in, want string
	}{
		{"text", "claude",
			`{"id":"chatcmpl-1","model":"pool","choices":[{"index":0,"message":{"role":"assistant","content":"Hi!"},"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`,
			`{"id":"msg_chatcmpl-1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"Hi!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":7,"output_tokens":2}}`},
		{"model from upstream, id kept", "",
			`{"id":"msg_x","model":"pool","choices":[{"message":{"content":"a"},"finish_reason":"length"}]}`,
			`{"id":"msg_x","type":"message","role":"assistant","model":"pool","content":[{"type":"text","text":"a"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"vllm stop string", "m",
			`{"id":"c","choices":[{"message":{"content":"a"},"finish_reason":"stop","stop_reason":"END"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"a"}],"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":1,"output_tokens":1}}`},
		{"vllm stop token id is not a sequence", "m",
			`{"id":"c","choices":[{"message":{"content":"a"},"finish_reason":"stop","stop_reason":128009}]}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"a"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"tool calls", "m",
			`{"id":"c","choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},{"type":"function","function":{"name":"noargs","arguments":""}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},{"type":"tool_use","id":"toolu_1","name":"noargs","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4}}`},
		{"text and tool", "m",
			`{"id":"c","choices":[{"message":{"content":"Let me check.","tool_calls":[{"id":"t","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"t","name":"f","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"content filter, empty", "m",
			`{"id":"c","choices":[{"message":{"content":""},"finish_reason":"content_filter"}]}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[],"stop_reason":"refusal","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, e := FromChat([]byte(tc.in), tc.model)
			if e != nil {
				t.Fatalf("error %d %s: %s", e.Status, e.Type, e.Message)
			}
			sameJSON(t, got, tc.want)
		})
	}
}

func TestFromChatErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"not JSON", `{"choices":`, "not a chat completion"},
		{"no choices", `{"id":"c","choices":[]}`, "no choices"},
		{"bad arguments", `{"choices":[{"message":{"tool_calls":[{"id":"t","function":{"name":"f","arguments":"{\"a\":"}}]}}]}`, `"f"`},
		{"arguments not an object", `{"choices":[{"message":{"tool_calls":[{"id":"t","function":{"name":"f","arguments":"[1]"}}]}}]}`, `"f"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, e := FromChat([]byte(tc.in), "m")
			if e == nil {
				t.Fatalf("no error; got %s", out)
			}
			if e.Status != 502 || e.Type != TypeAPI || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %d %s %q", e.Status, e.Type, e.Message)
			}
		})
	}
}

func TestFromOpenAIError(t *testing.T) {
	for _, tc := range []struct {
		status         int
		body, typ, msg string
	}{
		{400, `{"error":{"message":"bad temp","type":"invalid_request_error","param":null,"code":null}}`, TypeInvalidRequest, "bad temp"},
		{401, `{"error":{"message":"no key"}}`, TypeAuthentication, "no key"},
		{403, `{}`, TypePermission, "Forbidden"},
		{404, `{"object":"error","message":"The model x does not exist.","type":"NotFoundError","param":null,"code":404}`, TypeNotFound, "The model x does not exist."},
		{413, `not json`, TypeTooLarge, "Request Entity Too Large"},
		{429, `{"error":"slow down"}`, TypeRateLimit, "slow down"},
		{500, `{"error":{"message":"boom","type":"server_error"}}`, TypeAPI, "boom"},
		{503, ``, TypeAPI, "Service Unavailable"},
		{529, `{"error":{"message":"busy"}}`, TypeOverloaded, "busy"},
		{422, `{"message":"unprocessable"}`, TypeInvalidRequest, "unprocessable"},
		{599, ``, TypeAPI, "upstream error"},
	} {
		e := FromOpenAIError(tc.status, []byte(tc.body))
		if e.Status != tc.status || e.Type != tc.typ || e.Message != tc.msg {
			t.Errorf("FromOpenAIError(%d, %s) = %+v, want %s %q", tc.status, tc.body, e, tc.typ, tc.msg)
		}
	}
	e := &Error{Status: 400, Type: TypeInvalidRequest, Message: "a \"b\"\n"}
	sameJSON(t, e.Body(), `{"type":"error","error":{"type":"invalid_request_error","message":"a \"b\"\n"}}`)
}

// FuzzFromChat holds the response decoder to encoding/json: whatever the
// replica sends, FromChat never panics; it translates exactly the
// documents encoding/json reads as a well-typed chat completion with a
// choice, and what it reads from them is what encoding/json reads.
func FuzzFromChat(f *testing.F) {
	for _, s := range []string{
		`{"id":"c1","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi \u00e9"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
		`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls","stop_reason":null}]}`,
		`{"choices":[{"message":{"content":"x"},"finish_reason":"stop","stop_reason":"END"},{"message":{"content":"second"}}]}`,
		`{"choices":[{"message":{"content":1}}]}`,
		`{"choices":null}`, `[]`, `{"choices":[null]}`, `{"usage":{"prompt_tokens":1.5},"choices":[{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, e := FromChat(body, "")
		var ref struct {
			ID      string `json:"id"`
			Model   string `json:"model"`
			Choices []*struct {
				Message *struct {
					Content   *string `json:"content"`
					ToolCalls []*struct {
						ID       string `json:"id"`
						Function *struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		// encoding/json matches keys without regard to case; the decoder
		// (like the replicas' own JSON) does not. Compare only where
		// that cannot matter.
		if bytes.ContainsFunc(body, func(r rune) bool { return r >= 'A' && r <= 'Z' || r == '\\' }) {
			return
		}
		refErr := json.Unmarshal(body, &ref)
		if refErr == nil {
			// stop_reason may be a number or a string; anything else fails both.
			var sr struct {
				Choices []struct {
					StopReason any `json:"stop_reason"`
				} `json:"choices"`
			}
			_ = json.Unmarshal(body, &sr)
			for _, c := range sr.Choices {
				switch c.StopReason.(type) {
				case nil, string, float64:
				default:
					return // an object or array there: the decoder skips it as encoding/json would not read it
				}
			}
		}
		if refErr != nil || len(ref.Choices) == 0 {
			if e == nil {
				t.Fatalf("translated what encoding/json refuses (%v): %s -> %s", refErr, body, out)
			}
			return
		}
		if e != nil {
			if strings.Contains(e.Message, "arguments") {
				return // tool arguments that are not an object: refused by design
			}
			t.Fatalf("refused a chat completion encoding/json reads: %s: %s", e.Message, body)
		}
		var got struct {
			Content []struct {
				Type, Text, Name string
				Input            json.RawMessage
			} `json:"content"`
			Usage struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("output is not JSON: %v: %s", err, out)
		}
		c := ref.Choices[0]
		want := []string{}
		if c != nil && c.Message != nil {
			if c.Message.Content != nil && *c.Message.Content != "" {
				want = append(want, "text:"+*c.Message.Content)
			}
			for _, tc := range c.Message.ToolCalls {
				name := ""
				if tc != nil && tc.Function != nil {
					name = tc.Function.Name
				}
				want = append(want, "tool_use:"+name)
			}
		}
		have := []string{}
		for _, b := range got.Content {
			if b.Type == "text" {
				have = append(have, "text:"+b.Text)
			} else {
				have = append(have, b.Type+":"+b.Name)
			}
		}
		if strings.Join(have, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("content %q, encoding/json reads %q: %s", have, want, body)
		}
		if ref.Usage != nil && (got.Usage.InputTokens != ref.Usage.PromptTokens || got.Usage.OutputTokens != ref.Usage.CompletionTokens) {
			t.Fatalf("usage %+v, encoding/json reads %+v", got.Usage, *ref.Usage)
		}
	})
}
