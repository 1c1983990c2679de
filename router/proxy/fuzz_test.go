package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/pool"
)

// fuzzUpstream is one loopback listener whose connections answer a
// request with the bytes the current fuzz input gives.
type fuzzUpstream struct {
	url string
	mu  sync.Mutex
	// respond writes the answer to c after the request was read.
	respond func(c net.Conn)
}

func newFuzzUpstream(f *testing.F) *fuzzUpstream {
	u := &fuzzUpstream{}
	u.url = "http://" + testenv.ServeConns(f, func(c net.Conn) {
		if _, _, err := readRequest(bufio.NewReader(c)); err != nil {
			return
		}
		u.mu.Lock()
		respond := u.respond
		u.mu.Unlock()
		respond(c)
	})
	return u
}

func (u *fuzzUpstream) set(respond func(c net.Conn)) {
	u.mu.Lock()
	u.respond = respond
	u.mu.Unlock()
}

// reference parses raw as net/http's client does: the response after any
// 100 Continue, its body, and the bytes left after it.
func reference(raw []byte) (resp *http.Response, body, rest []byte, err error) {
	br := bufio.NewReader(bytes.NewReader(raw))
	for range max1xx + 1 {
		resp, err = http.ReadResponse(br, &http.Request{Method: "POST"})
		if err != nil || resp.StatusCode != http.StatusContinue {
			break
		}
	}
	if err != nil {
		return nil, nil, nil, err
	}
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, nil, err
	}
	rest, _ = io.ReadAll(br)
	return resp, body, rest, nil
}

var relaySeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"id\":\"x\"}\n",
	"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n" +
		"1b\r\ndata: {\"choices\":[\"a\"]}\n\n\r\n" + "e\r\ndata: [DONE]\n\n\r\n" + "0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: t\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 204 No Content\r\n\r\n",
	"HTTP/1.1 204 No Content\r\n\r\nLEAKED",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nLEAKED",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhéllo",
	"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil close",
	"HTTP/1.0 200 OK\r\n\r\nold",
	"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Bad: a\x00b\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 02\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
	"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
}

// FuzzRelay checks the upstream response parser against net/http's client
// (http.ReadResponse): a response the gateway relays in full is one
// net/http accepts with the same status, Content-Type and body bytes, and a
// connection the gateway keeps for reuse is one net/http would keep too,
// with nothing left on it after the response.
func FuzzRelay(f *testing.F) {
	for _, s := range relaySeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	up := newFuzzUpstream(f)
	off := false
	cfg := pool.Config{Name: "p", Model: "m", Health: pool.Health{Enabled: &off},
		Replicas: []pool.Replica{{URL: up.url}},
		// Short: an input that leaves the gateway waiting (a close-delimited
		// body on a connection kept open, a head cut short) costs this per
		// execution, and the fuzzer's minimisation runs thousands.
		Timeouts: pool.Timeouts{FirstByte: 30 * time.Millisecond, Idle: 10 * time.Millisecond},
		Retry:    pool.Retry{Attempts: 1}}
	cfg.SetDefaults()
	f.Fuzz(func(t *testing.T, raw []byte, closeAfter bool) {
		up.set(func(c net.Conn) {
			c.Write(raw)
			if !closeAfter {
				io.Copy(io.Discard, c) // keep it open until the gateway closes it
			}
		})
		p, err := pool.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pol := PolicyOf(&cfg)
		tr := &Transport{}
		defer tr.CloseIdle()
		rec := httptest.NewRecorder()
		res := tr.Forward(context.Background(), rec, p, &pol, &Request{Method: "POST", Path: "/v1/chat/completions",
			Header: http.Header{}, Body: []byte(`{"model":"m"}`), Start: time.Now()})
		ok := res.Err == nil && !res.Aborted
		c := tr.popIdle(tr.host(p.Backends()[0]))
		if c != nil {
			c.nc.Close()
		}
		if !ok {
			if c != nil {
				t.Fatalf("a failed response left its connection for reuse (error %v)", res.Err)
			}
			return
		}
		ref, body, rest, err := reference(raw)
		if err != nil {
			t.Fatalf("relayed status %d and %q in full, but net/http refuses the response: %v", res.Status, rec.Body.Bytes(), err)
		}
		if ref.StatusCode != res.Status || rec.Code != res.Status {
			t.Fatalf("status: relayed %d (recorded %d), net/http %d", res.Status, rec.Code, ref.StatusCode)
		}
		if !bytes.Equal(rec.Body.Bytes(), body) {
			t.Fatalf("body: relayed %q, net/http %q", rec.Body.Bytes(), body)
		}
		if got, want := strings.TrimSpace(rec.Header().Get("Content-Type")), strings.TrimSpace(ref.Header.Get("Content-Type")); got != want {
			t.Fatalf("Content-Type: relayed %q, net/http %q", got, want)
		}
		if c != nil && (ref.Close || len(rest) > 0) {
			t.Fatalf("connection kept for reuse; net/http says close=%v with %q left after the response", ref.Close, rest)
		}
	})
}

