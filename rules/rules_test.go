package rules

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"

	"github.com/triagegw/triage/internal/testenv"
)

var testClasses = []string{"code", "health", "law", "other"}

func testHeads(tier2 bool, floors map[string]classifier.Floors) *classifier.Heads {
	head := classifier.Linear{Kind: "softmax", Classes: testClasses, Dims: 1, W: make([]float32, 4), B: make([]float32, 4)}
	h := &classifier.Heads{Format: 1, Name: "t", Version: "v1", Classes: testClasses, Dir: "/heads",
		Tier1: &classifier.Tier{Head: head}, Floors: floors}
	if tier2 {
		h.Tier2 = &classifier.Tier{Head: head}
	}
	return h
}

var pools = map[string]bool{"general": true, "code": true, "legal": true, "medical": true, "vip": true}

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func compile(t *testing.T, body string, env Env) *Set {
	t.Helper()
	f, err := ParseFile(write(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if env.Pools == nil {
		env.Pools = pools
	}
	s, err := Compile(f, env)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func input(t testing.TB, model, user string, hdr ...string) Signals {
	t.Helper()
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	return Signals{Model: model, Text: user, Header: h}
}

func TestParseReportsEveryProblemWithPosition(t *testing.T) {
	_, err := Parse("r.yaml", []byte(`alias: auto
heads: h
clases:
  law: {}
classes:
  law: {floors: {tier1: 1.5}, requires_tier2: maybe}
  law: {}
routes:
  - {when: {class: law}, pool: legal}
  - {name: x, pool: code, when: {clas: code, min_score: high}}
tier2: {budget: -3ms, cache: -1, runs: 0, nice: 20, cpu_share: 0, batch: 65}
window: {user_turns: 0}
`))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Parse error = %v, want *Error", err)
	}
	want := []string{
		`r.yaml:3:1: clases: unknown field (did you mean "classes"?)`,
		`r.yaml:6:25: want a number between 0 and 1, got "1.5"`,
		`r.yaml:6:47: want true or false, got "maybe"`,
		`r.yaml:7:3: class "law" is listed twice`,
		`r.yaml:9:5: routes[0]: a route needs a name`,
		`r.yaml:10:34: routes[1].when.clas: unknown field (did you mean "class"?)`,
		`r.yaml:10:57: want a number between 0 and 1, got "high"`,
		`r.yaml:11:17: want a positive duration such as 40ms, got "-3ms"`,
		`r.yaml:11:30: want a whole number from 0 to 1048576, got "-1"`,
		`r.yaml:12:22: want a whole number from 1 to 100, got "0"`,
		`r.yaml:11:40: want a whole number from 1 to 256, got "0"`,
		`r.yaml:11:49: want a whole number from 0 to 19, got "20"`,
		`r.yaml:11:64: want a share of the cores above 0 (1: no cap), got 0`,
		`r.yaml:11:74: want a whole number from 1 to 64, got "65"`,
		`default: required`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("missing problem %q in:\n%s", w, msg)
		}
	}
	if len(e.Problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(e.Problems), len(want), msg)
	}
	if _, err := Parse("r.yaml", []byte("routes: [\n")); err == nil || !strings.Contains(err.Error(), "not valid YAML") {
		t.Fatalf("broken YAML: %v", err)
	}
}

func TestParseRemoteEncoder(t *testing.T) {
	f, err := Parse("r.yaml", []byte(`heads: h
default: general
tier2:
  encoder: {url: "https://tei:8080", model: use-lite-int8, pooling: none, dims: 512, api_key_env: TEI_KEY, ca_file: ca.pem, cert_file: gw.pem, key_file: gw-key.pem, timeout: 2s, failures: 3, cooldown: 10s}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := RemoteEncoder{URL: "https://tei:8080", Model: "use-lite-int8", Pooling: "none", Dims: 512, APIKeyEnv: "TEI_KEY", CAFile: "ca.pem",
		CertFile: "gw.pem", KeyFile: "gw-key.pem", Timeout: 2 * time.Second, Failures: 3, Cooldown: 10 * time.Second}
	if f.Tier2.Encoder == nil || *f.Tier2.Encoder != want {
		t.Fatalf("tier2.encoder = %+v, want %+v", f.Tier2.Encoder, want)
	}
	_, err = Parse("r.yaml", []byte(`heads: h
default: general
tier2:
  encoder: {url: "tei:8080", key: x, cert_file: gw.pem}
`))
	for _, w := range []string{
		`r.yaml:4:12: tier2.encoder: cert_file and key_file go together`,
		`r.yaml:4:30: tier2.encoder.key: unknown field`,
		`r.yaml:4:12: tier2.encoder.url: want http:// or https://, got "tei:8080"`,
		`r.yaml:4:12: tier2.encoder: a remote encoder needs a model`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Parse: %v, want the problem %q", err, w)
		}
	}
}

