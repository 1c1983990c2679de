package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// spliceLikeUpstream is the body router/proxy sends upstream when it
// rewrites the model: the bytes before the model token, the pool's token,
// the bytes after it, with Content-Length computed from the three.
func spliceLikeUpstream(body []byte, span Span, tok []byte) (out []byte, contentLength int) {
	contentLength = len(body) - span.Len() + len(tok)
	out = append(out, body[:span.Start]...)
	out = append(out, tok...)
	out = append(out, body[span.End:]...)
	return out, contentLength
}

// decodeObject decodes body as encoding/json does for an upstream that keeps
// numbers exact: duplicate keys resolve to the last.
func decodeObject(body []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

func FuzzSplice(f *testing.F) {
	for _, s := range []struct{ body, name string }{
		{`{"model":"auto","messages":[{"role":"user","content":"hi"}],"stream":true}`, "llama-3.1-8b-instruct"},
		{`{"model":"a","model":"b"}`, "c"},
		{`{"model":"a","mod\u0065l":"b","stream":false}`, `q"u\o</te>`},
		{`{"mod\u0065l":"gpt\u002d4","n":1.50,"x":{"model":"inner"}}`, ""},
		{`{"model":"m","n":12345678901234567890123,"f":-0.0e-0}`, "\u2028\u2029&<>"},
		{"{\"model\":\"\xff\",\"k\xfe\":\"\xfd\"}", "\xff\xfe"},
		{` { "model" : "m" } `, "\x00\x1f\x7f"},
		{`{"model":"m","model":1}`, "x"}, // refused: the last model is not a string
	} {
		f.Add([]byte(s.body), s.name)
	}
	f.Fuzz(func(t *testing.T, body []byte, name string) {
		r, err := Extract(body)
		if err != nil {
			return
		}
		tok := Quote(name)
		out, cl := spliceLikeUpstream(body, r.ModelSpan, tok)
		if len(out) != cl {
			t.Fatalf("Content-Length %d for a %d-byte body", cl, len(out))
		}
		if got := AppendSplice(nil, body, r.ModelSpan, tok); !bytes.Equal(got, out) {
			t.Fatalf("AppendSplice = %q, the proxy sends %q", got, out)
		}
		before, err := decodeObject(body)
		if err != nil {
			t.Fatalf("Extract accepted %q, encoding/json refuses it: %v", body, err)
		}
		after, err := decodeObject(out)
		if err != nil {
			t.Fatalf("splicing %q into %q gave invalid JSON %q: %v", name, body, out, err)
		}
		// The model encoding/json sees is the one the gateway routed on, before
		// the splice, and the spliced name after it. Quote, like
		// encoding/json, turns invalid UTF-8 into U+FFFD.
		if m, _ := before["model"].(string); m != replaceInvalid(r.ModelName()) {
			t.Fatalf("Extract(%q) routes on model %q, an upstream would read %q", body, r.ModelName(), m)
		}
		if m, _ := after["model"].(string); m != replaceInvalid(name) {
			t.Fatalf("splicing %q into %q: upstream reads model %q", name, body, m)
		}
		delete(before, "model")
		delete(after, "model")
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("splicing %q into %q changed more than the model:\n%v\n%v", name, body, before, after)
		}
		// The gateway reads the spliced body as an upstream does.
		r2, err := Extract(out)
		if err != nil || r2.ModelName() != replaceInvalid(name) || r2.Stream != r.Stream {
			t.Fatalf("Extract(%q) = model %q stream %v, %v; want %q %v", out, r2.ModelName(), r2.Stream, err, name, r.Stream)
		}
	})
}
