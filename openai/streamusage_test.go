package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// applyEdit is the body an upstream receives: body with e applied.
func applyEdit(body []byte, e Edit) []byte {
	out := append([]byte{}, body[:e.Span.Start]...)
	out = append(out, e.Tok...)
	return append(out, body[e.Span.End:]...)
}

func TestUsageEdit(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string // want "": no edit
	}{
		{"no stream", `{"model":"m","messages":[]}`, ""},
		{"stream false", `{"model":"m","stream":false}`, ""},
		{"no options", `{"model":"m","stream":true}`, `{"stream_options":{"include_usage":true},"model":"m","stream":true}`},
		{"leading space", " \n{ \"model\":\"m\",\"stream\":true}", " \n{\"stream_options\":{\"include_usage\":true}, \"model\":\"m\",\"stream\":true}"},
		{"null options", `{"model":"m","stream":true,"stream_options":null}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{"empty options", `{"model":"m","stream":true,"stream_options":{ }}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{"other options", `{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}}`},
		{"asked not", `{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{"asked null", `{"model":"m","stream":true,"stream_options":{"include_usage" : null }}`, `{"model":"m","stream":true,"stream_options":{"include_usage" : true }}`},
		{"asked", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"escaped key asked", `{"model":"m","stream":true,"stream_options":{"include\u005fusage":true}}`, ""},
		{"duplicate, last false", `{"model":"m","stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true,"include_usage":true}}`},
		{"duplicate options, last wins", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"stream_options":{}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":true}}`},
		{"options not an object", `{"model":"m","stream":true,"stream_options":"yes"}`, ""},
		{"include_usage not a boolean", `{"model":"m","stream":true,"stream_options":{"include_usage":"yes"}}`, ""},
	} {
		r, err := Extract([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		e, ok := UsageEdit([]byte(tc.body), &r)
		if ok != (tc.want != "") {
			t.Errorf("%s: edit %v, want %v", tc.name, ok, tc.want != "")
			continue
		}
		if !ok {
			continue
		}
		if got := string(applyEdit([]byte(tc.body), e)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// FuzzUsageEdit: for any body Extract accepts, the edited body is still
// valid JSON, decodes to the same members but for stream_options, asks
// for usage, keeps every other stream option, and never touches the
// model token.
func FuzzUsageEdit(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":false,"x":[1,{"a":"}"}]}}`,
		`{"stream_options":null,"model":"m\u0041","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","stream":true,"stream_options":{}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r, err := Extract([]byte(body))
		if err != nil {
			return
		}
		e, ok := UsageEdit([]byte(body), &r)
		if !ok {
			if r.Stream && json.Valid([]byte(body)) && asksUsage(t, []byte(body)) == "" {
				// Left alone only when the client asks or its options
				// are something the upstream refuses.
				var top struct {
					SO json.RawMessage `json:"stream_options"`
				}
				_ = json.Unmarshal([]byte(body), &top)
				var so map[string]any
				if json.Unmarshal(top.SO, &so) == nil && so != nil {
					if v, ok := so["include_usage"]; !ok || v == false || v == nil {
						t.Fatalf("no edit for %s", body)
					}
				}
			}
			return
		}
		if e.Span.Start < r.ModelSpan.End && r.ModelSpan.Start < e.Span.End ||
			(e.Span.Len() == 0 && e.Span.Start > r.ModelSpan.Start && e.Span.Start < r.ModelSpan.End) {
			t.Fatalf("edit %+v overlaps the model %+v", e.Span, r.ModelSpan)
		}
		out := applyEdit([]byte(body), e)
		if !json.Valid(out) {
			t.Fatalf("edited body is not JSON: %s", out)
		}
		if msg := asksUsage(t, out); msg != "" {
			t.Fatalf("%s: %s", msg, out)
		}
		var before, after map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &before) != nil || json.Unmarshal(out, &after) != nil {
			return // duplicate-key or case quirks encoding/json reads its own way
		}
		so0, so1 := before["stream_options"], after["stream_options"]
		delete(before, "stream_options")
		delete(after, "stream_options")
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("members changed:\n%s\n%s", body, out)
		}
		var o0, o1 map[string]json.RawMessage
		if json.Unmarshal(so0, &o0) == nil && json.Unmarshal(so1, &o1) == nil {
			delete(o0, "include_usage")
			delete(o1, "include_usage")
			if len(o0) > 0 && !reflect.DeepEqual(o0, o1) {
				t.Fatalf("stream options changed:\n%s\n%s", body, out)
			}
		}
	})
}

// asksUsage decodes body as Python's and Go's parsers do (last duplicate
// wins) and says what is wrong if it does not ask for usage.
func asksUsage(t *testing.T, body []byte) string {
	t.Helper()
	var top struct {
		StreamOptions *struct {
			IncludeUsage *bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return "" // case-folded keys and the like: nothing to judge
	}
	if top.StreamOptions == nil || top.StreamOptions.IncludeUsage == nil || !*top.StreamOptions.IncludeUsage {
		return "does not ask for usage"
	}
	return ""
}

func TestUsageEvent(t *testing.T) {
	for _, tc := range []struct {
		name, ev string
		want     Usage
		ok       bool
	}{
		{"vllm", `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":11,"completion_tokens":2}}` + "\n\n", Usage{9, 2, 11}, true},
		{"openai, no space, crlf", "data:{\"choices\": [ ],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\r\n\r\n", Usage{9, 2, 11}, true},
		{"no blank line", `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`, Usage{1, 1, 2}, true},
		{"token chunk", `data: {"choices":[{"delta":{"content":"hi"}}],"usage":null}` + "\n\n", Usage{}, false},
		{"choices and usage together", `data: {"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n\n", Usage{}, false},
		{"no choices key", `data: {"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n\n", Usage{}, false},
		{"usage null", `data: {"choices":[],"usage":null}` + "\n\n", Usage{}, false},
		{"usage in a string", `data: {"choices":[],"x":"\"usage\":{}"}` + "\n\n", Usage{}, false},
		{"done", "data: [DONE]\n\n", Usage{}, false},
		{"two lines", "event: x\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n", Usage{}, false},
		{"trailing garbage", `data: {"choices":[],"usage":{"prompt_tokens":1}}x` + "\n\n", Usage{}, false},
		{"cut", `data: {"choices":[],"usage":{"prompt_tokens":1}`, Usage{}, false},
		{"comment", ": ping\n\n", Usage{}, false},
	} {
		got, ok := UsageEvent([]byte(tc.ev))
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzUsageEvent: on any bytes UsageEvent never panics, and whatever it
// calls a usage event encoding/json reads as a chunk with no choices and
// those counts.
func FuzzUsageEvent(f *testing.F) {
	f.Add([]byte(`data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}` + "\n\n"))
	f.Add([]byte(`data: {"choices":[{"delta":{}}],"usage":null}` + "\n\n"))
	f.Add([]byte("data: [DONE]\n\n"))
	f.Fuzz(func(t *testing.T, ev []byte) {
		u, ok := UsageEvent(ev)
		if !ok {
			return
		}
		data := bytes.TrimRight(ev, "\r\n")
		data = bytes.TrimPrefix(data, []byte("data:"))
		var chunk map[string]json.RawMessage // exact keys, the last duplicate wins
		if err := json.Unmarshal(data, &chunk); err != nil {
			t.Fatalf("%q: encoding/json: %v", ev, err)
		}
		var choices []json.RawMessage
		if err := json.Unmarshal(chunk["choices"], &choices); err != nil || choices == nil || len(choices) != 0 {
			t.Fatalf("%q: choices %s", ev, chunk["choices"])
		}
		var usage map[string]json.RawMessage
		if err := json.Unmarshal(chunk["usage"], &usage); err != nil || usage == nil {
			t.Fatalf("%q: usage %s", ev, chunk["usage"])
		}
		count := func(k string) int64 {
			var n int64
			if v, ok := usage[k]; ok {
				if err := json.Unmarshal(v, &n); err != nil {
					t.Fatalf("%q: %s: %v", ev, k, err)
				}
			}
			return n
		}
		if p, c := count("prompt_tokens"), count("completion_tokens"); u.PromptTokens != p || u.CompletionTokens != c {
			t.Fatalf("%q: %+v, encoding/json %d %d", ev, u, p, c)
		}
	})
}
