package router

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/internal/logsink"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/tenancy"
)

// instantUpstream answers every request at once with a fixed reply, like
// ../shared/bench's mock: the benchmark then measures the gateway's path.
func instantUpstream(b *testing.B, stream bool) string {
	b.Helper()
	var resp string
	if stream {
		var sb strings.Builder
		for i := range 20 {
			ev := fmt.Sprintf("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"}}]}\n\n", i)
			fmt.Fprintf(&sb, "%x\r\n%s\r\n", len(ev), ev)
		}
		done := "data: [DONE]\n\n"
		fmt.Fprintf(&sb, "%x\r\n%s\r\n0\r\n\r\n", len(done), done)
		resp = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n" + sb.String()
	} else {
		body := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
		resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	return "http://" + testenv.ServeConns(b, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	})
}

// BenchmarkRequestPath runs the whole handler in process (body read,
// extraction, routing, forwarding over a real loopback connection, relay,
// metrics, access log) against an instant upstream. The "harness" case only
// builds the test request and recorder: subtract it to get the gateway's own
// allocations.
func BenchmarkRequestPath(b *testing.B) {
	b.Run("harness", func(b *testing.B) {
		body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":64,"stream":false}`
		b.ReportAllocs()
		for b.Loop() {
			req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			_ = httptest.NewRecorder()
		}
	})
	// With access control: an API key, a policy, requests, concurrency
	// and token limits and a daily budget (all far above the load).
	keys := filepath.Join(b.TempDir(), "keys.jsonl")
	secret, k, err := tenancy.NewKey("bench", []string{"load"}, time.Time{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	if err := tenancy.AppendKey(keys, k); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		stream, access bool
	}{{false, false}, {true, false}, {false, true}} {
		name := fmt.Sprintf("stream=%v", tc.stream)
		if tc.access {
			name += "/access"
		}
		b.Run(name, func(b *testing.B) {
			stream := tc.stream
			up := instantUpstream(b, stream)
			pc := poolCfg("p", "gpt-4o-mini", up)
			cfg := newConfig("", pc)
			if tc.access {
				cfg.Access = tenancy.Config{KeysFile: keys, Policies: []tenancy.Policy{{Group: "load", Models: []string{"gpt-4o-mini"},
					Limits: tenancy.Limits{RequestsPerMinute: 1 << 30, Concurrent: 4096, TokensPerMinute: 1 << 30}, Budget: tenancy.Budget{TokensPerDay: 1 << 50}}}}
			}
			gw, err := New(cfg, nil, Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), AccessLog: io.Discard})
			if err != nil {
				b.Fatal(err)
			}
			h := gw.Handler()
			body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":64,"stream":%v}`, stream)
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if tc.access {
					req.Header.Set("Authorization", "Bearer "+secret)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}

// BenchmarkSampling is the request path of a request routed by subject
// (tier 1 and the rules, then forwarding to an instant upstream), with
// prompt sampling off, at the default rate, 1 in 100, and at every
// request (what one record costs), without the hourly cap (every chosen
// request recorded: the most it costs at that rate). The sampler's worker runs meanwhile, on the same cores: it
// redacts and writes each record to a real file, so its cost shows in the
// throughput too. Compare ns/op of off and rate=0.01:
//
//	go test ./router -run '^$' -bench Sampling -count 10 | benchstat -col /sample -
func BenchmarkSampling(b *testing.B) {
	up := instantUpstream(b, false)
	text := "My landlord says I have to pay for repainting the whole flat after three years. " +
		"The lease says normal wear and tear is excluded. Can he keep my deposit for that? " +
		"He also wants me to pay the cleaning company he picked. What are my rights here, and how do I reply to him?"
	for _, rate := range []float64{0, 0.01, 1} {
		name, on := "sample=off", rate > 0
		if on {
			name = fmt.Sprintf("sample=rate=%g", rate)
		}
		b.Run(name, func(b *testing.B) {
			cfg := newConfig("general", poolCfg("general", "llama", up), poolCfg("legal", "saul", up), poolCfg("code", "coder", up))
			tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "deposit", Class: "law", Score: 0.9}},
				Default: classifier.Scored{Class: "other", Score: 0.8}}
			set := compileRules(b, cfg, tier1, gatewayRules)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			files := logsink.NewFiles(ctx)
			if on {
				cfg.Sample.Path = filepath.Join(b.TempDir(), "samples.jsonl")
				cfg.Sample.Rate, cfg.Sample.MaxPerHour = rate, 1<<30
			}
			gw, err := New(cfg, set, Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), AccessLog: io.Discard, SampleLog: files.OpenPrivate})
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{})
			go func() { gw.Run(ctx); close(done) }()
			h := gw.Handler()
			body := `{"model":"auto","messages":[{"role":"user","content":"` + text + `"}],"max_tokens":64}`
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			b.StopTimer()
			c := gw.sampler.Counts()
			b.ReportMetric(float64(c.Taken)/float64(b.N), "sampled/op")
			b.ReportMetric(float64(c.Dropped)/float64(b.N), "dropped/op")
			cancel()
			<-done
			files.Close()
		})
	}
}
