package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/openai"
)

// echoTranslator writes each event back as one line naming its parts, so a
// test can see exactly what the relay handed it.
type echoTranslator struct {
	done bool
	bad  string // an event whose data is this fails
}

func (e *echoTranslator) Event(dst, name, data []byte) ([]byte, error) {
	if e.done {
		return dst, errors.New("data after [DONE]")
	}
	if e.bad != "" && string(data) == e.bad {
		return dst, errors.New("cannot translate " + e.bad)
	}
	if string(data) == "[DONE]" {
		e.done = true
		return append(dst, "event: end\n\n"...), nil
	}
	return fmt.Appendf(dst, "event: %s\ndata: <%s>\n\n", orNone(name), data), nil
}

func orNone(b []byte) string {
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}

func (e *echoTranslator) End(dst []byte) ([]byte, error) {
	if !e.done {
		return dst, errors.New("no [DONE]")
	}
	return dst, nil
}

func (e *echoTranslator) Fail(dst []byte, msg string) []byte {
	return fmt.Appendf(dst, "event: error\ndata: %s\n\n", msg)
}

func (e *echoTranslator) Body(dst []byte, status int, body []byte) (int, []byte) {
	if string(body) == "untranslatable" {
		return 502, append(dst, `{"translated":"502"}`...)
	}
	return status, fmt.Appendf(dst, `{"translated":%d,"len":%d}`, status, len(body))
}

func echoError(w http.ResponseWriter, oe *openai.Error) {
	w.WriteHeader(oe.Status)
	fmt.Fprintf(w, `{"gateway":%d}`, oe.Status)
}

const translateStream = "data: {\"a\":1}\n\n" +
	": a comment\n\n" +
	"event: named\ndata: two\ndata: lines\n\n" +
	"retry: 10\n\n" +
	"data:no-space\r\n\r\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n" +
	"data: [DONE]\n\n"

const translatedStream = "event: none\ndata: <{\"a\":1}>\n\n" +
	"event: named\ndata: <two\nlines>\n\n" +
	"event: none\ndata: <no-space>\n\n" +
	"event: none\ndata: <{\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}>\n\n" +
	"event: end\n\n"

// A stream translates the same however it is cut into reads.
func TestTranslateCutAnywhere(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		rec := httptest.NewRecorder()
		r := &relayer{w: rec}
		x := &translation{tr: &echoTranslator{}, events: true}
		in := []byte(translateStream)
		for len(in) > 0 {
			n := 1 + rng.IntN(len(in))
			if err := x.write(r, in[:n]); err != nil {
				t.Fatal(err)
			}
			in = in[n:]
		}
		if _, err := x.end(r, 200); err != nil {
			t.Fatal(err)
		}
		if rec.Body.String() != translatedStream {
			t.Fatalf("got %q", rec.Body.String())
		}
	}
}

// translateUpstream answers each request as the test sets it, and counts
// the connections it accepted.
type translateUpstream struct {
	mu    sync.Mutex
	resp  func(c net.Conn)
	conns atomic.Int32
	url   string
}

func newTranslateUpstream(t *testing.T) *translateUpstream {
	u := &translateUpstream{}
	u.url = rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		u.conns.Add(1)
		for {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			u.mu.Lock()
			resp := u.resp
			u.mu.Unlock()
			resp(c)
		}
	})
	return u
}

func (u *translateUpstream) set(f func(c net.Conn)) { u.mu.Lock(); u.resp = f; u.mu.Unlock() }

