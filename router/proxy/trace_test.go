package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/router/pool"
)

// attemptLog records what Forward tells a Tracer.
type attemptLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *attemptLog) Attempt(n int, b *pool.Backend) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("attempt %d %s", n, b.Name))
	return fmt.Appendf(nil, "Traceparent: 00-0af7651916cd43dd8448eb211c80319c-%016x-01\r\n", n)
}

func (l *attemptLog) AttemptDone(status int, retry string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("done %d %q %v", status, retry, err != nil))
}

func (l *attemptLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "; ")
}

// Each attempt is reported to the Tracer, begun and ended in order with
// why it was retried, and carries the Tracer's trace context upstream in
// place of the client's; without a Tracer the client's goes through.
func TestTracerSeesEachAttempt(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	var mu sync.Mutex
	var seen []http.Header // what the replicas received, in order
	record := func(status int) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			seen = append(seen, r.Header.Clone())
			mu.Unlock()
			w.WriteHeader(status)
			fmt.Fprint(w, `{"ok":true}`)
		}))
		t.Cleanup(s.Close)
		return s
	}
	busy, ok := record(503), record(200)
	const clientTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	for _, tc := range []struct {
		name      string
		first     string
		traced    bool
		want      string // the attempt log, with replica names as "first" and "ok"
		firstSeen int    // the first attempt a replica received
		seen      int    // requests the replicas received
	}{
		{"503 then ok", busy.URL, true, `attempt 1 first; done 503 "status" true; attempt 2 ok; done 200 "" false`, 1, 2},
		{"refused then ok", dead, true, `attempt 1 first; done 0 "connect" true; attempt 2 ok; done 200 "" false`, 2, 1},
		{"untraced", busy.URL, false, ``, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			p := newPool(t, func(c *pool.Config) {
				c.Replicas[0].Weight = 10000 // tried first
				c.Breaker.Failures = 100
			}, tc.first, ok.URL)
			log := &attemptLog{}
			forwarded := make(chan struct{}, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				req := &Request{Method: r.Method, Path: r.URL.Path, Header: r.Header, Body: body, RequestID: "req-1", Start: time.Now()}
				if tc.traced {
					req.Trace = log
				}
				pol := PolicyOf(p.Config())
				(&Transport{}).Forward(r.Context(), w, p, &pol, req)
				forwarded <- struct{}{}
			}))
			defer srv.Close()
			resp := post(t, srv.URL, `{"model":"served-model"}`, "Traceparent", clientTP, "Tracestate", "vendor=1")
			if body := readAll(t, resp); resp.StatusCode != 200 {
				t.Fatalf("status %d, body %s", resp.StatusCode, body)
			}
			<-forwarded // the client may have its answer before Forward returns
			names := strings.NewReplacer(p.Backends()[0].Name, "first", p.Backends()[1].Name, "ok")
			if got := names.Replace(log.String()); got != tc.want {
				t.Fatalf("attempts: %s\nwant %s", got, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != tc.seen {
				t.Fatalf("the replicas received %d requests, want %d", len(seen), tc.seen)
			}
			for i, h := range seen {
				tp, ts := h.Values("Traceparent"), h.Get("Tracestate")
				switch {
				case !tc.traced && (len(tp) != 1 || tp[0] != clientTP || ts != "vendor=1"):
					t.Errorf("untraced: replica %d got traceparent %q, tracestate %q; want the client's", i, tp, ts)
				case tc.traced && (len(tp) != 1 || tp[0] != fmt.Sprintf("00-0af7651916cd43dd8448eb211c80319c-%016x-01", i+tc.firstSeen) || ts != ""):
					t.Errorf("traced: replica %d got traceparent %q, tracestate %q; want the attempt's alone", i, tp, ts)
				}
			}
		})
	}
}
