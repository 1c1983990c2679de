package sim

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// saltedChat is perfChat with a cache_salt (nil: none).
func saltedChat(text string, salt any) string {
	m := map[string]any{"model": testModel,
		"messages": []map[string]string{{"role": "system", "content": "be brief"}, {"role": "user", "content": text}}}
	if salt != nil {
		m["cache_salt"] = salt
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestPerfCacheSalt: prompts share cached blocks only under the same
// cache_salt, and a salt vLLM would refuse is refused.
func TestPerfCacheSalt(t *testing.T) {
	_, ts := newSim(t, Options{Perf: fastPerf(), Chunks: 2})
	long := strings.Repeat("the terms of a lease and who pays for repairs ", 40)
	cached := func(salt any) int {
		t.Helper()
		resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", saltedChat(long, salt), nil)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("salt %v: status %d: %s", salt, resp.StatusCode, b)
		}
		var out struct {
			Usage struct {
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out.Usage.PromptTokensDetails.CachedTokens
	}
	steps := []struct {
		salt       any
		wantCached bool
	}{
		{"tenant-a", false},
		{"tenant-a", true},
		{"tenant-b", false}, // the same prompt, another salt
		{nil, false},        // no salt is a salt of its own
		{nil, true},
		{"tenant-b", true},
	}
	for i, s := range steps {
		if got := cached(s.salt); (got > 0) != s.wantCached {
			t.Fatalf("request %d (salt %v): %d cached tokens, want cached: %v", i, s.salt, got, s.wantCached)
		}
	}
	for _, bad := range []any{"", "a/b", "a@b", `a\b`, "a\x00b", strings.Repeat("x", 129), 7} {
		resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", saltedChat(long, bad), nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "cache_salt") {
			t.Fatalf("cache_salt %q: %d %s, want 400 naming cache_salt", bad, resp.StatusCode, b)
		}
	}
	if got := cached(strings.Repeat("x", 128)); got != 0 {
		t.Fatalf("a 128-character salt: %d cached tokens, want a fresh cache", got)
	}
}
