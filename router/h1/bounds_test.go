package h1

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// closedWithin reads from c until it ends and reports how long that took,
// failing the test if it took longer than limit.
func closedWithin(t *testing.T, read func() error, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if err := read(); err != nil {
			break
		}
	}
	d := time.Since(start)
	if d > limit {
		t.Fatalf("connection closed after %v, want within %v", d, limit)
	}
	return d
}

// A connection that never sends its first request is cut at ReadTimeout,
// not held for the (much longer) idle timeout.
func TestSilentConnectionGetsReadTimeout(t *testing.T) {
	addr := serve(t, &Server{ReadTimeout: 150 * time.Millisecond, IdleTimeout: time.Minute, Handler: http.HandlerFunc(echo)})
	_, br := rawConn(t, addr)
	closedWithin(t, func() error { _, err := br.ReadByte(); return err }, 3*time.Second)
}

// The first request's ReadTimeout counts from the connection's start: a
// first byte does not restart it.
func TestTrickledHeadGetsOneReadTimeout(t *testing.T) {
	var served atomic.Bool
	read := 300 * time.Millisecond
	addr := serve(t, &Server{ReadTimeout: read, IdleTimeout: time.Minute, ErrorLog: quietLog(t),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Store(true) })})
	c, br := rawConn(t, addr)
	// The time under test is the client's: a head trickled across the
	// deadline.
	go func() {
		time.Sleep(read * 2 / 3)
		io.WriteString(c, "G") // the first byte late, within ReadTimeout
		time.Sleep(read * 2 / 3)
		io.WriteString(c, "ET /x HTTP/1.1\r\nHost: h\r\n\r\n") // the rest past it, within a restarted one
	}()
	closedWithin(t, func() error { _, err := br.ReadByte(); return err }, 3*time.Second)
	if served.Load() {
		t.Fatal("a head that ended past ReadTimeout from the connection's start was served")
	}
}

// A slow head handed to net/http keeps the deadline the fast path set:
// net/http would restart it, giving about twice ReadTimeout.
func TestHandedOverHeadKeepsItsDeadline(t *testing.T) {
	var served atomic.Bool
	read := 400 * time.Millisecond
	addr := serve(t, &Server{ReadTimeout: read, IdleTimeout: time.Minute, ErrorLog: quietLog(t),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Store(true) })})
	c, br := rawConn(t, addr)
	// Over 4 KiB of head: the fast path hands it over once its buffer is
	// full; the rest comes slowly (the client's time is what is tested).
	long := "GET /x HTTP/1.1\r\nHost: h\r\nX-Long: " + strings.Repeat("a", 5000) + "\r\n"
	start := time.Now()
	io.WriteString(c, long[:1000])
	go func() {
		time.Sleep(read * 3 / 4)
		io.WriteString(c, long[1000:]) // fills the buffer: handed over now
		time.Sleep(read / 2)
		io.WriteString(c, "\r\n") // the head ends past its deadline, within a restarted one
	}()
	closedWithin(t, func() error { _, err := br.ReadByte(); return err }, 5*time.Second)
	if served.Load() {
		t.Fatalf("a head finished %v after the connection began was served; ReadTimeout is %v", time.Since(start), read)
	}
}

// After the handed request, the connection gets its idle timeout as usual,
// and a long handler on a handed connection is not cut by the cap.
func TestHandedConnectionOutlivesTheCap(t *testing.T) {
	read := 200 * time.Millisecond
	addr := serve(t, &Server{ReadTimeout: read, IdleTimeout: time.Minute, ErrorLog: quietLog(t),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			if r.URL.Path == "/slow" {
				select {
				case <-time.After(500 * time.Millisecond):
				case <-r.Context().Done():
					http.Error(w, "cancelled", 499)
					return
				}
			}
			io.WriteString(w, "ok")
		})})
	c, br := rawConn(t, addr)
	// Chunked bodies go to net/http.
	io.WriteString(c, "POST /slow HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
	if resp, body := readResp(t, br, "POST"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("slow handler on a handed connection: %d %q", resp.StatusCode, body)
	}
	time.Sleep(read * 3 / 2) // the time under test: idle past the first request's deadline
	io.WriteString(c, "POST /fast HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	if resp, body := readResp(t, br, "POST"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("second request on a handed connection: %d %q", resp.StatusCode, body)
	}
}

// A client that stops reading a stream is cut after SendTimeout: the
// handler's write fails, on the fast path and on a handed connection.
func TestStalledClientIsCut(t *testing.T) {
	for _, tc := range []struct{ name, req string }{
		{"fast path", "POST /s HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi"},
		{"handed over", "POST /s HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed := make(chan error, 1)
			addr := serve(t, &Server{ReadTimeout: time.Second, SendTimeout: 200 * time.Millisecond, ErrorLog: quietLog(t),
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.ReadAll(r.Body)
					w.Header().Set("Content-Type", "text/event-stream")
					chunk := []byte("data: " + strings.Repeat("x", 64<<10) + "\n\n")
					for {
						if _, err := w.Write(chunk); err != nil {
							failed <- err
							return
						}
						w.(http.Flusher).Flush()
					}
				})})
			c, _ := rawConn(t, addr)
			io.WriteString(c, tc.req) // and never read
			select {
			case <-failed:
			case <-time.After(8 * time.Second):
				t.Fatal("the handler kept writing to a client that reads nothing")
			}
		})
	}
}
