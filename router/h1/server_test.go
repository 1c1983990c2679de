package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, s, ln)
}

// serveOn runs s on ln until the test ends, and returns ln's address.
func serveOn(t *testing.T, s *Server, ln net.Listener) string {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ln.Addr().String()
}

// echo answers with what it saw of the request, in headers and body.
func echo(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := w.Header()
	h.Set("X-Method", r.Method)
	h.Set("X-Path", r.URL.Path)
	h.Set("X-Query", r.URL.RawQuery)
	h.Set("X-Host", r.Host)
	h.Set("X-Proto", r.Proto)
	h.Set("X-Len", fmt.Sprint(r.ContentLength))
	h.Set("X-Header-Host", r.Header.Get("Host"))
	h.Set("X-Accept", strings.Join(r.Header.Values("Accept"), "|"))
	h.Set("X-Custom", r.Header.Get("X-Custom-Thing"))
	h.Set("X-Fast", fmt.Sprint(r.Context().Value(http.ServerContextKey) != nil))
	w.Write(b)
}

func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func readResp(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	for err == nil && resp.StatusCode == http.StatusContinue {
		resp, err = http.ReadResponse(br, &http.Request{Method: method})
	}
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read response body: %v", err)
	}
	return resp, string(b)
}

func TestPlainRequestsOnOneConnection(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo)})
	c, br := rawConn(t, addr)
	for i := range 3 {
		body := fmt.Sprintf(`{"n":%d}`, i)
		fmt.Fprintf(c, "POST /v1/chat/completions?x=1&y=%d HTTP/1.1\r\nHost: gw.example:8080\r\naccept: a\r\nAccept: b\r\nx-custom-thing:  v w \r\nContent-Length: %d\r\n\r\n%s", i, len(body), body)
		resp, got := readResp(t, br, "POST")
		h := resp.Header
		if resp.StatusCode != 200 || got != body {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, got)
		}
		want := map[string]string{
			"X-Method": "POST", "X-Path": "/v1/chat/completions", "X-Query": fmt.Sprintf("x=1&y=%d", i),
			"X-Host": "gw.example:8080", "X-Header-Host": "", "X-Proto": "HTTP/1.1",
			"X-Len": fmt.Sprint(len(body)), "X-Accept": "a|b", "X-Custom": "v w",
			"Content-Length": fmt.Sprint(len(body)), "X-Fast": "true",
		}
		for k, v := range want {
			if h.Get(k) != v {
				t.Errorf("request %d: %s = %q, want %q", i, k, h.Get(k), v)
			}
		}
		if h.Get("Date") == "" || h.Get("Content-Type") == "" {
			t.Errorf("request %d: missing Date or sniffed Content-Type: %v", i, h)
		}
		if resp.Close {
			t.Fatalf("request %d: connection not kept alive", i)
		}
	}
}

// Anything outside the fast path is net/http's to serve, on the same
// connection, and it stays there.
func TestHandsOverWhatIsNotPlain(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo)})
	cases := []struct {
		name, req, method, wantBody string
		check                       func(*http.Response) string
	}{
		{"chunked body with a Content-Length too", "POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", "POST", "abcde", nil},
		{"escaped path", "GET /v1/a%20b?q=%41 HTTP/1.1\r\nHost: h\r\n\r\n", "GET", "", func(r *http.Response) string {
			if r.Header.Get("X-Path") != "/v1/a b" || r.Header.Get("X-Query") != "q=%41" {
				return fmt.Sprintf("path %q query %q", r.Header.Get("X-Path"), r.Header.Get("X-Query"))
			}
			return ""
		}},
		{"HTTP/1.0", "GET /healthz HTTP/1.0\r\nHost: h\r\n\r\n", "GET", "", func(r *http.Response) string {
			if r.Header.Get("X-Proto") != "HTTP/1.0" {
				return "proto " + r.Header.Get("X-Proto")
			}
			return ""
		}},
		{"HEAD", "HEAD /v1/models HTTP/1.1\r\nHost: h\r\n\r\n", "HEAD", "", nil},
		{"LF line ends", "GET /v1/models HTTP/1.1\nHost: h\n\n", "GET", "", nil},
		{"long head", "GET /v1/models HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("a", 6000) + "\r\n\r\n", "GET", "", nil},
		{"PUT", "PUT /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nz", "PUT", "z", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawConn(t, addr)
			io.WriteString(c, tc.req)
			resp, got := readResp(t, br, tc.method)
			if resp.StatusCode != 200 || got != tc.wantBody {
				t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, got, tc.wantBody)
			}
			if tc.check != nil {
				if msg := tc.check(resp); msg != "" {
					t.Fatal(msg)
				}
			}
			if resp.Close {
				return
			}
			// The connection, now net/http's, serves the next request.
			io.WriteString(c, "POST /next HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nnext")
			if resp, got := readResp(t, br, "POST"); resp.StatusCode != 200 || got != "next" {
				t.Fatalf("next request: %d %q", resp.StatusCode, got)
			}
		})
	}
}

