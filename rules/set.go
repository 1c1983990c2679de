package rules

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/internal/suggest"
)

// Reasons a Decision gives.
const (
	ReasonExplicitModel      = "explicit_model"       // the request named a model, not an alias
	ReasonTier1Confident     = "tier1_confident"      // tier 1's top class has a route and cleared its floor
	ReasonBelowFloor         = "below_floor"          // tier 1 fell below the floor of a routed class (tier 2 consulted when enabled)
	ReasonClassRequiresTier2 = "class_requires_tier2" // tier 1's top class is never trusted alone
	ReasonTier2Timeout       = "tier2_timeout"        // tier 2 ran out of its budget
	ReasonTier2Unavailable   = "tier2_unavailable"    // tier 2 cannot run here (not in this build, or its model failed to load)
	ReasonTier2Error         = "tier2_error"          // tier 2 ran and failed
	ReasonTier2Shed          = "tier2_shed"           // tier 2 could not have answered within the budget, so it did not start
	ReasonTier2EncoderDown   = "tier2_encoder_down"   // tier 2's remote encoder kept failing: not called until its cooldown ends
	ReasonClientGone         = "client_gone"          // the client left while tier 2 ran
	ReasonDefault            = "default"              // no route takes the top class
	ReasonRule               = "rule"                 // a route without class conditions matched the request
	ReasonSession            = "session"              // kept on the session's earlier route
	// ReasonUnfamiliar (unfamiliar.go): tier 1 cleared a floor on text too unlike its training data.
)

// Decision is where a request goes and why.
type Decision struct {
	// Pool serves the request; empty for an explicit model (the gateway's
	// model table decides). Fallback takes over when Pool has no healthy
	// replica.
	Pool     string `json:"pool"`
	Fallback string `json:"fallback,omitempty"`
	// Route names the route taken; empty for the default pool.
	Route string `json:"route,omitempty"`
	// Class and Score are the verdict of the tier that decided (Tier 1 or
	// 2; 0 when no tier ran).
	Class  string  `json:"class,omitempty"`
	Score  float32 `json:"score,omitempty"`
	Tier   int     `json:"tier"`
	Reason string  `json:"reason"`
	// Mass is the route's mass at the tier that decided (the probability
	// of the classes it takes) and Floor the floor that mass had to clear;
	// both 0 when no class route decided.
	Mass  float32 `json:"mass,omitempty"`
	Floor float32 `json:"floor,omitempty"`
	// SessionClass, with ReasonSession, is the class the session's route
	// was decided for (Class is this turn's verdict).
	SessionClass string `json:"session_class,omitempty"`
	// Pinned: the caller's pin for the class (Signals.Pins) chose Pool, in
	// place of the route's own pool and fallback. Route and Reason stay
	// the rules': the pin moves where the route's requests go, not which
	// route they took.
	Pinned bool `json:"pinned,omitempty"`
	// Block: the route blocks the request (an error answer, nothing sent
	// upstream); Pool is empty then.
	Block bool `json:"block,omitempty"`
}

// Signals are what a decision reads of a request, whatever API shape it
// came in: each wire format extracts them (openai for chat, completions
// and embeddings). Text and Header are valid only during Decide.
type Signals struct {
	// Model is the model name the request asked for: an alias of the rules
	// for routing by subject.
	Model string
	// Text is the conversation as the classifier sees it, with the rules'
	// window applied (Set.Window): the last user turns, most recent first.
	Text string
	// Header is the request's headers, for routes with header conditions.
	Header http.Header
	// Session identifies the conversation for session stickiness (the
	// session header's value); empty: none.
	Session string
	// Principal is who the request acts for ("" without access control):
	// a session belongs to its principal.
	Principal string
	// Sessions is the store that keeps conversations on their route
	// (Session identifies this one's); nil: no stickiness. It outlives
	// Sets: its owner keeps it.
	Sessions *Sessions
	// Pins are the caller's own pools by class (a tenant's access policy):
	// a request whose route was decided for a pinned class goes to that
	// pool instead of the route's. nil: none. Read, never written.
	Pins map[string]string
	// Arm is the split arm the request is on: ArmB is decided by the
	// split's rule set (Set.Split), anything else by these rules.
	Arm Arm
}

