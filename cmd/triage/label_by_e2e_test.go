package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/triagegw/triage/label"
)

// TestLabelByPoolE2E: triage label --by asks a pool through a running
// gateway, which counts every call in its metrics. The pool "judge" is a
// test server standing in for a model that answers a class for some
// prompts and a sentence for others; the pool "babble" is triage sim,
// whose lorem ipsum is never a class. Every answer that is not exactly a
// class is "not sure", counted; a person's labels give the agreement; and
// eval refuses the model's labels until that report is asked for.
func TestLabelByPoolE2E(t *testing.T) {
	answers := map[string]string{
		"Can my landlord keep my deposit?":   "law",
		"Is a verbal contract binding?":      " LAW\n",
		"What is the integral of 1/x?":       "math",
		"solve 3x + 4 = 19":                  "other", // a wrong label, on purpose
		"how do I rebase onto main":          "Sure! That one is about computer science.",
		"What's a good name for a goldfish?": "math, or maybe other",
	}
	var mu sync.Mutex
	var seen []map[string]any
	judge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		var req struct {
			Messages []struct{ Role, Content string }
		}
		raw := map[string]any{}
		b := new(bytes.Buffer)
		b.ReadFrom(r.Body)
		if json.Unmarshal(b.Bytes(), &req) != nil || json.Unmarshal(b.Bytes(), &raw) != nil || len(req.Messages) != 2 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen = append(seen, raw)
		mu.Unlock()
		content := answers[req.Messages[1].Content]
		json.NewEncoder(w).Encode(map[string]any{"object": "chat.completion",
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": content}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 90, "completion_tokens": 3, "total_tokens": 93}})
	}))
	defer judge.Close()
	u, _ := url.Parse(judge.URL)
	babble := startSim(t, "babble-model", "babble")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "triage.yaml")
	writeFile(t, cfg, gatewayConfig("", poolSpec{name: "judge", model: "judge-model", replicas: []*proc{{addr: u.Host}}},
		poolSpec{name: "babble", model: "babble-model", replicas: []*proc{babble}}))
	gw := startGateway(t, cfg)

	var lines []string
	for text := range answers {
		b, _ := json.Marshal(map[string]string{"text": text})
		lines = append(lines, string(b))
	}
	sample := filepath.Join(dir, "sample.jsonl")
	writeFile(t, sample, strings.Join(lines, "\n")+"\n")
	cmd := func(args ...string) (int, string, string) {
		var o, e bytes.Buffer
		code := run(context.Background(), append([]string{"label"}, args...), &o, &e)
		return code, o.String(), e.String()
	}

	out := filepath.Join(dir, "model.jsonl")
	// By the pool's name in the gateway's config (sent as its model).
	code, stdout, stderr := cmd("--by", "judge", "--config", cfg, "--gateway", gw.url(""), "--sample", sample, "--out", out, "--classes", "law,math", "--concurrency", "2")
	if code != 0 || !strings.Contains(stdout, "6 answered: 4 labelled, 2 not sure (not exactly a class); 0 failed") {
		t.Fatalf("label --by judge: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if len(seen) != 6 {
		t.Fatalf("the model was asked %d times, want 6", len(seen))
	}
	for _, req := range seen {
		msgs := req["messages"].([]any)
		system := msgs[0].(map[string]any)["content"].(string)
		if req["temperature"] != 0.0 || req["max_tokens"] != 16.0 || !strings.Contains(system, "law, math, other") {
			t.Fatalf("request %v: want temperature 0, max_tokens 16 and the classes listed", req)
		}
	}
	labels, err := label.ReadLabels(out)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range labels {
		if l.Labeller != "model:judge" {
			t.Fatalf("label %+v: want labeller model:judge", l)
		}
		got[l.Text] = l.Label
	}
	want := map[string]string{"Can my landlord keep my deposit?": "law", "Is a verbal contract binding?": "law", "What is the integral of 1/x?": "math", "solve 3x + 4 = 19": "other"}
	if len(got) != len(want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("labels %v, want %v", got, want)
		}
	}

	// A pool that answers only lorem ipsum (named by its model, as a
	// client does): every prompt not sure, counted.
	out2 := filepath.Join(dir, "babble.jsonl")
	code, stdout, stderr = cmd("--by", "babble-model", "--gateway", gw.url(""), "--sample", sample, "--out", out2, "--classes", "law,math")
	if code != 0 || !strings.Contains(stdout, "6 answered: 0 labelled, 6 not sure") {
		t.Fatalf("label --by babble: exit %d\n%s\n%s", code, stdout, stderr)
	}

	// The gateway saw every call, in its metrics, per pool.
	c := newClient(t)
	exp := scrape(t, c, gw)
	for pool, n := range map[string]float64{"judge": 6, "babble": 6} {
		if v, ok := metricValue(exp, "triage_requests_total", map[string]string{"pool": pool, "code": "200"}); !ok || v != n {
			t.Fatalf("triage_requests_total{pool=%q,code=\"200\"} = %v (%v), want %v", pool, v, ok, n)
		}
	}
	// A pool the gateway does not front is refused at once.
	code, _, stderr = cmd("--by", "nosuch", "--gateway", gw.url(""), "--sample", sample, "--out", filepath.Join(dir, "none.jsonl"), "--classes", "law,math")
	if code != 1 || !strings.Contains(stderr, "status 404") {
		t.Fatalf("label --by nosuch: exit %d, stderr %q", code, stderr)
	}

	// A person's labels of four of the prompts: three agree.
	human := filepath.Join(dir, "human.jsonl")
	writeFile(t, human, `{"text":"Can my landlord keep my deposit?","label":"law"}
{"text":"Is a verbal contract binding?","label":"law"}
{"text":"What is the integral of 1/x?","label":"math"}
{"text":"solve 3x + 4 = 19","label":"math"}
{"text":"how do I rebase onto main","label":"other"}
`)
	code, stdout, stderr = cmd("--status", "--sample", sample, "--out", out, "--classes", "law,math", "--agreement", human)
	for _, want := range []string{"4 prompts both labelled (of 5 the person labelled, 1 the model was not sure of, 0 it has not labelled)", "raw agreement 0.750", "Cohen's kappa 0.600"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Fatalf("label --status --agreement: exit %d, lacks %q\n%s\n%s", code, want, stdout, stderr)
		}
	}
	// eval takes a model's labels as the truth only with that report.
	var o, e bytes.Buffer
	if code := run(context.Background(), []string{"eval", "--rules", filepath.Join(repoRoot(), "rules.yaml"), "--config", filepath.Join(repoRoot(), "triage.yaml"), "--data", out}, &o, &e); code != 2 ||
		!strings.Contains(e.String(), "4 of its 4 labels were proposed by a model (model:judge)") || !strings.Contains(e.String(), "--agreement HUMAN.jsonl") {
		t.Fatalf("eval on a model's labels: exit %d, stderr %q", code, e.String())
	}
}

