package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/config"
)

// Headers past the configured bounds get an OpenAI-shaped 431 and never
// reach a replica.
func TestOversizedHeadersGet431(t *testing.T) {
	rep := newReplica(t, "m", "r")
	cfg := newConfig("", poolCfg("p", "m", rep.URL))
	cfg.Limits.MaxHeaders = 20
	cfg.Limits.MaxHeaderBytes = 8 << 10
	h := newHarness(t, cfg)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	many := make([]string, 0, 60)
	for i := range 30 {
		many = append(many, fmt.Sprintf("X-H%d", i), "v")
	}
	for _, tc := range []struct {
		name string
		hdr  []string
	}{
		{"too many", many},
		{"too large", []string{"X-Big", strings.Repeat("b", 9<<10)}},
		{"too large, past the fast path's buffer", []string{"X-Big", strings.Repeat("b", 100<<10)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(t, "POST", "/v1/chat/completions", body, tc.hdr...)
			if r.status != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("status %d, want 431 (%s)", r.status, r.body)
			}
			if _, _, code := openAIError(t, r.body); code != "request_header_fields_too_large" {
				t.Fatalf("code %q", code)
			}
		})
	}
	if n := rep.Stats().Requests; n != 0 {
		t.Fatalf("oversized heads reached the replica %d times", n)
	}
	if r := h.do(t, "POST", "/v1/chat/completions", body, "X-Ok", "1"); r.status != 200 {
		t.Fatalf("a normal request after them: %d %s", r.status, r.body)
	}
}

// Every GET endpoint answers HEAD with its status and no body, as
// net/http's handlers do.
func TestHeadRequests(t *testing.T) {
	rep := newReplica(t, "m", "r")
	h := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	for _, path := range []string{"/v1/models", "/v1/models/m", "/healthz", "/metrics"} {
		req, _ := http.NewRequest("HEAD", h.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(b) != 0 {
			t.Errorf("HEAD %s: status %d, %d body bytes; want 200 and none", path, resp.StatusCode, len(b))
		}
	}
}

// A client-chosen model name is cut in the access log, with a marker.
func TestAccessLogClipsClientFields(t *testing.T) {
	rep := newReplica(t, "m", "r")
	h := newHarness(t, newConfig("", poolCfg("p", "m", rep.URL)))
	huge := strings.Repeat("é", 300<<10) // 600 KiB
	r := h.do(t, "POST", "/v1/chat/completions", `{"model":"`+huge+`"}`)
	if r.status != 404 {
		t.Fatalf("status %d", r.status)
	}
	var line map[string]any
	testenv.Wait(t, func() bool {
		for _, l := range strings.Split(h.log.String(), "\n") {
			if strings.Contains(l, `"msg":"request"`) && json.Unmarshal([]byte(l), &line) == nil {
				return true
			}
		}
		return false
	}, "an access log line")
	model, _ := line["model"].(string)
	if want := fmt.Sprintf("…[%d bytes]", len(huge)); !strings.HasSuffix(model, want) || len(model) > maxLogField+len(want) {
		t.Fatalf("logged model is %d bytes ending %q; want at most %d bytes ending %q", len(model), model[max(0, len(model)-20):], maxLogField+len(want), want)
	}
	if n := len(h.log.String()); n > 4<<10 {
		t.Fatalf("log holds %d bytes for one request", n)
	}
}

// A client that claims a large body and sends a byte costs a byte, not
// the claim: 40 such connections must not take the heap past a few MiB.
// The heap is measured once every handler has read the byte and is
// waiting for the rest, holding the buffer it reads into.
func TestClaimedBodyLengthIsNotAllocated(t *testing.T) {
	const clients = 40
	waiting := make(chan struct{}, clients)
	rep := newReplica(t, "m", "r")
	h := newWrappedHarness(t, newConfig("", poolCfg("p", "m", rep.URL)), func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = &waitingBody{ReadCloser: r.Body, waiting: waiting}
			next.ServeHTTP(w, r)
		})
	})
	addr := strings.TrimPrefix(h.URL, "http://")
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for range clients {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n{", 8<<20)
	}
	for i := range clients {
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d handlers are waiting for the rest of their bodies after 10 s", i, clients)
		}
	}
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	grown := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	if grown > 16<<20 {
		t.Fatalf("heap grew by %d MiB for %d one-byte bodies claiming 8 MiB each", grown>>20, clients)
	}
}

// waitingBody signals waiting, once, when the handler asks for more of a
// body after a read that returned some: it then holds the buffer it reads
// into and, when the client sends nothing more, waits.
type waitingBody struct {
	io.ReadCloser
	waiting chan<- struct{}
	got     bool
	sent    bool
}

func (b *waitingBody) Read(p []byte) (int, error) {
	if b.got && !b.sent {
		b.sent = true
		b.waiting <- struct{}{}
	}
	n, err := b.ReadCloser.Read(p)
	b.got = b.got || n > 0
	return n, err
}