// Env is what a rules file is compiled against.
type Env struct {
	// Pools are the gateway's pool names.
	Pools map[string]bool
	// Heads is the heads artifact the file names, loaded.
	Heads *classifier.Heads
	// Tier1 classifies with the heads' tier-1 head.
	Tier1 classifier.Classifier
	// Tier2 loads tier 2 on first need; nil when this build or the heads
	// have none. The Set wraps it in a classifier.Lazy.
	Tier2 func() (classifier.Classifier, error)
	// Tier2Lazy, when set, is tier 2 as the Sets compiled before this one
	// have it, loaded or not, with its result cache: what owns the models
	// across reloads hands the same one on while the encoder, the head and
	// the cache's size are unchanged, so a reload neither waits for tier 2
	// again nor starts its cache empty. Tier2 and the file's tier2.cache
	// are then not read.
	Tier2Lazy *classifier.Lazy
	// Shadow is the file's shadow.rules, compiled (nil without one).
	Shadow *Set
	// Split is the file's split.rules, compiled (nil without one).
	Split *Set
	// Tier2Budget, when set, replaces the file's tier2.budget: offline
	// evaluation passes Offline (no budget), so that two runs over the same
	// data decide the same, whatever the machine is doing.
	Tier2Budget *time.Duration
}

// Offline is the Tier2Budget of offline work: no budget at all.
var Offline = new(time.Duration)

// Set is a compiled rules file: immutable, safe for concurrent use.
type Set struct {
	file    *File
	version string
	aliases []string
	classes []string
	index   map[string]int
	info    []classInfo // by class index
	routes  []route
	def     string
	tier1   classifier.Classifier
	counter tokenCounter // tier 1's tokenizer, for token-length conditions; nil: estimated
	// headIdx maps each tier's head class positions to class indices
	// (heads normally list the classes in the same order).
	headIdx [3][]int
	// union1 lists tier 1's head positions of every class route's
	// classes, ascending: the routed mass when all class routes match.
	union1 []int

	escalateAt, fallbackFloor, mix float32
	unfamiliarAt                   float32 // tier2.unfamiliar_at (unfamiliar.go); 0: off
	params                         Params  // the same, and the routes' floors, as the decision reads them

	tier2On     bool
	tier2       *classifier.Lazy
	tier2Budget time.Duration

	scratch  sync.Pool
	warnings []Problem

	shadow       *Set
	shadowSample float64
	split        *Arms
}

type classInfo struct {
	floor1, floor2 float32
	requiresTier2  bool
}

type route struct {
	name, pool, fallback string
	block                bool
	message              string
	classes              []bool // by class index; nil: any class (no class condition)
	// heads lists, per tier, the head positions (in the verdict's Probs)
	// of its classes, ascending: its mass is their sum.
	heads  [3][]int
	always bool // no condition besides classes: it matches every request
	// floor is the least mass at tiers 1 and 2 (index 1, 2) that takes the
	// route: its floor (base), raised to min_score.
	floor         [3]float32
	base          [3]float32
	minScore      float32
	requiresTier2 bool // one of its classes is never trusted to tier 1 alone
	unknown       bool // a class, pattern or script in it is wrong (reported)
	model         string
	headers       [][2]string // canonical name, value
	keywords      *regexp.Regexp
	regex         *regexp.Regexp
	minTokens     int
	maxTokens     int
	scripts       []*unicode.RangeTable
}

// extra reports whether the route has conditions on the text besides its
// classes.
func (r *route) extra() bool {
	return r.keywords != nil || r.regex != nil || r.minTokens > 0 || r.maxTokens > 0 || len(r.scripts) > 0
}

type work struct {
	r1 classifier.Result
	r2 classifier.Result
	// taken marks the classes the matching class routes take: by head
	// position when the verdict has full probabilities, else by class index.
	taken []bool
	ev    evidence
	// tm, when not nil, records when each tier ran (DecideTimed).
	tm *Timing
}

