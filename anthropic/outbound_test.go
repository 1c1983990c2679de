package anthropic

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/triagegw/triage/internal/jsonscan"
)

func TestChatToMessages(t *testing.T) {
	const hi = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, model string
		def         int64
		in, want    string
	}{
		{"minimal, default max_tokens", "", 512,
			`{"model":"gpt-4o",` + hi + `}`,
			`{"model":"gpt-4o","max_tokens":512,"messages":[{"role":"user","content":"hi"}]}`},
		{"model replaced, sampling, stop string, user", "claude-sonnet-4", 512,
			`{"model":"gpt-4o","max_tokens":7,"temperature":0.25,"top_p":1,"top_k":40,"stop":"END","user":"u1","stream":true,"stream_options":{"include_usage":true},"seed":3,"store":false,"metadata":{"a":"b"},"n":1,"logprobs":false,"frequency_penalty":0,"presence_penalty":0.0,"logit_bias":{},"response_format":{"type":"text"},"modalities":["text"],` + hi + `}`,
			`{"model":"claude-sonnet-4","max_tokens":7,"messages":[{"role":"user","content":"hi"}],"temperature":0.25,"top_p":1,"top_k":40,"stop_sequences":["END"],"stream":true,"metadata":{"user_id":"u1"}}`},
		{"max_completion_tokens wins, stop array, safety_identifier", "", 0,
			`{"model":"m","max_tokens":7,"max_completion_tokens":9,"stop":["a","\n\n"],"user":"u1","safety_identifier":"s1",` + hi + `}`,
			`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}],"stop_sequences":["a","\n\n"],"metadata":{"user_id":"s1"}}`},
		{"system and developer messages hoisted and kept apart", "", 1,
			`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"developer","content":[{"type":"text","text":"in French"},{"type":"text","text":""}]},{"role":"system","content":""}]}`,
			`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"be brief"},{"type":"text","text":"in French"}],"messages":[{"role":"user","content":"hi"}]}`},
		{"one system part is a block", "", 1,
			`{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"s"}]},{"role":"user","content":"hi"}]}`,
			`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hi"}]}`},
		{"images", "", 1,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBOR","detail":"high"}},{"type":"image_url","image_url":{"url":"https://x/y.jpg"}},{"type":"image_url","image_url":"HTTP://x/z.gif"}]}]}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}},{"type":"image","source":{"type":"url","url":"https://x/y.jpg"}},{"type":"image","source":{"type":"url","url":"HTTP://x/z.gif"}}]}]}`},
		{"tool round trip", "", 100,
			`{"model":"m",
			  "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}},{"type":"function","function":{"name":"noargs"}},{"type":"function","function":{"name":"untyped","parameters":{"properties":{}}}},{"type":"function","function":{"name":"empty","parameters":{}}}],
			  "tool_choice":"auto",
			  "messages":[
			    {"role":"user","content":"weather in Paris?"},
			    {"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{ \"city\" : \"Paris\" }"}},{"id":"call_2","type":"function","function":{"name":"noargs","arguments":""}}]},
			    {"role":"tool","tool_call_id":"call_1","content":"18C"},
			    {"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
			    {"role":"user","content":"thanks"}]}`,
			`{"model":"m","max_tokens":100,"messages":[
			    {"role":"user","content":"weather in Paris?"},
			    {"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},{"type":"tool_use","id":"call_2","name":"noargs","input":{}}]},
			    {"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"18C"},{"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"type":"text","text":"thanks"}]}],
			  "tools":[{"name":"get_weather","description":"Weather now","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},{"name":"noargs","input_schema":{"type":"object"}},{"name":"untyped","input_schema":{"type":"object","properties":{}}},{"name":"empty","input_schema":{"type":"object"}}],
			  "tool_choice":{"type":"auto"}}`},
		{"tool results lead the turn, empty result has no content", "", 1,
			`{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","tool_calls":[{"id":"t","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"also"},{"role":"tool","tool_call_id":"t","content":""}]}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"},{"type":"text","text":"also"}]}]}`},
		{"same side merged, empty messages dropped", "", 1,
			`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":""},{"role":"user","content":[{"type":"text","text":"b"}]},{"role":"assistant","content":"c"},{"role":"assistant","content":[{"type":"text","text":"d"},{"type":"refusal","refusal":"e"}]}]}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":[{"type":"text","text":"c"},{"type":"text","text":"d"},{"type":"text","text":"e"}]}]}`},
		{"tool_choice required, no parallel", "", 1,
			`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","parallel_tool_calls":false,` + hi + `}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any","disable_parallel_tool_use":true}}`},
		{"tool_choice function", "", 1,
			`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}},` + hi + `}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"}}`},
		{"tool_choice none takes no parallel flag", "", 1,
			`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none","parallel_tool_calls":false,` + hi + `}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"none"}}`},
		{"no parallel alone states auto", "", 1,
			`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":false,` + hi + `}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true}}`},
		{"tool_choice without tools", "", 1,
			`{"model":"m","tool_choice":"none","parallel_tool_calls":false,` + hi + `}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
		{"escapes survive", "", 1,
			"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\\\"\\\\\\/\\u0001\\u00e9\\u2028<>&\\ud83d\\ude00\"}]}",
			"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"q\\\"\\\\/\\u0001é\\u2028<>&\U0001F600\"}]}"},
		{"lone surrogates and bad UTF-8 repaired", "", 1,
			"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\\ud800b\\udc00\xffc\"}]}",
			"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\ufffdb\ufffd\ufffdc\"}]}"},
		{"raw values repaired too", "", 1,
			`{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","description":"\udc00"}}}],"messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"a\":\"\\ud800\"}"}}]},{"role":"tool","tool_call_id":"a","content":"x"}]}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{"a":"\ufffd"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"x"}]}],"tools":[{"name":"f","input_schema":{"type":"object","description":"\ufffd"}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, e := ChatToMessages([]byte(tc.in), tc.model, tc.def, false)
			if e != nil {
				t.Fatalf("error %d %s: %s", e.Status, e.Type, e.Message)
			}
			checkWire(t, got)
			sameJSON(t, got, tc.want)
		})
	}
}