func TestTranslateThroughForward(t *testing.T) {
	up := newTranslateUpstream(t)
	p := newPool(t, nil, up.url)
	tr := &Transport{}
	pol := PolicyOf(p.Config())
	run := func(stream bool, x Translator) (*httptest.ResponseRecorder, Result) {
		body := []byte(`{"model":"m","stream":` + strconv.FormatBool(stream) + `}`)
		req := &Request{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{}, Body: body,
			Stream: stream, Start: time.Now(), Usage: true, Translate: x, WriteError: echoError}
		rec := httptest.NewRecorder()
		return rec, tr.Forward(t.Context(), rec, p, &pol, req)
	}
	sse := func(framing, body string) func(c net.Conn) {
		return func(c net.Conn) {
			head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			if framing == "length" {
				fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", head, len(body), body)
				return
			}
			fmt.Fprintf(c, "%sTransfer-Encoding: chunked\r\n\r\n", head)
			for k := 0; k < len(body); k += 7 {
				s := body[k:min(k+7, len(body))]
				fmt.Fprintf(c, "%x\r\n%s\r\n", len(s), s)
			}
			io.WriteString(c, "0\r\n\r\n")
		}
	}

	t.Run("stream", func(t *testing.T) {
		for _, fr := range []string{"length", "chunked"} {
			up.set(sse(fr, translateStream))
			rec, res := run(true, &echoTranslator{})
			if rec.Code != 200 || rec.Body.String() != translatedStream || rec.Header().Get("Content-Length") != "" || res.Err != nil || res.Aborted {
				t.Fatalf("%s: %d %q %v err %v", fr, rec.Code, rec.Body.String(), rec.Header(), res.Err)
			}
			// Usage is read from what the replica sent, not the translation.
			if !res.UsageFound || res.Usage.PromptTokens != 7 || res.Usage.CompletionTokens != 3 || res.Bytes != int64(len(translatedStream)) {
				t.Fatalf("%s: usage %+v %v bytes %d", fr, res.Usage, res.UsageFound, res.Bytes)
			}
		}
	})

	t.Run("stream without its end ends in an error event", func(t *testing.T) {
		up.set(sse("chunked", "data: 1\n\ndata: 2\n\n"))
		rec, res := run(true, &echoTranslator{})
		want := "event: none\ndata: <1>\n\nevent: none\ndata: <2>\n\nevent: error\ndata: no [DONE]\n\n"
		if rec.Body.String() != want || res.Aborted || res.Err == nil || res.ClientGone {
			t.Fatalf("%q aborted %v err %v", rec.Body.String(), res.Aborted, res.Err)
		}
	})

	t.Run("stream broken upstream ends in an error event", func(t *testing.T) {
		up.set(func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 1000\r\n\r\ndata: 1\n\ndata: 2")
			c.Close()
		})
		rec, res := run(true, &echoTranslator{})
		want := "event: none\ndata: <1>\n\nevent: error\ndata: upstream stream broke before its end\n\n"
		if rec.Body.String() != want || res.Aborted || res.Err == nil {
			t.Fatalf("%q aborted %v err %v", rec.Body.String(), res.Aborted, res.Err)
		}
	})

	t.Run("an event that cannot be translated ends the stream", func(t *testing.T) {
		up.set(sse("length", "data: 1\n\ndata: bad\n\ndata: 3\n\ndata: [DONE]\n\n"))
		rec, res := run(true, &echoTranslator{bad: "bad"})
		before := up.conns.Load()
		want := "event: none\ndata: <1>\n\nevent: error\ndata: cannot translate bad\n\n"
		if rec.Body.String() != want || res.Aborted || res.Err == nil {
			t.Fatalf("%q aborted %v err %v", rec.Body.String(), res.Aborted, res.Err)
		}
		// The rest of that body was never read: its connection is not reused.
		up.set(sse("length", "data: [DONE]\n\n"))
		if rec, _ := run(true, &echoTranslator{}); rec.Body.String() != "event: end\n\n" || up.conns.Load() != before+1 {
			t.Fatalf("%q, %d connections after %d", rec.Body.String(), up.conns.Load(), before)
		}
	})

	t.Run("bodies are translated whole", func(t *testing.T) {
		for _, tc := range []struct {
			status int
			body   string
			want   string
			code   int
		}{
			{200, `{"id":"x"}`, `{"translated":200,"len":10}`, 200},
			{400, `{"error":"no"}`, `{"translated":400,"len":14}`, 400},
			{200, "untranslatable", `{"translated":"502"}`, 502},
		} {
			up.set(func(c net.Conn) {
				fmt.Fprintf(c, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tc.status, len(tc.body), tc.body)
			})
			rec, res := run(false, &echoTranslator{})
			if rec.Code != tc.code || rec.Body.String() != tc.want || rec.Header().Get("Content-Length") != strconv.Itoa(len(tc.want)) || res.Status != tc.code {
				t.Fatalf("%d %q: got %d %q %v", tc.status, tc.body, rec.Code, rec.Body.String(), rec.Header())
			}
		}
	})

	t.Run("a body broken upstream is a whole error in the client's shape", func(t *testing.T) {
		up.set(func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":")
			c.Close()
		})
		rec, res := run(false, &echoTranslator{})
		if rec.Code != 502 || rec.Body.String() != `{"gateway":502}` || res.Aborted || res.Status != 502 {
			t.Fatalf("%d %q aborted %v", rec.Code, rec.Body.String(), res.Aborted)
		}
	})

	t.Run("no replica: the gateway's error in the client's shape", func(t *testing.T) {
		dead := newPool(t, nil, "http://127.0.0.1:1")
		rec := httptest.NewRecorder()
		req := &Request{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{}, Body: []byte(`{}`), Start: time.Now(), Translate: &echoTranslator{}, WriteError: echoError}
		pol := PolicyOf(dead.Config())
		tr.Forward(t.Context(), rec, dead, &pol, req)
		if !strings.HasPrefix(rec.Body.String(), `{"gateway":`) {
			t.Fatalf("%d %q", rec.Code, rec.Body.String())
		}
	})
}
