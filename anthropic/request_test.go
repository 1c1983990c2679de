package anthropic

import (
	"encoding/json"
	"math/rand"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestToChat(t *testing.T) {
	for _, tc := range []struct {
		name, model, in, want string
	}{
		{"minimal", "",
			`{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"claude","messages":[{"role":"user","content":"hi"}],"max_tokens":10}`},
		{"model replaced, sampling, stop, user", "pool-model",
			`{"model":"claude","max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["\n\n","END"],"metadata":{"user_id":"u1"},"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"pool-model","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":40,"stop":["\n\n","END"],"user":"u1"}`},
		{"stream asks for usage", "",
			`{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}`},
		{"system string", "",
			`{"model":"m","max_tokens":1,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":1}`},
		{"system blocks", "",
			`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}],"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"user","content":"hi"}],"max_tokens":1}`},
		{"one text block is a string", "",
			`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
			`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"max_tokens":1}`},
		{"images", "",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}},{"type":"image","source":{"type":"url","url":"https://x/y.jpg"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBOR"}},{"type":"image_url","image_url":{"url":"https://x/y.jpg"}}]}],"max_tokens":1}`},
		{"tool round trip", "",
			`{"model":"m","max_tokens":9,
			  "tools":[{"name":"get_weather","description":"Weather now","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},{"name":"noargs"}],
			  "tool_choice":{"type":"auto"},
			  "messages":[
			    {"role":"user","content":"weather in Paris?"},
			    {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{ "city" : "Paris" }},{"type":"tool_use","id":"toolu_2","name":"noargs","input":{}}]},
			    {"role":"user","content":[{"type":"text","text":"thanks"},{"type":"tool_result","tool_use_id":"toolu_1","content":"18C"},{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}]}`,
			`{"model":"m","messages":[
			    {"role":"user","content":"weather in Paris?"},
			    {"role":"assistant","content":"Checking.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"id":"toolu_2","type":"function","function":{"name":"noargs","arguments":"{}"}}]},
			    {"role":"tool","tool_call_id":"toolu_1","content":"18C"},
			    {"role":"tool","tool_call_id":"toolu_2","content":"a\nb"},
			    {"role":"user","content":"thanks"}],
			  "max_tokens":9,
			  "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},{"type":"function","function":{"name":"noargs","parameters":{"type":"object","properties":{}}}}],
			  "tool_choice":"auto"}`},
		{"assistant only tool calls, user only tool results", "",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":[1,2]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{\"a\":[1,2]}"}}]},{"role":"tool","tool_call_id":"t","content":""}],"max_tokens":1}`},
		{"tool_choice any", "",
			`{"model":"m","max_tokens":1,"tool_choice":{"type":"any","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1,"tool_choice":"required","parallel_tool_calls":false}`},
		{"tool_choice tool", "",
			`{"model":"m","max_tokens":1,"tool_choice":{"type":"tool","name":"f"},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1,"tool_choice":{"type":"function","function":{"name":"f"}}}`},
		{"tool_choice none", "",
			`{"model":"m","max_tokens":1,"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1,"tool_choice":"none"}`},
		{"escapes survive", "",
			"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"q\\\"\\\\\\u0001\\u2028<>&\\ud83d\\ude00\"}]}",
			"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\\\"\\\\\\u0001\\u2028<>&\U0001F600\"}],\"max_tokens\":1}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, e := ToChat([]byte(tc.in), tc.model)
			if e != nil {
				t.Fatalf("error %d %s: %s", e.Status, e.Type, e.Message)
			}
			sameJSON(t, got, tc.want)
		})
	}
}

