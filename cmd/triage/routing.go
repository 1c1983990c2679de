package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// tierCache keeps the loaded tier-1 model across reloads while its heads
// and model files are unchanged: loading one takes ~100 ms and 12 MiB.
type tierCache struct {
	mu    sync.Mutex
	key   string
	model *static.Model
}

func (c *tierCache) tier1(h *classifier.Heads, modelsDir string) (*static.Model, error) {
	b, err := os.ReadFile(filepath.Join(h.Dir, classifier.HeadsFile))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	key := h.Dir + "\x00" + hex.EncodeToString(sum[:]) + "\x00" + modelsDir
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key == key && c.model != nil {
		return c.model, nil
	}
	m, err := static.Load(h, modelsDir)
	if err != nil {
		return nil, err
	}
	c.key, c.model = key, m
	return m, nil
}

// routing is a config's rules, compiled, and the files they were read from.
type routing struct {
	set   *rules.Set
	files []string // the rules file and the heads manifest: watched for changes
}

// loadRouting parses and compiles the rules cfg names (nil without one),
// loading the heads and tier 1 they need.
func loadRouting(cfg *config.Config, cache *tierCache) (*routing, error) {
	path := cfg.RulesPath()
	if path == "" {
		return &routing{}, nil
	}
	f, err := rules.ParseFile(path)
	if err != nil {
		return nil, err
	}
	if f.Heads == "" {
		return nil, fmt.Errorf("%s: heads: required (the heads artifact directory the rules classify with)", path)
	}
	headsDir := f.Heads
	if !filepath.IsAbs(headsDir) {
		headsDir = filepath.Join(filepath.Dir(path), headsDir)
	}
	h, err := classifier.LoadHeads(headsDir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m, err := cache.tier1(h, cfg.ModelsPath())
	if err != nil {
		return nil, fmt.Errorf("%s: tier 1: %w", path, err)
	}
	set, err := rules.Compile(f, rules.Env{Pools: cfg.PoolNames(), Heads: h, Tier1: m})
	if err != nil {
		return nil, err
	}
	if err := set.Warmup(); err != nil {
		return nil, err
	}
	return &routing{set: set, files: []string{path, filepath.Join(headsDir, classifier.HeadsFile)}}, nil
}
