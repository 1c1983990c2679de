package openai

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/triagegw/triage/internal/jsonscan"
)

func TestScanUsage(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       Usage
		ok         bool
	}{
		{"json body", `{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`, Usage{12, 5, 17}, true},
		{"details and spaces", "{\"usage\" : {\"prompt_tokens\": 3, \"completion_tokens\": 4, \"total_tokens\": 7, \"prompt_tokens_details\": {\"cached_tokens\": 0}}}\n", Usage{3, 4, 7}, true},
		{"no total", `{"usage":{"prompt_tokens":3,"completion_tokens":4}}`, Usage{3, 4, 7}, true},
		{"responses", `{"id":"resp_1","output":[],"usage":{"input_tokens":8,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":13}}`, Usage{8, 5, 13}, true},
		{"responses stream", "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":8,\"output_tokens\":5,\"total_tokens\":13}}}\n\n", Usage{8, 5, 13}, true},
		{"stream with include_usage", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n" +
			"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\ndata: [DONE]\n\n", Usage{9, 2, 11}, true},
		{"stream without", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n", Usage{}, false},
		{"stream of nulls", "data: {\"usage\":null}\n\ndata: {\"usage\": null}\n\n", Usage{}, false},
		{"a key inside a string", `{"usage":{"prompt_tokens":1,"completion_tokens":1},"x":"say \"usage\":{\"prompt_tokens\":99}"}`, Usage{1, 1, 2}, true},
		{"escaped backslash before the key", `{"x":"a\\","usage":{"prompt_tokens":2,"completion_tokens":0}}`, Usage{2, 0, 2}, true},
		{"cut off", `{"usage":{"prompt_tokens":2,"completion_tok`, Usage{}, false},
		{"negative", `{"usage":{"prompt_tokens":-2,"completion_tokens":1}}`, Usage{}, false},
		{"not numbers", `{"usage":{"prompt_tokens":"2"}}`, Usage{}, false},
		{"endless object", `{"usage":{"a":"` + strings.Repeat("x", 4096) + `"}}`, Usage{}, false},
		{"empty", ``, Usage{}, false},
	} {
		got, ok := ScanUsage([]byte(tc.body))
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzScanUsage: on any bytes it never panics; on a body encoding/json
// writes (so the escaping is real) with the fuzzed text in a string
// before and after the usage object, it finds exactly that usage.
// FuzzUsageFields: on any object object() accepts, usageFields agrees with
// encoding/json wherever encoding/json reads whole numbers: the same
// counts, or both refuse.
func FuzzUsageFields(f *testing.F) {
	f.Add(`{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}`)
	f.Add(`{"prompt_tokens_details":{"cached_tokens":0},"prompt_tokens":5, "x":[1,"}"]}`)
	f.Add(`{"prompt_tokens":1.5}`)
	f.Fuzz(func(t *testing.T, s string) {
		if !strings.HasPrefix(s, "{") {
			return // ScanUsage hands object only what starts with a brace
		}
		obj, ok := object([]byte(s))
		if !ok {
			return
		}
		got, ok := usageFields(obj)
		// ScanUsage hands usageFields the bytes from the brace on: what
		// follows the object must not change its reading.
		if g2, ok2 := usageFields([]byte(s)); g2 != got || ok2 != ok {
			t.Fatalf("%s: %+v %v alone, %+v %v followed by %q", obj, got, ok, g2, ok2, s[len(obj):])
		}
		var want Usage
		var raw map[string]json.RawMessage
		if json.Unmarshal(obj, &raw) != nil {
			return // not JSON: usageFields may read it or not
		}
		for k := range raw {
			if l := strings.ToLower(k); l != k && (l == "prompt_tokens" || l == "completion_tokens" || l == "total_tokens") {
				return // encoding/json matches keys whatever their case; replicas send them lower-case
			}
		}
		jsonOK := json.Unmarshal(obj, &want) == nil
		for _, k := range []string{"prompt_tokens", "completion_tokens", "total_tokens"} {
			if v, has := raw[k]; has {
				if _, whole := digits(v); !whole {
					return // null, negative, fractional, exponent: encoding/json's reading differs by design
				}
			}
		}
		if ok != jsonOK || ok && got != want {
			t.Fatalf("%s: usageFields %+v %v, encoding/json %+v %v", obj, got, ok, want, jsonOK)
		}
	})
}

func FuzzScanUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":1}}`), "hello", `"usage":{"prompt_tokens":5}`, int64(3), int64(4))
	f.Add([]byte("data: {\"usage\":null}\n\n"), `\"usage\":{`, `"usage"`, int64(0), int64(0))
	f.Add([]byte(`"usage":{"prompt_tokens":1e3}`), "\\", "\\\\\"", int64(1<<40), int64(7))
	f.Fuzz(func(t *testing.T, raw []byte, before, after string, p, c int64) {
		ScanUsage(raw) // never panics
		if p < 0 || c < 0 || p > 1<<50 || c > 1<<50 {
			return
		}
		body, err := json.Marshal(struct {
			Before string `json:"content"`
			Usage  Usage  `json:"usage"`
			After  string `json:"note"`
		}{before, Usage{p, c, p + c}, after})
		if err != nil {
			t.Skip()
		}
		got, ok := ScanUsage(body)
		if !ok || got != (Usage{p, c, p + c}) {
			t.Fatalf("ScanUsage(%s) = %+v %v, want %d/%d", body, got, ok, p, c)
		}
		// And as the last event of a stream, after events with null usage
		// whose content is the fuzzed text.
		ev, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]string{"content": before + after}}}, "usage": nil})
		stream := "data: " + string(ev) + "\n\ndata: " + string(body) + "\n\ndata: [DONE]\n\n"
		if got, ok := ScanUsage([]byte(stream)); !ok || got != (Usage{p, c, p + c}) {
			t.Fatalf("in a stream: %+v %v", got, ok)
		}
	})
}