func TestToChatErrors(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, in, field string
	}{
		{"not JSON", `{"max_tokens":1,`, "not valid JSON"},
		{"not an object", `[1]`, "JSON object"},
		{"wrong type", `{"max_tokens":1,"temperature":"hot",` + user + `}`, "temperature"},
		{"max_tokens missing", `{` + user + `}`, "max_tokens"},
		{"max_tokens null", `{"max_tokens":null,` + user + `}`, "max_tokens"},
		{"max_tokens zero", `{"max_tokens":0,` + user + `}`, "max_tokens"},
		{"max_tokens fraction", `{"max_tokens":1.5,` + user + `}`, "max_tokens"},
		{"max_tokens string", `{"max_tokens":"5",` + user + `}`, "max_tokens"},
		{"messages missing", `{"max_tokens":1}`, "messages"},
		{"messages empty", `{"max_tokens":1,"messages":[]}`, "messages"},
		{"role system", `{"max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, "messages.0.role"},
		{"role missing", `{"max_tokens":1,"messages":[{"content":"x"}]}`, "messages.0.role"},
		{"content missing", `{"max_tokens":1,"messages":[{"role":"user"}]}`, "messages.0.content"},
		{"content number", `{"max_tokens":1,"messages":[{"role":"user","content":5}]}`, "messages.0.content"},
		{"unknown block", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, "messages.0.content.0.type"},
		{"block without type", `{"max_tokens":1,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages.0.content.0.type"},
		{"image bad source", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file"}}]}]}`, "source.type"},
		{"image no source", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"image"}]}]}`, "source"},
		{"image in assistant", `{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"image","source":{"type":"url","url":"u"}}]}]}`, "messages.0.content.0"},
		{"tool_use in user", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`, "messages.0.content.0"},
		{"tool_use input not object", `{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":[1]}]}]}`, "input"},
		{"tool_result unmatched", `{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"b","content":"x"}]}]}`, "messages.1.content.0.tool_use_id"},
		{"tool_result before its tool_use", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"x"}]},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`, "messages.0.content.0.tool_use_id"},
		{"tool_result image", `{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image","source":{"type":"url","url":"u"}}]}]}]}`, "messages.1.content.0.content.0.type"},
		{"system number", `{"max_tokens":1,"system":5,` + user + `}`, "system"},
		{"system image", `{"max_tokens":1,"system":[{"type":"image"}],` + user + `}`, "system.0.type"},
		{"tool no name", `{"max_tokens":1,"tools":[{"input_schema":{}}],` + user + `}`, "tools.0.name"},
		{"tool schema not object", `{"max_tokens":1,"tools":[{"name":"f","input_schema":"x"}],` + user + `}`, "tools.0.input_schema"},
		{"tool_choice unknown", `{"max_tokens":1,"tool_choice":{"type":"maybe"},` + user + `}`, "tool_choice.type"},
		{"tool_choice tool no name", `{"max_tokens":1,"tool_choice":{"type":"tool"},` + user + `}`, "tool_choice.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, e := ToChat([]byte(tc.in), "")
			if e == nil {
				t.Fatalf("no error; got %s", out)
			}
			if e.Status != 400 || e.Type != TypeInvalidRequest || !strings.Contains(e.Message, tc.field) {
				t.Fatalf("got %d %s %q, want 400 invalid_request_error naming %q", e.Status, e.Type, e.Message, tc.field)
			}
			var body struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(e.Body(), &body); err != nil || body.Type != "error" || body.Error.Message != e.Message {
				t.Fatalf("bad body %s", e.Body())
			}
		})
	}
}

// The request fields both APIs share, as the property test compares them.
type shared struct {
	Roles, Texts        []string
	ToolNames, ToolArgs []string
	Stop                []string
	MaxTokens           int64
	Temperature, TopP   *float64
}