func TestCompileChecksReferences(t *testing.T) {
	f, err := Parse("r.yaml", []byte(`heads: h
classes:
  astrology: {}
  health: {requires_tier2: true}
routes:
  - {name: legal, when: {class: law}, pool: legal}
  - {name: legal, when: {class: law, min_score: 0.9}, pool: legal}
  - {name: medical, when: {class: health}, pool: medical, fallback: nowhere}
  - {name: coding, when: {class: code}, pool: kode}
  - {name: fast, when: {model: gpt-4o, class: code}, pool: code}
  - {name: any, pool: general}
  - {name: never, when: {class: other}, pool: general}
default: nope
tier2: {enabled: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(f, Env{Pools: pools, Heads: testHeads(false, nil), Tier1: &classifiertest.Fixed{}})
	if err == nil {
		t.Fatal("Compile accepted broken references")
	}
	msg := err.Error()
	for _, w := range []string{
		`r.yaml:13:10: default: no pool named "nope"`,
		`r.yaml:3:3: classes: "astrology" is not a class of the heads`,
		`routes[1]: route name "legal" is also routes[0]'s`,
		`r.yaml:7:5: routes[1] (legal) can never match: routes[0] (legal) takes every request it would`,
		`r.yaml:8:69: routes[2].fallback: no pool named "nowhere"`,
		`routes[3].pool: no pool named "kode"`,
		`routes[4].when.model: "gpt-4o" is not an alias`,
		`routes[6] (never) can never match: routes[5] (any) takes every request it would`,
		`tier2.enabled: the heads in /heads have no tier-2 head`,
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("missing %q in:\n%s", w, msg)
		}
	}
	// requires_tier2 with tier 2 off makes its routes unreachable.
	f, _ = Parse("r.yaml", []byte("classes: {health: {requires_tier2: true}}\nroutes: [{name: m, when: {class: health}, pool: medical}]\ndefault: general\n"))
	if _, err := Compile(f, Env{Pools: pools, Heads: testHeads(false, nil), Tier1: &classifiertest.Fixed{}}); err == nil ||
		!strings.Contains(err.Error(), `class "health" requires tier 2 but tier2.enabled is false`) {
		t.Fatalf("requires_tier2 without tier 2: %v", err)
	}
}

const cascade = `alias: [auto, auto-fast]
heads: h
floors: {tier1: 0.6, tier2: 0.5}
classes:
  law: {floors: {tier1: 0.8, tier2: 0.7}}
  health: {requires_tier2: true}
routes:
  - {name: vip, when: {headers: {x-tier: gold}}, pool: vip}
  - {name: legal, when: {class: law}, pool: legal, fallback: general}
  - {name: medical, when: {class: health, min_score: 0.7}, pool: medical}
  - {name: coding-strict, when: {class: code, min_score: 0.9, model: auto-fast}, pool: code}
  - {name: coding, when: {class: code}, pool: code}
default: general
tier2: {enabled: true, budget: 50ms}
`

