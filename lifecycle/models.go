package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/tlsconf"
	"github.com/triagegw/triage/rules"
)

// Models owns the classifier tiers across reloads while their heads and
// model files are unchanged: a tier-1 table takes ~20 ms to map and 4.7 MiB
// of heap (its rows are the file's pages, resident as lookups touch them),
// a tier-2 session ~70-200 MiB and up to seconds, and tier 2's result cache
// is worth keeping warm. It holds the models of the last load (the rules'
// heads and, with a shadow or a split, theirs), dropping the rest. The zero
// Models is the gateway's; the exported fields set what an offline command
// changes. Safe for concurrent use.
type Models struct {
	// Budget, when set, replaces the rules' tier2.budget in every set
	// compiled through these models: rules.Offline for offline commands,
	// whose results must not depend on how busy the machine is.
	Budget *time.Duration
	// Place, when set, replaces the config's models directory (a
	// command's --models).
	Place *Place
	// NoTier2 compiles rules with tier 2 left out, as a build without the
	// runtime has it: escalations end on tier 1's verdict
	// (tier2_unavailable). triage ab's rules-tier1.
	NoTier2 bool
	// Heads, when set, replaces the heads directory the rules name: tier 1
	// of other heads judged through the same rules (triage ab).
	Heads string
	// Encoder, when set, replaces the rules' tier2.encoder (a command's
	// --encoder-url): tier 2's vectors come from that engine.
	Encoder *rules.RemoteEncoder

	mu     sync.Mutex
	models map[string]*static.Model // tier-1 models by heads and models directory
	used   map[string]bool          // what the load under way used: sweep keeps these
	// encoders are the tier-2 sessions by encoder (model directory, its
	// sha256, tokenizer, token cap), each loaded once on first need: a
	// reload that changes floors, rules or even the tier-2 head keeps it.
	encoders map[string]*classifier.Lazy
	// tiers are the tier-2 tiers handed to compiled Sets, by encoder, head
	// and result-cache size: the same one across reloads, loaded and with
	// its cache, while those are unchanged.
	tiers map[string]*classifier.Lazy
}

// ReleasePages drops the tier-1 table pages lookups made resident (they
// come back from the page cache, or the file, at the next lookups): for a
// gateway whose traffic stopped.
func (c *Models) ReleasePages() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.models {
		m.ReleasePages()
	}
}