// flushRecorder records what a ResponseWriter has been given, and what of
// it was flushed.
type flushRecorder struct {
	mu      sync.Mutex
	header  http.Header
	code    int
	body    []byte
	flushed int
	changed chan struct{}
}

func (r *flushRecorder) Header() http.Header { return r.header }
func (r *flushRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *flushRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.code == 0 {
		r.code = 200
	}
	r.body = append(r.body, p...)
	return len(p), nil
}
func (r *flushRecorder) Flush() {
	r.mu.Lock()
	r.flushed = len(r.body)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}
func (r *flushRecorder) flushedLen() int { r.mu.Lock(); defer r.mu.Unlock(); return r.flushed }

// FuzzRelayStream checks the streaming relay: an SSE body sent as chunks
// in arbitrary pieces reaches the client byte for byte, and every chunk is
// flushed to the client before the upstream sends the next (the gateway
// never holds a frame back waiting for more).
func FuzzRelayStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n"), []byte{10, 40, 3})
	f.Add([]byte("data: a\n\ndata: b\n\n"), []byte{1, 1, 1, 1, 1, 1})
	f.Add(bytes.Repeat([]byte("data: x\n\n"), 2000), []byte{200, 7, 255})
	up := newFuzzUpstream(f)
	off := false
	cfg := pool.Config{Name: "p", Model: "m", Health: pool.Health{Enabled: &off},
		Replicas: []pool.Replica{{URL: up.url}}, Retry: pool.Retry{Attempts: 1}}
	cfg.SetDefaults()
	f.Fuzz(func(t *testing.T, payload, cuts []byte) {
		if len(payload) == 0 || len(payload) > 64<<10 || len(cuts) > 64 {
			return
		}
		// The pieces, each sent as one chunk.
		var pieces [][]byte
		rest := payload
		for _, c := range cuts {
			n := int(c)*int(c)/8 + 1
			if n >= len(rest) {
				break
			}
			pieces, rest = append(pieces, rest[:n]), rest[n:]
		}
		pieces = append(pieces, rest)
		rec := &flushRecorder{header: http.Header{}, changed: make(chan struct{}, 1)}
		stalled := make(chan string, 1)
		up.set(func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			sent := 0
			for _, p := range pieces {
				c.Write([]byte(strconv.FormatInt(int64(len(p)), 16) + "\r\n"))
				c.Write(p)
				c.Write([]byte("\r\n"))
				sent += len(p)
				deadline := time.After(5 * time.Second)
				for rec.flushedLen() < sent {
					select {
					case <-rec.changed:
					case <-time.After(time.Millisecond):
					case <-deadline:
						stalled <- "chunk ending at byte " + strconv.Itoa(sent) + " was not flushed before the next was sent"
						c.Close()
						return
					}
				}
			}
			io.WriteString(c, "0\r\n\r\n")
			io.Copy(io.Discard, c)
		})
		p, err := pool.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pol := PolicyOf(&cfg)
		tr := &Transport{}
		defer tr.CloseIdle()
		res := tr.Forward(context.Background(), rec, p, &pol, &Request{Method: "POST", Path: "/v1/chat/completions",
			Header: http.Header{}, Body: []byte(`{"model":"m","stream":true}`), Start: time.Now()})
		select {
		case msg := <-stalled:
			t.Fatal(msg)
		default:
		}
		if res.Err != nil || res.Aborted || res.Status != 200 {
			t.Fatalf("stream failed: %+v", res)
		}
		if !bytes.Equal(rec.body, payload) {
			t.Fatalf("relayed %d bytes differing from the %d sent", len(rec.body), len(payload))
		}
		if res.Bytes != int64(len(payload)) {
			t.Fatalf("Result.Bytes %d, want %d", res.Bytes, len(payload))
		}
	})
}
