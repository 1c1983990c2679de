package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// TestTenancyExample serves examples/tenancy (on free ports) and checks
// what its README shows: no key 401, the demo key 200 with the rate-limit
// headers, a model the trial group may not use 403; then keys created and
// revoked with `triage keys --config` apply to the running gateway.
func TestTenancyExample(t *testing.T) {
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	models := testenv.Models(t, "tables/subjects-tier1.tbl", "tokenizer/bert-base-uncased.json")
	t.Parallel()
	ex := filepath.Join(root, "examples", "tenancy")
	readme, err := os.ReadFile(filepath.Join(ex, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	demo := regexp.MustCompile(`sk-triage-[0-9a-f]{8}-[0-9A-Za-z]{40}`).FindString(string(readme))
	if demo == "" {
		t.Fatal("the example's README shows no demo key")
	}
	cfg, err := os.ReadFile(filepath.Join(ex, "triage.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := os.ReadFile(filepath.Join(ex, "keys.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// The example's config and keys in a temp dir (keys get created and
	// revoked below), its replicas on free ports, its paths absolute.
	dir := t.TempDir()
	text := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).ReplaceAllStringFunc(string(cfg), func(string) string { return "http://" + freeAddr(t) })
	text = strings.Replace(text, "rules: ../../rules.yaml", "rules: "+filepath.Join(root, "rules.yaml"), 1)
	text = strings.Replace(text, "models_dir: ../../var/models", "models_dir: "+models, 1)
	text = strings.Replace(text, "state_file: ../../var/tenancy-state.json", "state_file: state.json", 1)
	text = regexp.MustCompile(`(?m)^listen:.*$`).ReplaceAllString(text, "")
	cfgPath := filepath.Join(dir, "triage.yaml")
	writeFile(t, cfgPath, text)
	writeFile(t, filepath.Join(dir, "keys.jsonl"), string(keys))
	gw := startReady(t, "gateway", "/readyz", "serve", "--config", cfgPath, "--sim")
	c := newClient(t)
	post := func(key, model string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", gw.url("/v1/chat/completions"),
			strings.NewReader(`{"model":"`+model+`","max_tokens":1,"messages":[{"role":"user","content":"Hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post("", "auto"); r.StatusCode != 401 {
		t.Fatalf("no key: %d", r.StatusCode)
	}
	r := post(demo, "auto")
	if r.StatusCode != 200 || r.Header.Get("X-Ratelimit-Limit-Requests") != "60" || r.Header.Get("X-Ratelimit-Remaining-Requests") != "59" {
		t.Fatalf("the demo key: %d %v", r.StatusCode, r.Header)
	}
	if r.Header.Get("X-Ratelimit-Limit-Tokens") != "20000" {
		t.Fatalf("the demo key's token limit: %v", r.Header)
	}
	if r := post(demo, "saul-7b-instruct"); r.StatusCode != 403 {
		t.Fatalf("a model the trial group may not use: %d", r.StatusCode)
	}

	// A key made with the CLI works once the gateway has reloaded.
	code, stdout, stderr := runIn(t, dir, nil, "keys", "create", "--config", cfgPath, "--principal", "erin", "--groups", "staff")
	if code != 0 || !strings.HasPrefix(stdout, "sk-triage-") || !strings.Contains(stderr, "only copy") {
		t.Fatalf("keys create: %d %q %q", code, stdout, stderr)
	}
	erin := strings.TrimSpace(stdout)
	eventually(t, 10*time.Second, "the new key to apply", func() (bool, string) {
		r := post(erin, "saul-7b-instruct")
		return r.StatusCode == 200, r.Status
	})
	code, stdout, _ = runIn(t, dir, nil, "keys", "list", "--config", cfgPath)
	if code != 0 || !strings.Contains(stdout, "erin") || !strings.Contains(stdout, "demo") || strings.Contains(stdout, erin[20:]) {
		t.Fatalf("keys list: %d\n%s", code, stdout)
	}
	id := erin[len("sk-triage-") : len("sk-triage-")+8]
	if code, stdout, stderr = runIn(t, dir, nil, "keys", "revoke", "--config", cfgPath, id); code != 0 {
		t.Fatalf("keys revoke: %d %s %s", code, stdout, stderr)
	}
	eventually(t, 10*time.Second, "the revocation to apply", func() (bool, string) {
		r := post(erin, "auto")
		return r.StatusCode == 401, r.Status
	})
	if strings.Contains(gw.stderr.String()+gw.stdout.String(), erin[20:]) || strings.Contains(gw.stderr.String()+gw.stdout.String(), demo[20:]) {
		t.Fatal("a key's secret reached the gateway's output")
	}
}