// tier2For returns the loader of h's tier 2 (nil when h has no tier-2
// head, so that rules asking for it are rejected with the reason), and
// whether its encoder is loaded already. The loader shares the encoder's
// session and puts h's head on it. In a build without the ONNX runtime it
// fails with classifier.ErrUnavailable: escalations fall back to tier 1's
// verdict (tier2_unavailable), and serve warns at start.
//
// With remote set (the rules' tier2.encoder), the encoder is that engine's:
// the heads' model directory gives its manifest only, and the loader
// refuses an engine serving another model.
func (c *Models) tier2For(h *classifier.Heads, place Place, opts onnx.Options, remote *rules.RemoteEncoder, rulesPath string) (func() (classifier.Classifier, error), bool, string, error) {
	t := h.Tier2
	if t == nil {
		return nil, false, "", nil
	}
	if c.NoTier2 {
		return func() (classifier.Classifier, error) {
			return nil, fmt.Errorf("tier 2 left out: %w", classifier.ErrUnavailable)
		}, false, "", nil
	}
	modelsDir := place.Dir
	dir, err := h.Resolve(t.Encoder.Model, modelsDir)
	if err != nil {
		dir = t.Encoder.Model // Load says what is missing, when it is needed
	}
	key := strings.Join([]string{dir, t.Encoder.ModelSHA256, t.Encoder.Tokenizer, t.Encoder.TokenizerSHA256, strconv.Itoa(t.Encoder.MaxTokens), modelsDir,
		fmt.Sprintf("%+v", opts)}, "\x00")
	if remote != nil {
		// The TLS files' content too: a CA bundle or client certificate
		// rotated in place makes a new client at the reload it triggers
		// (they are watched), as a pool's replicas get a new transport.
		// (An unreadable file keys as "": the load says what is wrong.)
		sum, _ := tlsconf.Digest(remoteTLSFiles(remote, rulesPath))
		key = strings.Join([]string{"remote", dir, strconv.Itoa(t.Encoder.MaxTokens), modelsDir, fmt.Sprintf("%+v", opts), fmt.Sprintf("%+v", *remote),
			filepath.Dir(rulesPath), sum}, "\x00")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.encoders == nil {
		c.encoders = map[string]*classifier.Lazy{}
	}
	if c.used == nil {
		c.used = map[string]bool{}
	}
	enc := c.encoders[key]
	if enc == nil && remote != nil {
		if enc, err = loadRemote(h, place, opts, remote, rulesPath); err != nil {
			return nil, false, "", err
		}
		c.encoders[key] = enc
	}
	if enc == nil {
		enc = classifier.NewLazy(func() (classifier.Classifier, error) {
			if err := NeedFiles(h, 2, place); err != nil {
				return nil, err
			}
			m, err := onnx.Load(h, modelsDir, opts)
			if err != nil {
				return nil, fmt.Errorf("tier 2 of %s: %w", h.Dir, err)
			}
			return m, nil
		})
		c.encoders[key] = enc
	}
	c.used["2\x00"+key] = true
	return withHead(enc, t.Head, h.Dir), enc.Loaded(), key, nil
}

// tier2Tier is the tier 2 a Set compiled now classifies with: the one the
// last load handed its Sets, when the encoder (key), the head and the
// result cache's size are the same, so that a reload keeps tier 2 loaded
// and its cache warm; else a new one, which load makes on first need.
func (c *Models) tier2Tier(key string, head *classifier.Linear, cacheSize *int, load func() (classifier.Classifier, error)) (*classifier.Lazy, error) {
	size := classifier.DefaultCacheSize
	if cacheSize != nil {
		size = *cacheSize
	}
	b, err := json.Marshal(head)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	k := key + "\x00" + hex.EncodeToString(sum[:]) + "\x00" + strconv.Itoa(size)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tiers == nil {
		c.tiers = map[string]*classifier.Lazy{}
	}
	if c.used == nil {
		c.used = map[string]bool{}
	}
	c.used["t\x00"+k] = true
	if l := c.tiers[k]; l != nil && l.State() != "failed" {
		return l, nil // a failed load is tried again by a new one
	}
	l := classifier.NewLazy(load)
	l.SetCacheSize(size)
	c.tiers[k] = l
	return l, nil
}

// loadRemote loads a remote encoder at once (its manifest; no call is
// made): rules whose heads were trained on another encoder, or whose
// engine's key or CA is missing, are refused when they load.
func loadRemote(h *classifier.Heads, place Place, opts onnx.Options, remote *rules.RemoteEncoder, rulesPath string) (*classifier.Lazy, error) {
	if err := NeedFiles(h, 2, place); err != nil {
		return nil, err
	}
	rc, err := RemoteConfig(remote, rulesPath)
	if err != nil {
		return nil, err
	}
	m, err := onnx.LoadRemote(h, place.Dir, rc, opts)
	if err != nil {
		return nil, err
	}
	enc := classifier.NewLazy(func() (classifier.Classifier, error) { return m, nil })
	enc.Start()
	if err := enc.Wait(); err != nil {
		return nil, err
	}
	return enc, nil
}

// withHead is the loader of tier 2 with head on enc's encoder: the
// encoder's own classifier when its head is that one, else a classifier
// sharing its session.
func withHead(enc *classifier.Lazy, head classifier.Linear, heads string) func() (classifier.Classifier, error) {
	return func() (classifier.Classifier, error) {
		got, err := enc.Get()
		if err != nil {
			return nil, err
		}
		m := got.(*onnx.Classifier)
		if reflect.DeepEqual(m.Head(), &head) {
			return m, nil
		}
		clf, err := onnx.NewClassifier(m.Model, &head)
		if err != nil {
			return nil, fmt.Errorf("tier 2 of %s: %w", heads, err)
		}
		return clf, nil
	}
}

// RemoteConfig is the remote encoder's client configuration: its API key
// read from the environment variable the rules name, its CA bundle as the
// only trust and its client certificate (files relative to the rules
// file; rulesPath "" for a command's flags, relative to the working
// directory).
func RemoteConfig(e *rules.RemoteEncoder, rulesPath string) (onnx.RemoteConfig, error) {
	rc := onnx.RemoteConfig{URL: e.URL, Model: e.Model, Pooling: e.Pooling, Dims: e.Dims,
		Timeout: e.Timeout, Failures: e.Failures, Cooldown: e.Cooldown}
	if e.APIKeyEnv != "" {
		if rc.APIKey = os.Getenv(e.APIKeyEnv); rc.APIKey == "" {
			return rc, fmt.Errorf("tier2.encoder.api_key_env: $%s is empty or unset", e.APIKeyEnv)
		}
	}
	if e.CAFile != "" || e.CertFile != "" || e.KeyFile != "" || strings.HasPrefix(e.URL, "https://") {
		ca, cert, key := remoteTLSFiles(e, rulesPath)
		tc, err := tlsconf.NewClient(ca, cert, key, "", false)
		if err != nil {
			return rc, fmt.Errorf("tier2.encoder: %w", err)
		}
		rc.TLS = tc
	}
	return rc, nil
}

// remoteTLSFiles are the remote encoder's CA bundle, client certificate
// and key, relative to the rules file ("" when unset).
func remoteTLSFiles(e *rules.RemoteEncoder, rulesPath string) (ca, cert, key string) {
	abs := func(f string) string {
		if f != "" && !filepath.IsAbs(f) && rulesPath != "" {
			return filepath.Join(filepath.Dir(rulesPath), f)
		}
		return f
	}
	return abs(e.CAFile), abs(e.CertFile), abs(e.KeyFile)
}

// tier2Options are the runtime options of the rules' tier 2: scheduled
// (admission, batching, a bounded share of the machine) for the gateway,
// plain for offline commands, whose classifications have no deadline and
// run one Run a text, as they come.
func (c *Models) tier2Options(f *rules.File) onnx.Options {
	if c.Budget != nil {
		return onnx.Options{}
	}
	t := f.Tier2
	// Half the cores: two Runs at once on this kind of 2-core machine
	// answer fewer texts a second than one (bench/tier2.md), and the
	// other half is the proxy path's.
	o := onnx.Options{Schedule: true, Nice: rules.DefaultTier2Nice, MaxConcurrent: max(1, runtime.GOMAXPROCS(0)/2)}
	if t.Encoder != nil {
		// Calls wait on the network, not on this machine's cores: the
		// remote encoder's own defaults (4 calls at once).
		o.MaxConcurrent, o.Nice = 0, 0
	}
	if t.Runs != nil {
		o.MaxConcurrent = *t.Runs
	}
	if t.Threads != nil {
		o.Threads = *t.Threads
	}
	if t.Batch != nil {
		o.MaxBatch = *t.Batch
	}
	if t.BatchTokens != nil {
		o.BatchTokens = *t.BatchTokens
	}
	if t.Queue != nil {
		o.QueueLen = *t.Queue
	}
	if t.CPUShare != nil {
		o.CPUShare = *t.CPUShare
	}
	if t.Nice != nil {
		o.Nice = *t.Nice
	}
	return o
}

// headsKey identifies a heads artifact's content and where its model files
// come from.
func headsKey(h *classifier.Heads, modelsDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(h.Dir, classifier.HeadsFile))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return h.Dir + "\x00" + hex.EncodeToString(sum[:]) + "\x00" + modelsDir, nil
}