func TestChatToMessagesErrors(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"hi"}]`
	const call = `{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	for _, tc := range []struct {
		name, in, field string
	}{
		{"not JSON", `{"model":"m",`, "not valid JSON"},
		{"not an object", `[1]`, "JSON object"},
		{"wrong type", `{"model":"m","temperature":"hot",` + user + `}`, "temperature"},
		{"no model", `{` + user + `}`, "model"},
		{"no max_tokens and no default", `{"model":"m",` + user + `}`, "max_tokens"},
		{"max_tokens zero", `{"model":"m","max_tokens":0,` + user + `}`, "max_tokens"},
		{"max_completion_tokens fraction", `{"model":"m","max_completion_tokens":1.5,` + user + `}`, "max_completion_tokens"},
		{"temperature above 1", `{"model":"m","max_tokens":1,"temperature":1.5,` + user + `}`, "temperature"},
		{"temperature negative", `{"model":"m","max_tokens":1,"temperature":-0.1,` + user + `}`, "temperature"},
		{"top_p above 1", `{"model":"m","max_tokens":1,"top_p":2,` + user + `}`, "top_p"},
		{"top_k fraction", `{"model":"m","max_tokens":1,"top_k":2.5,` + user + `}`, "top_k"},
		{"n", `{"model":"m","max_tokens":1,"n":2,` + user + `}`, "n:"},
		{"logprobs", `{"model":"m","max_tokens":1,"logprobs":true,` + user + `}`, "logprobs"},
		{"top_logprobs", `{"model":"m","max_tokens":1,"top_logprobs":3,` + user + `}`, "top_logprobs"},
		{"frequency_penalty", `{"model":"m","max_tokens":1,"frequency_penalty":0.5,` + user + `}`, "frequency_penalty"},
		{"presence_penalty", `{"model":"m","max_tokens":1,"presence_penalty":-1,` + user + `}`, "presence_penalty"},
		{"logit_bias", `{"model":"m","max_tokens":1,"logit_bias":{"50256":-100},` + user + `}`, "logit_bias"},
		{"json_schema", `{"model":"m","max_tokens":1,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}},` + user + `}`, "response_format"},
		{"json_object", `{"model":"m","max_tokens":1,"response_format":{"type":"json_object"},` + user + `}`, "response_format"},
		{"audio", `{"model":"m","max_tokens":1,"modalities":["text","audio"],` + user + `}`, "modalities"},
		{"audio output", `{"model":"m","max_tokens":1,"audio":{"voice":"alloy","format":"wav"},` + user + `}`, "audio"},
		{"reasoning_effort", `{"model":"m","max_tokens":1,"reasoning_effort":"high",` + user + `}`, "reasoning_effort"},
		{"web_search_options", `{"model":"m","max_tokens":1,"web_search_options":{},` + user + `}`, "web_search_options"},
		{"functions", `{"model":"m","max_tokens":1,"functions":[{"name":"f"}],` + user + `}`, "functions"},
		{"messages missing", `{"model":"m","max_tokens":1}`, "messages"},
		{"messages empty", `{"model":"m","max_tokens":1,"messages":[]}`, "messages"},
		{"only empty messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":""},{"role":"system","content":"s"}]}`, "messages"},
		{"role unknown", `{"model":"m","max_tokens":1,"messages":[{"role":"robot","content":"x"}]}`, "messages[0].role"},
		{"role function", `{"model":"m","max_tokens":1,"messages":[{"role":"function","name":"f","content":"x"}]}`, "messages[0].role"},
		{"role missing", `{"model":"m","max_tokens":1,"messages":[{"content":"x"}]}`, "messages[0].role"},
		{"user content missing", `{"model":"m","max_tokens":1,"messages":[{"role":"user"}]}`, "messages[0].content"},
		{"content number", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}`, "messages[0].content"},
		{"audio part", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`, "messages[0].content[0].type"},
		{"file part", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"file","file":{"file_id":"f"}}]}]}`, "messages[0].content[1].type"},
		{"image in assistant", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}]}`, "messages[0].content[0].type"},
		{"image ftp", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"image data not base64", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"image data no media type", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:;base64,abc"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"refusal in user", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"refusal","refusal":"no"}]}]}`, "messages[0].content[0].type"},
		{"arguments not JSON", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"a\":"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{"arguments not an object", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"[1]"}}]}]}`, "messages[1].tool_calls[0].function.arguments"},
		{"arguments trailing", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{} {}"}}]}]}`, "arguments"},
		{"tool call no id", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].id"},
		{"tool call no name", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].function.name"},
		{"custom tool call", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"custom","custom":{"name":"f","input":"x"}}]}]}`, "messages[0].tool_calls[0].type"},
		{"tool calls on user", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls"},
		{"function_call", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}}]}`, "messages[0].function_call"},
		{"tool result unmatched", `{"model":"m","max_tokens":1,"messages":[` + call + `,{"role":"tool","tool_call_id":"b","content":"x"}]}`, "messages[1].tool_call_id"},
		{"tool result before its call", `{"model":"m","max_tokens":1,"messages":[{"role":"tool","tool_call_id":"a","content":"x"},` + call + `]}`, "messages[0].tool_call_id"},
		{"tool result image", `{"model":"m","max_tokens":1,"messages":[` + call + `,{"role":"tool","tool_call_id":"a","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}]}`, "messages[1].content[0].type"},
		{"tool not function", `{"model":"m","max_tokens":1,"tools":[{"type":"custom","custom":{"name":"f"}}],` + user + `}`, "tools[0].type"},
		{"tool no function", `{"model":"m","max_tokens":1,"tools":[{"type":"function"}],` + user + `}`, "tools[0].function"},
		{"tool no name", `{"model":"m","max_tokens":1,"tools":[{"type":"function","function":{"parameters":{}}}],` + user + `}`, "tools[0].function.name"},
		{"tool parameters not object", `{"model":"m","max_tokens":1,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}],` + user + `}`, "tools[0].function.parameters"},
		{"tool_choice unknown", `{"model":"m","max_tokens":1,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"maybe",` + user + `}`, "tool_choice"},
		{"tool_choice allowed_tools", `{"model":"m","max_tokens":1,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{}},` + user + `}`, "tool_choice.type"},
		{"tool_choice function no name", `{"model":"m","max_tokens":1,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{}},` + user + `}`, "tool_choice.function.name"},
		{"tool_choice required without tools", `{"model":"m","max_tokens":1,"tool_choice":"required",` + user + `}`, "tool_choice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, e := ChatToMessages([]byte(tc.in), "", 0, false)
			if e == nil {
				t.Fatalf("no error; got %s", out)
			}
			if e.Status != 400 || e.Type != TypeInvalidRequest || !strings.Contains(e.Message, tc.field) {
				t.Fatalf("got %d %s %q, want 400 invalid_request_error naming %q", e.Status, e.Type, e.Message, tc.field)
			}
		})
	}
}

// FuzzLit checks the literals text is carried in against encoding/json:
// the same strings accepted, the same text read back, and nothing a strict
// reader would refuse.
func FuzzLit(f *testing.F) {
	for _, s := range []string{`"a"`, `"a\u00e9\ud83d\ude00\ud800x\n"`, `"\x"`, "\"\x01\"", "\"\xff\"", `"\ud800\u0041"`, `"\udc00\ud800"`, `"\/\b\f"`, `"é\u2028"`, `"`, `"\u12"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := scanner{jsonscan.New(data)}
		lit := sc.lit()
		var want string
		err := json.Unmarshal(data, &want)
		accepted := !sc.Failed() && sc.End()
		if accepted != (err == nil && data[firstByte(data)] == '"') {
			t.Fatalf("lit accepts %q: %v, encoding/json: %v", data, accepted, err)
		}
		if !accepted {
			return
		}
		var got string
		if err := json.Unmarshal(lit, &got); err != nil || !jsonscan.Clean(lit) {
			t.Fatalf("lit(%q) = %q: %v", data, lit, err)
		}
		if got != want {
			t.Fatalf("lit(%q) reads as %q, encoding/json %q", data, got, want)
		}
	})
}

// The Messages request as the API defines it, for checking what
// ChatToMessages writes: decoded with unknown fields refused, so a field
// the API does not have fails the test.
type wireRequest struct {
	Model         string          `json:"model"`
	MaxTokens     int64           `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []wireMessage   `json:"messages"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int64          `json:"top_k"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	Tools []struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		InputSchema map[string]any `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	} `json:"tool_choice"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type wireBlock struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

func strictDecode(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return strconv.ErrSyntax
	}
	return nil
}

// checkWire fails unless out is a Messages request the API would take as
// far as its shape goes: known fields only, roles alternating, no empty
// text, tool results leading their turn, inputs and schemas objects.
func checkWire(t *testing.T, out []byte) wireRequest {
	t.Helper()
	if !jsonscan.Clean(out) {
		t.Fatalf("output is not UTF-8, or escapes half a surrogate pair: %q", out)
	}
	var req wireRequest
	if err := strictDecode(out, &req); err != nil {
		t.Fatalf("not a Messages request: %v\n%s", err, out)
	}
	if req.Model == "" || req.MaxTokens < 1 || len(req.Messages) == 0 {
		t.Fatalf("model, max_tokens or messages missing: %s", out)
	}
	if len(req.System) > 0 {
		var s string
		var blocks []wireBlock
		if json.Unmarshal(req.System, &s) == nil {
			if s == "" {
				t.Fatalf("empty system: %s", out)
			}
		} else if err := strictDecode(req.System, &blocks); err != nil || len(blocks) == 0 {
			t.Fatalf("system %s: %v", req.System, err)
		} else {
			for _, b := range blocks {
				if b.Type != "text" || b.Text == "" {
					t.Fatalf("system block %+v", b)
				}
			}
		}
	}
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			t.Fatalf("role %q: %s", m.Role, out)
		}
		if i > 0 && req.Messages[i-1].Role == m.Role {
			t.Fatalf("roles do not alternate: %s", out)
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			if s == "" {
				t.Fatalf("empty content: %s", out)
			}
			continue
		}
		var blocks []wireBlock
		if err := strictDecode(m.Content, &blocks); err != nil || len(blocks) == 0 {
			t.Fatalf("content %s: %v", m.Content, err)
		}
		results := true
		for _, b := range blocks {
			if b.Type != "tool_result" {
				results = false
			}
			switch b.Type {
			case "text":
				if b.Text == "" {
					t.Fatalf("empty text block: %s", out)
				}
			case "image":
				ok := b.Source != nil && (b.Source.Type == "base64" && b.Source.MediaType != "" && b.Source.Data != "" ||
					b.Source.Type == "url" && b.Source.URL != "")
				if !ok || m.Role != "user" {
					t.Fatalf("image block %+v in %s", b, m.Role)
				}
			case "tool_use":
				var in map[string]any
				if m.Role != "assistant" || b.ID == "" || b.Name == "" || json.Unmarshal(b.Input, &in) != nil || in == nil {
					t.Fatalf("tool_use block %+v in %s", b, m.Role)
				}
			case "tool_result":
				if m.Role != "user" || !results || b.ToolUseID == "" {
					t.Fatalf("tool_result block %+v in %s, not leading: %s", b, m.Role, out)
				}
				if len(b.Content) > 0 {
					var blocks []wireBlock
					if json.Unmarshal(b.Content, &s) == nil {
						if s == "" {
							t.Fatalf("empty tool result: %s", out)
						}
					} else if err := strictDecode(b.Content, &blocks); err != nil {
						t.Fatalf("tool result content %s: %v", b.Content, err)
					}
				}
			default:
				t.Fatalf("block type %q", b.Type)
			}
		}
	}
	for _, tool := range req.Tools {
		if tool.Name == "" || tool.InputSchema["type"] == nil {
			t.Fatalf("tool %+v", tool)
		}
	}
	if c := req.ToolChoice; c != nil {
		if len(req.Tools) == 0 {
			t.Fatalf("tool_choice without tools: %s", out)
		}
		switch {
		case c.Type == "tool" && c.Name != "":
		case c.Type == "auto" || c.Type == "any":
		case c.Type == "none" && !c.DisableParallelToolUse:
		default:
			t.Fatalf("tool_choice %+v", c)
		}
	}
	return req
}

