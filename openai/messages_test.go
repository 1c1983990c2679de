package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestConversationText(t *testing.T) {
	chat := `{"model":"auto","messages":[
		{"role":"system","content":"You are helpful."},
		{"role":"user","content":"first question"},
		{"role":"assistant","content":"an answer"},
		{"role":"user","content":[{"type":"text","text":"look at \"this\""},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"caf\u00e9 \ud83d\ude00"}]},
		{"role":"tool","content":"tool output"},
		{"content":"no role","role":"user"}
	]}`
	for _, tc := range []struct {
		name string
		conv Conversation
		body string
		want string
	}{
		{"last user turn", Conversation{}, chat, "no role"},
		{"three turns, most recent first", Conversation{UserTurns: 3}, chat, "no role\n\nlook at \"this\"\ncafé 😀\n\nfirst question"},
		{"with system", Conversation{UserTurns: 1, System: true}, chat, "no role\n\nYou are helpful."},
		{"capped", Conversation{UserTurns: 3, MaxBytes: 12}, chat, "no role\n\nloo"},
		{"cap inside a rune", Conversation{MaxBytes: 5}, `{"model":"m","messages":[{"role":"user","content":"abcdé"}]}`, "abcd"},
		{"completions prompt", Conversation{}, `{"model":"m","prompt":"Once\tupon"}`, "Once\tupon"},
		{"prompt array", Conversation{}, `{"model":"m","prompt":[1,"second",[2]]}`, "second"},
		{"embeddings input", Conversation{}, `{"model":"m","input":["a","b"]}`, "a"},
		{"responses string input", Conversation{}, `{"model":"m","input":"explain rebase"}`, "explain rebase"},
		{"responses items", Conversation{UserTurns: 2, System: true}, `{"model":"m","instructions":"be brief","input":[{"role":"user","content":"first"},{"type":"function_call_output","call_id":"c","output":"x"},{"type":"message","role":"user","content":[{"type":"input_text","text":"second"}]}]}`, "second\n\nfirst\n\nbe brief"},
		{"responses items, no instructions wanted", Conversation{}, `{"model":"m","instructions":"be brief","input":[{"role":"user","content":"q"}]}`, "q"},
		{"no user message", Conversation{}, `{"model":"m","messages":[{"role":"system","content":"s"}]}`, ""},
		{"null content", Conversation{}, `{"model":"m","messages":[{"role":"user","content":null}]}`, ""},
		{"lone surrogate", Conversation{}, `{"model":"m","messages":[{"role":"user","content":"a\ud800b"}]}`, "a\uFFFDb"},
		// Keys are read as the upstream reads them, escapes decoded: a
		// client cannot hide a turn from the classifier by escaping a key.
		{"escaped keys", Conversation{}, `{"model":"m","messages":[{"r\u006fle":"user","c\u006fntent":[{"type":"text","t\u0065xt":"hidden"}]}]}`, "hidden"},
		{"cap before an escape", Conversation{MaxBytes: 5}, `{"model":"m","messages":[{"role":"user","content":"abcd\u00e9"}]}`, "abcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Extract([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			got := string(tc.conv.AppendText(nil, []byte(tc.body), &r))
			if got != tc.want {
				t.Fatalf("AppendText = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestConversationTextAllocs(t *testing.T) {
	body := []byte(`{"model":"auto","messages":[{"role":"system","content":"s"},{"role":"user","content":"Can my landlord keep my deposit?"}]}`)
	r, _ := Extract(body)
	dst := make([]byte, 0, 1024)
	c := Conversation{UserTurns: 3}
	if n := testing.AllocsPerRun(100, func() { dst = c.AppendText(dst[:0], body, &r) }); n != 0 {
		t.Fatalf("AppendText allocates %v times per call", n)
	}
}

// FuzzConversationText: any body Extract accepts yields text without
// panicking, and the last user turn matches encoding/json's reading.
func FuzzConversationText(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi \u00e9"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"user","content":"b\nc"}]}`))
	f.Add([]byte(`{"model":"m","prompt":["x"]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Extract(body)
		if err != nil {
			return
		}
		got := string(Conversation{}.AppendText(nil, body, &r))
		if r.Messages.Len() == 0 {
			return
		}
		// Maps, not structs: encoding/json matches struct fields without
		// regard to case, the upstream (Python) does not.
		var req struct {
			Messages []map[string]json.RawMessage `json:"messages"`
		}
		if json.Unmarshal(body, &req) != nil {
			return // e.g. messages holding non-objects
		}
		want := ""
		for i := len(req.Messages) - 1; i >= 0; i-- {
			var role string
			if json.Unmarshal(req.Messages[i]["role"], &role) != nil || role != "user" {
				continue
			}
			var s string
			if json.Unmarshal(req.Messages[i]["content"], &s) == nil {
				want = s
			} else {
				want = "\x00skip"
			}
			break
		}
		if want == "\x00skip" || strings.ContainsRune(want, '\uFFFD') {
			return
		}
		if len(want) > 16<<10 {
			want = want[:len(got)]
		}
		if got != want && replaceInvalid(got) != want {
			t.Fatalf("AppendText(%q) = %q, want %q", body, got, want)
		}
	})
}

// A conversation keeps its fingerprint as it grows; another conversation,
// or another system prompt, has another.
func TestFingerprint(t *testing.T) {
	fp := func(body string) uint64 {
		t.Helper()
		r, err := Extract([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return Fingerprint([]byte(body), &r)
	}
	turn1 := fp(`{"model":"auto","messages":[{"role":"system","content":"You code."},{"role":"user","content":"Write a Go HTTP server"}]}`)
	turn3 := fp(`{"model":"auto","messages":[{"role":"system","content":"You code."},{"role":"user","content":"Write a Go HTTP server"},{"role":"assistant","content":"package main..."},{"role":"user","content":"now add TLS"},{"role":"assistant","content":"..."},{"role":"user","content":"and tests?"}]}`)
	other := fp(`{"model":"auto","messages":[{"role":"system","content":"You code."},{"role":"user","content":"Write a Go gRPC server"}]}`)
	sys := fp(`{"model":"auto","messages":[{"role":"system","content":"You cook."},{"role":"user","content":"Write a Go HTTP server"}]}`)
	if turn1 == 0 || turn1 != turn3 {
		t.Fatalf("the same conversation: %x then %x", turn1, turn3)
	}
	if other == turn1 || sys == turn1 {
		t.Fatalf("other conversations share the fingerprint %x", turn1)
	}
	if got := fp(`{"model":"m","prompt":"hi"}`); got != 0 {
		t.Fatalf("a completion has fingerprint %x, want 0", got)
	}
}

func TestFirstUserEnd(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"},{"role":"assistant","content":"a"},{"role":"user","content":"q2"}]}`,
			`{"role":"user","content":"q1"}`},
		{`{"model":"m","messages":[{"content":"q1","role":"user"}]}`, `{"content":"q1","role":"user"}`},
		{`{"model":"m","messages":[{"role":"system","content":"s"}]}`, ""},
		{`{"model":"m","prompt":"p"}`, ""},
	} {
		r, err := Extract([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		end := FirstUserEnd([]byte(tc.body), &r)
		if tc.want == "" {
			if end != 0 {
				t.Errorf("FirstUserEnd(%s) = %d, want 0", tc.body, end)
			}
			continue
		}
		if got := tc.body[:end]; !strings.HasSuffix(got, tc.want) {
			t.Errorf("FirstUserEnd(%s) ends the prefix at %q, want it to end with %s", tc.body, got, tc.want)
		}
	}
}
