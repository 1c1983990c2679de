package rules

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"

	"github.com/triagegw/triage/internal/suggest"
)

// File is a parsed rules file, before its references are checked.
type File struct {
	Path string
	// Aliases are the model names that ask for routing by subject (the
	// file's "alias", one name or a list). Default ["auto"].
	Aliases []string
	// Heads is the heads artifact directory, relative to the file.
	Heads string
	// Floors are the default floors for classes with none of their own (in
	// this file or the heads artifact). Default 0.5 for each tier.
	Floors Floors
	// Classes configure the heads' classes; unlisted ones keep defaults.
	Classes map[string]*Class
	// Routes are tried in order; the first that matches wins.
	Routes []*Route
	// Default is the pool for everything no route takes. Required.
	Default string
	Tier2   Tier2
	Window  Window
	Session Session
	// Shadow decides sampled live requests a second way, off the request
	// path, and logs both decisions side by side (triage ab --log reads the
	// log).
	Shadow Shadow
	// Split sends a share of the callers to a second rule set that routes
	// their requests (a live A/B split); see Split.
	Split Split
	// Explain adds the x-triage-* headers to responses. Default true.
	Explain bool

	pos map[string]Pos // where each path was defined, for later checks
}

// Pos is a place in the file.
type Pos struct{ Line, Col int }

// Floors are per-tier floors; nil means unset.
type Floors struct {
	Tier1, Tier2 *float64
}

// Class is one class's settings.
type Class struct {
	Name        string
	Description string
	Floors      Floors
	// RequiresTier2: tier 1's verdict on this class is never enough.
	RequiresTier2 bool
	pos           Pos
}

// Route sends matching requests to a pool, or blocks them.
type Route struct {
	Name string
	When When
	// Pool serves the route; Fallback takes over when Pool has no healthy
	// replica. A block route has neither.
	Pool, Fallback string
	// Floors are the route's own floors per tier: the least mass of its
	// classes at which that tier's verdict takes the route. Unset, they
	// come from the heads artifact's fitted route floors, else from the
	// route's classes (the lowest of their floors).
	Floors Floors
	// Action is "route" (the default: send to Pool) or "block": answer 400
	// with code "blocked", the route's name and Message, and send nothing
	// upstream (for guard classes, or keyword and pattern rules).
	Action  string
	Message string
	pos     Pos
}

// Blocks reports whether the route answers with an error instead of a pool.
func (r *Route) Blocks() bool { return r.Action == "block" }

// When is a route's condition; every field set must hold.
type When struct {
	// Classes: the top class (of the tier that decides) is one of these.
	Classes []string
	// MinScore: and its score is at least this (on top of the floor).
	MinScore float64
	// Model: the request named this model (an alias such as auto).
	Model string
	// Headers: the request carries these headers with these values
	// (names case-insensitive, values exact).
	Headers map[string]string
	// Keywords: the conversation text holds one of these words or phrases
	// (case-insensitive, whole words).
	Keywords []string
	// Regex: the conversation text matches this RE2 pattern (compiled once;
	// use (?i) for case-insensitive).
	Regex string
	// MinTokens, MaxTokens: the conversation text's length in tier-1
	// tokens lies within these bounds (0: unbounded).
	MinTokens, MaxTokens int
	// Scripts: the text's dominant writing system is one of these Unicode
	// scripts (latin, cyrillic, han, arabic, ...; case-insensitive).
	Scripts []string
}

// classFree reports whether the condition is decided without classifying.
func (w *When) classFree() bool { return len(w.Classes) == 0 }

