package pool

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 750.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
process_cpu_seconds_total 12.5
`

func TestParseMetrics(t *testing.T) {
	got, err := ParseMetrics([]byte(vllmMetrics))
	if err != nil {
		t.Fatal(err)
	}
	if got.Running != 5 || got.Waiting != 4 || got.KVUsage != 0.5 || got.PrefixQueries != 1000 || got.PrefixHits != 750 {
		t.Fatalf("ParseMetrics = %+v", got)
	}
	old, err := ParseMetrics([]byte("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.25\n"))
	if err != nil || old.KVUsage != 0.25 || !math.IsNaN(old.PrefixHits) {
		t.Fatalf("vLLM before 0.10: %+v, %v", old, err)
	}
	for _, bad := range []string{
		"",
		"<html>not found</html>",
		"vllm:num_requests_running{engine=\"0\"} many\nvllm:num_requests_waiting 0\n",
		"vllm:num_requests_running -1\nvllm:num_requests_waiting 0\n",
		"vllm:num_requests_running 1\n",
		"vllm:num_requests_running{engine=\"0\" 1\nvllm:num_requests_waiting 0\n",
	} {
		if _, err := ParseMetrics([]byte(bad)); err == nil {
			t.Errorf("ParseMetrics(%q) accepted it", bad)
		}
	}
}

func scrapePool(t *testing.T, url string, mut func(*Config)) *Pool {
	t.Helper()
	cfg := Config{Name: "p", Model: "m", Balance: BalancePrefix, Replicas: []Replica{{URL: url}, {URL: "http://10.0.0.9:1"}}}
	off := false
	cfg.Health.Enabled = &off
	cfg.Metrics.Timeout = 200 * time.Millisecond
	cfg.Metrics.MaxBytes = 4096
	if mut != nil {
		mut(&cfg)
	}
	cfg.SetDefaults()
	if errs := cfg.Validate("pools[0]"); len(errs) > 0 {
		t.Fatal(errs)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A replica whose /metrics is absent, malformed, huge or slow is reported
// once, not per scrape; its load falls back to in-flight counts; once its
// metrics read again that is reported once too, and they count.
func TestScrapeFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(w http.ResponseWriter, r *http.Request)
	}{
		{"absent", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }},
		{"malformed", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("vllm:num_requests_running lots\n")) }},
		{"huge", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(vllmMetrics + strings.Repeat("# padding\n", 1000)))
		}},
		{"slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := make(chan bool, 1)
			good <- false
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ok := <-good
				good <- ok
				if ok {
					w.Write([]byte(vllmMetrics))
					return
				}
				tc.serve(w, r)
			}))
			defer ts.Close()
			p := scrapePool(t, ts.URL, nil)
			b := p.Backends()[0]
			var reports []Transition
			on := func(tr Transition) { reports = append(reports, tr) }
			for range 3 {
				p.ScrapeOnce(context.Background(), b, on)
			}
			if len(reports) != 1 || !reports[0].Metrics || reports[0].Healthy || reports[0].Err == nil {
				t.Fatalf("after three failed scrapes: reports %+v, want one failure", reports)
			}
			b.inflight.Store(2)
			if l := b.Load(time.Now().UnixNano()); l != 2 {
				t.Fatalf("Load = %d without metrics, want the in-flight count 2", l)
			}
			<-good
			good <- true
			p.ScrapeOnce(context.Background(), b, on)
			p.ScrapeOnce(context.Background(), b, on)
			if len(reports) != 2 || !reports[1].Healthy {
				t.Fatalf("after recovery: reports %+v, want one more, healthy", reports)
			}
			if l := b.Load(time.Now().UnixNano()); l != 9 {
				t.Fatalf("Load = %d, want the replica's 5 running + 4 waiting", l)
			}
		})
	}
}

// Nothing on the request path waits for a scrape: a pick completes while
// the replica's /metrics hangs.
func TestScrapeNeverBlocksPick(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer ts.Close()
	p := scrapePool(t, ts.URL, func(c *Config) { c.Metrics.Timeout = time.Minute })
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.ScrapeOnce(context.Background(), p.Backends()[0], nil)
	}()
	<-entered
	k := keyOf(p, conversation("sys", 1, 3))
	for range 100 {
		b, _, err := p.PickKey(k, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	select {
	case <-done:
		t.Fatal("the scrape ended before the picks were made: the test proved nothing")
	default:
	}
	close(release)
	<-done
}

// Run scrapes on its own, and stops when its context ends.
func TestRunScrapes(t *testing.T) {
	hit := make(chan struct{}, 8)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(vllmMetrics))
		select {
		case hit <- struct{}{}:
		default:
		}
	}))
	defer ts.Close()
	p := scrapePool(t, ts.URL, func(c *Config) { c.Metrics.Interval = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { p.Run(ctx, nil); close(stopped) }()
	<-hit
	<-hit
	cancel()
	<-stopped
	if _, ok := p.Backends()[0].Scraped(); !ok {
		t.Fatal("no scraped state after two scrapes")
	}
}