// Malformed requests get net/http's answers.
func TestBadRequestsGetNetHTTPAnswers(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo)})
	for _, tc := range []struct {
		req    string
		status int
	}{
		{"POST /v1/x HTTP/1.1\r\nContent-Length: 1\r\n\r\nz", 400},                                  // no Host
		{"POST /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n", 400},                        // bad length
		{"POST /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nzz", 400}, // two lengths
		{"GET /v1/x HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n", 400},
		{"GET /v1/x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
	} {
		c, br := rawConn(t, addr)
		io.WriteString(c, tc.req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.req, err)
		}
		if resp.StatusCode != tc.status {
			t.Errorf("%q: status %d, want %d", tc.req, resp.StatusCode, tc.status)
		}
	}
}

func TestResponseFraming(t *testing.T) {
	h := http.NewServeMux()
	h.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	h.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, strings.Repeat("x", 10000)) })
	h.HandleFunc("/flushed", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	})
	h.HandleFunc("/length", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		io.WriteString(w, "abc")
		if _, err := io.WriteString(w, "d"); !errors.Is(err, http.ErrContentLength) {
			panic("writing past Content-Length: " + fmt.Sprint(err))
		}
	})
	h.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	h.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	})
	addr := serve(t, &Server{Handler: h})
	c, br := rawConn(t, addr)
	for _, tc := range []struct {
		path, te, cl, body string
		close              bool
	}{
		{"/small", "", "5", "hello", false},
		{"/big", "chunked", "", strings.Repeat("x", 10000), false},
		{"/flushed", "chunked", "", "data: 0\n\ndata: 1\n\ndata: 2\n\n", false},
		{"/length", "", "3", "abc", false},
		{"/nocontent", "", "", "", false},
		{"/close", "", "3", "bye", true},
	} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", tc.path)
		resp, got := readResp(t, br, "GET")
		te := strings.Join(resp.TransferEncoding, ",")
		cl := resp.Header.Get("Content-Length")
		if got != tc.body || te != tc.te || cl != tc.cl || resp.Close != tc.close {
			t.Errorf("%s: body %q te %q cl %q close %v, want %q %q %q %v", tc.path, truncate(got), te, cl, resp.Close, truncate(tc.body), tc.te, tc.cl, tc.close)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close, read gave %v, want EOF", err)
	}
}

func truncate(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

// A handler that aborts mid-stream leaves the client with a broken
// response, not a complete one.
func TestAbortMidStreamLooksBroken(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: partial\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}), ErrorLog: quietLog(t)})
	resp, err := http.Get("http://" + addr + "/s")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read %q with error %v; want io.ErrUnexpectedEOF", b, err)
	}
	if string(b) != "data: partial\n\n" {
		t.Fatalf("got %q before the break", b)
	}
}