func FuzzChatToMessages(f *testing.F) {
	r := rand.New(rand.NewSource(4))
	for i := 0; i < 8; i++ {
		body, _ := randomChatRequest(r)
		f.Add(body)
	}
	f.Add([]byte(typicalChatRequest))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,QQ=="}}]}],"tools":[{"type":"function","function":{"name":"x","parameters":{"properties":{"a":"\u00e9"}}}}],"tool_choice":{"type":"function","function":{"name":"x"}}}`))
	f.Add([]byte("{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\\\"\xff\\\\ud800\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"\\ud800\"}]}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, e := ChatToMessages(body, "", 64, false)
		if e != nil {
			if e.Status != 400 || e.Type != TypeInvalidRequest || e.Message == "" || !json.Valid(e.Body()) {
				t.Fatalf("bad error %+v", e)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("body %q is not JSON but was translated", body)
		}
		checkWire(t, out)
	})
}

// chatShared is what a chat request and its translation there and back
// (ChatToMessages, then ToChat) must agree on: every field both APIs have,
// in the form both can carry. Runs of same-side messages form one turn,
// system prompts gather at the top, and a turn's tool results come first:
// that is what Messages can say.
type chatShared struct {
	System      []string
	Turns       []sharedTurn
	Tools       []sharedTool
	ToolChoice  string
	NoParallel  bool
	Stop        []string
	MaxTokens   int64
	Temperature *float64
	TopP        *float64
	TopK        *int64
	Stream      bool
	User        string
}

type sharedTurn struct {
	Role    string
	Results []string // tool_call_id=text
	Parts   []string // text:... or image:url
	Calls   []sharedCall
}

type sharedCall struct {
	ID, Name string
	Args     any
}

type sharedTool struct {
	Name, Description string
	Parameters        any
}

// chatToolCall is a chat message's tool call, as encoding/json reads it.
type chatToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatWire is a chat-completions request, read loosely.
type chatWire struct {
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []chatToolCall  `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	Stop                json.RawMessage `json:"stop"`
	MaxTokens           int64           `json:"max_tokens"`
	MaxCompletionTokens int64           `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int64          `json:"top_k"`
	Stream              bool            `json:"stream"`
	User                string          `json:"user"`
}

func decodeChatShared(t *testing.T, body []byte, defaultMax int64) chatShared {
	t.Helper()
	var req chatWire
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("chat request is not JSON: %v\n%s", err, body)
	}
	got := chatShared{MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, Stream: req.Stream, User: req.User}
	if req.MaxCompletionTokens > 0 {
		got.MaxTokens = req.MaxCompletionTokens
	}
	if got.MaxTokens == 0 {
		got.MaxTokens = defaultMax
	}
	if len(req.Stop) > 0 {
		var s string
		if json.Unmarshal(req.Stop, &s) == nil {
			got.Stop = []string{s}
		} else if err := json.Unmarshal(req.Stop, &got.Stop); err != nil {
			t.Fatal(err)
		}
	}
	// texts reads content as its non-empty parts.
	texts := func(raw json.RawMessage) []string {
		var s string
		var parts []struct {
			Type, Text, Refusal string
			ImageURL            struct{ URL string } `json:"image_url"`
		}
		switch {
		case len(raw) == 0 || string(raw) == "null":
			return nil
		case json.Unmarshal(raw, &s) == nil:
			if s == "" {
				return nil
			}
			return []string{"text:" + s}
		case json.Unmarshal(raw, &parts) == nil:
			var out []string
			for _, p := range parts {
				switch {
				case p.Type == "image_url":
					out = append(out, "image:"+p.ImageURL.URL)
				case p.Text+p.Refusal != "":
					out = append(out, "text:"+p.Text+p.Refusal)
				}
			}
			return out
		}
		t.Fatalf("content %s", raw)
		return nil
	}
	for _, m := range req.Messages {
		role := m.Role
		switch role {
		case "system", "developer":
			for _, s := range texts(m.Content) {
				got.System = append(got.System, strings.TrimPrefix(s, "text:"))
			}
			continue
		case "tool":
			role = "user"
		}
		var tt sharedTurn
		if m.Role == "tool" {
			var ts []string
			for _, s := range texts(m.Content) {
				ts = append(ts, strings.TrimPrefix(s, "text:"))
			}
			tt.Results = []string{m.ToolCallID + "=" + strings.Join(ts, "\n")}
		} else {
			tt.Parts = texts(m.Content)
		}
		for _, c := range m.ToolCalls {
			var args any = map[string]any{}
			if c.Function.Arguments != "" {
				if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
					t.Fatalf("arguments %q: %v", c.Function.Arguments, err)
				}
			}
			tt.Calls = append(tt.Calls, sharedCall{c.ID, c.Function.Name, args})
		}
		if tt.Results == nil && tt.Parts == nil && tt.Calls == nil {
			continue
		}
		if n := len(got.Turns); n > 0 && got.Turns[n-1].Role == role {
			last := &got.Turns[n-1]
			last.Results = append(last.Results, tt.Results...)
			last.Parts = append(last.Parts, tt.Parts...)
			last.Calls = append(last.Calls, tt.Calls...)
			continue
		}
		tt.Role = role
		got.Turns = append(got.Turns, tt)
	}
	for _, tool := range req.Tools {
		params := map[string]any{}
		if len(tool.Function.Parameters) > 0 {
			if err := json.Unmarshal(tool.Function.Parameters, &params); err != nil {
				t.Fatal(err)
			}
		}
		if params["type"] == nil {
			params["type"] = "object"
		}
		got.Tools = append(got.Tools, sharedTool{tool.Function.Name, tool.Function.Description, params})
	}
	if len(req.Tools) > 0 {
		var s string
		var fn struct{ Function struct{ Name string } }
		switch {
		case len(req.ToolChoice) == 0:
			got.ToolChoice = "auto"
		case json.Unmarshal(req.ToolChoice, &s) == nil:
			got.ToolChoice = s
		case json.Unmarshal(req.ToolChoice, &fn) == nil:
			got.ToolChoice = "function:" + fn.Function.Name
		}
		got.NoParallel = req.ParallelToolCalls != nil && !*req.ParallelToolCalls && got.ToolChoice != "none"
	}
	return got
}