// Compile checks f against env and builds its Set. Every problem is
// reported at once, with the line and column it comes from; a name that
// is not known (a class, a pool) is reported with the known ones and the
// closest, whatever its case.
func Compile(f *File, env Env) (*Set, error) {
	var problems []Problem
	bad := func(p Pos, format string, a ...any) {
		problems = append(problems, Problem{File: f.Path, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, a...)})
	}
	h := env.Heads
	if h == nil {
		return nil, &Error{Problems: []Problem{{File: f.Path, Msg: "heads: no heads artifact loaded"}}}
	}
	s := &Set{file: f, aliases: f.Aliases, classes: h.Classes, index: classifier.ClassIndex(h.Classes),
		def: f.Default, tier1: env.Tier1, tier2: env.Tier2Lazy, tier2Budget: f.Tier2.Budget}
	if env.Tier2Budget != nil {
		s.tier2Budget = *env.Tier2Budget
	}
	if s.tier2 == nil {
		s.tier2 = classifier.NewLazy(env.Tier2)
		if c := f.Tier2.Cache; c != nil {
			s.tier2.SetCacheSize(*c)
		}
	}
	s.counter, _ = env.Tier1.(tokenCounter)
	if env.Tier1 == nil || h.Tier1 == nil {
		bad(Pos{}, "heads %s: no tier-1 head; tier 1 is what every decision starts with", h.Dir)
	}
	s.headIdx[1] = s.headIndex(h.Tier1)
	s.headIdx[2] = s.headIndex(h.Tier2)
	pools := slices.Sorted(maps.Keys(env.Pools))
	if !env.Pools[f.Default] {
		bad(f.pos["default"], "default: no pool named %q%s", f.Default, known(f.Default, pools, "pools"))
	}
	for _, name := range slices.Sorted(maps.Keys(f.Classes)) {
		if _, ok := s.index[name]; !ok {
			bad(f.Classes[name].pos, "classes: %q is not a class of the heads in %s%s", name, h.Dir, known(name, h.Classes, "classes"))
		}
	}
	s.info = classFloors(f, h)
	s.escalateAt, s.fallbackFloor, s.mix = cascadeSettings(f, h)
	s.unfamiliarAt = s.compileUnfamiliar(f, h, bad)
	names := map[string]int{}
	for i, r := range f.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		if j, dup := names[r.Name]; dup {
			bad(r.pos, "%s: route name %q is also routes[%d]'s", path, r.Name, j)
		}
		names[r.Name] = i
		for _, ref := range []struct{ key, pool string }{{"pool", r.Pool}, {"fallback", r.Fallback}} {
			if ref.pool != "" && !env.Pools[ref.pool] {
				bad(f.pos[path+"."+ref.key], "%s.%s: no pool named %q%s", path, ref.key, ref.pool, known(ref.pool, pools, "pools"))
			}
		}
		if r.When.Model != "" && !slices.Contains(f.Aliases, r.When.Model) {
			bad(r.pos, "%s.when.model: %q is not an alias (%v): rules only see requests naming an alias, so this route can never match", path, r.When.Model, f.Aliases)
		}
		s.routes = append(s.routes, s.compileRoute(f, h, r, path, bad))
	}
	for j := range s.routes {
		if s.routes[j].unknown {
			continue // its classes are reported; it shadows nothing and is shadowed by nothing
		}
		for i := range j {
			if !s.routes[i].unknown && shadows(&s.routes[i], &s.routes[j]) {
				bad(f.Routes[j].pos, "routes[%d] (%s) can never match: routes[%d] (%s) takes every request it would", j, s.routes[j].name, i, s.routes[i].name)
				break
			}
		}
	}
	if f.Tier2.Enabled && (h.Tier2 == nil || env.Tier2 == nil) {
		bad(f.pos["tier2.enabled"], "tier2.enabled: the heads in %s have no tier-2 head, or this build has no tier-2 encoder", h.Dir)
	}
	s.tier2On = f.Tier2.Enabled && s.needsTier2()
	switch {
	case f.Shadow.Rules != "" && env.Shadow == nil:
		bad(f.pos["shadow.rules"], "shadow.rules: %s was not loaded", f.Shadow.Rules)
	case f.Shadow.Rules == "" && env.Shadow != nil:
		bad(f.pos["shadow"], "shadow: a shadow rule set was given but the file names none (shadow.rules)")
	case env.Shadow != nil && env.Shadow.shadow != nil:
		bad(f.pos["shadow.rules"], "shadow.rules: %s has a shadow of its own; a shadow cannot have one", f.Shadow.Rules)
	case env.Shadow != nil && f.Shadow.Sample <= 0:
		bad(f.pos["shadow.sample"], "shadow.sample: 0 decides nothing in shadow; remove the shadow section instead")
	case env.Shadow != nil:
		s.shadow, s.shadowSample = env.Shadow, f.Shadow.Sample
	}
	s.split = compileSplit(f, env, bad)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	s.warnings = s.unreachable()
	if w := plainKeyWarning(f.Tier2.Encoder); w != "" {
		p := f.pos["tier2.encoder.url"]
		s.warnings = append(s.warnings, Problem{File: f.Path, Line: p.Line, Col: p.Col, Msg: w})
	}
	if s.split != nil && s.split.byRequest {
		p := f.pos["split.by_request"]
		s.warnings = append(s.warnings, Problem{File: f.Path, Line: p.Line, Col: p.Col, Msg: "split.by_request: a request with neither a principal nor a conversation is assigned by its request id, which is not sticky: one caller's requests land on both arms, and its follow-ups may change arm"})
	}
	sum := sha256.New()
	if b, err := os.ReadFile(f.Path); err == nil {
		sum.Write(b)
	}
	// The heads by name, version and content, not by where they were
	// found: the same rules and heads have the same version whatever the
	// working directory.
	fmt.Fprintf(sum, "\x00%s\x00%s\x00", h.Name, h.Version)
	// The heads' content too: calibration changes floors (and temperatures)
	// without changing the artifact's version string.
	if b, err := os.ReadFile(filepath.Join(h.Dir, classifier.HeadsFile)); err == nil {
		sum.Write(b)
	}
	s.version = hex.EncodeToString(sum.Sum(nil))[:12]
	n, nr := len(h.Classes), len(s.routes)
	for i := range s.routes {
		r := &s.routes[i]
		r.always = r.model == "" && len(r.headers) == 0 && !r.extra()
	}
	for p, c := range s.headIdx[1] {
		for i := range s.routes {
			if r := &s.routes[i]; c >= 0 && r.classes != nil && r.classes[c] {
				s.union1 = append(s.union1, p)
				break
			}
		}
	}
	for t := 1; t <= 2; t++ {
		n = max(n, len(s.headIdx[t]))
		for i := range s.routes {
			r := &s.routes[i]
			if r.classes == nil {
				continue
			}
			for p, c := range s.headIdx[t] {
				if c >= 0 && r.classes[c] {
					r.heads[t] = append(r.heads[t], p)
				}
			}
		}
	}
	s.scratch.New = func() any {
		return &work{taken: make([]bool, n), ev: evidence{match: make([]bool, nr), m1: make([]float32, nr), m2: make([]float32, nr),
			class1: make([]classifier.Scored, nr), class2: make([]classifier.Scored, nr)}}
	}
	s.params = Params{EscalateAt: s.escalateAt, FallbackFloor: s.fallbackFloor, Mix: s.mix}
	s.params.UnfamiliarAt = s.unfamiliarAt
	for t := 1; t <= 2; t++ {
		s.params.Floors[t] = make([]float32, nr)
		for i, r := range s.routes {
			s.params.Floors[t][i] = r.base[t]
		}
	}
	return s, nil
}

