package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestExtract(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		model      string
		stream     bool
		messages   string // raw value of messages, "" if absent
		wantCode   string // error code, "" for success
		wantParam  string
		wantStatus int
	}{
		{name: "chat", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}`, model: "gpt-4o", stream: true, messages: `[{"role":"user","content":"hi"}]`},
		{name: "whitespace", body: " \n\t{ \"model\" : \"m\" , \"stream\" : false }\r\n", model: "m"},
		{name: "stream null", body: `{"model":"m","stream":null}`, model: "m"},
		{name: "escaped model", body: `{"model":"gpt\u002d4"}`, model: "gpt-4"},
		{name: "escaped key", body: `{"mod\u0065l":"m2"}`, model: "m2"},
		{name: "duplicate keys last wins", body: `{"model":"a","model":"b","stream":true,"stream":false}`, model: "b"},
		{name: "nested model ignored", body: `{"x":{"model":"inner"},"model":"outer"}`, model: "outer"},
		{name: "unicode", body: `{"model":"модель","messages":[{"content":"日本語 \ud83d\ude00"}]}`, model: "модель", messages: `[{"content":"日本語 \ud83d\ude00"}]`},
		{name: "numbers", body: `{"model":"m","temperature":-0.5e+2,"n":0,"top_p":1.0E-3}`, model: "m"},
		{name: "empty", body: ``, wantCode: "invalid_request", wantStatus: 400},
		{name: "spaces only", body: "   ", wantCode: "invalid_request", wantStatus: 400},
		{name: "array", body: `[{"model":"m"}]`, wantCode: "invalid_request", wantStatus: 400},
		{name: "string", body: `"model"`, wantCode: "invalid_request", wantStatus: 400},
		{name: "truncated", body: `{"model":"m","messages":[{"role":"user"`, wantCode: "invalid_json", wantStatus: 400},
		{name: "trailing comma", body: `{"model":"m",}`, wantCode: "invalid_json", wantStatus: 400},
		{name: "trailing data", body: `{"model":"m"} {}`, wantCode: "invalid_json", wantStatus: 400},
		{name: "single quotes", body: `{'model':'m'}`, wantCode: "invalid_json", wantStatus: 400},
		{name: "bad escape", body: `{"model":"a\x"}`, wantCode: "invalid_json", wantStatus: 400},
		{name: "raw newline in string", body: "{\"model\":\"a\nb\"}", wantCode: "invalid_json", wantStatus: 400},
		{name: "leading zero", body: `{"model":"m","n":01}`, wantCode: "invalid_json", wantStatus: 400},
		{name: "bare minus", body: `{"model":"m","n":-}`, wantCode: "invalid_json", wantStatus: 400},
		{name: "NaN", body: `{"model":"m","t":NaN}`, wantCode: "invalid_json", wantStatus: 400},
		{name: "missing model", body: `{"messages":[]}`, wantCode: "missing_model", wantParam: "model", wantStatus: 400},
		{name: "model number", body: `{"model":4}`, wantCode: "invalid_type", wantParam: "model", wantStatus: 400},
		{name: "model null", body: `{"model":null}`, wantCode: "invalid_type", wantParam: "model", wantStatus: 400},
		{name: "stream string", body: `{"model":"m","stream":"yes"}`, wantCode: "invalid_type", wantParam: "stream", wantStatus: 400},
		{name: "messages object", body: `{"model":"m","messages":{"role":"user"}}`, wantCode: "invalid_type", wantParam: "messages", wantStatus: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Extract([]byte(tc.body))
			if tc.wantCode != "" {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("Extract(%q) error = %v, want *Error code %q", tc.body, err, tc.wantCode)
				}
				if e.Code != tc.wantCode || e.Param != tc.wantParam || e.Status != tc.wantStatus {
					t.Fatalf("Extract(%q) = code %q param %q status %d, want %q %q %d (%s)", tc.body, e.Code, e.Param, e.Status, tc.wantCode, tc.wantParam, tc.wantStatus, e.Message)
				}
				return
			}
			if err != nil {
				t.Fatalf("Extract(%q) error: %v", tc.body, err)
			}
			if got := r.ModelName(); got != tc.model {
				t.Errorf("Extract(%q).ModelName() = %q, want %q", tc.body, got, tc.model)
			}
			if r.Stream != tc.stream {
				t.Errorf("Extract(%q).Stream = %v, want %v", tc.body, r.Stream, tc.stream)
			}
			var msgs string
			if r.Messages.Len() > 0 {
				msgs = tc.body[r.Messages.Start:r.Messages.End]
			}
			if msgs != tc.messages {
				t.Errorf("Extract(%q).Messages = %q, want %q", tc.body, msgs, tc.messages)
			}
			if tok := tc.body[r.ModelSpan.Start:r.ModelSpan.End]; tok[0] != '"' || tok[len(tok)-1] != '"' {
				t.Errorf("Extract(%q).ModelSpan = %q, want a string token", tc.body, tok)
			}
		})
	}
}

func TestExtractDeepNesting(t *testing.T) {
	ok := `{"model":"m","x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`
	if _, err := Extract([]byte(ok)); err != nil {
		t.Fatalf("Extract(depth 10000) error: %v", err)
	}
	deep := `{"model":"m","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`
	if _, err := Extract([]byte(deep)); err == nil {
		t.Fatalf("Extract(depth 10001) succeeded, want an error (encoding/json rejects it too: %v)", json.Unmarshal([]byte(deep), new(any)))
	}
}

func TestErrorJSON(t *testing.T) {
	e := &Error{Status: 404, Message: `no "such" model`, Type: TypeInvalidRequest, Param: "model", Code: "model_not_found"}
	var got struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(e.AppendJSON(nil), &got); err != nil {
		t.Fatalf("AppendJSON gave invalid JSON: %v", err)
	}
	if got.Error.Message != e.Message || got.Error.Type != e.Type || *got.Error.Param != "model" || *got.Error.Code != "model_not_found" {
		t.Fatalf("AppendJSON round trip = %+v", got.Error)
	}
	raw := string((&Error{Message: "x", Type: TypeServer}).AppendJSON(nil))
	if !strings.Contains(raw, `"param":null`) || !strings.Contains(raw, `"code":null`) {
		t.Fatalf("empty param/code not null: %s", raw)
	}
}

func TestSplice(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":"model"}],"model":"auto","stream":true}`)
	r, err := Extract(body)
	if err != nil {
		t.Fatal(err)
	}
	orig := append([]byte(nil), body...)
	out := AppendSplice(nil, body, r.ModelSpan, Quote(`llama "3"`))
	want := `{"messages":[{"role":"user","content":"model"}],"model":"llama \"3\"","stream":true}`
	if string(out) != want {
		t.Fatalf("AppendSplice = %s, want %s", out, want)
	}
	if !bytes.Equal(body, orig) {
		t.Fatalf("Splice modified its input")
	}
	r2, err := Extract(out)
	if err != nil || r2.ModelName() != `llama "3"` || !r2.Stream {
		t.Fatalf("Extract(spliced) = %+v, %v", r2, err)
	}
}

// oracle is what encoding/json says Extract should do with body.
func oracle(body []byte) (model string, stream bool, ok bool) {
	if !json.Valid(body) {
		return "", false, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return "", false, false // valid JSON but not an object
	}
	raw, has := m["model"]
	if !has || json.Unmarshal(raw, &model) != nil || raw[0] != '"' {
		return "", false, false
	}
	if raw, has := m["stream"]; has {
		var p *bool
		if json.Unmarshal(raw, &p) != nil {
			return "", false, false
		}
		stream = p != nil && *p
	}
	if raw, has := m["messages"]; has && raw[0] != '[' {
		return "", false, false
	}
	return model, stream, true
}

// replaceInvalid replaces each invalid UTF-8 byte with U+FFFD, as encoding/json does.
func replaceInvalid(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

func FuzzExtract(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"a\u0062c","stream":null}`,
		`{"mod\u0065l":"x"}`,
		`{"model":"m","x":[1,-2.5e3,true,false,null,{"a":"b"}]}`,
		`{"model":"m",}`, `[]`, `"s"`, `{"model":1}`, "{\"model\":\"\xff\"}",
		`{"model":"m","stream":"true"}`, `{"model":"m","messages":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Extract(body)
		model, stream, ok := oracle(body)
		if (err == nil) != ok {
			t.Fatalf("Extract(%q) err = %v, encoding/json says ok = %v", body, err, ok)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Fatalf("Extract(%q) err = %#v, want a 400 *Error", body, err)
			}
			return
		}
		// Invalid UTF-8 is replaced by encoding/json; compare valid names only.
		if got := r.ModelName(); got != model && replaceInvalid(got) != model {
			t.Fatalf("Extract(%q).ModelName() = %q, want %q", body, got, model)
		}
		if r.Stream != stream {
			t.Fatalf("Extract(%q).Stream = %v, want %v", body, r.Stream, stream)
		}
		// Splicing any name keeps the document valid and changes only the model.
		name := "spliced-\"name\"-\u00e9"
		out := AppendSplice(nil, body, r.ModelSpan, Quote(name))
		r2, err := Extract(out)
		if err != nil {
			t.Fatalf("Extract(splice(%q)) error: %v", body, err)
		}
		if r2.ModelName() != name || r2.Stream != r.Stream {
			t.Fatalf("Extract(splice(%q)) = model %q stream %v", body, r2.ModelName(), r2.Stream)
		}
		var before, after map[string]json.RawMessage
		_ = json.Unmarshal(body, &before)
		_ = json.Unmarshal(out, &after)
		delete(before, "model")
		delete(after, "model")
		if len(before) != len(after) {
			t.Fatalf("splice changed the key set: %q -> %q", body, out)
		}
		for k, v := range before {
			if !bytes.Equal(v, after[k]) {
				t.Fatalf("splice changed %q: %s -> %s", k, v, after[k])
			}
		}
	})
}

func BenchmarkExtract(b *testing.B) {
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Can my landlord keep my deposit for normal wear and tear? I moved out last month and the flat was clean."}],"max_tokens":256,"temperature":0.7,"stream":true}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Extract(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExtractLong is a 2 KB prompt, most of it one string: the word
// at a time scan of strings.
func BenchmarkExtractLong(b *testing.B) {
	para := "I moved out of my apartment last month and my landlord is refusing to return the security deposit. He says the carpet needs replacing. "
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat(para, 15) + `\n\"Is that legal?\""}],"max_tokens":64}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Extract(body); err != nil {
			b.Fatal(err)
		}
	}
}
