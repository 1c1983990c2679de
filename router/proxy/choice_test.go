package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/pool"
)

// A prefix pool keeps a conversation on its replica, says why in
// X-Triage-Replica-Choice, and retries a replica that refuses connections
// on another with the same key.
func TestForwardPrefixChoice(t *testing.T) {
	var urls []string
	for i := range 3 {
		name := string(rune('a' + i))
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Upstream", name)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"choices":[]}`))
		}))
		t.Cleanup(up.Close)
		urls = append(urls, up.URL)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // refuses connections
	urls = append(urls, dead.URL)
	p := newPool(t, func(c *pool.Config) { c.Balance = pool.BalancePrefix }, urls...)
	tr := &Transport{}
	pol := PolicyOf(p.Config())
	retried := 0
	sys := strings.Repeat("You answer questions about the firm's contracts. ", 30)
	send := func(turns int) (upstream, choice string) {
		t.Helper()
		body := `{"model":"served-model","messages":[{"role":"system","content":"` + sys + `"}`
		for i := range turns {
			body += `,{"role":"user","content":"question ` + strings.Repeat("x", 300) + string(rune('0'+i)) + `"}`
			if i < turns-1 {
				body += `,{"role":"assistant","content":"an answer"}`
			}
		}
		body += `]}`
		x, err := openai.Extract([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		var k pool.Key
		p.Key(&k, []byte(body)[x.Messages.Start:x.Messages.End], openai.FirstUserEnd([]byte(body), &x)-x.Messages.Start)
		rec := httptest.NewRecorder()
		res := tr.Forward(context.Background(), rec, p, &pol, &Request{Method: "POST", Path: "/v1/chat/completions",
			Header: http.Header{}, Body: []byte(body), Start: time.Now(), Key: &k, ExplainChoice: true})
		if res.Attempts > 1 {
			retried++
		}
		if res.Status != 200 {
			t.Fatalf("turn %d: status %d (%v)", turns, res.Status, res.Err)
		}
		if got := rec.Header().Get("X-Triage-Replica-Choice"); got != res.Choice.String() {
			t.Fatalf("turn %d: header %q, result's choice %v", turns, got, res.Choice)
		}
		return rec.Header().Get("X-Upstream"), rec.Header().Get("X-Triage-Replica-Choice")
	}
	first, c := send(1)
	if c != "prefix_miss" && c != "prefix_hit" {
		t.Fatalf("turn 1: choice %q", c)
	}
	for turns := 2; turns <= 5; turns++ {
		up, c := send(turns)
		if up != first || c != "prefix_hit" {
			t.Fatalf("turn %d went to %s (%s), want %s (prefix_hit)", turns, up, c, first)
		}
	}
	// Many conversations: some have the dead replica as their home; each
	// is retried elsewhere and answered.
	for i := range 40 {
		sys = strings.Repeat("other system prompt ", 5+i)
		if _, c := send(1); c == "" {
			t.Fatal("no choice header")
		}
	}
	if retried == 0 {
		t.Fatal("no conversation had the dead replica as its home: the retry was not exercised")
	}
}