// randomChatRequest builds a chat request from r: a conversation with
// system prompts anywhere, runs of same-side messages, empty messages,
// string and part content, images, tool calls and their results.
func randomChatRequest(r *rand.Rand) ([]byte, int64) {
	text := func() string {
		const alphabet = "ab \n\"\\\t<é😀\x01\u2028/"
		rs := []rune(alphabet)
		var sb strings.Builder
		for n := r.Intn(10); n > 0; n-- {
			sb.WriteRune(rs[r.Intn(len(rs))])
		}
		return sb.String()
	}
	content := func(images bool) any {
		if r.Intn(3) == 0 {
			return text()
		}
		parts := []any{}
		for k := r.Intn(4); k > 0; k-- {
			switch {
			case images && r.Intn(4) == 0:
				parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,QUJD" + strconv.Itoa(k)}})
			case images && r.Intn(4) == 0:
				parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/" + strconv.Itoa(k) + ".jpg", "detail": "low"}})
			default:
				parts = append(parts, map[string]any{"type": "text", "text": text()})
			}
		}
		return parts
	}
	req := map[string]any{"model": "gpt-4o"}
	def := int64(256)
	switch r.Intn(3) {
	case 0:
		req["max_tokens"] = 1 + r.Intn(4096)
	case 1:
		req["max_completion_tokens"] = 1 + r.Intn(4096)
	}
	if r.Intn(2) == 0 {
		req["temperature"] = float64(r.Intn(101)) / 100
	}
	if r.Intn(2) == 0 {
		req["top_p"] = r.Float64()
	}
	if r.Intn(4) == 0 {
		req["top_k"] = r.Intn(100)
	}
	switch r.Intn(3) {
	case 0:
		req["stop"] = text() + "x"
	case 1:
		req["stop"] = []string{"a" + text(), "b" + text()}
	}
	if r.Intn(3) == 0 {
		req["stream"] = true
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	if r.Intn(3) == 0 {
		req["user"] = "user-" + strconv.Itoa(r.Intn(100))
	}
	var tools []any
	for k := r.Intn(3); k > 0; k-- {
		fn := map[string]any{"name": "f" + strconv.Itoa(k)}
		if r.Intn(2) == 0 {
			fn["description"] = text()
		}
		switch r.Intn(3) {
		case 0:
			fn["parameters"] = map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}, "required": []any{"q"}}
		case 1:
			fn["parameters"] = map[string]any{"properties": map[string]any{}}
		}
		tools = append(tools, map[string]any{"type": "function", "function": fn})
	}
	if tools != nil {
		req["tools"] = tools
		switch r.Intn(5) {
		case 0:
			req["tool_choice"] = "auto"
		case 1:
			req["tool_choice"] = "none"
		case 2:
			req["tool_choice"] = "required"
		case 3:
			req["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": "f1"}}
		}
		if r.Intn(2) == 0 {
			req["parallel_tool_calls"] = r.Intn(2) == 0
		}
	}
	var msgs []any
	if r.Intn(2) == 0 {
		msgs = append(msgs, map[string]any{"role": "system", "content": text()})
	}
	var pending []string
	for n := 1 + r.Intn(8); n > 0; n-- {
		switch k := r.Intn(10); {
		case k == 0:
			role := "system"
			if r.Intn(2) == 0 {
				role = "developer"
			}
			msgs = append(msgs, map[string]any{"role": role, "content": content(false)})
		case k < 5:
			msgs = append(msgs, map[string]any{"role": "user", "content": content(true)})
		default:
			m := map[string]any{"role": "assistant"}
			if r.Intn(3) > 0 {
				m["content"] = content(false)
			} else if r.Intn(2) == 0 {
				m["content"] = nil
			}
			var calls []any
			for c := r.Intn(3); c > 0; c-- {
				id := "call_" + strconv.Itoa(len(msgs)) + "_" + strconv.Itoa(c)
				args, _ := json.Marshal(map[string]any{"q": text(), "n": r.Intn(100), "l": []any{true, nil, 1.5}})
				a := string(args)
				switch r.Intn(4) {
				case 0:
					a = ""
				case 1:
					a = " " + strings.ReplaceAll(a, ",", " , ") + "\n"
				}
				calls = append(calls, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "f" + strconv.Itoa(c), "arguments": a}})
				pending = append(pending, id)
			}
			if calls != nil {
				m["tool_calls"] = calls
			}
			msgs = append(msgs, m)
			for _, id := range pending {
				var c any = text()
				if r.Intn(3) == 0 {
					c = []any{map[string]any{"type": "text", "text": text()}, map[string]any{"type": "text", "text": text()}}
				}
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": id, "content": c})
			}
			pending = nil
		}
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "last" + text()})
	req["messages"] = msgs
	body, _ := json.Marshal(req)
	return body, def
}

func TestChatToMessagesKeepsSharedFields(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for i := 0; i < 3000; i++ {
		body, def := randomChatRequest(r)
		msgs, e := ChatToMessages(body, "", def, false)
		if e != nil {
			t.Fatalf("%s\n%s", e.Message, body)
		}
		checkWire(t, msgs)
		back, e := ToChat(msgs, "")
		if e != nil {
			t.Fatalf("ToChat refused the translation: %s\nrequest  %s\nmessages %s", e.Message, body, msgs)
		}
		want := decodeChatShared(t, body, def)
		got := decodeChatShared(t, back, 0)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("request  %s\nmessages %s\nback     %s\ngot  %+v\nwant %+v", body, msgs, back, got, want)
		}
	}
}

