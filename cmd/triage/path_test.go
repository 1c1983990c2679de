package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router"
	"github.com/triagegw/triage/router/routertest"
	"github.com/triagegw/triage/router/tracing"
	"github.com/triagegw/triage/router/tracing/tracingtest"
)

// The whole request path in one process, as `triage serve` runs it: the
// h1 server on a loopback socket, the handler, the decision (tier 1 where
// the config has rules), the proxy to a loopback upstream and the relay
// back, the access log formatted (to io.Discard) and the metrics. The
// upstream and the client are raw sockets that allocate nothing per
// request, so an allocation counted is the gateway's.

// pathCase is one configuration and request of the benchmark and the gate.
type pathCase struct {
	name   string
	config string // under bench/
	stream bool
	prompt string
	header string // an extra request header line
	// usage: the pools ask for a stream's usage and drop the chunk (the
	// default, stream_usage: true); the bench configs turn it off.
	usage bool
	// budget is the most allocations per request the gate allows:
	// BenchmarkServePath's figure when it was last cut. Lower it with
	// every cut; raising it needs a reason in the commit.
	budget float64
	// traced: tracing on, exported over OTLP/HTTP to a collector on a
	// loopback socket, sampling this ratio of requests.
	traced bool
	sample float64
}

var pathCases = []pathCase{
	{name: "plain", config: "gateway.yaml", prompt: "hi", budget: 9},
	{name: "plain-stream", config: "gateway.yaml", stream: true, prompt: "hi", budget: 8},
	{name: "plain-stream-usage", config: "gateway.yaml", stream: true, prompt: "hi", usage: true, budget: 8},
	{name: "plain-2KB", config: "gateway.yaml", prompt: prompt2KB, budget: 9},
	{name: "tier1", config: "gateway-semantic.yaml", prompt: "hi", budget: 11},
	{name: "tier1-stream", config: "gateway-semantic.yaml", stream: true, prompt: "hi", budget: 10},
	{name: "tier1-2KB", config: "gateway-semantic.yaml", prompt: prompt2KB, budget: 11},
	{name: "access", config: "gateway-access.yaml", prompt: "hi", header: "Authorization: Bearer sk-triage-680ada05-0oqbsct2Ixizw6Zfmnl7Ps3yBGTy6vDqdwK2qfvm\r\n", budget: 12},
	{name: "plain-sdk-head", config: "gateway.yaml", prompt: "hi", header: sdkHead, budget: 11},
}

// sdkHead is the rest of the head OpenAI's Python SDK sends with a chat
// completion (v1.82, on Linux): the bench's other cases send three header
// lines, real clients fifteen.
const sdkHead = "Accept: application/json\r\nAccept-Encoding: gzip, deflate\r\nAuthorization: Bearer sk-proj-4f9Qx2LbV7nR0tYz8KcW1mHdPsA6eUjG3oNiT5vXyB2qLrC9wZkM0aSfD7hJ4gE1pO8uI6tYxVbN3cR5\r\n" +
	"Connection: keep-alive\r\nUser-Agent: OpenAI/Python 1.82.0\r\nX-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.82.0\r\n" +
	"X-Stainless-Os: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\nX-Stainless-Runtime-Version: 3.12.3\r\n" +
	"X-Stainless-Async: false\r\nX-Stainless-Retry-Count: 0\r\nX-Stainless-Read-Timeout: 600\r\n"

// tracedCases are what tracing costs, in time and in allocations
// (BenchmarkServePath only: the export goroutine allocates too, by batch,
// so their counts are not exact enough for the gate). Tracing off, the
// cases above are the gate's: it must cost them nothing.
var tracedCases = []pathCase{
	{name: "plain-traced", config: "gateway.yaml", prompt: "hi", traced: true, sample: 1},
	{name: "tier1-traced", config: "gateway-semantic.yaml", prompt: "hi", traced: true, sample: 1},
	{name: "tier1-stream-traced", config: "gateway-semantic.yaml", stream: true, prompt: "hi", traced: true, sample: 1},
	{name: "tier1-traced-unsampled", config: "gateway-semantic.yaml", prompt: "hi", traced: true, sample: 0},
}

// prompt2KB is a 2 KB prompt (about 400 tokens).
var prompt2KB = strings.Repeat("How do enzymes lower the activation energy of a reaction? ", 35)

// upstreamReply is what the raw upstream answers, as ../shared/bench's
// mock does: a chat completion, or a stream of 20 chunks, the usage chunk
// and [DONE], one chunk each.
func upstreamReply(stream bool) []byte {
	if !stream {
		body := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}`
		return fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n")
	ev := func(s string) { fmt.Fprintf(&b, "%x\r\n%s\r\n", len(s), s) }
	for i := range 20 {
		ev(fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"tok%d "},"logprobs":null,"finish_reason":null}]}`+"\n\n", i))
	}
	ev(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":20,"total_tokens":32}}` + "\n\n")
	ev("data: [DONE]\n\n")
	b.WriteString("0\r\n\r\n")
	return b.Bytes()
}

// rawUpstream answers every request on every connection with reply,
// reading heads line by line from a buffer and allocating nothing.
func rawUpstream(tb testing.TB, reply []byte) string {
	return "http://" + testenv.ServeConns(tb, func(c net.Conn) {
		br := bufio.NewReaderSize(c, 64<<10)
		for {
			n, _, err := readHeadFraming(br)
			if err != nil {
				return
			}
			if _, err := br.Discard(n); err != nil {
				return
			}
			if _, err := c.Write(reply); err != nil {
				return
			}
		}
	})
}