func (c *Models) tier1(h *classifier.Heads, modelsDir string) (*static.Model, error) {
	key, err := headsKey(h, modelsDir)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used == nil {
		c.models, c.used = map[string]*static.Model{}, map[string]bool{}
	}
	c.used[key] = true
	if m := c.models[key]; m != nil {
		return m, nil
	}
	m, err := static.Load(h, modelsDir)
	if err != nil {
		return nil, err
	}
	c.models[key] = m
	return m, nil
}

// sweep drops the models the last load did not use. A dropped tier-2
// session is not closed: requests in flight on the previous rules may
// still run it; the runtime's memory goes when the process does.
func (c *Models) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.models {
		if !c.used[k] {
			delete(c.models, k)
		}
	}
	for k := range c.encoders {
		if !c.used["2\x00"+k] {
			delete(c.encoders, k)
		}
	}
	for k := range c.tiers {
		if !c.used["t\x00"+k] {
			delete(c.tiers, k)
		}
	}
	clear(c.used)
}

// Routing is a config's rules, compiled, and the files they were read from.
type Routing struct {
	Set   *rules.Set
	Files []string // the rules files, heads manifests and remote encoder TLS files: watched for changes
}

// Load parses and compiles the rules cfg names (a Routing without a Set
// when it names none), loading what they need and reusing what the last
// load had; the models the last load had and this one does not are
// dropped.
func (c *Models) Load(cfg *config.Config) (*Routing, error) {
	path := cfg.RulesPath()
	if path == "" {
		return &Routing{}, nil
	}
	defer c.sweep()
	rt := &Routing{}
	f, err := rules.ParseFile(path)
	if err != nil {
		return nil, err
	}
	var shadow *rules.Set
	if f.Shadow.Rules != "" {
		sp := f.Shadow.Rules
		if !filepath.IsAbs(sp) {
			sp = filepath.Join(filepath.Dir(path), sp)
		}
		sf, err := rules.ParseFile(sp)
		if err != nil {
			return nil, fmt.Errorf("%s: shadow.rules: %w", path, err)
		}
		if sf.Shadow.Rules != "" {
			return nil, fmt.Errorf("%s: shadow.rules: %s has a shadow of its own; a shadow cannot have one", path, sp)
		}
		if sf.Split.Rules != "" {
			return nil, fmt.Errorf("%s: shadow.rules: %s has a split; a shadow cannot have one", path, sp)
		}
		if shadow, err = c.compile(sf, cfg, rt); err != nil {
			return nil, fmt.Errorf("%s: shadow.rules: %w", path, err)
		}
	}
	var split *rules.Set
	if f.Split.Rules != "" {
		sp := f.Split.Rules
		if !filepath.IsAbs(sp) {
			sp = filepath.Join(filepath.Dir(path), sp)
		}
		sf, err := rules.ParseFile(sp)
		if err != nil {
			return nil, fmt.Errorf("%s: split.rules: %w", path, err)
		}
		if sf.Split.Rules != "" || sf.Shadow.Rules != "" {
			return nil, fmt.Errorf("%s: split.rules: %s has a split or shadow of its own; an arm has neither", path, sp)
		}
		if split, err = c.compile(sf, cfg, rt); err != nil {
			return nil, fmt.Errorf("%s: split.rules: %w", path, err)
		}
	}
	set, err := c.compile(f, cfg, rt, shadow, split)
	if err != nil {
		return nil, err
	}
	rt.Set = set
	return rt, nil
}