// A client that leaves while its request runs cancels the request's
// context, once the watch has started.
func TestClientLeavingCancelsTheRequest(t *testing.T) {
	cancelled := make(chan error, 1)
	running := make(chan struct{}, 1)
	addr := serve(t, &Server{WatchAfter: time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		running <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- r.Context().Err()
		case <-time.After(5 * time.Second):
			cancelled <- errors.New("not cancelled within 5s")
		}
	})})
	c, _ := rawConn(t, addr)
	io.WriteString(c, "POST /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}")
	testenv.Receive(t, running, "the handler to run") // the client leaves while it does
	c.Close()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("request context: %v", err)
	}
}

// A request that arrives while the previous one is still being handled
// (pipelining) is answered after it, even when the watch read its first
// byte: whether the watch has finished with that byte when the handler
// returns, or is stopped holding it (its read ends by a deadline in the
// past, which must not outlive it).
func TestPipelinedRequestSurvivesTheWatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold bool // the watch's read returns its byte only once the watch is being stopped
	}{{"byte read", false}, {"stopped holding the byte", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ln := newWatchedListener(t, tc.hold)
			var n atomic.Int32
			addr := serveOn(t, &Server{WatchAfter: time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body)
				if n.Add(1) == 1 {
					// The first request runs until the watch has read the
					// second's first byte.
					select {
					case <-ln.gotByte:
					case <-time.After(10 * time.Second):
						t.Error("the watch did not read the pipelined request's first byte")
					}
				}
				if r.Context().Err() != nil {
					panic("request cancelled by a pipelined request")
				}
				io.WriteString(w, r.URL.Path)
			})}, ln)
			c, br := rawConn(t, addr)
			io.WriteString(c, "GET /one HTTP/1.1\r\nHost: h\r\n\r\n")
			select {
			case <-ln.reading: // the watch is waiting for the client
			case <-time.After(10 * time.Second):
				t.Fatal("the watch did not start")
			}
			io.WriteString(c, "GET /two HTTP/1.1\r\nHost: h\r\n\r\n")
			for _, want := range []string{"/one", "/two"} {
				if _, got := readResp(t, br, "GET"); got != want {
					t.Fatalf("got %q, want %q", got, want)
				}
			}
		})
	}
}

// watchedListener's connections show the server's watch at work: the watch
// reads one byte at a time (requests are read through a 4 KiB buffer), so
// reading is closed when a one-byte read starts, gotByte when one gets a
// byte. With hold, that read returns only once a read deadline in the past
// has been set (the watch being stopped).
type watchedListener struct {
	net.Listener
	hold                           bool
	reading, gotByte, stopping     chan struct{}
	readingOnce, gotOnce, stopOnce sync.Once
}

func newWatchedListener(t *testing.T, hold bool) *watchedListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &watchedListener{Listener: ln, hold: hold, reading: make(chan struct{}), gotByte: make(chan struct{}), stopping: make(chan struct{})}
}

func (l *watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, l: l}, nil
}

type watchedConn struct {
	net.Conn
	l *watchedListener
}

func (c *watchedConn) Read(p []byte) (int, error) {
	if len(p) != 1 {
		return c.Conn.Read(p)
	}
	c.l.readingOnce.Do(func() { close(c.l.reading) })
	n, err := c.Conn.Read(p)
	if n == 1 {
		c.l.gotOnce.Do(func() { close(c.l.gotByte) })
		if c.l.hold {
			select {
			case <-c.l.stopping:
			case <-time.After(10 * time.Second):
			}
		}
	}
	return n, err
}

func (c *watchedConn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(time.Now()) {
		c.l.stopOnce.Do(func() { close(c.l.stopping) })
	}
	return c.Conn.SetReadDeadline(t)
}