func TestDecideCascade(t *testing.T) {
	t1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "deposit", Class: "law", Score: 0.9},
		{Contains: "lease", Class: "law", Score: 0.7}, // below law's 0.8
		{Contains: "rash", Class: "health", Score: 0.95},
		{Contains: "itch", Class: "health", Score: 0.95},
		{Contains: "rebase", Class: "code", Score: 0.85},
		{Contains: "soup", Class: "other", Score: 0.99},
		{Contains: "tie", Class: "code", Score: 0.6}, // exactly the default floor
	}}
	t2 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "slow", Class: "law", Score: 0.99, Delay: time.Second},
		{Contains: "lease", Class: "law", Score: 0.75},
		{Contains: "rash", Class: "health", Score: 0.8},
		{Contains: "itch", Class: "health", Score: 0.6}, // above health's tier-2 floor, below the route's 0.7
	}}
	var loads atomic.Int64
	s := compile(t, cascade, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) {
		loads.Add(1)
		return t2, nil
	}})
	if !s.NeedsTier2() {
		t.Fatal("NeedsTier2 = false with routed floors and tier 2 enabled")
	}
	for _, tc := range []struct {
		name, model, text string
		hdr               []string
		want              Decision
	}{
		{"explicit model", "llama-3", "deposit", nil, Decision{Reason: ReasonExplicitModel}},
		{"confident", "auto", "my deposit", nil, Decision{Pool: "legal", Fallback: "general", Route: "legal", Class: "law", Score: 0.9, Tier: 1, Reason: ReasonTier1Confident, Mass: 0.9, Floor: 0.8}},
		{"second alias", "auto-fast", "git rebase", nil, Decision{Pool: "code", Route: "coding", Class: "code", Score: 0.85, Tier: 1, Reason: ReasonTier1Confident, Mass: 0.85, Floor: 0.6}},
		{"at the floor", "auto", "tie", nil, Decision{Pool: "code", Route: "coding", Class: "code", Score: 0.6, Tier: 1, Reason: ReasonTier1Confident, Mass: 0.6, Floor: 0.6}},
		{"header rule first", "auto", "my deposit", []string{"X-Tier", "gold"}, Decision{Pool: "vip", Route: "vip", Reason: ReasonRule}},
		{"no route for the class", "auto", "tomato soup", nil, Decision{Pool: "general", Class: "other", Score: 0.99, Tier: 1, Reason: ReasonDefault}},
		{"below floor, tier 2 confident", "auto", "my lease", nil, Decision{Pool: "legal", Fallback: "general", Route: "legal", Class: "law", Score: 0.75, Tier: 2, Reason: ReasonBelowFloor, Mass: 0.75, Floor: 0.7}},
		{"requires tier 2, confident", "auto", "a rash", nil, Decision{Pool: "medical", Route: "medical", Class: "health", Score: 0.8, Tier: 2, Reason: ReasonClassRequiresTier2, Mass: 0.8, Floor: 0.7}},
		// Tier 2 clears health's floor (0.5) but not the route's min_score
		// (0.7): the default pool, with tier 2's verdict.
		{"requires tier 2, tier 2 below the route minimum", "auto", "an itch", nil, Decision{Pool: "general", Class: "health", Score: 0.6, Tier: 2, Reason: ReasonClassRequiresTier2}},
		// Past the budget: tier 1's best route, its mass above the 0.5
		// fallback floor though below the route's own.
		{"tier 2 timeout", "auto", "lease slow", nil, Decision{Pool: "legal", Fallback: "general", Route: "legal", Class: "law", Score: 0.7, Tier: 1, Reason: ReasonTier2Timeout, Mass: 0.7, Floor: 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := s.Decide(context.Background(), input(t, tc.model, tc.text, tc.hdr...))
			if got != tc.want {
				t.Fatalf("Decide(%s %q) = %+v\nwant %+v", tc.model, tc.text, got, tc.want)
			}
		})
	}
	if loads.Load() != 1 {
		t.Fatalf("tier 2 loaded %d times, want once", loads.Load())
	}
	// Tier 2 that cannot run: the default pool, said so.
	s2 := compile(t, cascade, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) {
		return nil, fmt.Errorf("no model: %w", classifier.ErrUnavailable)
	}})
	if d := s2.Decide(context.Background(), input(t, "auto", "my lease")); d.Pool != "legal" || d.Reason != ReasonTier2Unavailable || d.Floor != 0.5 {
		t.Fatalf("tier 2 unavailable: %+v", d)
	}
	// The trace tells the whole story.
	tr := s.ExplainDecision(context.Background(), input(t, "auto", "my lease"))
	var legal *RouteTrace
	for i := range tr.Routes {
		if tr.Routes[i].Name == "legal" {
			legal = &tr.Routes[i]
		}
	}
	if tr.Tier1 == nil || tr.Tier2 == nil || legal == nil || legal.Floor1 != 0.8 || legal.Floor2 != 0.7 ||
		legal.Mass1 != 0.7 || legal.Mass2 != 0.75 || tr.Decision.Route != "legal" || tr.Text != "my lease" {
		t.Fatalf("trace = %+v", tr)
	}
}

