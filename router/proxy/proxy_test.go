package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/pool"

	"github.com/triagegw/triage/internal/testenv"
)

// newPool builds a pool over urls with active checks off.
func newPool(t testing.TB, mut func(*pool.Config), urls ...string) *pool.Pool {
	t.Helper()
	off := false
	cfg := pool.Config{Name: "p", Model: "served-model", Health: pool.Health{Enabled: &off}}
	for _, u := range urls {
		cfg.Replicas = append(cfg.Replicas, pool.Replica{URL: u})
	}
	if mut != nil {
		mut(&cfg)
	}
	cfg.ResolveSecrets()
	cfg.SetDefaults()
	if errs := cfg.Validate("pool"); errs != nil {
		t.Fatal(errs)
	}
	p, err := pool.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// gateway serves Forward on a real socket. Each request's Result is sent on
// the returned channel (buffered).
func gateway(t testing.TB, tr *Transport, p *pool.Pool) (string, chan Result) {
	t.Helper()
	results := make(chan Result, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header,
			Body: body, RequestID: "req-1", Start: time.Now()}
		if x, err := openai.Extract(body); err == nil {
			req.Stream = x.Stream
			if x.ModelName() != p.Model() {
				req.ModelSpan, req.ModelTok = x.ModelSpan, openai.Quote(p.Model())
			}
		}
		pol := PolicyOf(p.Config())
		res := tr.Forward(r.Context(), w, p, &pol, req)
		results <- res
		if res.Aborted {
			panic(http.ErrAbortHandler)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, results
}

// rawUpstream accepts connections and hands each to serve.
func rawUpstream(t testing.TB, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// readRequest reads one request (head and Content-Length body) off br.
func readRequest(br *bufio.Reader) (*http.Request, []byte, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(req.Body)
	return req, body, err
}

func post(t testing.TB, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

func TestForwardRequestAndHeaders(t *testing.T) {
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	var got *http.Request
	var gotBody []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		gotBody, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("Connection", "X-Private")
		w.Header().Set("X-Private", "hop")
		w.Header().Set("X-Request-Id", "upstream-id")
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer up.Close()
	p := newPool(t, func(c *pool.Config) { c.Replicas[0].APIKeyEnv = "UPSTREAM_KEY" }, up.URL+"/base/")
	gw, results := gateway(t, &Transport{}, p)

	req, _ := http.NewRequest("POST", gw+"/v1/chat/completions?x=1", strings.NewReader(`{"model":"auto","messages":[]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer client-secret")
	req.Header.Set("Connection", "keep-alive, X-Hop")
	req.Header.Set("X-Hop", "must-not-pass")
	req.Header.Set("X-Custom", "passes")
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); body != `{"ok":true}` {
		t.Fatalf("client got body %q", body)
	}
	res := <-results
	if res.Status != 200 || res.Bytes != 11 || res.Attempts != 1 || res.Err != nil || res.TTFB <= 0 {
		t.Fatalf("Result = %+v", res)
	}
	if got.URL.Path != "/base/v1/chat/completions" || got.URL.RawQuery != "x=1" {
		t.Errorf("upstream path = %s?%s", got.URL.Path, got.URL.RawQuery)
	}
	if string(gotBody) != `{"model":"served-model","messages":[]}` {
		t.Errorf("upstream body = %s (model not spliced)", gotBody)
	}
	checks := map[string]string{
		"Authorization": "Bearer sk-upstream", "X-Custom": "passes", "X-Hop": "",
		"Accept-Encoding": "", "X-Request-Id": "req-1", "Content-Type": "application/json",
	}
	for k, want := range checks {
		if v := got.Header.Get(k); v != want {
			t.Errorf("upstream header %s = %q, want %q", k, v, want)
		}
	}
	if resp.Header.Get("X-Upstream") != "yes" || resp.Header.Get("X-Private") != "" {
		t.Errorf("relayed headers wrong: %v", resp.Header)
	}
}

func TestGatedStreamReachesClientBeforeUpstreamFinishes(t *testing.T) {
	gate := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		<-gate // chunk 2 waits until the client has seen chunk 1
		fmt.Fprint(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	gw, results := gateway(t, &Transport{}, newPool(t, nil, up.URL))
	resp := post(t, gw, `{"model":"served-model","stream":true}`)
	br := bufio.NewReader(resp.Body)
	first := make(chan string, 1)
	go func() {
		l, _ := br.ReadString('\n')
		first <- l
	}()
	select {
	case l := <-first:
		if l != "data: {\"n\":1}\n" {
			t.Fatalf("first line %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("chunk 1 did not reach the client while the upstream held chunk 2: the gateway buffers")
	}
	close(gate)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest of stream %q, %v", rest, err)
	}
	resp.Body.Close()
	if res := <-results; res.Status != 200 || res.Aborted || res.Err != nil {
		t.Fatalf("Result = %+v", res)
	}
}

func TestRetryOnConnectErrorAndRetryableStatus(t *testing.T) {
	// A port nobody listens on: connection refused.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	var hits503 atomic.Int64
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits503.Add(1)
		w.WriteHeader(503)
		fmt.Fprint(w, `{"error":"overloaded"}`)
	}))
	defer busy.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer ok.Close()

	for _, tc := range []struct {
		name         string
		urls         []string
		wantStatus   int
		wantAttempts int
	}{
		{"refused then ok", []string{dead, ok.URL}, 200, 2},
		{"503 then ok", []string{busy.URL, ok.URL}, 200, 2},
		{"refused, 503: the last answer is relayed", []string{dead, busy.URL}, 503, 2},
		{"only refused", []string{dead}, 502, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Weight the failing replica so it is always tried first.
			p := newPool(t, func(c *pool.Config) {
				c.Replicas[0].Weight = 10000
				c.Breaker.Failures = 100
			}, tc.urls...)
			gw, results := gateway(t, &Transport{}, p)
			for range 5 {
				resp := post(t, gw, `{"model":"served-model"}`)
				body := readAll(t, resp)
				res := <-results
				want := tc.wantStatus
				if tc.wantStatus == 503 && res.Backend != nil && res.Backend.Name == dead {
					// The rare draw that tried the busy replica first: its 503 was
					// retried on the refusing one, whose connect error is last.
					want = 502
				}
				if resp.StatusCode != want || res.Status != want {
					t.Fatalf("status %d (result %d), want %d; body %s", resp.StatusCode, res.Status, want, body)
				}
				if tc.wantStatus == 502 && !strings.Contains(body, `"code":"bad_gateway"`) {
					t.Fatalf("502 body is not an OpenAI error: %s", body)
				}
				if res.Attempts > tc.wantAttempts {
					t.Fatalf("attempts %d, want at most %d", res.Attempts, tc.wantAttempts)
				}
			}
		})
	}
}

func TestNoRetryAfterFirstByte(t *testing.T) {
	var hits atomic.Int64
	dies := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, _, err := readRequest(br); err != nil {
			return
		}
		hits.Add(1)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		io.WriteString(c, "e\r\ndata: {\"n\":1}\n\r\n")
		// and the replica dies mid-stream
	})
	p := newPool(t, func(c *pool.Config) { c.Replicas[0].Weight = 10000 }, dies, dies+"/second")
	gw, results := gateway(t, &Transport{}, p)
	resp := post(t, gw, `{"model":"served-model","stream":true}`)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("client read the cut stream without an error: %q; a broken stream must look broken", body)
	}
	if !strings.Contains(string(body), `data: {"n":1}`) {
		t.Fatalf("client did not get the first event before the cut: %q", body)
	}
	res := <-results
	if !res.Aborted || res.Attempts != 1 || hits.Load() != 1 {
		t.Fatalf("Result %+v, upstream hits %d: want aborted after one attempt", res, hits.Load())
	}
}

func TestClientCancelReachesUpstream(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			cancelled := make(chan struct{})
			started := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body) // as servers do; net/http watches for the client leaving only after
				if stream {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, "data: {}\n\n")
					w.(http.Flusher).Flush()
				}
				close(started)
				select {
				case <-r.Context().Done():
					close(cancelled)
				case <-time.After(10 * time.Second):
				}
			}))
			defer up.Close()
			gw, results := gateway(t, &Transport{}, newPool(t, nil, up.URL))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", gw+"/v1/chat/completions", strings.NewReader(`{"model":"served-model"}`))
			if !stream {
				// The client leaves while the gateway waits for the
				// replica's head.
				go func() {
					<-started
					testenv.Poll(testenv.WaitTimeout, forwardWaiting)
					cancel()
				}()
			}
			resp, err := http.DefaultClient.Do(req)
			if stream {
				// The client leaves mid-stream: it has the first event,
				// and the gateway waits for the next.
				if err != nil {
					t.Fatal(err)
				}
				if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "data: {}\n" {
					t.Fatalf("first line of the stream: %q, %v", line, err)
				}
				testenv.Wait(t, func() bool { ok, _ := forwardWaiting(); return ok }, "the gateway to wait on the replica")
				cancel()
				resp.Body.Close()
			} else if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			select {
			case <-cancelled:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream request was not cancelled when the client left")
			}
			if res := <-results; !res.ClientGone || res.Status != 499 {
				t.Fatalf("Result = %+v, want ClientGone with 499", res)
			}
		})
	}
}

// forwardWaiting reports whether a Forward waits in the network poller
// (on its replica's connection), read from the dump of all goroutines.
func forwardWaiting() (bool, string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, "proxy.(*Transport).Forward(") {
			return true, ""
		}
	}
	return false, ""
}

func TestKeepAliveReuseAndStaleConnection(t *testing.T) {
	var conns, reqs atomic.Int64
	closed := make(chan struct{})
	up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		for {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			n := reqs.Add(1)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if n == 3 {
				c.Close() // close the connection after a response, without saying so
				close(closed)
				return
			}
		}
	})
	tr := &Transport{}
	gw, results := gateway(t, tr, newPool(t, nil, up))
	for i := range 5 {
		if body := readAll(t, post(t, gw, `{"model":"served-model"}`)); body != "ok" {
			t.Fatalf("request %d: body %q", i, body)
		}
		if res := <-results; res.Status != 200 || res.Attempts != 1 {
			t.Fatalf("request %d: Result %+v", i, res)
		}
		if i == 2 {
			// On loopback the FIN is at the gateway's end once Close returns.
			testenv.Receive(t, closed, "the upstream to close the connection")
		}
	}
	if conns.Load() != 2 || reqs.Load() != 5 {
		t.Fatalf("connections %d requests %d, want 2 connections (one reuse broke) and 5 requests", conns.Load(), reqs.Load())
	}
	if tr.IdleConns() != 1 {
		t.Fatalf("idle connections = %d, want 1", tr.IdleConns())
	}
}

func TestIdleTimeoutDropsOldConnections(t *testing.T) {
	var conns atomic.Int64
	up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		for {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	tr := &Transport{IdleTimeout: time.Second, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	gw, results := gateway(t, tr, newPool(t, nil, up))
	readAll(t, post(t, gw, `{"model":"served-model"}`))
	<-results
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	readAll(t, post(t, gw, `{"model":"served-model"}`))
	<-results
	if conns.Load() != 2 {
		t.Fatalf("connections = %d, want 2: a connection idle past IdleTimeout must not be reused", conns.Load())
	}
	// Without traffic, CloseStale reaps what aged out.
	tr.CloseStale()
	if n := tr.IdleConns(); n != 1 {
		t.Fatalf("CloseStale closed a fresh connection: %d idle, want 1", n)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	tr.CloseStale()
	if n := tr.IdleConns(); n != 0 {
		t.Fatalf("after CloseStale past the idle timeout: %d idle connections, want 0", n)
	}
}

func TestWireFraming(t *testing.T) {
	for _, tc := range []struct {
		name, resp string
		wantBody   string
		wantErr    bool // the client must see a broken response
		wantStatus int
		reusable   bool
		closes     bool // the replica closes the connection after the response
	}{
		{name: "content-length", resp: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", wantBody: "hello", wantStatus: 200, reusable: true},
		{name: "chunked with extension and trailer", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n", wantBody: "hello world", wantStatus: 200, reusable: true},
		{name: "uppercase hex chunk", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", wantBody: "0123456789", wantStatus: 200, reusable: true},
		{name: "close-delimited", resp: "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil close", wantBody: "until close", wantStatus: 200, closes: true},
		{name: "http/1.0", resp: "HTTP/1.0 200 OK\r\n\r\nold", wantBody: "old", wantStatus: 200, closes: true},
		{name: "100 continue skipped", resp: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", wantBody: "ok", wantStatus: 201, reusable: true},
		{name: "204", resp: "HTTP/1.1 204 No Content\r\n\r\n", wantBody: "", wantStatus: 204, reusable: true},
		{name: "4xx relayed", resp: "HTTP/1.1 400 Bad Request\r\nContent-Length: 7\r\n\r\n{\"e\":1}", wantBody: `{"e":1}`, wantStatus: 400, reusable: true},
		{name: "short content-length body", resp: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", wantErr: true, wantStatus: 200, closes: true},
		{name: "bad chunk size", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n", wantErr: true, wantStatus: 200},
		{name: "bad chunk end", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\n0\r\n\r\n", wantErr: true, wantStatus: 200},
		{name: "bare LF chunk size line", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n", wantErr: true, wantStatus: 200},
		{name: "transfer-encoding other than chunked", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", wantStatus: 502},
		{name: "two transfer-encodings", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", wantStatus: 502},
		{name: "transfer-encoding on http/1.0", resp: "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", wantStatus: 502},
		{name: "NUL in a header value", resp: "HTTP/1.1 200 OK\r\nX-Bad: a\x00b\r\nContent-Length: 2\r\n\r\nok", wantStatus: 502},
		{name: "CR in a header value", resp: "HTTP/1.1 200 OK\r\nX-Bad: a\rb\r\nContent-Length: 2\r\n\r\nok", wantStatus: 502},
		{name: "header name not a token", resp: "HTTP/1.1 200 OK\r\nX Bad: a\r\nContent-Length: 2\r\n\r\nok", wantStatus: 502},
		{name: "folded header line", resp: "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok", wantStatus: 502},
		{name: "101 switching protocols", resp: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", wantStatus: 502},
		{name: "102 processing", resp: "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", wantStatus: 502},
		{name: "forbidden trailer announced", resp: "HTTP/1.1 200 OK\r\nTrailer: Content-Length\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", wantStatus: 502},
		{name: "invalid content-length on a 204", resp: "HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n", wantStatus: 502},
		{name: "equal content-lengths spelled differently", resp: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 02\r\n\r\nok", wantStatus: 502},
		{name: "http/1.0 keep-alive with length", resp: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", wantBody: "ok", wantStatus: 200, reusable: true},
		{name: "http/1.0 keep-alive and close", resp: "HTTP/1.0 200 OK\r\nConnection: close, keep-alive\r\nContent-Length: 2\r\n\r\nok", wantBody: "ok", wantStatus: 200},
		{name: "bytes after the response", resp: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nLEAKED", wantBody: "ok", wantStatus: 200},
		{name: "CRLF after the response", resp: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\r\n", wantBody: "ok", wantStatus: 200},
		{name: "204 with a body", resp: "HTTP/1.1 204 No Content\r\n\r\nLEAKED", wantBody: "", wantStatus: 204},
		{name: "content-length in characters", resp: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhéllo", wantBody: "h\xc3\xa9ll", wantStatus: 200},
		{name: "garbage status line", resp: "SMTP ready\r\n\r\n", wantStatus: 502},
		{name: "bad header line", resp: "HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n", wantStatus: 502},
		{name: "conflicting content-length", resp: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", wantStatus: 502},
		{name: "empty reply", resp: "", wantStatus: 502, closes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wrote := make(chan struct{}, 1)
			up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				if _, _, err := readRequest(br); err != nil {
					return
				}
				io.WriteString(c, tc.resp)
				if tc.closes {
					c.Close()
				}
				select {
				case wrote <- struct{}{}:
				default:
				}
				if !tc.closes {
					readRequest(br) // keep the connection open until the gateway closes it
				}
			})
			tr := &Transport{}
			gw, results := gateway(t, tr, newPool(t, func(c *pool.Config) { c.Retry.Attempts = 1 }, up))
			req, _ := http.NewRequest("POST", gw+"/v1/chat/completions", strings.NewReader(`{"model":"served-model"}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				// A body that breaks is relayed up to the break, head
				// included, whether the break arrives with the head or later.
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantErr {
				if err == nil {
					t.Fatalf("client read %q with no error; a broken response must look broken", body)
				}
				return
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if tc.wantStatus == 502 {
				var e struct{ Error struct{ Code string } }
				if jerr := jsonUnmarshal(body, &e); jerr != nil || e.Error.Code != "bad_gateway" {
					t.Fatalf("502 body %q is not an OpenAI error", body)
				}
				return
			}
			if string(body) != tc.wantBody {
				t.Fatalf("body %q, want %q", body, tc.wantBody)
			}
			res := <-results
			if res.Bytes != int64(len(tc.wantBody)) {
				t.Fatalf("Result.Bytes = %d, want %d", res.Bytes, len(tc.wantBody))
			}
			// What the next request would get: popIdle drops a connection
			// the replica wrote more on, or closed. All of it was written
			// in one go, so what the gateway read of it is all there is.
			testenv.Receive(t, wrote, "the replica to write its response")
			h := tr.host(newPoolBackend(t, up))
			c := tr.popIdle(h)
			if got := c != nil; got != tc.reusable {
				t.Fatalf("connection kept for reuse = %v, want %v", got, tc.reusable)
			}
			if c != nil {
				c.nc.Close()
			}
		})
	}
}

func TestFirstByteTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		readRequest(br)
		<-release
	})
	p := newPool(t, func(c *pool.Config) { c.Timeouts.FirstByte = 100 * time.Millisecond }, up)
	gw, results := gateway(t, &Transport{}, p)
	resp := post(t, gw, `{"model":"served-model"}`)
	body := readAll(t, resp)
	if resp.StatusCode != 504 || !strings.Contains(body, "upstream_timeout") {
		t.Fatalf("status %d body %s, want 504 upstream_timeout", resp.StatusCode, body)
	}
	if res := <-results; res.Attempts != 1 {
		t.Fatalf("a timed-out attempt was retried: %+v", res)
	}
}

func TestIdleTimeoutMidStream(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		readRequest(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata:1\r\n")
		<-release
	})
	p := newPool(t, func(c *pool.Config) { c.Timeouts.Idle = 100 * time.Millisecond }, up)
	gw, results := gateway(t, &Transport{}, p)
	resp := post(t, gw, `{"model":"served-model","stream":true}`)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || string(body) != "data:1" {
		t.Fatalf("body %q err %v, want the first chunk then a broken stream", body, err)
	}
	if res := <-results; !res.Aborted {
		t.Fatalf("Result %+v, want Aborted", res)
	}
}

