package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/openai"
)

const usageChunk = `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`

// stream is a replica's event stream with its usage chunk, events ended by
// nl+nl.
func stream(nl string) (full, stripped string) {
	evs := []string{
		`data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`data: {"id":"c","choices":[{"index":0,"delta":{"content":"usage "}}]}`,
		`data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		usageChunk,
		`data: [DONE]`,
	}
	for i, ev := range evs {
		full += ev + nl + nl
		if i != 3 {
			stripped += ev + nl + nl
		}
	}
	return full, stripped
}

// filtered runs the pieces through an sseFilter as the relay would.
func filtered(t testing.TB, pieces ...[]byte) (string, openai.Usage, bool) {
	t.Helper()
	rec := httptest.NewRecorder()
	r := &relayer{w: rec}
	f := sseFilters.Get().(*sseFilter)
	defer func() { f.reset(); sseFilters.Put(f) }()
	for _, p := range pieces {
		if err := f.write(r, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.end(r); err != nil {
		t.Fatal(err)
	}
	if int(r.n) != rec.Body.Len() {
		t.Fatalf("counted %d bytes sent, recorder has %d", r.n, rec.Body.Len())
	}
	return rec.Body.String(), f.usage, f.found
}

// The usage chunk is dropped and its counts kept however the stream is cut
// into reads, with LF or CRLF line ends.
func TestStripUsageCutAnywhere(t *testing.T) {
	for _, nl := range []string{"\n", "\r\n"} {
		full, want := stream(nl)
		b := []byte(full)
		for i := 0; i <= len(b); i++ {
			for _, j := range []int{i, i + 1, i + 7, (i + len(b)) / 2, len(b)} {
				if j < i || j > len(b) {
					continue
				}
				got, u, ok := filtered(t, b[:i], b[i:j], b[j:])
				if got != want || !ok || u != (openai.Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10}) {
					t.Fatalf("cut at %d,%d (nl %q): %q %+v %v", i, j, nl, got, u, ok)
				}
			}
		}
	}
}

// What is not a lone usage chunk passes untouched: a stream without one, a
// second usage chunk, an unfinished event at the end, an event beyond
// what is held back.
func TestStripUsageLeavesTheRest(t *testing.T) {
	plain := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n"
	if got, _, ok := filtered(t, []byte(plain)); got != plain || ok {
		t.Fatalf("%q %v", got, ok)
	}
	two := usageChunk + "\n\n" + usageChunk + "\n\ndata: [DONE]\n\n"
	if got, _, _ := filtered(t, []byte(two)); got != usageChunk+"\n\ndata: [DONE]\n\n" {
		t.Fatalf("two usage chunks: %q", got)
	}
	cut := "data: {\"choices\":[{\"delta\":{}}]}\n\ndata: {\"choi"
	if got, _, _ := filtered(t, []byte(cut[:20]), []byte(cut[20:])); got != cut {
		t.Fatalf("unfinished: %q", got)
	}
	huge := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("y", maxHeldEvent) + "\"}}]}\n\n"
	in := huge + usageChunk + "\n\n"
	got, _, ok := filtered(t, []byte(in[:maxHeldEvent+1]), []byte(in[maxHeldEvent+1:]))
	if got != in || ok {
		t.Fatalf("after an event larger than the hold: %d bytes, stripped %v", len(got), ok)
	}
}

// FuzzStripUsage: however a stream is cut into reads, the client gets the
// same bytes, and they are the stream with its first usage event (by
// openai.UsageEvent, on a naive split into events) taken out.
func FuzzStripUsage(f *testing.F) {
	full, _ := stream("\n")
	f.Add([]byte(full), uint16(10), uint16(200))
	crlf, _ := stream("\r\n")
	f.Add([]byte(crlf), uint16(3), uint16(90))
	f.Add([]byte("data: x\n\r\n"+usageChunk+"\n\n\n\n"), uint16(0), uint16(5))
	f.Fuzz(func(t *testing.T, in []byte, c1, c2 uint16) {
		if len(in) > maxHeldEvent {
			return
		}
		i, j := min(int(c1), len(in)), min(int(c2), len(in))
		if i > j {
			i, j = j, i
		}
		// The reference: cut after every LF that an LF or a CRLF follows.
		var evs [][]byte
		at := 0
		for k := 0; k < len(in); k++ {
			if in[k] != '\n' {
				continue
			}
			switch {
			case k+1 < len(in) && in[k+1] == '\n':
				evs, at, k = append(evs, in[at:k+2]), k+2, k+1
			case k+2 < len(in) && in[k+1] == '\r' && in[k+2] == '\n':
				evs, at, k = append(evs, in[at:k+3]), k+3, k+2
			}
		}
		var want []byte
		dropped := false
		for _, ev := range evs {
			if _, ok := openai.UsageEvent(ev); ok && !dropped {
				dropped = true
				continue
			}
			want = append(want, ev...)
		}
		want = append(want, in[at:]...)
		whole, _, ok1 := filtered(t, in)
		cut, _, ok2 := filtered(t, in[:i], in[i:j], in[j:])
		if whole != string(want) || cut != whole || ok1 != dropped || ok2 != dropped {
			t.Fatalf("in %q cut %d,%d:\nwhole %q\ncut   %q\nwant  %q", in, i, j, whole, cut, want)
		}
	})
}

// End to end through Forward: the upstream gets both edits (the model and
// the request for usage) in a body of the right length, inline or by
// writev; the client gets the stream without its usage chunk, framed
// anew when the upstream gave a Content-Length; the result has the usage.
// A response that is not an event stream, or not a 2xx, passes as is.
func TestStripUsageThroughForward(t *testing.T) {
	full, stripped := stream("\n")
	var mu sync.Mutex // the upstream's goroutine and the test share these
	var gotBody []byte
	ctype, status, framing := "text/event-stream", 200, "length"
	set := func(ct string, st int, fr string) { mu.Lock(); ctype, status, framing = ct, st, fr; mu.Unlock() }
	got := func() []byte { mu.Lock(); defer mu.Unlock(); return gotBody }
	up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			_, body, err := readRequest(br)
			if err != nil {
				return
			}
			mu.Lock()
			gotBody = body
			ctype, status, framing := ctype, status, framing
			mu.Unlock()
			head := fmt.Sprintf("HTTP/1.1 %d X\r\nContent-Type: %s\r\n", status, ctype)
			if framing == "length" {
				fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", head, len(full), full)
			} else {
				fmt.Fprintf(c, "%sTransfer-Encoding: chunked\r\n\r\n", head)
				for k := 0; k < len(full); k += 50 {
					p := full[k:min(k+50, len(full))]
					fmt.Fprintf(c, "%x\r\n%s\r\n", len(p), p)
				}
				io.WriteString(c, "0\r\n\r\n")
			}
		}
	})
	p := newPool(t, nil, up)
	tr := &Transport{}
	pol := PolicyOf(p.Config())
	run := func(body string) (*httptest.ResponseRecorder, Result) {
		b := []byte(body)
		x, err := openai.Extract(b)
		if err != nil {
			t.Fatal(err)
		}
		req := &Request{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{}, Body: b,
			Stream: true, Start: time.Now(), Usage: true, ModelSpan: x.ModelSpan, ModelTok: openai.Quote("served")}
		req.Edit, req.StripUsage = openai.UsageEdit(b, &x)
		rec := httptest.NewRecorder()
		return rec, tr.Forward(t.Context(), rec, p, &pol, req)
	}
	for _, tc := range []struct {
		name, body string
	}{
		{"inline", `{"model":"auto","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"writev", `{"messages":[{"role":"user","content":"` + strings.Repeat("z", 40<<10) + `"}],"stream":true,"model":"auto"}`},
	} {
		for _, fr := range []string{"length", "chunked"} {
			set("text/event-stream", 200, fr)
			rec, res := run(tc.body)
			want := strings.Replace(tc.body, `"model":"auto"`, `"model":"served"`, 1)
			want = strings.Replace(want, "{", `{"stream_options":{"include_usage":true},`, 1)
			if string(got()) != want {
				t.Fatalf("%s/%s: upstream got %.200q", tc.name, fr, got())
			}
			if rec.Body.String() != stripped || rec.Header().Get("Content-Length") != "" || res.Bytes != int64(len(stripped)) {
				t.Fatalf("%s/%s: client got %q (Content-Length %q)", tc.name, fr, rec.Body.String(), rec.Header().Get("Content-Length"))
			}
			if !res.UsageFound || res.Usage.PromptTokens != 7 || res.Usage.CompletionTokens != 3 {
				t.Fatalf("%s/%s: usage %+v %v", tc.name, fr, res.Usage, res.UsageFound)
			}
		}
	}
	for _, tc := range []struct {
		ctype  string
		status int
	}{{"application/json", 200}, {"text/event-stream", 400}, {"text/event-streams", 200}} {
		set(tc.ctype, tc.status, "length")
		rec, _ := run(`{"model":"auto","stream":true}`)
		if rec.Body.String() != full || rec.Header().Get("Content-Length") != fmt.Sprint(len(full)) {
			t.Fatalf("%s %d: %q", tc.ctype, tc.status, rec.Body.String())
		}
	}
	if !bytes.Contains(got(), []byte("include_usage")) {
		t.Fatal("the edit was not sent")
	}
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkStripUsage is the filter's cost on a 64-token chat stream
// written one event per read, as a replica sends it ("filter"), against
// relaying the same writes untouched ("pass"). Per stream.
func BenchmarkStripUsage(b *testing.B) {
	var evs [][]byte
	for i := range 64 {
		evs = append(evs, fmt.Appendf(nil, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok%d "},"logprobs":null,"finish_reason":null}]}`+"\n\n", i))
	}
	evs = append(evs, []byte(usageChunk+"\n\n"), []byte("data: [DONE]\n\n"))
	n := 0
	for _, ev := range evs {
		n += len(ev)
	}
	b.Run("pass", func(b *testing.B) {
		r := &relayer{w: &discard{h: http.Header{}}}
		b.SetBytes(int64(n))
		for b.Loop() {
			for _, ev := range evs {
				_ = r.send(ev)
			}
		}
	})
	b.Run("filter", func(b *testing.B) {
		r := &relayer{w: &discard{h: http.Header{}}}
		b.SetBytes(int64(n))
		for b.Loop() {
			f := sseFilters.Get().(*sseFilter)
			for _, ev := range evs {
				_ = f.write(r, ev)
			}
			_ = f.end(r)
			f.reset()
			sseFilters.Put(f)
		}
	})
}