func TestExtractMaxTokens(t *testing.T) {
	for body, want := range map[string]int64{
		`{"model":"m","max_tokens":256}`:                                    256,
		`{"model":"m","max_completion_tokens":100,"max_tokens":50}`:         100,
		`{"model":"m","max_output_tokens":7}`:                               7,
		`{"model":"m","max_tokens":1.5}`:                                    0,
		`{"model":"m","max_tokens":"9"}`:                                    0,
		`{"model":"m","max_tokens":-3}`:                                     0,
		`{"model":"m","max_tokens":1e3}`:                                    0,
		`{"model":"m","max_tokens":99999999999999999999}`:                   0,
		`{"model":"m","messages":[{"role":"user","content":"max_tokens"}]}`: 0,
	} {
		r, err := Extract([]byte(body))
		if err != nil || r.MaxTokens != want {
			t.Errorf("%s: %d %v, want %d", body, r.MaxTokens, err, want)
		}
	}
}

// object returns the JSON object b starts with (up to its closing brace),
// if it is well formed and closes within maxUsageObject.
func object(b []byte) ([]byte, bool) {
	b = b[:min(len(b), maxUsageObject)]
	if len(b) == 0 || b[0] != '{' {
		return nil, false
	}
	s := jsonscan.New(b)
	if !s.Skip() {
		return nil, false
	}
	return b[:s.Pos()], true
}

// FuzzLastUsageKey holds lastUsageKey to bytes.LastIndex.
func FuzzLastUsageKey(f *testing.F) {
	for _, s := range []string{"", `"usage"`, `{"usage":{"prompt_tokens":1}}`, `gggg"usage"gggggggggg"usage"g`, `"usag"usage"`, `x"usage"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := lastUsageKey(b), bytes.LastIndex(b, []byte(`"usage"`)); got != want {
			t.Fatalf("%q: %d, want %d", b, got, want)
		}
	})
}