func TestLargeBodySplicedByWritev(t *testing.T) {
	var gotBody []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotBody, _ = io.ReadAll(r.Body)
		fmt.Fprint(w, "ok")
	}))
	defer up.Close()
	gw, results := gateway(t, &Transport{}, newPool(t, nil, up.URL))
	big := strings.Repeat("x", 100<<10)
	readAll(t, post(t, gw, `{"messages":[{"content":"`+big+`"}],"model":"auto"}`))
	<-results
	if want := `{"messages":[{"content":"` + big + `"}],"model":"served-model"}`; string(gotBody) != want {
		t.Fatalf("upstream got %d bytes, want %d (splice over writev)", len(gotBody), len(want))
	}
}

func TestNoBackend(t *testing.T) {
	p := newPool(t, func(c *pool.Config) { c.Breaker.Failures = 1 }, "http://127.0.0.1:1")
	p.Report(p.Backends()[0], pool.Failure)
	gw, results := gateway(t, &Transport{}, p)
	resp := post(t, gw, `{"model":"served-model"}`)
	body := readAll(t, resp)
	if resp.StatusCode != 503 || !strings.Contains(body, "no_healthy_upstream") {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if res := <-results; !errors.Is(res.Err, pool.ErrNoBackend) {
		t.Fatalf("Result.Err = %v", res.Err)
	}
}

func TestParsers(t *testing.T) {
	for _, tc := range []struct {
		line   string
		status int
		ok     bool
	}{
		{"HTTP/1.1 200 OK\r\n", 200, true}, {"HTTP/1.0 404\r\n", 404, true}, {"HTTP/1.1 503 Service Unavailable\n", 503, true},
		{"HTTP/2 200\r\n", 0, false}, {"HTTP/1.1 20 OK\r\n", 0, false}, {"HTTP/1.1 2000 OK\r\n", 0, false}, {"HTTP/1.1 600 X\r\n", 0, false},
	} {
		s, _, ok := parseStatusLine([]byte(tc.line))
		if s != tc.status || ok != tc.ok {
			t.Errorf("parseStatusLine(%q) = %d, %v; want %d, %v", tc.line, s, ok, tc.status, tc.ok)
		}
	}
	// Chunk-size lines without their CRLF, which line() cuts.
	for line, want := range map[string]int64{"0": 0, "1a": 26, "FF;x=y": 255, "10 ": 16, "10\t": 16} {
		if n, ok := parseChunkSize([]byte(line)); !ok || n != want {
			t.Errorf("parseChunkSize(%q) = %d, %v; want %d", line, n, ok, want)
		}
	}
	for _, bad := range []string{"", "g", "-1", "1000000000000000", "1 a", "1a ;x", "10\t;ext", " 1", "0x1"} {
		if _, ok := parseChunkSize([]byte(bad)); ok {
			t.Errorf("parseChunkSize(%q) accepted", bad)
		}
	}
}

// newPoolBackend is the backend a pool over url would have, for looking up
// its connections.
func newPoolBackend(t testing.TB, url string) *pool.Backend {
	return newPool(t, nil, url).Backends()[0]
}

func jsonUnmarshal(b []byte, v any) error {
	return jsonDecode(bytes.NewReader(b), v)
}
