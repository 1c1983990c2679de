package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// perfChat is a chat request whose one user message is text.
func perfChat(text string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": testModel, "stream": stream,
		"messages": []map[string]string{{"role": "system", "content": "be brief"}, {"role": "user", "content": text}}})
	return string(b)
}

// cachedTokens posts a chat request and returns its usage's prompt and
// cached tokens.
func cachedTokens(t *testing.T, url, text string) (prompt, cached int) {
	t.Helper()
	resp := post(t, context.Background(), url+"/v1/chat/completions", perfChat(text, false), nil)
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Usage.PromptTokensDetails == nil {
		t.Fatal("usage has no prompt_tokens_details with the performance model on")
	}
	return out.Usage.PromptTokens, out.Usage.PromptTokensDetails.CachedTokens
}

// metric reads one of vLLM's metrics from the replica's /metrics.
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{[^}]*\} (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics has no %s:\n%s", name, b)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func fastPerf() Perf {
	return Perf{Enabled: true, DecodeStep: time.Millisecond, DecodePerSeq: time.Microsecond, PrefillTokensPerSecond: 1e7}
}

func TestPerfPrefixReuse(t *testing.T) {
	_, ts := newSim(t, Options{Perf: fastPerf(), Chunks: 4})
	long := strings.Repeat("a question about contracts and their clauses ", 40) // ~1800 bytes
	p1, c1 := cachedTokens(t, ts.URL, long)
	if c1 != 0 {
		t.Fatalf("first request: %d cached tokens, want 0", c1)
	}
	p2, c2 := cachedTokens(t, ts.URL, long+" and one more thing")
	if p2 <= p1 {
		t.Fatalf("prompt tokens %d then %d: the longer prompt counts fewer", p1, p2)
	}
	// The first prompt's whole blocks (64 bytes each) are reused.
	if want := (p1 / 16) * 16; c2 < want-16 || c2 > p1 {
		t.Fatalf("second request: %d cached tokens, want about %d of the first's %d", c2, want, p1)
	}
	q, h := metric(t, ts.URL, "vllm:prefix_cache_queries_total"), metric(t, ts.URL, "vllm:prefix_cache_hits_total")
	if q != float64(p1+p2) || h != float64(c2) {
		t.Fatalf("prefix cache counters %v queries %v hits, want %d and %d", q, h, p1+p2, c2)
	}
}

func TestPerfEvictsLeastRecentlyUsed(t *testing.T) {
	// 40 blocks of 16 tokens: each ~640-byte prompt takes 10 plus one for
	// its output, so three fit and a fourth evicts the least recent.
	p := fastPerf()
	p.KVBlocks = 40
	_, ts := newSim(t, Options{Perf: p, Chunks: 4})
	text := func(i int) string { return strings.Repeat(fmt.Sprintf("prompt %d says ", i), 50)[:640] }
	for i := range 3 {
		cachedTokens(t, ts.URL, text(i))
	}
	if _, c := cachedTokens(t, ts.URL, text(0)); c == 0 {
		t.Fatal("prompt 0, sent again with room to spare, found nothing cached")
	}
	cachedTokens(t, ts.URL, text(3)) // evicts prompt 1, now the least recently used
	if _, c := cachedTokens(t, ts.URL, text(0)); c == 0 {
		t.Fatal("prompt 0 was evicted, though used more recently than prompt 1")
	}
	if _, c := cachedTokens(t, ts.URL, text(1)); c != 0 {
		t.Fatalf("prompt 1 found %d cached tokens: the least recently used was not evicted", c)
	}
	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", perfChat(strings.Repeat("x", 4000), false), nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a prompt larger than the cache: status %d, want 400", resp.StatusCode)
	}
}

// A batch of one: the second request waits, and /metrics says so.
func TestPerfQueue(t *testing.T) {
	p := fastPerf()
	p.MaxSeqs = 1
	p.DecodeStep = 20 * time.Millisecond
	_, ts := newSim(t, Options{Perf: p, Chunks: 50})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := post(t, ctx, ts.URL+"/v1/chat/completions", perfChat("one", true), nil)
	defer first.Body.Close()
	second := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(perfChat("two", true)))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			second <- resp
		}
	}()
	// The second is queued while the first's 50 tokens take a second.
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, ts.URL, "vllm:num_requests_waiting") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second request never showed as waiting")
		}
	}
	if r := metric(t, ts.URL, "vllm:num_requests_running"); r != 1 {
		t.Fatalf("running %v, want 1", r)
	}
	if u := metric(t, ts.URL, "vllm:kv_cache_usage_perc"); !(u > 0 && u < 1) {
		t.Fatalf("kv cache usage %v with one short sequence running, want in (0,1)", u)
	}
	first.Body.Close()
	cancel()
}

func TestPerfOff(t *testing.T) {
	_, ts := newSim(t, Options{})
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/metrics without the model: %d, want 404 as before", resp.StatusCode)
	}
	resp = post(t, context.Background(), ts.URL+"/v1/chat/completions", perfChat("hi", false), nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(b), "prompt_tokens_details") {
		t.Fatalf("usage without the model has prompt_tokens_details: %s", b)
	}
}

// A conversation's next turn finds its whole history cached: the earlier
// prompt and the answer the replica generated.
func TestPerfKeepsAnswers(t *testing.T) {
	_, ts := newSim(t, Options{Perf: fastPerf(), Chunks: 40})
	msgs := []map[string]string{{"role": "system", "content": strings.Repeat("rules of the house ", 30)}, {"role": "user", "content": "first question"}}
	send := func() (prompt, cached int, answer string) {
		b, _ := json.Marshal(map[string]any{"model": testModel, "messages": msgs})
		resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", string(b), nil)
		defer resp.Body.Close()
		var out struct {
			Choices []struct{ Message struct{ Content string } }
			Usage   struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) == 0 {
			t.Fatalf("decode: %v", err)
		}
		return out.Usage.PromptTokens, out.Usage.PromptTokensDetails.CachedTokens, out.Choices[0].Message.Content
	}
	p1, _, answer := send()
	msgs = append(msgs, map[string]string{"role": "assistant", "content": answer}, map[string]string{"role": "user", "content": "second question"})
	p2, c2, _ := send()
	// Uncached: the new user message and the partial blocks at the ends.
	if c2 < p1 || p2-c2 > 3*16 {
		t.Fatalf("turn 2: %d of %d prompt tokens cached, want the whole first turn (%d) and its answer but for the last blocks", c2, p2, p1)
	}
}
