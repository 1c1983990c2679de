package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/pool"
)

// A replica that sends more than the response asked for must never make a
// later client receive those bytes as its answer: the connection is
// dropped, whether the extra bytes arrive with the response or while the
// connection is idle.
func TestExtraBytesNeverReachTheNextClient(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string
		idle  bool // sent once the connection is idle, not with the response
	}{
		{"second response in the same write", "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nLEAKED", false},
		{"second response while idle", "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nLEAKED", true},
		{"CRLF while idle", "\r\n", true},
		{"partial garbage", "LEAK", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reqs, conns atomic.Int64
			pooled := make(chan struct{}, 1) // the gateway has put the connection back
			stop := make(chan struct{})
			up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				conns.Add(1)
				for {
					if _, _, err := readRequest(br); err != nil {
						return
					}
					n := reqs.Add(1)
					body := fmt.Sprintf("answer-%d", n)
					resp := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
					if !tc.idle {
						io.WriteString(c, resp+tc.extra)
						continue
					}
					io.WriteString(c, resp)
					select {
					case <-pooled:
					case <-stop:
						return
					}
					io.WriteString(c, tc.extra)
				}
			})
			t.Cleanup(func() { close(stop) }) // before rawUpstream's, which waits for the handler
			tr := &Transport{}
			p := newPool(t, nil, up)
			gw, results := gateway(t, tr, p)
			h := tr.host(p.Backends()[0])
			for i := 1; i <= 4; i++ {
				body := readAll(t, post(t, gw, `{"model":"served-model"}`))
				if want := fmt.Sprintf("answer-%d", i); body != want {
					t.Fatalf("request %d got %q, want %q: a replica's extra bytes reached another client", i, body, want)
				}
				if res := <-results; res.Status != 200 || res.Attempts != 1 {
					t.Fatalf("request %d: Result %+v", i, res)
				}
				if tc.idle {
					// Forward has returned: the connection is idle. The
					// next request comes once the extra bytes are on it.
					pooled <- struct{}{}
					testenv.Wait(t, func() bool {
						h.mu.Lock()
						defer h.mu.Unlock()
						return len(h.idle) == 1 && !h.idle[0].quiet()
					}, "the replica's extra bytes to reach the idle connection")
				}
			}
			if conns.Load() != 4 {
				t.Fatalf("%d connections for 4 requests: each one the replica wrote extra bytes on must be dropped", conns.Load())
			}
		})
	}
}

// A POST that reached a replica is not sent again, even on a kept-alive
// connection the replica closes without answering: it may be generating.
func TestReceivedRequestIsNeverResent(t *testing.T) {
	var reqs atomic.Int64
	up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			if reqs.Add(1) == 2 {
				return // read the whole second request, then close without a word
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	other := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, _, err := readRequest(br); err == nil {
			reqs.Add(100)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := &Transport{}
	p := newPool(t, func(c *pool.Config) { c.Retry.Attempts = 3 }, up, other)
	gw, results := gateway(t, tr, p)
	// Route the first request to the first replica by taking the other out.
	p.Report(p.Backends()[1], pool.Failure)
	for range 5 {
		p.Report(p.Backends()[1], pool.Failure)
	}
	if body := readAll(t, post(t, gw, `{"model":"served-model"}`)); body != "ok" {
		t.Fatalf("first request: %q", body)
	}
	<-results
	resp := post(t, gw, `{"model":"served-model"}`)
	body := readAll(t, resp)
	res := <-results
	if resp.StatusCode != 502 || !strings.Contains(body, "bad_gateway") {
		t.Fatalf("second request: status %d body %s, want a 502", resp.StatusCode, body)
	}
	if n := reqs.Load(); n != 2 {
		t.Fatalf("replicas received %d (100 per request on the other replica), want 2: the received POST was sent again", n)
	}
	if res.Attempts != 1 {
		t.Fatalf("Attempts = %d, want 1", res.Attempts)
	}
}

func TestNotSentClassification(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&connectError{io.EOF}, true},
		{&notSentError{io.ErrClosedPipe}, true},
		{fmt.Errorf("wrapped: %w", &notSentError{io.EOF}), true},
		{fmt.Errorf("read response: %w", io.EOF), false},
		{&statusError{502}, false},
	} {
		if got := notSent(tc.err); got != tc.want {
			t.Errorf("notSent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A streamed request whose head is late (retry.first_byte_timeout) is
// abandoned, its connection closed (an abort to vLLM), and tried on
// another replica; a non-streamed one waits, its head comes when
// generation ends.
func TestLateStreamHeadTriedElsewhere(t *testing.T) {
	abandoned := make(chan struct{}, 4)
	slow := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, _, err := readRequest(br); err != nil {
			return
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.ReadByte(); err == io.EOF {
			abandoned <- struct{}{} // the gateway closed it
			return
		}
	})
	fast := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfast")
		}
	})
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			p := newPool(t, func(c *pool.Config) {
				c.Retry.FirstByteTimeout = 100 * time.Millisecond
				c.Timeouts.FirstByte = 600 * time.Millisecond
			}, slow, fast)
			tr := &Transport{}
			b := p.Backends()
			gw, results := gateway(t, tr, p)
			body := `{"model":"served-model"}`
			if stream {
				body = `{"model":"served-model","stream":true}`
			}
			// Pick is random between two idle replicas: send until one
			// request went to the slow replica first.
			for range 20 {
				resp := post(t, gw, body)
				got := readAll(t, resp)
				res := <-results
				if res.Backend.Name != b[0].Name && res.Attempts == 1 {
					continue // went to the fast one directly
				}
				if stream {
					if resp.StatusCode != 200 || got != "fast" || res.Attempts != 2 {
						t.Fatalf("late streamed head: status %d body %q attempts %d; want the other replica's answer on attempt 2", resp.StatusCode, got, res.Attempts)
					}
					select {
					case <-abandoned:
					case <-time.After(3 * time.Second):
						t.Fatal("the abandoned attempt's connection was not closed")
					}
				} else if resp.StatusCode != 504 || res.Attempts != 1 {
					t.Fatalf("non-streamed request: status %d attempts %d; want 504 after first_byte, not a retry", resp.StatusCode, res.Attempts)
				}
				return
			}
			t.Fatal("no request went to the slow replica in 20 tries")
		})
	}
}