// Tier2 configures the second tier.
type Tier2 struct {
	// Enabled lets decisions escalate to tier 2. Default false.
	Enabled bool
	// Budget bounds one tier-2 classification; past it the request goes to
	// the default pool (reason tier2_timeout). Default 50ms.
	Budget time.Duration
	// Warmup loads tier 2 when the rules load instead of on first need.
	Warmup bool
	// EscalateAt is tier 1's routed mass (the probability of the classes
	// the matching routes take) at or above which a request no route is
	// sure of goes to tier 2; below it, tier 1 is sure enough that no
	// route applies, and the default pool takes it. Unset: the heads
	// artifact's fitted value, else 0.2.
	EscalateAt *float64
	// FallbackFloor is the route mass at which, when tier 2 is past its
	// budget or fails, tier 1's best route is taken anyway (lower than the
	// route's own floor: the request would otherwise go to the default).
	// Unset: the artifact's, else 0.5.
	FallbackFloor *float64
	// Mix is the weight of tier 1's probabilities in the decision tier 2
	// makes (0: tier 2's alone; the two tiers make different mistakes).
	// Unset: the artifact's, else 0.
	Mix *float64
	// UnfamiliarAt is the distance from its top class's centroid (1 − the
	// cosine of the text's tier-1 features and the class's training texts'
	// mean, 0 to 2) at or above which a tier-1 answer is not trusted even
	// above its route's floor: the request goes to tier 2 (reason
	// unfamiliar), or, without tier 2, as a request below its floor does.
	// Needs heads with tier-1 centroids. 0: off. Unset: the artifact's
	// fitted value (triage calibrate --rules), else off.
	UnfamiliarAt *float64
	// Cache is how many distinct conversation texts keep their tier-2
	// result, so a retry or a regenerated answer costs a lookup, not a
	// run (0: none). Unset: classifier.DefaultCacheSize (4096).
	Cache *int
	// Runs is how many tier-2 Runs may be in flight at once (one intra-op
	// thread each), or calls to a remote encoder. Unset: half of
	// GOMAXPROCS, at least 1; 4 for a remote encoder.
	Runs *int
	// Threads is each Run's intra-op threads. Unset: 1 (the cores serve
	// more texts as one Run each than as one Run's threads).
	Threads *int
	// Batch is the most texts one Run takes when requests queue (1: no
	// batching). Unset: 8.
	Batch *int
	// BatchTokens is the most padded tokens (texts × the longest) one
	// batched Run takes. Unset: 256.
	BatchTokens *int
	// Queue is the most texts waiting for a Run; past it, escalations are
	// shed. Unset: 32 a Run.
	Queue *int
	// CPUShare caps tier 2's Runs at this share of the machine's cores
	// (GOMAXPROCS), in Run time a second (1: no cap). Unset: 1.
	CPUShare *float64
	// Nice is the scheduling priority of the threads tier 2 runs on, from
	// 0 (the gateway's own) to 19 (the lowest), so that the proxy path
	// takes a core first when both want one. Unset: DefaultTier2Nice.
	Nice *int
	// Encoder, when set, is a remote encoder serving the heads' tier-2
	// encoder over the OpenAI embeddings API; unset, the encoder runs in
	// this process (ONNX Runtime).
	Encoder *RemoteEncoder
}

// RemoteEncoder is tier 2's encoder served by an inference engine (vLLM,
// text-embeddings-inference, Infinity) at POST /v1/embeddings.
type RemoteEncoder struct {
	// URL is the engine's base URL (http:// or https://); requests go to
	// its /v1/embeddings.
	URL string
	// Model is the model name the engine serves: it must be the name in
	// the heads' encoder manifest (encoder.json).
	Model string
	// Pooling and Dims, when set, are checked against the manifest.
	Pooling string
	Dims    int
	// APIKeyEnv names the environment variable holding the engine's API
	// key, sent as a bearer token. Unset: none.
	APIKeyEnv string
	// CAFile is a PEM bundle, the only trust for an https URL. Unset: the
	// system roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key,
	// presented to an engine that asks for one (mTLS; both or neither).
	// Like CAFile, relative to the rules file, watched, and re-read when
	// they change.
	CertFile, KeyFile string
	// Timeout bounds a call without a budget (offline commands). Unset: 30s.
	Timeout time.Duration
	// Failures is how many calls in a row must fail before the encoder is
	// left alone for Cooldown (reason tier2_encoder_down). Unset: 5 and 5s.
	Failures int
	Cooldown time.Duration
}

// DefaultTier2Nice is tier 2's threads' nice value when the rules set
// none: the lowest priority. The kernel still gives them the cores the
// proxy path leaves (and a share under contention: on a saturated 2-core
// machine tier 2 answered as many texts at 19 as at 5), while a proxy
// thread that wakes takes a core first (bench/tier2.md).
const DefaultTier2Nice = 19

// Shadow configures shadow decisions on live traffic.
type Shadow struct {
	// Rules is a second rules file (relative to this one): a candidate
	// rule set, heads artifact or tier configuration to compare. Its
	// decisions are logged, never acted on. Empty: no shadow.
	Rules string
	// Sample is the share of routed requests decided in shadow too.
	// Default 1.
	Sample float64
	// Log is the JSONL file both decisions of each sampled request are
	// appended to (relative to this file). Empty: agreement is counted in
	// metrics only.
	Log string
}