// A body the handler did not read is skipped, and the connection serves
// the next request; a large one closes the connection.
func TestUnreadBody(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	})})
	c, br := rawConn(t, addr)
	fmt.Fprintf(c, "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello")
	fmt.Fprintf(c, "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n")
	for _, want := range []string{"/a", "/b"} {
		if resp, got := readResp(t, br, "POST"); got != want || resp.Close {
			t.Fatalf("got %q (close %v), want %q", got, resp.Close, want)
		}
	}
	c2, br2 := rawConn(t, addr)
	fmt.Fprintf(c2, "POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", 1<<20)
	if resp, _ := readResp(t, br2, "POST"); !resp.Close {
		t.Fatal("a 1 MiB unread body did not close the connection")
	}
}

func TestReadAndIdleTimeouts(t *testing.T) {
	addr := serve(t, &Server{ReadTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadAll(r.Body); err != nil {
				http.Error(w, "slow body", http.StatusRequestTimeout)
				return
			}
			io.WriteString(w, "ok")
		})})
	c, br := rawConn(t, addr)
	io.WriteString(c, "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
	if resp, _ := readResp(t, br, "POST"); resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("slow body: status %d", resp.StatusCode)
	}
	c2, br2 := rawConn(t, addr)
	io.WriteString(c2, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n")
	readResp(t, br2, "GET")
	start := time.Now()
	if _, err := br2.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read gave %v, want EOF", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("idle connection closed after %v, want about 300ms", d)
	}
}

// Shutdown closes idle connections at once and lets a request in flight
// finish, then Serve returns.
func TestShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done")
	})}
	addr := serve(t, s)
	idle, ibr := rawConn(t, addr)
	io.WriteString(idle, "GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	readResp(t, ibr, "GET")

	busy, bbr := rawConn(t, addr)
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection during shutdown: %v, want EOF", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	resp, got := readResp(t, bbr, "GET")
	if got != "done" || !resp.Close {
		t.Fatalf("in-flight request: %q, close %v", got, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
}

// A connection accepted just before Shutdown, whose request is still on
// the way, is answered rather than closed under it (a load balancer sent
// it there a moment before the listener closed).
func TestShutdownAnswersNewConnections(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "done") })}
	addr := serve(t, s)
	// An idle connection beside it: once Shutdown has closed that one, it
	// has passed over the new one in the same sweep.
	idle, ibr := rawConn(t, addr)
	io.WriteString(idle, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n")
	readResp(t, ibr, "GET")
	c, br := rawConn(t, addr)
	testenv.Wait(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.conns) == 2 }, "the server to track both connections")
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection during shutdown: %v, want EOF", err)
	}
	io.WriteString(c, "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi")
	resp, got := readResp(t, br, "POST")
	if got != "done" || !resp.Close {
		t.Fatalf("late request: %q, close %v", got, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestShutdownDeadline(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	started := make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-block
	})}
	addr := serve(t, s)
	c, _ := rawConn(t, addr)
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
	}
}

func quietLog(t *testing.T) *log.Logger { return log.New(io.Discard, "", 0) }