// TestLabelByRefusals: --by's flags that cannot work are refused before
// any call.
func TestLabelByRefusals(t *testing.T) {
	dir := t.TempDir()
	sample := filepath.Join(dir, "sample.jsonl")
	writeFile(t, sample, `{"text":"Is a verbal contract binding?"}`+"\n")
	t.Setenv("LABEL_TEST_KEY", "sk-triage-secret")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--gateway", "http://gateway.example:8080", "--key-env", "LABEL_TEST_KEY"}, 2, "clear text"},
		{[]string{"--gateway", "http://127.0.0.1:1", "--key-env", "LABEL_TEST_UNSET"}, 2, "LABEL_TEST_UNSET: the variable is empty or unset"},
		{[]string{"--gateway", "ftp://127.0.0.1:1"}, 2, "want the gateway's base URL"},
		{[]string{"--concurrency", "0"}, 2, "--concurrency is 1 to 64"},
		{[]string{"--max-tokens-total", "0"}, 2, "at least 1"},
	} {
		var o, e bytes.Buffer
		args := append([]string{"label", "--by", "judge", "--sample", sample, "--out", filepath.Join(dir, "out.jsonl"), "--classes", "law"}, tc.args...)
		if code := run(context.Background(), args, &o, &e); code != tc.code || !strings.Contains(e.String(), tc.says) {
			t.Errorf("triage %v: exit %d, stderr %q; want %d and %q", args, code, e.String(), tc.code, tc.says)
		}
	}
}