// Clip cuts a single text to MaxBytes, on a rune boundary, as the window
// cuts a conversation's text: what the classifier sees of a one-turn
// request (offline evaluation asks with texts, not requests).
func (w Window) Clip(text string) string {
	n := w.MaxBytes
	if n <= 0 {
		n = 16 << 10
	}
	if len(text) <= n {
		return text
	}
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	return text[:n]
}

// Window selects the conversation text the classifier sees.
type Window struct {
	// UserTurns: the last user message and earlier ones up to this many.
	// Default 3.
	UserTurns int
	// System adds the system prompt. Default false.
	System bool
	// MaxBytes caps the text. Default 16 KiB.
	MaxBytes int
}

// Defaults of a session section's turns and size.
const (
	DefaultSessionTurns = 5
	DefaultSessionSize  = 10000
)

// Session keeps a conversation on its route.
type Session struct {
	// Enabled is set by a session section in the file.
	Enabled bool
	// Header names a session id header clients may send. Without it (or
	// when a request lacks it), a conversation is known by a fingerprint:
	// a hash of its system prompt and first user turn, which stay the same
	// as a chat grows.
	Header string
	// Turns is how many later requests stay on the session's route when
	// their own decision is not confident. Default 5.
	Turns int
	// Size bounds the sessions remembered (least recently used go first).
	// Default 10000.
	Size int
}

// Problem is one thing wrong with a rules file.
type Problem struct {
	File      string
	Line, Col int
	Msg       string
}

func (p Problem) Error() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Col, p.Msg)
	}
	return fmt.Sprintf("%s: %s", p.File, p.Msg)
}

// Error lists every problem found.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d problem(s) in rules:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap lets errors.As reach each problem.
func (e *Error) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p
	}
	return out
}

// ParseFile reads and parses path.
func ParseFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	return Parse(path, b)
}