func TestTier2NeverLoadedWhenNotNeeded(t *testing.T) {
	t1 := &classifiertest.Fixed{Default: classifier.Scored{Class: "law", Score: 0.3}} // below law's floor, above escalate_at
	loaded := false
	load := func() (classifier.Classifier, error) { loaded = true; return &classifiertest.Fixed{}, nil }
	// Tier 2 off: below-floor requests go to the default pool; nothing loads.
	s := compile(t, "routes: [{name: l, when: {class: law}, pool: legal}]\ndefault: general\n", Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: load})
	if s.NeedsTier2() {
		t.Fatal("NeedsTier2 = true with tier 2 disabled")
	}
	if d := s.Decide(context.Background(), input(t, "auto", "x")); d.Reason != ReasonBelowFloor || d.Pool != "general" {
		t.Fatalf("below floor without tier 2: %+v", d)
	}
	// Tier 2 on, but no route names a class: nothing can escalate.
	s = compile(t, "routes: [{name: v, when: {headers: {x-a: b}}, pool: vip}]\ndefault: general\ntier2: {enabled: true, warmup: true}\n", Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: load})
	if s.NeedsTier2() || s.Warmup() != nil {
		t.Fatal("NeedsTier2 = true with no class route")
	}
	s.Decide(context.Background(), input(t, "auto", "x"))
	if loaded || s.Tier2State() != "off" {
		t.Fatalf("tier 2 was loaded although no decision can need it (state %q)", s.Tier2State())
	}
	// Warmup loads it up front when asked and needed.
	s = compile(t, "routes: [{name: l, when: {class: law}, pool: legal}]\ndefault: general\ntier2: {enabled: true, warmup: true}\n", Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: load})
	if err := s.Warmup(); err != nil || !loaded {
		t.Fatalf("Warmup: %v, loaded %v", err, loaded)
	}
}

func TestFloorPrecedence(t *testing.T) {
	f := func(v float32) *float32 { return &v }
	heads := testHeads(false, map[string]classifier.Floors{"law": {Tier1: f(0.3)}, "code": {Tier1: f(0.4)}})
	s := compile(t, `floors: {tier1: 0.7}
classes: {code: {floors: {tier1: 0.9}}}
routes:
  - {name: l, when: {class: law}, pool: legal}
  - {name: c, when: {class: code}, pool: code}
  - {name: h, when: {class: health}, pool: medical}
default: general
`, Env{Heads: heads, Tier1: &classifiertest.Fixed{}})
	for class, want := range map[string]float32{"law": 0.3, "code": 0.9, "health": 0.7, "other": 0.7} {
		if got := s.info[s.index[class]].floor1; got != want {
			t.Errorf("tier-1 floor of %s = %v, want %v (file class > heads > file default)", class, got, want)
		}
	}
	s = compile(t, "routes: [{name: l, when: {class: law}, pool: legal}]\ndefault: general\n", Env{Heads: testHeads(false, nil), Tier1: &classifiertest.Fixed{}})
	if got := s.info[s.index["law"]].floor1; got != 0.5 {
		t.Errorf("built-in default floor = %v, want 0.5", got)
	}
}

func TestConversationWindow(t *testing.T) {
	s := compile(t, "window: {user_turns: 2, system: true, max_bytes: 100}\nroutes: [{name: l, when: {class: law}, pool: legal}]\ndefault: general\n",
		Env{Heads: testHeads(false, nil), Tier1: &classifiertest.Fixed{}})
	if w := s.Window(); w != (Window{UserTurns: 2, System: true, MaxBytes: 100}) {
		t.Fatalf("Window() = %+v", w)
	}
	for _, tc := range []struct{ in, want string }{
		{"short", "short"},
		{strings.Repeat("a", 120), strings.Repeat("a", 100)},
		{strings.Repeat("a", 99) + "é", strings.Repeat("a", 99)}, // never inside a rune
	} {
		if got := s.Window().Clip(tc.in); got != tc.want {
			t.Errorf("Clip(%d bytes) = %d bytes %q", len(tc.in), len(got), got)
		}
	}
}