// compile loads what f needs and compiles it, adding the files read to
// rt's watch list; sets are its shadow and split rule sets, compiled (nil:
// none).
func (c *Models) compile(f *rules.File, cfg *config.Config, rt *Routing, sets ...*rules.Set) (*rules.Set, error) {
	if f.Heads == "" {
		return nil, fmt.Errorf("%s: heads: required (the heads artifact directory the rules classify with)", f.Path)
	}
	headsDir := RulesHeads(f)
	if c.Heads != "" {
		headsDir = c.Heads
	}
	h, err := classifier.LoadHeads(headsDir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	place := ConfigPlace(cfg)
	if c.Place != nil {
		place = *c.Place
	}
	if err := NeedFiles(h, 1, place); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	m, err := c.tier1(h, place.Dir)
	if err != nil {
		return nil, fmt.Errorf("%s: tier 1: %w", f.Path, err)
	}
	env := rules.Env{Pools: cfg.PoolNames(), Heads: h, Tier1: m, Tier2Budget: c.Budget}
	var tier2Loaded bool
	var key string
	remote, remotePath := f.Tier2.Encoder, f.Path
	if c.Encoder != nil {
		remote, remotePath = c.Encoder, ""
	}
	if env.Tier2, tier2Loaded, key, err = c.tier2For(h, place, c.tier2Options(f), remote, remotePath); err != nil {
		return nil, fmt.Errorf("%s: tier 2: %w", f.Path, err)
	}
	if key != "" {
		if env.Tier2Lazy, err = c.tier2Tier(key, &h.Tier2.Head, f.Tier2.Cache, env.Tier2); err != nil {
			return nil, fmt.Errorf("%s: tier 2: %w", f.Path, err)
		}
	}
	if len(sets) > 0 {
		env.Shadow = sets[0]
	}
	if len(sets) > 1 {
		env.Split = sets[1]
	}
	set, err := rules.Compile(f, env)
	if err != nil {
		return nil, err
	}
	if err := set.Warmup(); err != nil {
		return nil, err
	}
	if tier2Loaded {
		_ = set.LoadTier2() // the session is there already: no wait, and /readyz says so
	}
	rt.Files = append(rt.Files, f.Path, filepath.Join(headsDir, classifier.HeadsFile))
	if remote != nil {
		ca, cert, key := remoteTLSFiles(remote, remotePath)
		for _, file := range []string{ca, cert, key} {
			if file != "" {
				rt.Files = append(rt.Files, file)
			}
		}
	}
	return set, nil
}