// Parse parses a rules file's bytes; path names it in problems.
func Parse(path string, src []byte) (*File, error) {
	p := &parser{file: path}
	f := &File{Path: path, Aliases: []string{"auto"}, Explain: true, Classes: map[string]*Class{}, pos: map[string]Pos{},
		Tier2: Tier2{Budget: 50 * time.Millisecond}, Shadow: Shadow{Sample: 1}, Window: Window{UserTurns: 3, MaxBytes: 16 << 10},
		Session: Session{Turns: DefaultSessionTurns, Size: DefaultSessionSize}}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, &Error{Problems: []Problem{{File: path, Msg: "not valid YAML: " + err.Error()}}}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{Problems: []Problem{{File: path, Msg: "empty file"}}}
	}
	root := doc.Content[0]
	p.mapping(root, "", map[string]func(*yaml.Node){
		"alias":   func(n *yaml.Node) { f.Aliases = p.strs(n) },
		"heads":   func(n *yaml.Node) { f.Heads = p.str(n) },
		"floors":  func(n *yaml.Node) { f.Floors = p.floors(n, "floors") },
		"default": func(n *yaml.Node) { f.Default = p.str(n); f.pos["default"] = pos(n) },
		"explain": func(n *yaml.Node) { f.Explain = p.boolean(n) },
		"classes": func(n *yaml.Node) {
			if n.Kind != yaml.MappingNode {
				p.bad(n, "classes: want a mapping of class name to settings")
				return
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				name := n.Content[i].Value
				c := &Class{Name: name, pos: pos(n.Content[i])}
				if _, dup := f.Classes[name]; dup {
					p.bad(n.Content[i], fmt.Sprintf("class %q is listed twice", name))
				}
				f.Classes[name] = c
				path := "classes." + name
				p.mapping(n.Content[i+1], path, map[string]func(*yaml.Node){
					"description":    func(n *yaml.Node) { c.Description = p.str(n) },
					"floors":         func(n *yaml.Node) { c.Floors = p.floors(n, path+".floors") },
					"requires_tier2": func(n *yaml.Node) { c.RequiresTier2 = p.boolean(n) },
				})
			}
		},
		"routes": func(n *yaml.Node) {
			if n.Kind != yaml.SequenceNode {
				p.bad(n, "routes: want a list of routes")
				return
			}
			for i, rn := range n.Content {
				r := &Route{pos: pos(rn)}
				path := fmt.Sprintf("routes[%d]", i)
				p.mapping(rn, path, map[string]func(*yaml.Node){
					"name":     func(n *yaml.Node) { r.Name = p.str(n); f.pos[path+".name"] = pos(n) },
					"pool":     func(n *yaml.Node) { r.Pool = p.str(n); f.pos[path+".pool"] = pos(n) },
					"fallback": func(n *yaml.Node) { r.Fallback = p.str(n); f.pos[path+".fallback"] = pos(n) },
					"floors":   func(n *yaml.Node) { r.Floors = p.floors(n, path+".floors") },
					"message":  func(n *yaml.Node) { r.Message = p.str(n) },
					"action": func(n *yaml.Node) {
						switch r.Action = p.str(n); r.Action {
						case "route", "block":
						default:
							p.bad(n, fmt.Sprintf("%s.action: want route or block, got %q", path, r.Action))
						}
					},
					"when": func(n *yaml.Node) {
						p.mapping(n, path+".when", map[string]func(*yaml.Node){
							"class": func(n *yaml.Node) {
								r.When.Classes = append(r.When.Classes, p.str(n))
								f.pos[path+".when.class"] = pos(n)
							},
							"classes": func(n *yaml.Node) {
								r.When.Classes = append(r.When.Classes, p.strs(n)...)
								f.pos[path+".when.class"] = pos(n)
							},
							"min_score": func(n *yaml.Node) { r.When.MinScore = p.unit(n) },
							"model":     func(n *yaml.Node) { r.When.Model = p.str(n) },
							"headers":   func(n *yaml.Node) { r.When.Headers = p.strMap(n) },
							"keywords":  func(n *yaml.Node) { r.When.Keywords = p.strs(n); f.pos[path+".when.keywords"] = pos(n) },
							"regex":     func(n *yaml.Node) { r.When.Regex = p.str(n); f.pos[path+".when.regex"] = pos(n) },
							"scripts":   func(n *yaml.Node) { r.When.Scripts = p.strs(n); f.pos[path+".when.scripts"] = pos(n) },
							"tokens": func(n *yaml.Node) {
								p.mapping(n, path+".when.tokens", map[string]func(*yaml.Node){
									"min": func(n *yaml.Node) { r.When.MinTokens = p.count(n, 0, 1<<24) },
									"max": func(n *yaml.Node) { r.When.MaxTokens = p.count(n, 1, 1<<24) },
								})
								if r.When.MaxTokens > 0 && r.When.MinTokens > r.When.MaxTokens {
									p.bad(n, fmt.Sprintf("%s.when.tokens: min %d is above max %d", path, r.When.MinTokens, r.When.MaxTokens))
								}
							},
						})
					},
				})
				if r.Name == "" {
					p.bad(rn, path+": a route needs a name")
				}
				switch {
				case r.Blocks() && (r.Pool != "" || r.Fallback != ""):
					p.bad(rn, path+": a block route answers with an error: it takes no pool or fallback")
				case !r.Blocks() && r.Pool == "":
					p.bad(rn, path+": a route needs a pool (or action: block)")
				case !r.Blocks() && r.Message != "":
					p.bad(rn, path+".message: only a block route has a message")
				}
				f.Routes = append(f.Routes, r)
			}
		},
		"tier2": func(n *yaml.Node) {
			p.mapping(n, "tier2", map[string]func(*yaml.Node){
				"enabled":        func(n *yaml.Node) { f.Tier2.Enabled = p.boolean(n); f.pos["tier2.enabled"] = pos(n) },
				"budget":         func(n *yaml.Node) { f.Tier2.Budget = p.duration(n) },
				"warmup":         func(n *yaml.Node) { f.Tier2.Warmup = p.boolean(n) },
				"escalate_at":    func(n *yaml.Node) { v := p.unit(n); f.Tier2.EscalateAt = &v },
				"fallback_floor": func(n *yaml.Node) { v := p.unit(n); f.Tier2.FallbackFloor = &v },
				"mix":            func(n *yaml.Node) { v := p.unit(n); f.Tier2.Mix = &v },
				"unfamiliar_at":  func(n *yaml.Node) { p.unfamiliarAt(n, f) },
				"cache":          func(n *yaml.Node) { v := p.count(n, 0, 1<<20); f.Tier2.Cache = &v },
				"runs":           func(n *yaml.Node) { v := p.count(n, 1, 256); f.Tier2.Runs = &v },
				"threads":        func(n *yaml.Node) { v := p.count(n, 1, 64); f.Tier2.Threads = &v },
				"batch":          func(n *yaml.Node) { v := p.count(n, 1, 64); f.Tier2.Batch = &v },
				"batch_tokens":   func(n *yaml.Node) { v := p.count(n, 1, 1<<16); f.Tier2.BatchTokens = &v },
				"queue":          func(n *yaml.Node) { v := p.count(n, 1, 1<<16); f.Tier2.Queue = &v },
				"cpu_share": func(n *yaml.Node) {
					v := p.unit(n)
					if v == 0 && n.Kind == yaml.ScalarNode && n.Value != "" {
						p.bad(n, "want a share of the cores above 0 (1: no cap), got 0")
						v = 1
					}
					f.Tier2.CPUShare = &v
				},
				"nice": func(n *yaml.Node) { v := p.count(n, 0, 19); f.Tier2.Nice = &v },
				"encoder": func(n *yaml.Node) {
					e := &RemoteEncoder{}
					p.mapping(n, "tier2.encoder", map[string]func(*yaml.Node){
						"url":         func(n *yaml.Node) { e.URL = p.str(n); f.pos["tier2.encoder.url"] = pos(n) },
						"model":       func(n *yaml.Node) { e.Model = p.str(n) },
						"pooling":     func(n *yaml.Node) { e.Pooling = p.str(n) },
						"dims":        func(n *yaml.Node) { e.Dims = p.count(n, 1, 1<<16) },
						"api_key_env": func(n *yaml.Node) { e.APIKeyEnv = p.str(n) },
						"ca_file":     func(n *yaml.Node) { e.CAFile = p.str(n) },
						"cert_file":   func(n *yaml.Node) { e.CertFile = p.str(n) },
						"key_file":    func(n *yaml.Node) { e.KeyFile = p.str(n) },
						"timeout":     func(n *yaml.Node) { e.Timeout = p.duration(n) },
						"failures":    func(n *yaml.Node) { e.Failures = p.count(n, 1, 1000) },
						"cooldown":    func(n *yaml.Node) { e.Cooldown = p.duration(n) },
					})
					switch {
					case e.URL == "":
						p.bad(n, "tier2.encoder: a remote encoder needs a url (http:// or https://)")
					case !strings.HasPrefix(e.URL, "http://") && !strings.HasPrefix(e.URL, "https://"):
						p.bad(n, fmt.Sprintf("tier2.encoder.url: want http:// or https://, got %q", e.URL))
					}
					if e.Model == "" {
						p.bad(n, "tier2.encoder: a remote encoder needs a model: the name in the heads' encoder manifest")
					}
					if (e.CertFile == "") != (e.KeyFile == "") {
						p.bad(n, "tier2.encoder: cert_file and key_file go together (the client certificate and its key)")
					}
					f.Tier2.Encoder = e
				},
			})
		},
		"window": func(n *yaml.Node) {
			p.mapping(n, "window", map[string]func(*yaml.Node){
				"user_turns": func(n *yaml.Node) { f.Window.UserTurns = p.count(n, 1, 100) },
				"system":     func(n *yaml.Node) { f.Window.System = p.boolean(n) },
				"max_bytes":  func(n *yaml.Node) { f.Window.MaxBytes = p.count(n, 64, 1<<24) },
			})
		},
		"shadow": func(n *yaml.Node) {
			f.pos["shadow"] = pos(n)
			p.mapping(n, "shadow", map[string]func(*yaml.Node){
				"rules":  func(n *yaml.Node) { f.Shadow.Rules = p.str(n); f.pos["shadow.rules"] = pos(n) },
				"sample": func(n *yaml.Node) { f.Shadow.Sample = p.unit(n); f.pos["shadow.sample"] = pos(n) },
				"log":    func(n *yaml.Node) { f.Shadow.Log = p.str(n) },
			})
		},
		"split": func(n *yaml.Node) { p.parseSplit(n, f) },
		"session": func(n *yaml.Node) {
			f.Session.Enabled = true
			p.mapping(n, "session", map[string]func(*yaml.Node){
				"header": func(n *yaml.Node) { f.Session.Header = p.str(n) },
				"turns":  func(n *yaml.Node) { f.Session.Turns = p.count(n, 1, 1000) },
				"size":   func(n *yaml.Node) { f.Session.Size = p.count(n, 1, 10_000_000) },
			})
		},
	})
	if f.Default == "" {
		p.problems = append(p.problems, Problem{File: path, Line: root.Line, Col: root.Column, Msg: "default: required (the pool for everything no route takes)"})
	}
	if len(f.Aliases) == 0 {
		p.problems = append(p.problems, Problem{File: path, Msg: "alias: must name at least one model"})
	}
	if len(p.problems) > 0 {
		return nil, &Error{Problems: p.problems}
	}
	return f, nil
}

