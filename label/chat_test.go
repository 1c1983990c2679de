package label

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestChatClient: what Ask sends, and what it makes of each kind of
// answer: a completion, one without usage, a 200 that is not a
// completion, and a refusal.
func TestChatClient(t *testing.T) {
	var got struct {
		Model       string
		Temperature *float64
		MaxTokens   int `json:"max_tokens"`
		Stream      bool
		Messages    []struct{ Role, Content string }
	}
	var auth string
	reply := ""
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		auth = r.Header.Get("Authorization")
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		w.WriteHeader(status)
		w.Write([]byte(reply))
	}))
	defer srv.Close()
	c := &ChatClient{URL: srv.URL + "/", Model: "judge-model", Key: "sk-triage-x", MaxTokens: 8}
	ask := func() (Answer, error) {
		return c.Ask(context.Background(), "the instruction", "is a verbal contract binding?")
	}

	reply = `{"choices":[{"message":{"role":"assistant","content":"law"}}],"usage":{"total_tokens":57}}`
	a, err := ask()
	if err != nil || a.Text != "law" || a.Tokens != 57 {
		t.Fatalf("a completion: %+v, %v", a, err)
	}
	if got.Model != "judge-model" || got.Temperature == nil || *got.Temperature != 0 || got.MaxTokens != 8 || got.Stream ||
		len(got.Messages) != 2 || got.Messages[0] != (struct{ Role, Content string }{"system", "the instruction"}) ||
		got.Messages[1] != (struct{ Role, Content string }{"user", "is a verbal contract binding?"}) || auth != "Bearer sk-triage-x" {
		t.Fatalf("sent %+v with Authorization %q", got, auth)
	}
	// No usage: counted at what it may have cost.
	reply = `{"choices":[{"message":{"content":"Law "}}]}`
	if a, err := ask(); err != nil || a.Text != "Law " || a.Tokens != 8+len("is a verbal contract binding?")/4+len("the instruction")/4 {
		t.Fatalf("no usage: %+v, %v", a, err)
	}
	// A 200 that is not a completion says nothing: no text, not an error.
	for _, body := range []string{"<html>oops</html>", `{"choices":[]}`, `{"choices":[{"message":{"content":null}}]}`} {
		reply = body
		if a, err := ask(); err != nil || a.Text != "" {
			t.Fatalf("200 %q: %+v, %v", body, a, err)
		}
	}
	// A refusal is an error saying so, with the gateway's message.
	status, reply = http.StatusUnauthorized, `{"error":{"message":"invalid API key","type":"invalid_request_error"}}`
	_, err = ask()
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 401 || se.Message != "invalid API key" || !Refusal(err) {
		t.Fatalf("401: %v", err)
	}
	status, reply = http.StatusTooManyRequests, "slow down"
	if _, err := ask(); Refusal(err) || err == nil {
		t.Fatalf("429 is not a refusal: %v", err)
	}
}