// randomRequest builds a Messages request from r, and what ToChat must
// keep of it.
func randomRequest(r *rand.Rand) ([]byte, shared) {
	var want shared
	text := func() string {
		const alphabet = "ab \n\"\\\t<é😀\x01"
		rs := []rune(alphabet)
		var sb strings.Builder
		for n := r.Intn(12); n > 0; n-- {
			sb.WriteRune(rs[r.Intn(len(rs))])
		}
		return sb.String()
	}
	req := map[string]any{"model": "m"}
	want.MaxTokens = int64(1 + r.Intn(4096))
	req["max_tokens"] = want.MaxTokens
	if r.Intn(2) == 0 {
		f := float64(r.Intn(200)) / 100
		want.Temperature = &f
		req["temperature"] = f
	}
	if r.Intn(2) == 0 {
		f := r.Float64()
		want.TopP = &f
		req["top_p"] = f
	}
	for n := r.Intn(3); n > 0; n-- {
		want.Stop = append(want.Stop, text()+"x")
	}
	if want.Stop != nil {
		req["stop_sequences"] = want.Stop
	}
	if r.Intn(2) == 0 {
		s := text()
		req["system"] = s
		if s != "" {
			want.Roles = append(want.Roles, "system")
			want.Texts = append(want.Texts, s)
		}
	}
	var msgs []any
	pending := []string(nil) // tool_use ids awaiting a result
	for n := 1 + r.Intn(6); n > 0; n-- {
		if len(msgs)%2 == 0 { // user
			var blocks []any
			var texts []string
			for _, id := range pending {
				res := text()
				blocks = append(blocks, map[string]any{"type": "tool_result", "tool_use_id": id, "content": res})
				want.Roles = append(want.Roles, "tool")
				want.Texts = append(want.Texts, res)
			}
			pending = nil
			for k := r.Intn(3); k > 0; k-- {
				s := text()
				texts = append(texts, s)
				blocks = append(blocks, map[string]any{"type": "text", "text": s})
			}
			if blocks == nil {
				s := text()
				msgs = append(msgs, map[string]any{"role": "user", "content": s})
				want.Roles = append(want.Roles, "user")
				want.Texts = append(want.Texts, s)
				continue
			}
			msgs = append(msgs, map[string]any{"role": "user", "content": blocks})
			if len(texts) > 0 {
				want.Roles = append(want.Roles, "user")
				want.Texts = append(want.Texts, strings.Join(texts, ""))
			}
			continue
		}
		var blocks []any
		var texts []string
		for k := r.Intn(2); k > 0; k-- {
			s := text()
			texts = append(texts, s)
			blocks = append(blocks, map[string]any{"type": "text", "text": s})
		}
		for k := r.Intn(3); k > 0; k-- {
			id := "toolu_" + strconv.Itoa(len(msgs)) + "_" + strconv.Itoa(k)
			name := "f" + strconv.Itoa(r.Intn(5))
			input := map[string]any{"q": text(), "n": r.Intn(100), "l": []any{true, nil}}
			args, _ := json.Marshal(input)
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": id, "name": name, "input": input})
			want.ToolNames = append(want.ToolNames, name)
			want.ToolArgs = append(want.ToolArgs, string(args))
			pending = append(pending, id)
		}
		if blocks == nil {
			blocks = []any{map[string]any{"type": "text", "text": "ok"}}
			texts = []string{"ok"}
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": blocks})
		want.Roles = append(want.Roles, "assistant")
		want.Texts = append(want.Texts, strings.Join(texts, ""))
	}
	req["messages"] = msgs
	body, _ := json.Marshal(req)
	return body, want
}

// decodeShared reads back from a chat request what the property compares.
func decodeShared(t *testing.T, chat []byte) shared {
	var req struct {
		Messages []struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []chatToolCall  `json:"tool_calls"`
		} `json:"messages"`
		MaxTokens   int64    `json:"max_tokens"`
		Temperature *float64 `json:"temperature"`
		TopP        *float64 `json:"top_p"`
		Stop        []string `json:"stop"`
	}
	if err := json.Unmarshal(chat, &req); err != nil {
		t.Fatalf("chat request is not JSON: %v\n%s", err, chat)
	}
	got := shared{MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP, Stop: req.Stop}
	for _, m := range req.Messages {
		got.Roles = append(got.Roles, m.Role)
		var s string
		var parts []struct{ Type, Text string }
		switch {
		case string(m.Content) == "null":
		case json.Unmarshal(m.Content, &s) == nil:
		case json.Unmarshal(m.Content, &parts) == nil:
			for _, p := range parts {
				s += p.Text
			}
		default:
			t.Fatalf("content %s", m.Content)
		}
		got.Texts = append(got.Texts, s)
		for _, tc := range m.ToolCalls {
			got.ToolNames = append(got.ToolNames, tc.Function.Name)
			got.ToolArgs = append(got.ToolArgs, tc.Function.Arguments)
		}
	}
	return got
}

func TestToChatKeepsSharedFields(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		body, want := randomRequest(r)
		chat, e := ToChat(body, "")
		if e != nil {
			t.Fatalf("%s\n%s", e.Message, body)
		}
		got := decodeShared(t, chat)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("request %s\nchat %s\ngot  %+v\nwant %+v", body, chat, got, want)
		}
	}
}

func FuzzToChat(f *testing.F) {
	r := rand.New(rand.NewSource(2))
	for i := 0; i < 8; i++ {
		body, _ := randomRequest(r)
		f.Add(body)
	}
	f.Add([]byte(`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"a","data":"b"}}]}],"tools":[{"name":"x","input_schema":{}}],"tool_choice":{"type":"tool","name":"x"}}`))
	f.Add([]byte("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, e := ToChat(body, "")
		if e != nil {
			if e.Status != 400 || !json.Valid(e.Body()) {
				t.Fatalf("bad error %+v", e)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("body %q is not JSON but was translated", body)
		}
		if !json.Valid(out) {
			t.Fatalf("output is not JSON: %s", out)
		}
	})
}