type parser struct {
	file     string
	problems []Problem
}

func pos(n *yaml.Node) Pos { return Pos{n.Line, n.Column} }

func (p *parser) bad(n *yaml.Node, msg string) {
	p.problems = append(p.problems, Problem{File: p.file, Line: n.Line, Col: n.Column, Msg: msg})
}

// mapping calls the handler of each key of n, reporting unknown keys (with
// a suggestion) and repeated ones.
func (p *parser) mapping(n *yaml.Node, path string, fields map[string]func(*yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		p.bad(n, fmt.Sprintf("%s: want a mapping", orRoot(path)))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		full := k.Value
		if path != "" {
			full = path + "." + k.Value
		}
		h, ok := fields[k.Value]
		if !ok {
			msg := fmt.Sprintf("%s: unknown field", full)
			if s := suggest.Closest(k.Value, slices.Collect(maps.Keys(fields))); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			p.bad(k, msg)
			continue
		}
		if seen[k.Value] {
			p.bad(k, fmt.Sprintf("%s: given twice", full))
			continue
		}
		seen[k.Value] = true
		h(v)
	}
}

func orRoot(path string) string {
	if path == "" {
		return "the file"
	}
	return path
}

func (p *parser) scalar(n *yaml.Node, what string) bool {
	if n.Kind != yaml.ScalarNode {
		p.bad(n, "want "+what)
		return false
	}
	return true
}