// BenchmarkServer sends keep-alive POSTs over loopback to this server and
// to net/http's, each running the same small handler: the difference is
// what each server costs per request (allocations include the client's few).
func BenchmarkServer(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header()["Content-Type"] = []string{"application/json"}
		w.Header()["Content-Length"] = []string{"2"}
		io.WriteString(w, "{}")
	})
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":64}`
	req := []byte(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	for _, tc := range []struct {
		name  string
		serve func(net.Listener) (stop func())
	}{
		{"h1", func(ln net.Listener) func() {
			s := &Server{Handler: handler, ReadTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
			go s.Serve(ln)
			return func() { s.Close() }
		}},
		{"net-http", func(ln net.Listener) func() {
			s := &http.Server{Handler: handler, ReadTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
			go s.Serve(ln)
			return func() { s.Close() }
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer tc.serve(ln)()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				// Read to the end of the 2-byte body.
				n := 0
				for {
					k, err := c.Read(buf[n:])
					if err != nil {
						b.Fatal(err)
					}
					n += k
					if bytes.HasSuffix(buf[:n], []byte("\r\n\r\n{}")) {
						break
					}
				}
			}
		})
	}
}

// Deadlines under keep-alive: a connection waiting for its next request
// lasts the idle timeout, even past the last request's read deadline (it
// waits under that one and extends); a second request that arrives slowly
// is still cut at the read timeout, also after a request the watch
// watched (the watch clears the deadline while it waits).
func TestKeepAliveDeadlines(t *testing.T) {
	const read, idle = 150 * time.Millisecond, 400 * time.Millisecond
	s := &Server{ReadTimeout: read, IdleTimeout: idle, WatchAfter: 5 * time.Millisecond}
	// watching reports whether a watch is waiting on a connection.
	watching := func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for c := range s.conns {
			c.wmu.Lock()
			running := c.wstate == watchRunning
			c.wmu.Unlock()
			if running {
				return true, ""
			}
		}
		return false, ""
	}
	s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "slow body", http.StatusRequestTimeout)
			return
		}
		if r.URL.Path == "/watched" {
			// Answered once the watch is waiting on the connection.
			if _, ok := testenv.Poll(testenv.WaitTimeout, watching); !ok {
				http.Error(w, "the watch never ran", http.StatusInternalServerError)
				return
			}
		}
		io.WriteString(w, "ok")
	})
	addr := serve(t, s)
	c, br := rawConn(t, addr)
	io.WriteString(c, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n")
	readResp(t, br, "GET")
	// The time under test: past the first request's read deadline, within
	// the idle timeout.
	wait := read + (idle-read)/2
	time.Sleep(wait)
	io.WriteString(c, "GET /b HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, got := readResp(t, br, "GET"); resp.StatusCode != 200 || got != "ok" {
		t.Fatalf("request after %v idle: %d %q", wait, resp.StatusCode, got)
	}
	for _, path := range []string{"/plain", "/watched"} {
		c, br := rawConn(t, addr)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", path)
		if resp, got := readResp(t, br, "GET"); resp.StatusCode != 200 || got != "ok" {
			t.Fatalf("GET %s: %d %q", path, resp.StatusCode, got)
		}
		start := time.Now()
		io.WriteString(c, "POST /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
		resp, _ := readResp(t, br, "POST")
		if d := time.Since(start); resp.StatusCode != http.StatusRequestTimeout || d > time.Second {
			t.Fatalf("after %s: a slow body got %d after %v, want 408 at about 150ms", path, resp.StatusCode, d)
		}
	}
}

// A handler whose request's context was wrapped (a middleware's value, a
// cancel) still reads what the server knows of the head: the facts are
// found through the context, not by the context's type. A request the
// fast path hands to net/http has none.
func TestHeadFactsThroughAWrappedContext(t *testing.T) {
	type key struct{}
	wrap := func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(context.WithValue(r.Context(), key{}, "v"))
		defer cancel()
		bytes, lines := HeadSize(ctx)
		names, values := HeaderLines(ctx)
		w.Header().Set("X-Head", fmt.Sprintf("%d %d %q %q", bytes, lines, names, values))
	}
	addr := serve(t, &Server{Handler: http.HandlerFunc(wrap)})
	c, br := rawConn(t, addr)
	head := "Host: gw\r\nX-A: 1\r\nX-B:2\r\n"
	fmt.Fprintf(c, "GET / HTTP/1.1\r\n%s\r\n", head)
	resp, _ := readResp(t, br, "GET")
	if got, want := resp.Header.Get("X-Head"), fmt.Sprintf("%d 3 %q %q", len(head), []string{"", "X-A", "X-B"}, []string{"", "1", "2"}); got != want {
		t.Errorf("fast path: %s, want %s", got, want)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: gw\r\nX-Folded: a\r\n b\r\n\r\n") // not plain: net/http's
	resp, _ = readResp(t, br, "GET")
	if got := resp.Header.Get("X-Head"); got != "0 0 [] []" {
		t.Errorf("net/http: %s", got)
	}
}