func TestMessagesToChat(t *testing.T) {
	for _, tc := range []struct {
		name, model, in, want string
	}{
		{"text", "gpt-4o",
			`{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"Hi!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":7,"output_tokens":2}}`,
			`{"id":"msg_1","object":"chat.completion","created":0,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hi!"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`},
		{"model from upstream, blocks joined, thinking left out, cache counted", "",
			`{"id":"msg_2","type":"message","model":"claude","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"a"},{"type":"text","text":"b","citations":[]}],"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":5,"cache_creation_input_tokens":10,"cache_read_input_tokens":100,"output_tokens":3}}`,
			`{"id":"msg_2","object":"chat.completion","created":0,"model":"claude","choices":[{"index":0,"message":{"role":"assistant","content":"ab"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":115,"completion_tokens":3,"total_tokens":118,"prompt_tokens_details":{"cached_tokens":100}}}`},
		{"tool calls only", "m",
			`{"id":"msg_3","type":"message","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{ "city" : "Paris" }},{"type":"tool_use","name":"noargs"}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`,
			`{"id":"msg_3","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"id":"toolu_1","type":"function","function":{"name":"noargs","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`},
		{"text and tool", "m",
			`{"id":"msg_4","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"t","name":"f","input":{}}],"stop_reason":"tool_use"}`,
			`{"id":"msg_4","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`},
		{"max_tokens", "m", `{"id":"x","content":[{"type":"text","text":"a"}],"stop_reason":"max_tokens"}`,
			`{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`},
		{"refusal, empty", "m", `{"id":"x","content":[],"stop_reason":"refusal"}`,
			`{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":""},"logprobs":null,"finish_reason":"content_filter"}],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`},
		{"pause_turn, no stop reason", "m", `{"id":"x","content":[{"type":"text","text":"a"}],"stop_reason":"pause_turn"}`,
			`{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, e := MessagesToChat([]byte(tc.in), tc.model)
			if e != nil {
				t.Fatalf("error %d %s: %s", e.Status, e.Type, e.Message)
			}
			sameJSON(t, withoutCreated(t, got), tc.want)
		})
	}
}

// withoutCreated checks created is a plausible time and zeroes it, so the
// rest can be compared.
func withoutCreated(t *testing.T, body []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("not JSON: %v: %s", err, body)
	}
	if c, ok := m["created"].(float64); !ok || c < 1.7e9 {
		t.Fatalf("created %v", m["created"])
	}
	m["created"] = 0
	out, _ := json.Marshal(m)
	return out
}

func TestMessagesToChatErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"not JSON", `{"content":`, "not a Messages response"},
		{"error body", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "Overloaded"},
		{"other type", `{"type":"completion","content":[]}`, "completion"},
		{"no content", `{"id":"x","type":"message"}`, "no content"},
		{"input not an object", `{"content":[{"type":"tool_use","id":"t","name":"f","input":[1]}]}`, `"f"`},
		{"tool without name", `{"content":[{"type":"tool_use","id":"t","input":{}}]}`, "no name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, e := MessagesToChat([]byte(tc.in), "m")
			if e == nil {
				t.Fatalf("no error; got %s", out)
			}
			if e.Status != 502 || e.Type != TypeAPI || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %d %s %q", e.Status, e.Type, e.Message)
			}
		})
	}
}

func TestFromAnthropicError(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   string
	}{
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too big"},"request_id":"req_1"}`,
			`{"error":{"message":"max_tokens: too big","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`},
		{401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`,
			`{"error":{"message":"invalid x-api-key","type":"authentication_error","param":null,"code":"authentication_error"}}`},
		{403, `{"type":"error","error":{"type":"permission_error","message":"no"}}`,
			`{"error":{"message":"no","type":"permission_error","param":null,"code":"permission_error"}}`},
		{404, `{"type":"error","error":{"type":"not_found_error","message":"model: x"}}`,
			`{"error":{"message":"model: x","type":"invalid_request_error","param":null,"code":"not_found_error"}}`},
		{413, `{"type":"error","error":{"type":"request_too_large","message":"big"}}`,
			`{"error":{"message":"big","type":"invalid_request_error","param":null,"code":"request_too_large"}}`},
		{429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow \"down\""}}`,
			`{"error":{"message":"slow \"down\"","type":"rate_limit_error","param":null,"code":"rate_limit_error"}}`},
		{500, `{"type":"error","error":{"type":"api_error","message":"boom"}}`,
			`{"error":{"message":"boom","type":"server_error","param":null,"code":"api_error"}}`},
		{529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			`{"error":{"message":"Overloaded","type":"server_error","param":null,"code":"overloaded_error"}}`},
		{502, `<html>bad gateway</html>`,
			`{"error":{"message":"upstream error: status 502 Bad Gateway","type":"server_error","param":null,"code":null}}`},
		{599, ``,
			`{"error":{"message":"upstream error: status 599","type":"server_error","param":null,"code":null}}`},
		{400, `{"error":{"message":"openai-shaped"}}`,
			`{"error":{"message":"openai-shaped","type":"invalid_request_error","param":null,"code":null}}`},
		{422, `{"error":"flat"}`,
			`{"error":{"message":"flat","type":"invalid_request_error","param":null,"code":null}}`},
	} {
		sameJSON(t, FromAnthropicError(tc.status, []byte(tc.body)), tc.want)
	}
}

// ev is one Messages SSE event.
type ev struct{ name, data string }

// runChat feeds events to a ChatStream, ending it with Fail on an error as
// a caller would, and returns the output and the error.
func runChat(s *ChatStream, evs []ev) ([]byte, error) {
	var out []byte
	for _, e := range evs {
		var err error
		if out, err = s.Event([]byte(e.name), []byte(e.data), out); err != nil {
			return s.Fail(out, err.Error()), err
		}
	}
	return out, nil
}

// parseChunks checks that out is a sequence of SSE data events, each a JSON
// object but the [DONE] that may end it, and returns the objects.
func parseChunks(t testing.TB, out []byte) (chunks []map[string]any, done bool) {
	t.Helper()
	s := string(out)
	for s != "" {
		i := strings.Index(s, "\n\n")
		if i < 0 {
			t.Fatalf("unterminated event %q", s)
		}
		line := s[:i]
		s = s[i+2:]
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("malformed event %q", line)
		}
		if done {
			t.Fatalf("event after [DONE]: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		if !utf8.ValidString(data) {
			t.Fatalf("chunk is not UTF-8: %q", data)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil || m == nil {
			t.Fatalf("chunk is not a JSON object: %v: %q", err, data)
		}
		chunks = append(chunks, m)
	}
	return chunks, done
}

// assembled is what a client makes of a chat completion, streamed or not.
type assembled struct {
	ID, Model, Content, Finish string
	Calls                      []sharedCall
	Usage                      any
}

// assembleChunks builds what a client would from the chunks.
func assembleChunks(t *testing.T, chunks []map[string]any) assembled {
	t.Helper()
	var a assembled
	var args []string
	for i, c := range chunks {
		if c["object"] != "chat.completion.chunk" {
			t.Fatalf("chunk %v", c)
		}
		if i == 0 {
			a.ID, _ = c["id"].(string)
			a.Model, _ = c["model"].(string)
		} else if c["id"] != a.ID || c["model"] != a.Model || c["created"] != chunks[0]["created"] {
			t.Fatalf("chunk %d changes id, model or created: %v", i, c)
		}
		if u, ok := c["usage"]; ok {
			a.Usage = u
		}
		choices := c["choices"].([]any)
		if len(choices) == 0 {
			continue
		}
		ch := choices[0].(map[string]any)
		if f, _ := ch["finish_reason"].(string); f != "" {
			if a.Finish != "" {
				t.Fatal("two finish reasons")
			}
			a.Finish = f
		} else if a.Finish != "" {
			t.Fatalf("chunk after the finish: %v", c)
		}
		d := ch["delta"].(map[string]any)
		if s, ok := d["content"].(string); ok {
			a.Content += s
		}
		tcs, _ := d["tool_calls"].([]any)
		for _, x := range tcs {
			tc := x.(map[string]any)
			idx := int(tc["index"].(float64))
			fn := tc["function"].(map[string]any)
			if idx == len(a.Calls) {
				a.Calls = append(a.Calls, sharedCall{ID: tc["id"].(string), Name: fn["name"].(string)})
				args = append(args, "")
			} else if idx != len(a.Calls)-1 || tc["id"] != nil {
				t.Fatalf("tool call chunk out of order: %v", tc)
			}
			args[idx] += fn["arguments"].(string)
		}
	}
	for i := range a.Calls {
		if err := json.Unmarshal([]byte(args[i]), &a.Calls[i].Args); err != nil {
			t.Fatalf("arguments %q: %v", args[i], err)
		}
	}
	return a
}

// assembleResponse reads a chat completion the same way.
func assembleResponse(t *testing.T, body []byte) assembled {
	t.Helper()
	var r struct {
		ID, Model string
		Choices   []struct {
			Message struct {
				Content   *string
				ToolCalls []chatToolCall `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
		Usage any
	}
	if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("not a chat completion: %v: %s", err, body)
	}
	a := assembled{ID: r.ID, Model: r.Model, Finish: r.Choices[0].FinishReason, Usage: r.Usage}
	if c := r.Choices[0].Message.Content; c != nil {
		a.Content = *c
	}
	for _, tc := range r.Choices[0].Message.ToolCalls {
		c := sharedCall{ID: tc.ID, Name: tc.Function.Name}
		if err := json.Unmarshal([]byte(tc.Function.Arguments), &c.Args); err != nil {
			t.Fatalf("arguments %q: %v", tc.Function.Arguments, err)
		}
		a.Calls = append(a.Calls, c)
	}
	return a
}

// splitRunes cuts s into random pieces on character boundaries, empty ones
// included: Messages splits text and tool input anywhere between
// characters.
func splitRunes(r *rand.Rand, s string) []string {
	var out []string
	rs := []rune(s)
	for len(rs) > 0 {
		n := r.Intn(len(rs) + 1)
		if r.Intn(3) == 0 {
			n = len(rs)
		}
		out = append(out, string(rs[:n]))
		rs = rs[n:]
	}
	return out
}

func evJSON(name string, v any) ev {
	b, _ := json.Marshal(v)
	return ev{name, string(b)}
}

// randomMessage builds a Messages response from r, and the events that
// stream it, cut up and interleaved with pings at random.
func randomMessage(r *rand.Rand) ([]byte, []ev) {
	texts := []string{"Hello", ", wor\"ld\n", "", "😀 done.", "a\u2028b\\"}
	reasons := []string{"end_turn", "stop_sequence", "max_tokens", "tool_use", "refusal", "pause_turn", "model_context_window_exceeded"}
	content := []any{}
	var evs []ev
	ping := func() {
		if r.Intn(4) == 0 {
			evs = append(evs, ev{"ping", `{"type": "ping"}`})
		}
	}
	usage := map[string]any{"input_tokens": r.Intn(1000), "output_tokens": 1}
	if r.Intn(2) == 0 {
		usage["cache_creation_input_tokens"] = r.Intn(100)
		usage["cache_read_input_tokens"] = r.Intn(100)
	}
	evs = append(evs, evJSON("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_01", "type": "message", "role": "assistant", "content": []any{}, "model": "claude-x",
		"stop_reason": nil, "stop_sequence": nil, "usage": usage}}))
	ping()
	for n := r.Intn(5); n > 0; n-- {
		i := len(content)
		start := func(block map[string]any) {
			evs = append(evs, evJSON("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": block}))
			ping()
		}
		delta := func(d map[string]any) {
			evs = append(evs, evJSON("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}))
			ping()
		}
		switch r.Intn(4) {
		case 0, 1:
			text := texts[r.Intn(len(texts))] + texts[r.Intn(len(texts))]
			content = append(content, map[string]any{"type": "text", "text": text})
			start(map[string]any{"type": "text", "text": ""})
			for _, p := range splitRunes(r, text) {
				delta(map[string]any{"type": "text_delta", "text": p})
			}
		case 2:
			input := map[string]any{}
			if r.Intn(4) > 0 {
				input = map[string]any{"city": texts[r.Intn(len(texts))], "days": []any{1, 2.5, nil}, "deep": map[string]any{"ok": true}}
			}
			id, name := "toolu_"+strconv.Itoa(i), "tool"+strconv.Itoa(r.Intn(3))
			content = append(content, map[string]any{"type": "tool_use", "id": id, "name": name, "input": input})
			start(map[string]any{"type": "tool_use", "id": id, "name": name, "input": map[string]any{}})
			js, _ := json.Marshal(input)
			if r.Intn(2) == 0 {
				js, _ = json.MarshalIndent(input, "", " ")
			}
			if len(input) > 0 || r.Intn(2) == 0 {
				for _, p := range splitRunes(r, string(js)) {
					delta(map[string]any{"type": "input_json_delta", "partial_json": p})
				}
			}
		default:
			content = append(content, map[string]any{"type": "thinking", "thinking": "hmm", "signature": "sig"})
			start(map[string]any{"type": "thinking", "thinking": ""})
			delta(map[string]any{"type": "thinking_delta", "thinking": "hmm"})
			delta(map[string]any{"type": "signature_delta", "signature": "sig"})
		}
		evs = append(evs, evJSON("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}))
		ping()
	}
	reason := reasons[r.Intn(len(reasons))]
	out := r.Intn(500)
	final := map[string]any{"output_tokens": out}
	if r.Intn(2) == 0 {
		// Newer servers repeat the input counts at the end.
		for k, v := range usage {
			if k != "output_tokens" {
				final[k] = v
			}
		}
	}
	var seq any
	if reason == "stop_sequence" {
		seq = "END"
	}
	evs = append(evs, evJSON("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": reason, "stop_sequence": seq}, "usage": final}))
	ping()
	evs = append(evs, ev{"message_stop", `{"type":"message_stop"}`})
	whole := map[string]any{}
	for k, v := range usage {
		whole[k] = v
	}
	whole["output_tokens"] = out
	body, _ := json.Marshal(map[string]any{"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-x",
		"content": content, "stop_reason": reason, "stop_sequence": seq, "usage": whole})
	return body, evs
}

func TestChatStreamMatchesMessagesToChat(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	for iter := 0; iter < 2000; iter++ {
		body, evs := randomMessage(r)
		model := []string{"", "gpt-4o"}[r.Intn(2)]
		resp, e := MessagesToChat(body, model)
		if e != nil {
			t.Fatalf("%s\n%s", e.Message, body)
		}
		want := assembleResponse(t, resp)

		s := NewChatStream(model, true)
		out, err := runChat(s, evs)
		if err != nil {
			t.Fatalf("%v\nevents %v", err, evs)
		}
		if !s.Done() {
			t.Fatal("not done after message_stop")
		}
		chunks, done := parseChunks(t, out)
		if !done {
			t.Fatalf("no [DONE]:\n%s", out)
		}
		last := chunks[len(chunks)-1]
		if len(last["choices"].([]any)) != 0 || last["usage"] == nil {
			t.Fatalf("last chunk is not the usage chunk: %v", last)
		}
		got := assembleChunks(t, chunks)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("stream gave   %+v\nresponse gave %+v\nevents %v\noutput\n%s", got, want, evs, out)
		}

		// Without include_usage the same, less the usage chunk.
		out, err = runChat(NewChatStream(model, false), evs)
		if err != nil {
			t.Fatal(err)
		}
		chunks, _ = parseChunks(t, out)
		got = assembleChunks(t, chunks)
		if got.Usage != nil {
			t.Fatalf("usage without include_usage: %s", out)
		}
		want.Usage = nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("stream gave   %+v\nresponse gave %+v", got, want)
		}
	}
}

func TestChatStreamChunks(t *testing.T) {
	s := NewChatStream("gpt-4o", true)
	out, err := runChat(s, []ev{
		{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_read_input_tokens":5,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"ping", `{"type": "ping"}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi \u00e9\n"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\": "}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"1}"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":1}`},
		{"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"g","input":{}}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":2}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":15}}`},
		{"future_event", `{"type":"future_event"}`},
		{"message_stop", `{"type":"message_stop"}`},
	})
	if err != nil {
		t.Fatal(err)
	}
	var created string
	if i := bytes.Index(out, []byte(`"created":`)); i > 0 {
		created = string(out[i+10 : i+10+bytes.IndexByte(out[i+10:], ',')])
	}
	head := `data: {"id":"msg_1","object":"chat.completion.chunk","created":` + created + `,"model":"gpt-4o","choices":[`
	tail := `,"logprobs":null,"finish_reason":null}]}` + "\n\n"
	want := head + `{"index":0,"delta":{"role":"assistant","content":""}` + tail +
		head + `{"index":0,"delta":{"content":"Hi \u00e9\n"}` + tail +
		head + `{"index":0,"delta":{"tool_calls":[{"index":0,"id":"toolu_1","type":"function","function":{"name":"f","arguments":""}}]}` + tail +
		head + `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\": "}}]}` + tail +
		head + `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}` + tail +
		head + `{"index":0,"delta":{"tool_calls":[{"index":1,"id":"toolu_2","type":"function","function":{"name":"g","arguments":""}}]}` + tail +
		head + `{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}` + tail +
		head + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}` + "\n\n" +
		head + `],"usage":{"prompt_tokens":30,"completion_tokens":15,"total_tokens":45,"prompt_tokens_details":{"cached_tokens":5}}}` + "\n\n" +
		"data: [DONE]\n\n"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if n, err := strconv.ParseInt(created, 10, 64); err != nil || n < 1.7e9 {
		t.Fatalf("created %q", created)
	}
	// Nothing follows the end, not even a failure.
	if more, err := s.Event([]byte("ping"), []byte(`{"type":"ping"}`), nil); err != nil || len(more) != 0 {
		t.Fatalf("ping after the end: %q %v", more, err)
	}
	if _, err := s.Event([]byte("message_stop"), []byte(`{"type":"message_stop"}`), nil); err == nil {
		t.Fatal("event after the end accepted")
	}
	if more := s.Fail(nil, "late"); len(more) != 0 {
		t.Fatalf("Fail after the end wrote %q", more)
	}
}

func TestChatStreamUnnamedAndUnfinished(t *testing.T) {
	// Events without a name go by their data's type; unknown ones are
	// passed over, even first; a stream that stops without a stop reason
	// still finishes.
	out, err := runChat(NewChatStream("", false), []ev{
		{"", `{"type":"future_event","x":[1]}`},
		{"", `{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":1}}}`},
		{"", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hi"}}`},
		{"", `{"type":"message_stop"}`},
	})
	if err != nil {
		t.Fatal(err)
	}
	chunks, done := parseChunks(t, out)
	a := assembleChunks(t, chunks)
	if !done || a.Content != "Hi" || a.Finish != "stop" || a.Model != "claude" || a.ID != "msg_1" || a.Usage != nil {
		t.Fatalf("%+v\n%s", a, out)
	}
}