func (p *parser) str(n *yaml.Node) string {
	if !p.scalar(n, "a string") {
		return ""
	}
	return n.Value
}

func (p *parser) strs(n *yaml.Node) []string {
	if n.Kind == yaml.ScalarNode {
		return []string{n.Value}
	}
	if n.Kind != yaml.SequenceNode {
		p.bad(n, "want a list of strings")
		return nil
	}
	var out []string
	for _, c := range n.Content {
		if s := p.str(c); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) strMap(n *yaml.Node) map[string]string {
	if n.Kind != yaml.MappingNode {
		p.bad(n, "want a mapping of header name to value")
		return nil
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		out[n.Content[i].Value] = p.str(n.Content[i+1])
	}
	return out
}

func (p *parser) boolean(n *yaml.Node) bool {
	if !p.scalar(n, "true or false") {
		return false
	}
	switch strings.ToLower(n.Value) {
	case "true", "yes", "on":
		return true
	case "false", "no", "off":
		return false
	}
	p.bad(n, fmt.Sprintf("want true or false, got %q", n.Value))
	return false
}

// unit reads a number in [0, 1].
func (p *parser) unit(n *yaml.Node) float64 {
	if !p.scalar(n, "a number between 0 and 1") {
		return 0
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || v < 0 || v > 1 {
		p.bad(n, fmt.Sprintf("want a number between 0 and 1, got %q", n.Value))
		return 0
	}
	return v
}

func (p *parser) count(n *yaml.Node, lo, hi int) int {
	if !p.scalar(n, "a whole number") {
		return lo
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil || v < lo || v > hi {
		p.bad(n, fmt.Sprintf("want a whole number from %d to %d, got %q", lo, hi, n.Value))
		return lo
	}
	return v
}

func (p *parser) duration(n *yaml.Node) time.Duration {
	if !p.scalar(n, "a duration such as 40ms") {
		return 0
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil || d <= 0 {
		p.bad(n, fmt.Sprintf("want a positive duration such as 40ms, got %q", n.Value))
		return 0
	}
	return d
}

func (p *parser) floors(n *yaml.Node, path string) Floors {
	var f Floors
	p.mapping(n, path, map[string]func(*yaml.Node){
		"tier1": func(n *yaml.Node) { v := p.unit(n); f.Tier1 = &v },
		"tier2": func(n *yaml.Node) { v := p.unit(n); f.Tier2 = &v },
	})
	return f
}