// known lists the names a reference could have meant: the closest one
// (case-insensitive) and all of them.
func known(name string, names []string, what string) string {
	msg := ""
	if c := suggest.ClosestFold(name, names); c != "" {
		msg = fmt.Sprintf(" (did you mean %q?)", c)
	}
	return fmt.Sprintf("%s; the %s are %s", msg, what, quoteList(names))
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// headIndex maps a tier's head class positions to the set's class indices.
func (s *Set) headIndex(t *classifier.Tier) []int {
	if t == nil {
		return nil
	}
	idx := make([]int, len(t.Head.Classes))
	for i, c := range t.Head.Classes {
		if j, ok := s.index[c]; ok {
			idx[i] = j
		} else {
			idx[i] = -1
		}
	}
	return idx
}

// classFloors resolves each class's floors: the file's class floor, else
// the heads' calibrated one, else the file's default, else 0.5.
func classFloors(f *File, h *classifier.Heads) []classInfo {
	info := make([]classInfo, len(h.Classes))
	for i, name := range h.Classes {
		ci := &info[i]
		def1, def2 := 0.5, 0.5
		if f.Floors.Tier1 != nil {
			def1 = *f.Floors.Tier1
		}
		if f.Floors.Tier2 != nil {
			def2 = *f.Floors.Tier2
		}
		ci.floor1, ci.floor2 = float32(def1), float32(def2)
		if hf, ok := h.Floors[name]; ok {
			if hf.Tier1 != nil {
				ci.floor1 = *hf.Tier1
			}
			if hf.Tier2 != nil {
				ci.floor2 = *hf.Tier2
			}
		}
		if c := f.Classes[name]; c != nil {
			if c.Floors.Tier1 != nil {
				ci.floor1 = float32(*c.Floors.Tier1)
			}
			if c.Floors.Tier2 != nil {
				ci.floor2 = float32(*c.Floors.Tier2)
			}
			ci.requiresTier2 = c.RequiresTier2
		}
	}
	return info
}

// Defaults of the escalation settings, when neither the file nor the
// heads artifact sets them.
const (
	DefaultEscalateAt    = 0.2
	DefaultFallbackFloor = 0.5
)

// cascadeSettings resolves escalate_at, fallback_floor and mix: the
// file's, else the artifact's fitted ones, else the defaults.
func cascadeSettings(f *File, h *classifier.Heads) (escalateAt, fallback, mix float32) {
	pick := func(file *float64, fitted func(*classifier.Routing) *float32, def float32) float32 {
		if file != nil {
			return float32(*file)
		}
		if h.Routing != nil {
			if v := fitted(h.Routing); v != nil {
				return *v
			}
		}
		return def
	}
	escalateAt = pick(f.Tier2.EscalateAt, func(r *classifier.Routing) *float32 { return r.EscalateAt }, DefaultEscalateAt)
	fallback = pick(f.Tier2.FallbackFloor, func(r *classifier.Routing) *float32 { return r.FallbackFloor }, DefaultFallbackFloor)
	mix = pick(f.Tier2.Mix, func(r *classifier.Routing) *float32 { return r.Mix }, 0)
	return
}

// compileRoute checks one route and builds it: its classes, its floors per
// tier (the file's, else the artifact's fitted ones for the same classes,
// else the lowest of its classes' floors; raised to min_score), and its
// text conditions.
func (s *Set) compileRoute(f *File, h *classifier.Heads, r *Route, path string, bad func(Pos, string, ...any)) route {
	cr := route{name: r.Name, pool: r.Pool, fallback: r.Fallback, block: r.Blocks(), message: r.Message,
		minScore: float32(r.When.MinScore), model: r.When.Model, minTokens: r.When.MinTokens, maxTokens: r.When.MaxTokens}
	if len(r.When.Classes) > 0 {
		cr.classes = make([]bool, len(h.Classes))
		cr.floor = [3]float32{0, 1, 1}
		for _, c := range r.When.Classes {
			ci, ok := s.index[c]
			if !ok {
				cr.unknown = true
				bad(f.pos[path+".when.class"], "%s.when: %q is not a class of the heads in %s%s", path, c, h.Dir, known(c, h.Classes, "classes"))
				continue
			}
			cr.classes[ci] = true
			info := s.info[ci]
			cr.floor[1], cr.floor[2] = min(cr.floor[1], info.floor1), min(cr.floor[2], info.floor2)
			if info.requiresTier2 {
				cr.requiresTier2 = true
				if !f.Tier2.Enabled {
					bad(f.pos[path+".when.class"], "%s.when: class %q requires tier 2 but tier2.enabled is false: this route can never take it", path, c)
				}
			}
		}
		if fit, ok := fittedFloors(h, r); ok {
			if fit.Tier1 != nil {
				cr.floor[1] = *fit.Tier1
			}
			if fit.Tier2 != nil {
				cr.floor[2] = *fit.Tier2
			}
		}
		if r.Floors.Tier1 != nil {
			cr.floor[1] = float32(*r.Floors.Tier1)
		}
		if r.Floors.Tier2 != nil {
			cr.floor[2] = float32(*r.Floors.Tier2)
		}
		cr.base = cr.floor
		cr.floor[1], cr.floor[2] = max(cr.floor[1], cr.minScore), max(cr.floor[2], cr.minScore)
	}
	for k, v := range r.When.Headers {
		cr.headers = append(cr.headers, [2]string{http.CanonicalHeaderKey(k), v})
	}
	slices.SortFunc(cr.headers, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	if len(r.When.Keywords) > 0 {
		alts := make([]string, len(r.When.Keywords))
		for i, k := range r.When.Keywords {
			alts[i] = regexp.QuoteMeta(strings.TrimSpace(k))
		}
		cr.keywords = regexp.MustCompile(`(?i)(?:^|[^\pL\pN_])(?:` + strings.Join(alts, "|") + `)(?:$|[^\pL\pN_])`)
	}
	if r.When.Regex != "" {
		re, err := regexp.Compile(r.When.Regex)
		if err != nil {
			cr.unknown = true
			bad(f.pos[path+".when.regex"], "%s.when.regex: %v", path, err)
		}
		cr.regex = re
	}
	for _, name := range r.When.Scripts {
		t := scriptTable(name)
		if t == nil {
			cr.unknown = true
			hint := ""
			if c := suggest.ClosestFold(name, scriptNames()); c != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", c)
			}
			bad(f.pos[path+".when.scripts"], "%s.when.scripts: %q is not a Unicode script%s; for example latin, cyrillic, greek, arabic, hebrew, devanagari, han, hiragana, katakana, hangul, thai", path, name, hint)
			continue
		}
		cr.scripts = append(cr.scripts, t)
	}
	return cr
}

// fittedFloors are the floors calibration fitted for a route of this name
// taking exactly these classes.
func fittedFloors(h *classifier.Heads, r *Route) (classifier.Floors, bool) {
	if h.Routing == nil {
		return classifier.Floors{}, false
	}
	fit, ok := h.Routing.Routes[r.Name]
	if !ok || !sameSet(fit.Classes, r.When.Classes) {
		return classifier.Floors{}, false
	}
	return fit.Floors, true
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// shadows reports whether route a (earlier) takes every request route b
// would: its conditions are each no stricter than b's. A class route takes
// b's requests when its classes include b's (its mass is then at least
// b's) and its floors are no higher.
func shadows(a, b *route) bool {
	if a.model != "" && a.model != b.model {
		return false
	}
	if a.extra() {
		return false // conditions on the text: not compared
	}
	for _, ha := range a.headers {
		if !slices.Contains(b.headers, ha) {
			return false
		}
	}
	if a.classes == nil {
		return true
	}
	if b.classes == nil {
		return false
	}
	if a.floor[1] > b.floor[1] || a.floor[2] > b.floor[2] || a.requiresTier2 && !b.requiresTier2 {
		return false
	}
	for c, in := range b.classes {
		if in && !a.classes[c] {
			return false
		}
	}
	return true
}

// needsTier2 reports whether any decision could escalate: a class route
// whose tier-1 floor can fail, that tier 1 may never take, or whose
// tier-1 answer may be unfamiliar.
func (s *Set) needsTier2() bool {
	for _, r := range s.routes {
		if r.classes != nil && (r.requiresTier2 || r.floor[1] > 0 || s.unfamiliarAt > 0) {
			return true
		}
	}
	return false
}

// unreachable lists the routes no request can take (a floor of 1 at every
// tier that can decide: a mass never reaches past it) and the classes
// named only by such routes.
func (s *Set) unreachable() []Problem {
	var out []Problem
	dead := map[int]bool{}
	for i, r := range s.routes {
		if r.classes == nil || r.unknown {
			continue
		}
		t1 := !r.requiresTier2 && r.floor[1] < 1
		t2 := s.tier2On && r.floor[2] < 1
		if t1 || t2 {
			continue
		}
		dead[i] = true
		p := s.file.Routes[i].pos
		out = append(out, Problem{File: s.file.Path, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(
			"routes[%d] (%s) can never fire: its floor is %.2f at tier 1 and %.2f at tier 2 (tier 2 %s); lower its floors or refit them with triage calibrate --rules",
			i, r.name, r.floor[1], r.floor[2], map[bool]string{true: "on", false: "off"}[s.tier2On])})
	}
	for c, name := range s.classes {
		named, live := false, false
		for i, r := range s.routes {
			if r.classes != nil && r.classes[c] {
				named = true
				live = live || !dead[i]
			}
		}
		if named && !live {
			out = append(out, Problem{File: s.file.Path, Msg: fmt.Sprintf("class %q can never be routed: every route that names it can never fire", name)})
		}
	}
	return out
}

// BlockMessage is the message a block route answers with ("" for none,
// or for a route that does not block).
func (s *Set) BlockMessage(route string) string {
	for _, r := range s.routes {
		if r.name == route && r.block {
			return r.message
		}
	}
	return ""
}

// Warnings are what Compile found that is allowed but probably wrong:
// routes that can never fire, classes no route can take.
func (s *Set) Warnings() []Problem { return s.warnings }

// NeedsTier2 reports whether any decision can reach tier 2. When false the
// tier-2 model is never loaded.
func (s *Set) NeedsTier2() bool { return s.tier2On }

// Shadow is the rule set that decides sampled requests in shadow, and the
// share of routed requests it sees; nil without one.
func (s *Set) Shadow() (*Set, float64) { return s.shadow, s.shadowSample }

// ShadowLog is the shadow decision log's path, resolved against the rules
// file's directory; empty without one.
func (s *Set) ShadowLog() string {
	l := s.file.Shadow.Log
	if s.shadow == nil || l == "" || filepath.IsAbs(l) {
		return l
	}
	return filepath.Join(filepath.Dir(s.file.Path), l)
}

// DecideShadow decides as Decide does for a request that named one of the
// primary set's aliases, whatever this set's own aliases are: a shadow set
// judges the traffic its primary routes. The caller's pins apply, as they
// do to the primary's decision it is compared with; sessions do not (the
// store is the primary's).
func (s *Set) DecideShadow(ctx context.Context, sig Signals) Decision {
	w := s.scratch.Get().(*work)
	defer s.scratch.Put(w)
	d := s.cascade(ctx, &sig, w, nil)
	pin(sig.Pins, &d)
	return d
}

// Window is the conversation window the classifier sees: what a wire
// format extracts into Signals.Text.
func (s *Set) Window() Window { return s.file.Window }

// Sessions is the session settings; Enabled is false when the file keeps
// no sessions.
func (s *Set) Sessions() Session { return s.file.Session }

// Version identifies the rules file, heads and floors in effect.
func (s *Set) Version() string { return s.version }

// Explain reports whether responses carry the x-triage-* headers.
func (s *Set) Explain() bool { return s.file.Explain }

// Aliases are the model names that ask for routing.
func (s *Set) Aliases() []string { return s.aliases }

// RoutedClasses are the classes some route names, sorted.
func (s *Set) RoutedClasses() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range s.file.Routes {
		for _, c := range r.When.Classes {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Classes are the heads' classes.
func (s *Set) Classes() []string { return s.classes }

// Default is the default pool.
func (s *Set) Default() string { return s.def }

// File is the parsed file the Set was compiled from.
func (s *Set) File() *File { return s.file }

// IsAlias reports whether a requested model name asks for routing.
func (s *Set) IsAlias(model []byte) bool {
	_, ok := s.Alias(model)
	return ok
}

// Alias returns the alias a requested model name is, without allocating.
func (s *Set) Alias(model []byte) (string, bool) {
	for _, a := range s.aliases {
		if string(model) == a {
			return a, true
		}
	}
	return "", false
}

// Warmup loads tier 2 now, and waits for it, when the file asks for it
// and a decision can need it; otherwise it does nothing.
func (s *Set) Warmup() error {
	if s.file.Tier2.Warmup {
		return s.LoadTier2()
	}
	return nil
}

// LoadTier2 loads tier 2 now and waits for it, when a decision can need
// it: for offline evaluation, whose figures should not count the load.
func (s *Set) LoadTier2() error {
	if !s.tier2On {
		return nil
	}
	return s.tier2.Wait()
}

// Tier2State says where tier 2 stands, for /readyz: "off" (no decision
// can reach it: it is never loaded), "not loaded" (loaded on first need),
// "loading", "loaded" or "failed".
func (s *Set) Tier2State() string {
	if !s.tier2On {
		return "off"
	}
	return s.tier2.State()
}

// Tier2Stats reports tier 2's scheduler (false: tier 2 is off, not
// loaded, or runs unscheduled) and its result cache's hits and misses.
func (s *Set) Tier2Stats() (run classifier.RunStats, scheduled bool, hits, misses uint64) {
	if !s.tier2On {
		return run, false, 0, 0
	}
	run, scheduled = s.tier2.RunStats()
	hits, misses = s.tier2.CacheStats()
	return run, scheduled, hits, misses
}

// Tier2Loaded reports whether tier 2 has been loaded (successfully).
func (s *Set) Tier2Loaded() bool { return s.tier2On && s.tier2.Loaded() }

// Trace is the whole story of one decision, for `triage route`: what each
// tier said, every class route's mass and floors, and the decision.
type Trace struct {
	Model      string             `json:"model"`
	Text       string             `json:"text,omitempty"`
	Tier1      *classifier.Result `json:"tier1,omitempty"`
	Tier2      *classifier.Result `json:"tier2,omitempty"`
	Tier2Error string             `json:"tier2_error,omitempty"`
	// Routes are the class routes whose other conditions held, in order,
	// with their mass at each tier that ran and their floors.
	Routes []RouteTrace `json:"routes,omitempty"`
	// EscalateAt is the routed mass from which tier 1 escalates.
	EscalateAt float32 `json:"escalate_at"`
	// UnfamiliarAt is tier 1's distance from its top class's centroid
	// from which it escalates however sure it is (absent: off); tier 1's
	// own distance is Tier1.Distance.
	UnfamiliarAt float32  `json:"unfamiliar_at,omitempty"`
	Decision     Decision `json:"decision"`
}

// Decide routes one request by its signals. For a model that is not an
// alias it returns ReasonExplicitModel and no pool. For an alias, in
// order:
//
//  1. the cascade (see policy) decides on the request's own text;
//  2. with sig.Sessions and a session id, a confident decision becomes the
//     conversation's route; one that is not confident is replaced by the
//     route its session keeps, while it has turns left (ReasonSession,
//     SessionClass);
//  3. with sig.Pins, the caller's pin for the class the route was decided
//     for (this turn's, or for a turn its session kept, the session's)
//     sends the request to the caller's pool (Pinned).
//
// Steps 2 and 3 add no allocation but the session's key, when a
// principal owns it, and a new session's entry.
func (s *Set) Decide(ctx context.Context, sig Signals) Decision {
	return s.decide(ctx, &sig, nil, nil)
}

// Timing is when each tier ran during one decision, for tracing: a tier
// that did not run has a zero Start.
type Timing struct {
	Tier1Start time.Time
	Tier1      time.Duration
	// Tier2 covers tier 2's load (the first time) and its classification,
	// within its budget; when it gave no verdict the Decision's Reason says
	// why (ReasonTier2Timeout, ReasonTier2Shed, ReasonTier2Unavailable,
	// ReasonTier2Error, ReasonClientGone).
	Tier2Start time.Time
	Tier2      time.Duration
}

// DecideTimed decides as Decide does and records in t when each tier ran:
// up to four clock reads more than Decide, which the gateway makes only
// for a traced request.
func (s *Set) DecideTimed(ctx context.Context, sig Signals, t *Timing) Decision {
	*t = Timing{}
	return s.decide(ctx, &sig, nil, t)
}

// ExplainDecision decides as Decide does and records how.
func (s *Set) ExplainDecision(ctx context.Context, sig Signals) Trace {
	var t Trace
	t.Decision = s.decide(ctx, &sig, &t, nil)
	return t
}

func (s *Set) decide(ctx context.Context, sig *Signals, tr *Trace, tm *Timing) Decision {
	if tr != nil {
		tr.Model, tr.EscalateAt = sig.Model, s.escalateAt
		tr.UnfamiliarAt = s.unfamiliarAt
	}
	if _, ok := s.Alias([]byte(sig.Model)); !ok {
		return Decision{Reason: ReasonExplicitModel}
	}
	s = s.arm(sig.Arm)
	w := s.scratch.Get().(*work)
	defer s.scratch.Put(w)
	w.tm = tm
	d := s.cascade(ctx, sig, w, tr)
	w.tm = nil
	if sig.Sessions != nil {
		d = sig.Sessions.apply(s, sig.Principal, sig.Session, d)
	}
	if len(sig.Pins) > 0 {
		pin(sig.Pins, &d)
	}
	if tr != nil {
		tr.Decision = d
	}
	return d
}

// pin sends d to the pool pins has for the class its route was decided
// for: this turn's class when a tier decided, the session's when the
// session kept the route. A blocked request goes nowhere, pinned or not.
func pin(pins map[string]string, d *Decision) {
	if d.Block || d.Tier == 0 && d.SessionClass == "" {
		return
	}
	class := d.Class
	if d.SessionClass != "" {
		class = d.SessionClass
	}
	if p := pins[class]; p != "" && class != "" {
		d.Pool, d.Fallback, d.Pinned = p, "", true
	}
}

// route is the route named name; nil: none.
func (s *Set) route(name string) *route {
	for i := range s.routes {
		if s.routes[i].name == name {
			return &s.routes[i]
		}
	}
	return nil
}
