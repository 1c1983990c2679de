package rules

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/triagegw/triage/classifier"
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
	ReasonDefault            = "default"              // no route takes the top class
	ReasonRule               = "rule"                 // a route without class conditions matched the request
	ReasonSession            = "session"              // kept on the session's earlier route
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
	// Shadow is the file's shadow.rules, compiled (nil without one).
	Shadow *Set
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

	tier2On     bool
	tier2       *classifier.Lazy
	tier2Budget time.Duration

	scratch sync.Pool

	shadow       *Set
	shadowSample float64
}

type classInfo struct {
	floor1, floor2 float32
	requiresTier2  bool
}

type route struct {
	name, pool, fallback string
	classes              []bool // by class index; nil: any class (no class condition)
	minScore             float32
	model                string
	headers              [][2]string // canonical name, value
}

type work struct {
	r1 classifier.Result
	r2 classifier.Result
}

// Compile checks f against env and builds its Set. Every problem is
// reported at once, with the line and column it comes from.
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
		def: f.Default, tier1: env.Tier1, tier2: classifier.NewLazy(env.Tier2), tier2Budget: f.Tier2.Budget}
	if env.Tier2Budget != nil {
		s.tier2Budget = *env.Tier2Budget
	}
	if env.Tier1 == nil || h.Tier1 == nil {
		bad(Pos{}, "heads %s: no tier-1 head; tier 1 is what every decision starts with", h.Dir)
	}
	if !env.Pools[f.Default] {
		bad(f.pos["default"], "default: no pool named %q", f.Default)
	}
	for name, c := range f.Classes {
		if _, ok := s.index[name]; !ok {
			bad(c.pos, "classes: %q is not a class of the heads in %s (they are %v)", name, h.Dir, h.Classes)
		}
	}
	// Floors: the file's class floor, else the heads' calibrated one, else
	// the file's default, else 0.5.
	s.info = make([]classInfo, len(h.Classes))
	for i, name := range h.Classes {
		ci := &s.info[i]
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
	names := map[string]int{}
	for i, r := range f.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		cr := route{name: r.Name, pool: r.Pool, fallback: r.Fallback, minScore: float32(r.When.MinScore), model: r.When.Model}
		if j, dup := names[r.Name]; dup {
			bad(r.pos, "%s: route name %q is also routes[%d]'s", path, r.Name, j)
		}
		names[r.Name] = i
		if r.Pool != "" && !env.Pools[r.Pool] {
			bad(f.pos[path+".pool"], "%s.pool: no pool named %q", path, r.Pool)
		}
		if r.Fallback != "" && !env.Pools[r.Fallback] {
			bad(f.pos[path+".fallback"], "%s.fallback: no pool named %q", path, r.Fallback)
		}
		if r.When.Model != "" && !slices.Contains(f.Aliases, r.When.Model) {
			bad(r.pos, "%s.when.model: %q is not an alias (%v): rules only see requests naming an alias, so this route can never match", path, r.When.Model, f.Aliases)
		}
		if len(r.When.Classes) > 0 {
			cr.classes = make([]bool, len(h.Classes))
			for _, c := range r.When.Classes {
				ci, ok := s.index[c]
				if !ok {
					bad(f.pos[path+".when.class"], "%s.when: %q is not a class of the heads (%v)", path, c, h.Classes)
					continue
				}
				cr.classes[ci] = true
				if s.info[ci].requiresTier2 && !f.Tier2.Enabled {
					bad(f.pos[path+".when.class"], "%s.when: class %q requires tier 2 but tier2.enabled is false: this route can never take it", path, c)
				}
			}
		}
		for k, v := range r.When.Headers {
			cr.headers = append(cr.headers, [2]string{http.CanonicalHeaderKey(k), v})
		}
		slices.SortFunc(cr.headers, func(a, b [2]string) int { return cmpStr(a[0], b[0]) })
		s.routes = append(s.routes, cr)
	}
	for j := range s.routes {
		for i := range j {
			if shadows(&s.routes[i], &s.routes[j]) {
				bad(f.Routes[j].pos, "routes[%d] (%s) can never match: routes[%d] (%s) takes every request it would", j, s.routes[j].name, i, s.routes[i].name)
				break
			}
		}
	}
	if f.Tier2.Enabled {
		if h.Tier2 == nil || env.Tier2 == nil {
			bad(f.pos["tier2.enabled"], "tier2.enabled: the heads in %s have no tier-2 head, or this build has no tier-2 encoder", h.Dir)
		}
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
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	sum := sha256.New()
	if b, err := os.ReadFile(f.Path); err == nil {
		sum.Write(b)
	}
	fmt.Fprintf(sum, "\x00%s\x00%s\x00%s\x00", h.Name, h.Version, h.Dir)
	// The heads' content too: calibration changes floors (and temperatures)
	// without changing the artifact's version string.
	if b, err := os.ReadFile(filepath.Join(h.Dir, classifier.HeadsFile)); err == nil {
		sum.Write(b)
	}
	s.version = hex.EncodeToString(sum.Sum(nil))[:12]
	s.scratch.New = func() any { return new(work) }
	return s, nil
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// shadows reports whether route a (earlier) takes every request route b
// would: its conditions are each no stricter than b's.
func shadows(a, b *route) bool {
	if a.model != "" && a.model != b.model {
		return false
	}
	if a.minScore > b.minScore {
		return false
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
	for c, in := range b.classes {
		if in && !a.classes[c] {
			return false
		}
	}
	return true
}

// needsTier2 reports whether any route could escalate: a routed class that
// requires tier 2 or whose tier-1 floor (or the route's minimum) can fail.
func (s *Set) needsTier2() bool {
	for _, r := range s.routes {
		for c, in := range r.classes {
			if in && (s.info[c].requiresTier2 || s.info[c].floor1 > 0 || r.minScore > 0) {
				return true
			}
		}
	}
	return false
}

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
// judges the traffic its primary routes.
func (s *Set) DecideShadow(ctx context.Context, sig Signals) Decision {
	w := s.scratch.Get().(*work)
	defer s.scratch.Put(w)
	return s.cascade(ctx, &sig, w, nil)
}

// Window is the conversation window the classifier sees: what a wire
// format extracts into Signals.Text.
func (s *Set) Window() Window { return s.file.Window }

// Sessions is the session settings; Header is empty when the file keeps
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

// Tier2Loaded reports whether tier 2 has been loaded (successfully).
func (s *Set) Tier2Loaded() bool { return s.tier2On && s.tier2.Loaded() }

// Trace is the whole story of one decision, for `triage route`.
type Trace struct {
	Model      string             `json:"model"`
	Text       string             `json:"text,omitempty"`
	Tier1      *classifier.Result `json:"tier1,omitempty"`
	Tier2      *classifier.Result `json:"tier2,omitempty"`
	Tier2Error string             `json:"tier2_error,omitempty"`
	Floors     map[string]float32 `json:"floors_applied,omitempty"` // tier → floor of the class it judged
	Candidates []string           `json:"candidate_routes,omitempty"`
	Decision   Decision           `json:"decision"`
}

// Decide routes one request by its signals. For a model that is not an
// alias it returns ReasonExplicitModel and no pool. Session stickiness is
// not applied here: the Sessions store, which outlives a Set, is the
// caller's (the gateway's).
func (s *Set) Decide(ctx context.Context, sig Signals) Decision {
	return s.decide(ctx, &sig, nil)
}

// ExplainDecision decides as Decide does and records how.
func (s *Set) ExplainDecision(ctx context.Context, sig Signals) Trace {
	var t Trace
	t.Decision = s.decide(ctx, &sig, &t)
	return t
}

func (s *Set) decide(ctx context.Context, sig *Signals, tr *Trace) Decision {
	if tr != nil {
		tr.Model = sig.Model
	}
	if _, ok := s.Alias([]byte(sig.Model)); !ok {
		return Decision{Reason: ReasonExplicitModel}
	}
	w := s.scratch.Get().(*work)
	defer s.scratch.Put(w)
	d := s.cascade(ctx, sig, w, tr)
	if tr != nil {
		tr.Decision = d
	}
	return d
}

// matches reports whether r's conditions other than the class hold.
func (r *route) matches(sig *Signals) bool {
	if r.model != "" && sig.Model != r.model {
		return false
	}
	for _, h := range r.headers {
		if v := sig.Header[h[0]]; len(v) == 0 || v[0] != h[1] {
			return false
		}
	}
	return true
}

func (s *Set) pick(r *route, res *classifier.Result, tier int, reason string) Decision {
	return Decision{Pool: r.pool, Fallback: r.fallback, Route: r.name, Class: res.Class, Score: res.Score, Tier: tier, Reason: reason}
}

func (s *Set) cascade(ctx context.Context, sig *Signals, w *work, tr *Trace) Decision {
	// A route without a class condition that comes before any class route
	// the request could take settles it without classifying.
	for i := range s.routes {
		r := &s.routes[i]
		if !r.matches(sig) {
			continue
		}
		if r.classes == nil {
			return Decision{Pool: r.pool, Fallback: r.fallback, Route: r.name, Reason: ReasonRule}
		}
		break
	}
	if tr != nil {
		tr.Text = sig.Text
	}
	_ = s.tier1.Classify(ctx, sig.Text, &w.r1) // tier 1 does not fail
	if tr != nil {
		r1 := w.r1
		r1.Top = append([]classifier.Scored(nil), w.r1.Top...)
		tr.Tier1 = &r1
	}
	c, ok := s.index[w.r1.Class]
	if !ok {
		return Decision{Pool: s.def, Class: w.r1.Class, Score: w.r1.Score, Tier: 1, Reason: ReasonDefault}
	}
	info := &s.info[c]
	routed := false
	var catchAll *route // a class-free route after the class routes: it takes what they leave
	for i := range s.routes {
		r := &s.routes[i]
		if !r.matches(sig) {
			continue
		}
		if r.classes == nil {
			catchAll = r
			break
		}
		if !r.classes[c] {
			continue
		}
		routed = true
		if tr != nil {
			tr.Candidates = append(tr.Candidates, r.name)
			if tr.Floors == nil {
				tr.Floors = map[string]float32{"tier1": info.floor1}
			}
		}
		if !info.requiresTier2 && w.r1.Score >= max(info.floor1, r.minScore) {
			return s.pick(r, &w.r1, 1, ReasonTier1Confident)
		}
	}
	def := Decision{Pool: s.def, Class: w.r1.Class, Score: w.r1.Score, Tier: 1, Reason: ReasonDefault}
	if catchAll != nil {
		def.Pool, def.Fallback, def.Route, def.Reason = catchAll.pool, catchAll.fallback, catchAll.name, ReasonRule
	}
	if !routed {
		return def
	}
	reason := ReasonBelowFloor
	if info.requiresTier2 {
		reason = ReasonClassRequiresTier2
	}
	def.Reason = reason
	if !s.tier2On {
		return def
	}
	return s.escalate(ctx, sig, w, tr, reason, def)
}

func (s *Set) escalate(ctx context.Context, sig *Signals, w *work, tr *Trace, reason string, def Decision) Decision {
	// The budget covers the load (the first time) and the classification;
	// past it the request goes on with tier 1's verdict.
	err := s.tier2.ClassifyWithin(ctx, s.tier2Budget, sig.Text, &w.r2)
	if err != nil {
		if tr != nil {
			tr.Tier2Error = err.Error()
		}
		var le *classifier.LoadError
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			def.Reason = ReasonTier2Timeout
		case errors.Is(err, classifier.ErrUnavailable) || errors.As(err, &le):
			def.Reason = ReasonTier2Unavailable
		default:
			def.Reason = ReasonTier2Error
		}
		return def
	}
	if tr != nil {
		r2 := w.r2
		r2.Top = append([]classifier.Scored(nil), w.r2.Top...)
		tr.Tier2 = &r2
	}
	c, ok := s.index[w.r2.Class]
	if !ok {
		return def
	}
	info := &s.info[c]
	if tr != nil {
		if tr.Floors == nil {
			tr.Floors = map[string]float32{}
		}
		tr.Floors["tier2"] = info.floor2
	}
	for i := range s.routes {
		r := &s.routes[i]
		if r.classes == nil || !r.classes[c] || !r.matches(sig) {
			continue
		}
		if w.r2.Score >= max(info.floor2, r.minScore) {
			return s.pick(r, &w.r2, 2, reason)
		}
	}
	def.Class, def.Score, def.Tier = w.r2.Class, w.r2.Score, 2
	return def
}