func TestChatStreamErrors(t *testing.T) {
	const start = `{"type":"message_start","message":{"id":"m","model":"c","usage":{}}}`
	const tool = `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}`
	for _, tc := range []struct {
		name     string
		evs      []ev
		want     string
		typ      string
		code     any
		withHead bool
	}{
		{"overloaded", []ev{{"message_start", start}, {"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}}, "Overloaded", "server_error", "overloaded_error", true},
		{"error before start", []ev{{"error", `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`}}, "slow", "rate_limit_error", "rate_limit_error", false},
		{"not JSON", []ev{{"message_start", `{"type":`}}, "not valid JSON", "server_error", nil, false},
		{"trailing bytes", []ev{{"message_start", start + ` x`}}, "not valid JSON", "server_error", nil, false},
		{"wrong type", []ev{{"message_start", start}, {"content_block_start", `{"index":"0"}`}}, "not valid JSON", "server_error", nil, true},
		{"no message_start", []ev{{"content_block_start", tool}}, "message_start", "server_error", nil, false},
		{"two message_start", []ev{{"message_start", start}, {"message_start", start}}, "second message_start", "server_error", nil, true},
		{"block inside block", []ev{{"message_start", start}, {"content_block_start", tool}, {"content_block_start", tool}}, "another was open", "server_error", nil, true},
		{"delta for another block", []ev{{"message_start", start}, {"content_block_start", tool}, {"content_block_delta", `{"index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}`}}, "not open", "server_error", nil, true},
		{"stop for no block", []ev{{"message_start", start}, {"content_block_stop", `{"index":0}`}}, "not open", "server_error", nil, true},
		{"text into a tool", []ev{{"message_start", start}, {"content_block_start", tool}, {"content_block_delta", `{"index":0,"delta":{"type":"text_delta","text":"x"}}`}}, "not text", "server_error", nil, true},
		{"json into text", []ev{{"message_start", start}, {"content_block_start", `{"index":0,"content_block":{"type":"text","text":""}}`}, {"content_block_delta", `{"index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}`}}, "not a tool call", "server_error", nil, true},
		{"tool without name", []ev{{"message_start", start}, {"content_block_start", `{"index":0,"content_block":{"type":"tool_use","id":"t","input":{}}}`}}, "no name", "server_error", nil, true},
		{"bad arguments at stop", []ev{{"message_start", start}, {"content_block_start", tool}, {"content_block_delta", `{"index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`}, {"content_block_stop", `{"index":0}`}}, "not a JSON object", "server_error", nil, true},
		{"arguments an array", []ev{{"message_start", start}, {"content_block_start", tool}, {"content_block_delta", `{"index":0,"delta":{"type":"input_json_delta","partial_json":"[1]"}}`}, {"message_stop", `{}`}}, "not a JSON object", "server_error", nil, true},
		{"start input not an object", []ev{{"message_start", start}, {"content_block_start", `{"index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":"x"}}`}, {"message_delta", `{"delta":{"stop_reason":"tool_use"}}`}}, "not a JSON object", "server_error", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewChatStream("m", true)
			out, err := runChat(s, tc.evs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if !s.Done() {
				t.Fatal("not done after Fail")
			}
			chunks, done := parseChunks(t, out)
			if !done || len(chunks) == 0 {
				t.Fatalf("no error chunk and [DONE]:\n%s", out)
			}
			if tc.withHead != (len(chunks) > 1) {
				t.Fatalf("chunks before the error: %v", chunks)
			}
			e, _ := chunks[len(chunks)-1]["error"].(map[string]any)
			if e == nil || e["message"] != err.Error() || e["type"] != tc.typ || e["code"] != tc.code || e["param"] != nil {
				t.Fatalf("error chunk %v", chunks[len(chunks)-1])
			}
			if _, ok := e["param"]; !ok {
				t.Fatal("no param")
			}
		})
	}
}

func FuzzChatStream(f *testing.F) {
	r := rand.New(rand.NewSource(7))
	for i := 0; i < 4; i++ {
		_, evs := randomMessage(r)
		if len(evs) >= 4 {
			f.Add(true, []byte(evs[1].name), []byte(evs[1].data), []byte(evs[2].name), []byte(evs[2].data), []byte(evs[3].name), []byte(evs[3].data))
		}
	}
	f.Add(false, []byte("message_start"), []byte(`{"type":"message_start","message":{"id":"\u2028\"","model":"\xff","usage":{"input_tokens":-1}}}`), []byte("content_block_start"), []byte(`{"index":0,"content_block":{"type":"text","text":"\ud800"}}`), []byte("content_block_delta"), []byte(`{"index":0,"delta":{"type":"text_delta","text":"\xff\u2029"}}`))
	f.Add(true, []byte("content_block_start"), []byte(`{"index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{"a":"\xff"}}}`), []byte("content_block_stop"), []byte(`{"index":0}`), []byte("message_delta"), []byte(`{"delta":{"stop_reason":"weird"},"usage":{"output_tokens":9223372036854775807,"input_tokens":1}}`))
	f.Add(true, []byte(""), []byte(`{"type":"error","error":{"type":"x","message":"y"}}`), []byte("ping"), []byte("garbage"), []byte("message_stop"), []byte(`{}`))
	f.Fuzz(func(t *testing.T, started bool, n1, d1, n2, d2, n3, d3 []byte) {
		s := NewChatStream("m\x00\"", r.Intn(2) == 0)
		evs := []ev{{string(n1), string(d1)}, {string(n2), string(d2)}, {string(n3), string(d3)}, {"message_stop", `{"type":"message_stop"}`}}
		if started {
			evs = append([]ev{{"message_start", `{"type":"message_start","message":{"id":"msg_1","model":"c","usage":{"input_tokens":3}}}`}}, evs...)
		}
		var out []byte
		for _, e := range evs {
			var err error
			out, err = s.Event([]byte(e.name), []byte(e.data), out)
			if err == nil && e.name != "ping" && !json.Valid([]byte(e.data)) {
				t.Fatalf("event data %q is not JSON but was accepted", e.data)
			}
			if err != nil {
				out = s.Fail(out, err.Error())
				break
			}
		}
		if !s.Done() {
			out = s.Fail(out, "the stream ended early")
		}
		chunks, done := parseChunks(t, out)
		if !done {
			t.Fatalf("no [DONE]: %q", out)
		}
		for _, c := range chunks[:max(len(chunks)-1, 0)] {
			if c["error"] != nil {
				t.Fatalf("error chunk before the last: %v", chunks)
			}
		}
	})
}

// TestChatToMessagesNoEquivalent: vLLM's sampling extensions, which
// Messages has no equivalent for, are refused naming the field; with drop
// (a pool's drop_unsupported) the settings that only tune sampling are
// left out, while what would change the answer's shape is refused even so.
// Neutral values (a penalty of 1, min_p 0) are no request at all.
func TestChatToMessagesNoEquivalent(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, extra, field string
		droppable          bool
	}{
		{"repetition_penalty", `"repetition_penalty":1.2`, "repetition_penalty", true},
		{"min_p", `"min_p":0.05`, "min_p", true},
		{"min_tokens", `"min_tokens":16`, "min_tokens", true},
		{"ignore_eos", `"ignore_eos":true`, "ignore_eos", true},
		{"stop_token_ids", `"stop_token_ids":[128001]`, "stop_token_ids", true},
		{"frequency_penalty", `"frequency_penalty":0.5`, "frequency_penalty", true},
		{"presence_penalty", `"presence_penalty":-0.5`, "presence_penalty", true},
		{"logit_bias", `"logit_bias":{"50256":-100}`, "logit_bias", true},
		{"best_of", `"best_of":3`, "best_of", false},
		{"use_beam_search", `"use_beam_search":true`, "use_beam_search", false},
		{"guided_json", `"guided_json":{"type":"object"}`, "guided_json", false},
		{"guided_choice", `"guided_choice":["a","b"]`, "guided_choice", false},
		{"n", `"n":2`, "n", false},
		{"logprobs", `"logprobs":true`, "logprobs", false},
	} {
		body := []byte(`{"model":"m","max_tokens":8,` + tc.extra + `,` + user + `}`)
		t.Run(tc.name, func(t *testing.T) {
			out, e := ChatToMessages(body, "", 0, false)
			if e == nil || e.Status != 400 || e.Type != TypeInvalidRequest || !strings.HasPrefix(e.Message, tc.field+": ") {
				t.Fatalf("ChatToMessages(%s) = %s, %+v; want a 400 naming %s", tc.extra, out, e, tc.field)
			}
			out, e = ChatToMessages(body, "", 0, true)
			switch {
			case tc.droppable && e != nil:
				t.Fatalf("with drop: %+v, want it dropped", e)
			case tc.droppable && strings.Contains(string(out), tc.field):
				t.Fatalf("with drop: %s still has %s", out, tc.field)
			case !tc.droppable && (e == nil || !strings.HasPrefix(e.Message, tc.field+": ")):
				t.Fatalf("with drop: %s, %+v; want a 400 naming %s even so", out, e, tc.field)
			}
		})
	}
	for _, neutral := range []string{`"repetition_penalty":1`, `"min_p":0`, `"min_tokens":0`, `"ignore_eos":false`, `"stop_token_ids":[]`,
		`"best_of":1`, `"use_beam_search":false`, `"guided_json":null`, `"min_p":null`} {
		if out, e := ChatToMessages([]byte(`{"model":"m","max_tokens":8,`+neutral+`,`+user+`}`), "", 0, false); e != nil {
			t.Errorf("ChatToMessages(%s) = %+v; a neutral value asks nothing", neutral, e)
		} else if strings.Contains(string(out), strings.Split(neutral, `"`)[1]) {
			t.Errorf("ChatToMessages(%s) = %s; sent on", neutral, out)
		}
	}
}

// TestToChatAsks: what a Messages request asks that not every pool can
// serve, and Check's verdict for each kind of pool, with and without
// drop_unsupported.
func TestToChatAsks(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"hi"}]`
	const prefill = `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"{\"a\":"}]`
	type verdict struct{ vllm, openai, vllmDrop, openaiDrop string } // "" serves, else the field the 400 names
	for _, tc := range []struct {
		name, body string
		asks       Asks
		want       verdict
	}{
		{"plain", `{"model":"m","max_tokens":8,` + user + `}`, 0, verdict{}},
		{"thinking", `{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},` + user + `}`, AsksThinking,
			verdict{vllm: "thinking", openai: "thinking"}},
		{"thinking disabled", `{"model":"m","max_tokens":8,"thinking":{"type":"disabled"},` + user + `}`, 0, verdict{}},
		{"top_k", `{"model":"m","max_tokens":8,"top_k":40,` + user + `}`, AsksTopK, verdict{openai: "top_k"}},
		{"stop_sequences", `{"model":"m","max_tokens":8,"stop_sequences":["END"],` + user + `}`, AsksStopSequences, verdict{openai: "stop_sequences"}},
		{"prefill", `{"model":"m","max_tokens":8,` + prefill + `}`, AsksPrefill, verdict{openai: "messages", openaiDrop: "messages"}},
		{"server tool", `{"model":"m","max_tokens":8,"tools":[{"type":"web_search_20250305","name":"web_search"},{"name":"f","input_schema":{"type":"object"}}],` + user + `}`,
			AsksServerTools, verdict{"tools", "tools", "tools", "tools"}},
		{"mcp_servers", `{"model":"m","max_tokens":8,"mcp_servers":[{"type":"url","url":"https://mcp.example/sse","name":"x"}],` + user + `}`,
			AsksServerTools, verdict{"tools", "tools", "tools", "tools"}},
		{"mcp_servers empty", `{"model":"m","max_tokens":8,"mcp_servers":[ ],` + user + `}`, 0, verdict{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, asks, e := ToChatAsks([]byte(tc.body), "", 0)
			if e != nil || asks != tc.asks {
				t.Fatalf("ToChatAsks() = %v, %+v; want asks %v", asks, e, tc.asks)
			}
			for _, c := range []struct {
				vllm, drop bool
				want       string
			}{{true, false, tc.want.vllm}, {false, false, tc.want.openai}, {true, true, tc.want.vllmDrop}, {false, true, tc.want.openaiDrop}} {
				e := asks.Check(c.vllm, c.drop)
				if c.want == "" && e != nil || c.want != "" && (e == nil || e.Status != 400 || !strings.HasPrefix(e.Message, c.want+": ")) {
					t.Errorf("Check(vllm %v, drop %v) = %+v, want %q", c.vllm, c.drop, e, c.want)
				}
			}
			if strings.Contains(string(out), "thinking") || strings.Contains(string(out), "web_search") || strings.Contains(string(out), "mcp") {
				t.Errorf("ToChat sent on what chat completions lacks: %s", out)
			}
			if tc.name == "server tool" && !strings.Contains(string(out), `"tools":[{"type":"function","function":{"name":"f"`) {
				t.Errorf("ToChat() = %s: the custom tool beside the server tool is lost", out)
			}
			prefilled := strings.Contains(string(out), `"continue_final_message":true,"add_generation_prompt":false`)
			if prefilled != (asks&AsksPrefill != 0) {
				t.Errorf("ToChat() = %s; continue_final_message %v, want %v", out, prefilled, asks&AsksPrefill != 0)
			}
		})
	}
	out, _, e := ToChatAsks([]byte(`{"model":"m","max_tokens":8,"top_k":40,`+user+`}`), "", AsksTopK)
	if e != nil || strings.Contains(string(out), "top_k") {
		t.Fatalf("ToChatAsks(omit top_k) = %s, %+v", out, e)
	}
}
