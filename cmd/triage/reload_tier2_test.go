package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/rules"
)

// A reload that leaves tier 2's encoder, head and cache size alone hands
// the new rules the tier 2 the old ones had: loaded, and with its result
// cache, so a text decided by tier 2 before the reload is a cache hit
// after it. A change to the cache's size gives a tier of its own.
func TestReloadKeepsTier2(t *testing.T) {
	heads, models := defaultHeadsOrSkip(t)
	if !onnx.Available() {
		t.Skip("a build without the ONNX runtime (the ort tag)")
	}
	testenv.Models(t, "use-int8/encoder.json", "ort/libonnxruntime.so.1")
	cfg, _ := remoteConfigs(t, heads, models, "http://127.0.0.1:1", "unused", "")
	cache := &lifecycle.Models{Budget: rules.Offline}
	before, err := cache.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := tier2Text(t, before.Set)
	_, _, hits0, misses0 := before.Set.Tier2Stats()

	after, err := cache.Load(cfg) // the same files: a reload
	if err != nil {
		t.Fatal(err)
	}
	if s := after.Set.Tier2State(); s != "loaded" {
		t.Fatalf("tier 2 after the reload: %s", s)
	}
	d := after.Set.Decide(context.Background(), askAbout(after.Set, "auto", text, nil))
	_, _, hits, misses := after.Set.Tier2Stats()
	if d.Tier != 2 || hits != hits0+1 || misses != misses0 {
		t.Fatalf("after the reload: tier %d, cache hits %d → %d, misses %d → %d; want the text answered from the cache", d.Tier, hits0, hits, misses0, misses)
	}

	// Another cache size: a tier of its own, with an empty cache.
	resized, _ := remoteConfigs(t, heads, models, "http://127.0.0.1:1", "unused",
		"tier2: {enabled: true, budget: 50ms, escalate_at: 0.1, mix: 0.5, fallback_floor: 0.786, cache: 100}")
	other, err := cache.Load(resized)
	if err != nil {
		t.Fatal(err)
	}
	other.Set.Decide(context.Background(), askAbout(other.Set, "auto", text, nil))
	if _, _, hits, misses := other.Set.Tier2Stats(); hits != 0 || misses != 1 {
		t.Fatalf("a resized cache: hits %d, misses %d; want a cache of its own", hits, misses)
	}
}

// tier2Text is the first dev text set decides by tier 2.
func tier2Text(t *testing.T, set *rules.Set) string {
	t.Helper()
	f, err := os.Open(devSet(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for i := 0; sc.Scan() && i < 500; i++ {
		var ex struct{ Text string }
		if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(ex.Text) == "" {
			continue
		}
		if d := set.Decide(context.Background(), askAbout(set, "auto", ex.Text, nil)); d.Tier == 2 {
			return ex.Text
		}
	}
	t.Fatal("no text of dev's first 500 decided by tier 2")
	return ""
}