// readHeadFraming reads a message head and returns its Content-Length (0
// when absent) and whether its body is chunked.
func readHeadFraming(br *bufio.Reader) (length int, chunked bool, err error) {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		if len(line) <= 2 {
			return length, chunked, nil
		}
		if k := len("content-length:"); len(line) > k && asciiPrefixFold(line, "content-length:") {
			length = 0
			for _, c := range bytes.TrimSpace(line[k:]) {
				length = length*10 + int(c-'0')
			}
		}
		if asciiPrefixFold(line, "transfer-encoding: chunked") {
			chunked = true
		}
	}
}

func asciiPrefixFold(b []byte, p string) bool {
	if len(b) < len(p) {
		return false
	}
	for i := range len(p) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != p[i] {
			return false
		}
	}
	return true
}

var errStatus = errors.New("the gateway did not answer 200")

// pathClient sends one request at a time on a kept-alive connection and
// reads the answer to its end, allocating nothing.
type pathClient struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
	gw  *router.Gateway
	col *tracingtest.Collector // the OTLP endpoint of a traced case
}

func (p *pathClient) do() error {
	if _, err := p.c.Write(p.req); err != nil {
		return err
	}
	status, err := p.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	ok := bytes.HasPrefix(status, []byte("HTTP/1.1 200 "))
	n, chunked, err := readHeadFraming(p.br)
	if err != nil {
		return err
	}
	if !chunked {
		if _, err := p.br.Discard(n); err != nil {
			return err
		}
	} else {
		for {
			line, err := p.br.ReadSlice('\n')
			if err != nil {
				return err
			}
			size := 0
			for _, c := range bytes.TrimSpace(line) {
				switch {
				case c >= '0' && c <= '9':
					size = size<<4 | int(c-'0')
				case c >= 'a' && c <= 'f':
					size = size<<4 | int(c-'a'+10)
				}
			}
			if _, err := p.br.Discard(size + 2); err != nil { // the data and its CRLF; the last: the blank line
				return err
			}
			if size == 0 {
				break
			}
		}
	}
	if !ok {
		return errStatus
	}
	return nil
}

// startPath serves c's config with its pools pointed at a raw upstream,
// and returns a client connected to it.
func startPath(tb testing.TB, c pathCase) *pathClient {
	tb.Helper()
	tb.Setenv("TRIAGE_MODELS", testenv.Models(tb, "tables/subjects-tier1.tbl"))
	l := &gatewayLoader{path: filepath.Join(repoRoot(), "bench", c.config), cache: &lifecycle.Models{}}
	ld, err := l.load()
	if err != nil {
		tb.Fatal(err)
	}
	up := rawUpstream(tb, upstreamReply(c.stream))
	var col *tracingtest.Collector
	if c.traced {
		col = tracingtest.NewSink()
		tb.Cleanup(col.Close)
		ratio := c.sample
		ld.Config.Tracing = tracing.Config{Endpoint: col.URL, SampleRatio: &ratio}
		ld.Config.Tracing.SetDefaults()
	}
	off := false
	for i := range ld.Config.Pools {
		p := &ld.Config.Pools[i]
		p.Replicas[0].URL = up
		p.Health.Enabled = &off // no background requests among the counted ones
		if c.usage {
			p.StreamUsage = nil
		}
	}
	gw, err := router.New(ld.Config, ld.Rules, router.Options{Logger: slog.New(slog.DiscardHandler), AccessLog: io.Discard, Registry: prometheus.NewRegistry()})
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := net.Dial("tcp", routertest.Serve(tb, gw, routertest.Options{}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}],"max_tokens":64,"stream":%v}`, c.prompt, c.stream)
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", c.header, len(body), body)
	p := &pathClient{c: conn, br: bufio.NewReaderSize(conn, 64<<10), req: []byte(req), gw: gw, col: col}
	for range warmUp { // connections, pools and caches warm
		if err := p.do(); err != nil {
			tb.Fatalf("%s: %v", c.name, err)
		}
	}
	return p
}

// warmUp is the number of requests startPath sends before returning.
const warmUp = 50

// BenchmarkServePath is the request path end to end, one request at a
// time on one connection: time per request (loopback round trips to the
// gateway and to the upstream included), the process's CPU time per
// request (the client, the upstream and, traced, the span export
// included: compare cases) and allocations per request.
// `go test ./cmd/triage -run '^$' -bench ServePath -benchmem`.
func BenchmarkServePath(b *testing.B) {
	for _, c := range append(pathCases[:len(pathCases):len(pathCases)], tracedCases...) {
		b.Run(c.name, func(b *testing.B) {
			p := startPath(b, c)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if err := p.do(); err != nil {
					b.Fatal(err)
				}
			}
			if c.traced { // the spans of the requests served (and of the warm-up's 50), exported
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := p.gw.Shutdown(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(p.col.Bytes())/float64(b.N+warmUp), "export-B/op")
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// TestServePathAllocs is the allocation gate: each case's allocations per
// request must stay within its recorded budget. Allocations are counted
// for the whole process, so they are the gateway's (the upstream and the
// client allocate nothing per request).
func TestServePathAllocs(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector allocates, and makes sync.Pool drop items")
	}
	for _, c := range pathCases {
		t.Run(c.name, func(t *testing.T) {
			p := startPath(t, c)
			var err error
			n := testing.AllocsPerRun(300, func() {
				if e := p.do(); e != nil {
					err = e
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %.1f allocations per request (budget %v)", c.name, n, c.budget)
			if n > c.budget {
				t.Errorf("%s: %.1f allocations per request, over the budget of %v: find the new ones with `go test ./cmd/triage -run '^$' -bench 'ServePath/%s$' -memprofile mem.out` and `go tool pprof -sample_index=alloc_objects mem.out`", c.name, n, c.budget, c.name)
			}
		})
	}
}