// What curl and SDKs send for larger bodies: Expect: 100-continue, and a
// chunked body of unknown length. Both are routed, and the replica gets
// the body whole with a Content-Length.
func TestExpectContinueAndChunkedBodies(t *testing.T) {
	rep := newReplica(t, "llama", "gen-0")
	h := newHarness(t, newConfig("general", poolCfg("general", "llama", rep.URL)))
	long := strings.Repeat("word ", 400) // 2 KB: curl asks for 100 Continue
	body := `{"model":"llama","messages":[{"role":"user","content":"` + long + `"}]}`
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
	for _, tc := range []struct {
		name    string
		expect  bool
		chunked bool
	}{{"expect", true, false}, {"chunked", false, true}, {"both", true, true}} {
		var r io.Reader = strings.NewReader(body)
		if tc.chunked {
			r = struct{ io.Reader }{r} // no length: the client sends it chunked
		}
		req, _ := http.NewRequest("POST", h.URL+"/v1/chat/completions", r)
		req.Header.Set("Content-Type", "application/json")
		if tc.expect {
			req.Header.Set("Expect", "100-continue")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "[gen-0]") {
			t.Fatalf("%s: %d %s", tc.name, resp.StatusCode, b)
		}
		last := rep.LastRequest()
		if string(last.Body) != body || last.Header.Get("Expect") != "" {
			t.Fatalf("%s: the replica got %d bytes (Expect %q)", tc.name, len(last.Body), last.Header.Get("Expect"))
		}
	}
}

// headSizeCtx is a request context that reports its head's size, as the
// gateway's own server's does.
type headSizeCtx struct {
	context.Context
	bytes, lines int
}

func (c headSizeCtx) HeadSize() (int, int) { return c.bytes, c.lines }

// checkHeaders answers the same whether or not the request says how large
// its head was on the wire: the size only lets it skip counting heads
// well within the limits. Heads of random lines ("k:v", "k: v ", repeated
// names), written as a client would, checked at limits around their size.
func TestCheckHeadersHeadSizeAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20_000 {
		host := strings.Repeat("h", 1+r.IntN(20))
		raw := "Host: " + host + "\r\n"
		lines := 1
		hdr := http.Header{}
		for range r.IntN(12) {
			k := http.CanonicalHeaderKey("x-" + strings.Repeat("k", 1+r.IntN(3)))
			v := strings.Repeat("v", r.IntN(30))
			sep := [...]string{":", ": ", ":\t", ":  "}[r.IntN(4)]
			tail := [...]string{"", " ", "\t "}[r.IntN(3)]
			raw += k + sep + v + tail + "\r\n"
			lines++
			hdr[k] = append(hdr[k], v)
		}
		exact := &http.Request{Host: host, Header: hdr}
		req := exact.WithContext(headSizeCtx{context.Background(), len(raw), lines})
		for range 4 {
			l := config.Limits{MaxHeaders: lines - 1 + r.IntN(3), MaxHeaderBytes: config.ByteSize(len(raw) - 3 + r.IntN(lines+6))}
			want, got := checkHeaders(exact, &l), checkHeaders(req, &l)
			if (want == nil) != (got == nil) {
				t.Fatalf("head %q, limits %+v: counted %v, with its size %v", raw, l, want, got)
			}
		}
	}
}

// A client's header lines reach the replica in the order the client sent
// them, a repeated name's lines included, less the ones the gateway never
// forwards (hop-by-hop, those Connection lists, credentials). A head the
// fast path leaves to net/http (here, one with a folded line) is
// forwarded from net/http's map: the same lines, in the map's order.
func TestHeaderLinesReachTheReplicaInOrder(t *testing.T) {
	heads := make(chan []string, 4)
	replica := testenv.ServeConns(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			// The head as it came: http.ReadRequest's map would lose
			// its order.
			var lines []string
			n := 0
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimSuffix(line, "\r\n")
				if line == "" {
					break
				}
				if k, v, ok := strings.Cut(line, ": "); ok && k == "Content-Length" {
					n, _ = strconv.Atoi(v)
				}
				lines = append(lines, line)
			}
			if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
				return
			}
			heads <- lines[1:] // less the request line
			body := `{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
	h := newHarness(t, newConfig("p", poolCfg("p", "m", "http://"+replica)))
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" +
		"X-Zeta: 1\r\nAccept: a\r\nConnection: keep-alive, X-Hop\r\nX-Hop: no\r\nauthorization: Bearer client\r\n" +
		"x-alpha: 2\r\nACCEPT: b\r\nKeep-Alive: timeout=5\r\nX-Zeta: 3\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	for _, tc := range []struct {
		name, extra string
		want        []string
	}{
		{"fast path", "", []string{"X-Zeta: 1", "Accept: a", "X-Alpha: 2", "Accept: b", "X-Zeta: 3", "Content-Type: application/json"}},
		{"net/http", "X-Folded: a\r\n b\r\n", []string{"Accept: a", "Accept: b", "Content-Type: application/json", "X-Alpha: 2", "X-Folded: a b", "X-Zeta: 1", "X-Zeta: 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(h.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, head+tc.extra+"\r\n"+body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var got []string
			for _, l := range <-heads {
				switch k, _, _ := strings.Cut(l, ":"); k {
				case "Host", "X-Request-Id", "Content-Length":
					// the gateway's own
				default:
					got = append(got, l)
				}
			}
			if tc.extra != "" {
				// The map's order is random: the same lines, each
				// name's values in order (sort.SliceStable by name).
				sort.SliceStable(got, func(i, j int) bool {
					a, _, _ := strings.Cut(got[i], ":")
					b, _, _ := strings.Cut(got[j], ":")
					return a < b
				})
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("the replica got\n %q\nwant\n %q", got, tc.want)
			}
		})
	}
}
