package openai

import (
	"encoding/json"
	"slices"
	"testing"
)

// apply applies edits, sorted by start and otherwise in order, to body.
func apply(body []byte, edits ...Edit) []byte {
	slices.SortStableFunc(edits, func(a, b Edit) int { return a.Span.Start - b.Span.Start })
	var out []byte
	at := 0
	for _, e := range edits {
		out = append(append(out, body[at:e.Span.Start]...), e.Tok...)
		at = e.Span.End
	}
	return append(out, body[at:]...)
}

func TestSalt(t *testing.T) {
	const salt = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, body string
		client     string // ClientSalt's token
		refused    bool
	}{
		{name: "none", body: `{"model":"m","messages":[]}`},
		{name: "spaced", body: " {\n \"model\" : \"m\" , \"stream\": true }\n"},
		{name: "given", body: `{"model":"m","cache_salt":"theirs","messages":[]}`, client: `"theirs"`},
		{name: "given first", body: `{"cache_salt":"theirs","model":"m"}`, client: `"theirs"`},
		{name: "escaped key", body: `{"model":"m","cache\u005fsalt":"theirs"}`, client: `"theirs"`},
		{name: "null", body: `{"model":"m","cache_salt":null}`},
		{name: "twice", body: `{"cache_salt":"a","model":"m","cache_salt":"b"}`, refused: true},
		{name: "a number", body: `{"model":"m","cache_salt":7}`, refused: true},
		{name: "empty", body: `{"model":"m","cache_salt":""}`, refused: true},
		{name: "an object", body: `{"model":"m","cache_salt":{"a":"b"}}`, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			r, err := Extract(body)
			if err != nil {
				t.Fatal(err)
			}
			client, oe := ClientSalt(body, &r)
			if tc.refused {
				if oe == nil || oe.Status != 400 || oe.Param != "cache_salt" {
					t.Fatalf("ClientSalt(%s) = %s, %v; want a 400 naming cache_salt", body, client, oe)
				}
				return
			}
			if oe != nil || string(client) != tc.client {
				t.Fatalf("ClientSalt(%s) = %s, %v; want %s", body, client, oe, tc.client)
			}
			es := Salt(&r, []byte(salt))
			edits := []Edit{{r.ModelSpan, []byte(`"pool-model"`)}}
			if ed, ok := UsageEdit(body, &r); ok {
				edits = append(edits, ed)
			}
			out := apply(body, append(edits, es[:]...)...)
			var got, want map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("salted body %s: %v", out, err)
			}
			_ = json.Unmarshal(body, &want)
			want["cache_salt"], want["model"] = salt, "pool-model"
			if ed, ok := UsageEdit(body, &r); ok {
				_ = ed
				want["stream_options"] = map[string]any{"include_usage": true}
			}
			if g, w := mustMarshal(got), mustMarshal(want); g != w {
				t.Fatalf("salted %s into %s, want %s", body, out, w)
			}
		})
	}
}

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// FuzzSalt: whatever body Extract and ClientSalt accept, the salted body
// is JSON whose cache_salt, as encoding/json (and Python's json, the last
// of duplicates) reads it, is the gateway's, and whose other members are
// the client's.
func FuzzSalt(f *testing.F) {
	for _, s := range []string{`{"model":"m"}`, `{"model":"m","cache_salt":"x"}`, `{"cache_salt":null,"model":"m"}`,
		`{"model":"m","cache\u005fsalt":"x","stream":true}`, ` { "model" : "m" , "cache_salt" : "a\"b" } `} {
		f.Add([]byte(s))
	}
	const salt = "0123456789abcdef0123456789abcdef"
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Extract(body)
		if err != nil {
			return
		}
		if _, oe := ClientSalt(body, &r); oe != nil {
			return
		}
		es := Salt(&r, []byte(salt))
		out := apply(body, es[:]...)
		var got, want map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("salted %q into %q: %v", body, out, err)
		}
		if err := json.Unmarshal(body, &want); err != nil {
			return // JSON encoding/json refuses (invalid UTF-8, say) that the scanner takes
		}
		if string(got["cache_salt"]) != `"`+salt+`"` {
			t.Fatalf("salted %q into %q: cache_salt %s", body, out, got["cache_salt"])
		}
		delete(got, "cache_salt")
		delete(want, "cache_salt")
		if len(got) != len(want) {
			t.Fatalf("salted %q into %q: members changed", body, out)
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Fatalf("salted %q into %q: %s changed", body, out, k)
			}
		}
	})
}