func TestSessions(t *testing.T) {
	t1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "rebase", Class: "code", Score: 0.95},
		{Contains: "commit it", Class: "other", Score: 0.4},
		{Contains: "deposit", Class: "law", Score: 0.95},
	}, Default: classifier.Scored{Class: "law", Score: 0.2}}
	s := compile(t, `routes:
  - {name: coding, when: {class: code}, pool: code}
  - {name: legal, when: {class: law}, pool: legal}
default: general
session: {header: x-session-id, turns: 2, size: 2}
`, Env{Heads: testHeads(false, nil), Tier1: t1})
	ctx := context.Background()
	store := NewSessions(s.Sessions())
	decide := func(text, id string) Decision {
		sig := input(t, "auto", text)
		sig.Session, sig.Sessions = id, store
		return s.Decide(ctx, sig)
	}
	steps := []struct {
		text, wantPool, wantReason string
	}{
		{"how do I rebase", "code", ReasonTier1Confident},
		{"now commit it", "code", ReasonSession},  // a follow-up does not bounce to the default
		{"and push", "code", ReasonSession},       // below law's floor: still the session's route
		{"and then", "general", ReasonBelowFloor}, // turns used up
		{"my deposit", "legal", ReasonTier1Confident},
		{"commit it", "legal", ReasonSession}, // a confident new class moved the session
	}
	for i, st := range steps {
		d := decide(st.text, "s1")
		if d.Pool != st.wantPool || d.Reason != st.wantReason {
			t.Fatalf("step %d %q: %+v, want %s/%s", i, st.text, d, st.wantPool, st.wantReason)
		}
	}
	// Without a session id nothing sticks; the table is bounded.
	if d := decide("now commit it", ""); d.Reason != ReasonDefault {
		t.Fatalf("no session id: %+v", d)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		decide("rebase", id)
	}
	if n := store.Len(); n != 2 {
		t.Fatalf("%d sessions kept, size is 2", n)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(cascade))
	f.Add([]byte("routes: [{name: a, when: {class: [x, y]}}]\ndefault: p\n"))
	f.Add([]byte("alias: [a, {b: c}]\nwindow: {user_turns: 9999999999999}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse("f.yaml", b)
		if err == nil && file.Default == "" {
			t.Fatal("Parse accepted a file without a default")
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 {
				t.Fatalf("Parse error %v is not a problem list", err)
			}
		}
	})
}

// BenchmarkDecide measures what the rules add to classification: the
// conversation text, route matching, floors (tier 1 is a fixed answer).
func BenchmarkDecide(b *testing.B) {
	t1 := constant{Class: "code", Score: 0.9}
	f, _ := Parse("r.yaml", []byte(cascade))
	s, err := Compile(f, Env{Pools: pools, Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return t1, nil }})
	if err != nil {
		b.Fatal(err)
	}
	var r classifier.Result
	if n := testing.AllocsPerRun(10, func() { t1.Classify(context.Background(), "x", &r) }); n != 0 {
		b.Fatalf("the stand-in classifier allocates %v", n)
	}
	in := input(b, "auto", "How do I rebase my feature branch onto main without losing my commits?")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d := s.Decide(ctx, in); d.Route != "coding" {
			b.Fatal(d)
		}
	}
}

// constant is a classifier that costs nothing and keeps nothing.
type constant classifier.Scored

func (c constant) Classify(_ context.Context, _ string, r *classifier.Result) error {
	r.Class, r.Score = c.Class, c.Score
	r.Top = append(r.Top[:0], classifier.Scored(c))
	return nil
}

func TestShadowCompile(t *testing.T) {
	const base = "alias: auto\nheads: h\nroutes:\n  - {name: coding, when: {class: code}, pool: code}\ndefault: general\n"
	tier1 := constant{"code", 0.9}
	shadow := compile(t, base, Env{Heads: testHeads(false, nil), Tier1: tier1})
	for _, tc := range []struct {
		name, extra string
		shadow      *Set
		want        string
	}{
		{"not loaded", "shadow: {rules: c.yaml}\n", nil, "shadow.rules: c.yaml was not loaded"},
		{"not named", "", shadow, "the file names none"},
		{"zero sample", "shadow: {rules: c.yaml, sample: 0}\n", shadow, "shadow.sample: 0 decides nothing"},
		{"shadow of a shadow", "shadow: {rules: c.yaml}\n", compile(t, base+"shadow: {rules: x.yaml}\n", Env{Heads: testHeads(false, nil), Tier1: tier1, Shadow: shadow}), "a shadow cannot have one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseFile(write(t, base+tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Compile(f, Env{Pools: pools, Heads: testHeads(false, nil), Tier1: tier1, Shadow: tc.shadow})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile() = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := ParseFile(write(t, base+"shadow: {rules: c.yaml, sample: 2, extra: 1}\n")); err == nil ||
		!strings.Contains(err.Error(), "between 0 and 1") || !strings.Contains(err.Error(), "extra") {
		t.Fatalf("ParseFile() = %v", err)
	}

	// The shadow decides requests naming the primary's alias, even when its
	// own alias differs, and the primary exposes it with its sample and log.
	cand := compile(t, strings.Replace(base, "alias: auto", "alias: next", 1), Env{Heads: testHeads(false, nil), Tier1: tier1})
	p := write(t, base+"shadow: {rules: c.yaml, sample: 0.25, log: /var/log/shadow.jsonl}\n")
	f, err := ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(f, Env{Pools: pools, Heads: testHeads(false, nil), Tier1: tier1, Shadow: cand})
	if err != nil {
		t.Fatal(err)
	}
	if got, sample := s.Shadow(); got != cand || sample != 0.25 || s.ShadowLog() != "/var/log/shadow.jsonl" {
		t.Fatalf("Shadow() = %p %v, log %q", got, sample, s.ShadowLog())
	}
	if d := cand.DecideShadow(context.Background(), input(t, "auto", "x")); d.Pool != "code" || d.Reason != ReasonTier1Confident {
		t.Fatalf("DecideShadow = %+v", d)
	}
	if d := cand.Decide(context.Background(), input(t, "auto", "x")); d.Reason != ReasonExplicitModel {
		t.Fatalf("Decide on a name that is not the set's alias = %+v", d)
	}
}

// blocking is a tier 2 whose Classify ignores its context and returns only
// when released, as an ONNX Runtime Run does.
type blocking struct {
	release chan struct{}
	verdict classifier.Scored
	err     error
}

func (b *blocking) Classify(_ context.Context, _ string, r *classifier.Result) error {
	<-b.release
	if b.err != nil {
		return b.err
	}
	r.Class, r.Score, r.Tier = b.verdict.Class, b.verdict.Score, 2
	r.Top = append(r.Top[:0], b.verdict)
	return nil
}

// TestTier2Budget: the budget bounds the request, not tier 2: a Run that
// cannot be interrupted, or a model still loading, leaves the request to
// tier 1's verdict (tier2_timeout) while tier 2 goes on; a tier 2 that
// fails says so (tier2_error).
func TestTier2Budget(t *testing.T) {
	// Below law's 0.8 and the 0.5 fallback floor: without tier 2's answer,
	// the default pool.
	t1 := &classifiertest.Fixed{Default: classifier.Scored{Class: "law", Score: 0.45}}
	body := strings.Replace(cascade, "budget: 50ms", "budget: 20ms", 1)

	// A Run past the budget: the decision does not wait for it.
	slow := &blocking{release: make(chan struct{}), verdict: classifier.Scored{Class: "law", Score: 0.9}}
	s := compile(t, body, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return slow, nil }})
	d := s.Decide(context.Background(), input(t, "auto", "my lease"))
	close(slow.release) // only now can the Run end: Decide returned without it
	if d.Reason != ReasonTier2Timeout || d.Pool != "general" || d.Tier != 1 {
		t.Fatalf("Run past the budget: %+v", d)
	}
	if d := s.Decide(context.Background(), input(t, "auto", "my lease")); d.Reason != ReasonBelowFloor || d.Tier != 2 || d.Pool != "legal" {
		t.Fatalf("after the Run is released: %+v", d)
	}

	// A model still loading: the first requests do not wait for it.
	loading := make(chan struct{})
	fast := &blocking{release: make(chan struct{}), verdict: classifier.Scored{Class: "law", Score: 0.9}}
	close(fast.release)
	s = compile(t, body, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) {
		<-loading
		return fast, nil
	}})
	if st := s.Tier2State(); st != "not loaded" {
		t.Fatalf("before any decision: tier 2 %q", st)
	}
	if d := s.Decide(context.Background(), input(t, "auto", "my lease")); d.Reason != ReasonTier2Timeout || s.Tier2Loaded() || s.Tier2State() != "loading" {
		t.Fatalf("while loading: %+v (state %q)", d, s.Tier2State())
	}
	close(loading)
	testenv.Wait(t, s.Tier2Loaded, "tier 2 loaded")
	if d := s.Decide(context.Background(), input(t, "auto", "my lease")); d.Tier != 2 || d.Pool != "legal" || s.Tier2State() != "loaded" {
		t.Fatalf("once loaded: %+v (state %q)", d, s.Tier2State())
	}

	// A failing Run, and a model that failed to load.
	broken := &blocking{release: make(chan struct{}), err: errors.New("onnx: run failed")}
	close(broken.release)
	s = compile(t, body, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return broken, nil }})
	if d := s.Decide(context.Background(), input(t, "auto", "my lease")); d.Reason != ReasonTier2Error || d.Pool != "general" {
		t.Fatalf("failing Run: %+v", d)
	}
	s = compile(t, body, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) {
		return nil, errors.New("model.onnx: sha256 mismatch")
	}})
	if d := s.Decide(context.Background(), input(t, "auto", "my lease")); d.Reason != ReasonTier2Unavailable || s.Tier2State() != "failed" {
		t.Fatalf("failed load: %+v (state %q)", d, s.Tier2State())
	}

	// A tier that would not have finished in time, and did not start.
	shed := &blocking{release: make(chan struct{}), err: fmt.Errorf("onnx: %w", classifier.ErrShed)}
	close(shed.release)
	s = compile(t, body, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return shed, nil }})
	if d := s.Decide(context.Background(), input(t, "auto", "my lease")); d.Reason != ReasonTier2Shed || d.Pool != "general" {
		t.Fatalf("shed: %+v", d)
	}

	// A remote encoder that kept failing, left alone for its cooldown.
	down := &blocking{release: make(chan struct{}), err: fmt.Errorf("onnx: %w", classifier.ErrEncoderDown)}
	close(down.release)
	s = compile(t, body, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return down, nil }})
	if d := s.Decide(context.Background(), input(t, "auto", "my lease")); d.Reason != ReasonTier2EncoderDown || d.Pool != "general" {
		t.Fatalf("encoder down: %+v", d)
	}

	// The client leaves while tier 2 runs: the reason says so, not an error.
	slow = &blocking{release: make(chan struct{}), verdict: classifier.Scored{Class: "law", Score: 0.9}}
	defer close(slow.release)
	s = compile(t, body, Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: func() (classifier.Classifier, error) { return slow, nil }})
	if err := s.LoadTier2(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // gone before tier 2 answers (before it starts: the same to the decision, and no race with the budget)
	if d := s.Decide(ctx, input(t, "auto", "my lease")); d.Reason != ReasonClientGone {
		t.Fatalf("client gone: %+v", d)
	}
}

// tier2.cache sizes the tier's result cache, and 0 turns it off.
func TestTier2CacheSetting(t *testing.T) {
	t1 := &classifiertest.Fixed{Default: classifier.Scored{Class: "law", Score: 0.3}}
	load := func() (classifier.Classifier, error) { return &classifiertest.Fixed{}, nil }
	for _, tc := range []struct {
		setting string
		hits    uint64
	}{{"", 1}, {", cache: 0", 0}, {", cache: 8", 1}} {
		s := compile(t, "routes: [{name: l, when: {class: law}, pool: legal}]\ndefault: general\ntier2: {enabled: true"+tc.setting+"}\n",
			Env{Heads: testHeads(true, nil), Tier1: t1, Tier2: load})
		var r classifier.Result
		for range 2 {
			if err := s.tier2.ClassifyWithin(context.Background(), 0, "the same text", &r); err != nil {
				t.Fatal(err)
			}
		}
		if hits, _ := s.tier2.CacheStats(); hits != tc.hits {
			t.Errorf("tier2 {enabled: true%s}: %d cache hits, want %d", tc.setting, hits, tc.hits)
		}
	}
}
