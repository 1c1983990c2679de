package rules

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

const splitBase = "alias: auto\nheads: h\nroutes:\n  - {name: coding, when: {class: code}, pool: code}\ndefault: general\n"

func TestSplitParse(t *testing.T) {
	for _, tc := range []struct{ name, section, want string }{
		{"weight 0", "split: {rules: c.yaml, weight: 0}\n", "split.weight: want a share strictly between 0 and 1"},
		{"weight 1", "split: {rules: c.yaml, weight: 1}\n", "split.weight: want a share strictly between 0 and 1"},
		{"weight 2", "split: {rules: c.yaml, weight: 2}\n", "want a number between 0 and 1"},
		{"no weight", "split: {rules: c.yaml}\n", "split.weight: required"},
		{"no rules", "split: {weight: 0.5}\n", "split.rules: required"},
		{"one name", "split: {rules: c.yaml, weight: 0.5, names: [x]}\n", "split.names: want two names"},
		{"same names", "split: {rules: c.yaml, weight: 0.5, names: [x, x]}\n", "both arms are named"},
		{"bad name", "split: {rules: c.yaml, weight: 0.5, names: [x, \"B arm\"]}\n", "want lower-case letters"},
		{"unknown field", "split: {rules: c.yaml, weight: 0.5, wieght: 1}\n", "split.wieght: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(splitBase+tc.section))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse() = %v, want %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "rules.yaml:6:") {
				t.Fatalf("Parse() = %v, want the split's line (6)", err)
			}
		})
	}
	f, err := Parse("/etc/triage/rules.yaml", []byte(splitBase+"split: {rules: c.yaml, weight: 0.2, log: split.jsonl, names: [control, candidate]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Split{Rules: "c.yaml", Weight: 0.2, Log: "split.jsonl", Names: [2]string{"control", "candidate"}}); f.Split != want {
		t.Fatalf("Split = %+v, want %+v", f.Split, want)
	}
}

func TestSplitCompile(t *testing.T) {
	tier1 := constant{"code", 0.9}
	env := func(e Env) Env { e.Heads, e.Tier1 = testHeads(false, nil), tier1; return e }
	cand := compile(t, strings.Replace(splitBase, "pool: code", "pool: legal", 1), env(Env{}))
	other := compile(t, splitBase, env(Env{}))
	elsewhere := compile(t, strings.Replace(splitBase, "pool: code", "pool: gpu", 1), env(Env{Pools: map[string]bool{"gpu": true, "general": true}}))
	nested := compile(t, splitBase+"split: {rules: x.yaml, weight: 0.5}\n", env(Env{Split: other}))
	shadowed := compile(t, splitBase+"shadow: {rules: x.yaml}\n", env(Env{Shadow: other}))
	for _, tc := range []struct {
		name, extra   string
		split, shadow *Set
		want          string
	}{
		{"not loaded", "split: {rules: c.yaml, weight: 0.5}\n", nil, nil, "split.rules: c.yaml was not loaded"},
		{"not named", "", cand, nil, "split: a split rule set was given but the file names none"},
		{"nested split", "split: {rules: c.yaml, weight: 0.5}\n", nested, nil, "has a split of its own"},
		{"arm with a shadow", "split: {rules: c.yaml, weight: 0.5}\n", shadowed, nil, "has a shadow"},
		{"other pools", "split: {rules: c.yaml, weight: 0.5}\n", elsewhere, nil, `routes to pool "gpu", which this gateway does not have`},
		{"shadow with a split", "shadow: {rules: s.yaml}\n", nil, nested, "a shadow cannot have one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseFile(write(t, splitBase+tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Compile(f, env(Env{Pools: pools, Split: tc.split, Shadow: tc.shadow}))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile() = %v, want %q", err, tc.want)
			}
		})
	}

	// A split and a shadow together; the B arm decides requests naming the
	// primary's alias, the A arm as ever.
	p := write(t, splitBase+"shadow: {rules: s.yaml}\nsplit: {rules: c.yaml, weight: 0.3, log: logs/split.jsonl}\n")
	f, err := ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cand = compile(t, strings.NewReplacer("pool: code", "pool: legal", "alias: auto", "alias: next").Replace(splitBase), env(Env{}))
	s, err := Compile(f, env(Env{Pools: pools, Split: cand, Shadow: other}))
	if err != nil {
		t.Fatal(err)
	}
	a := s.Split()
	if a == nil || a.Candidate() != cand || a.Weight() != 0.3 || a.Name(ArmA) != "a" || a.Name(ArmB) != "b" || a.Name(ArmNone) != "" ||
		a.Log() != strings.TrimSuffix(p, "rules.yaml")+"logs/split.jsonl" {
		t.Fatalf("Split() = %+v", a)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		arm  Arm
		pool string
	}{{ArmNone, "code"}, {ArmA, "code"}, {ArmB, "legal"}} {
		sig := input(t, "auto", "x")
		sig.Arm = tc.arm
		if d := s.Decide(ctx, sig); d.Pool != tc.pool || d.Route != "coding" {
			t.Errorf("Decide(arm %d) = %+v, want pool %s", tc.arm, d, tc.pool)
		}
	}
	sig := input(t, "gpt-4", "x")
	sig.Arm = ArmB
	if d := s.Decide(ctx, sig); d.Reason != ReasonExplicitModel {
		t.Errorf("Decide(arm b, not an alias) = %+v", d)
	}
	if got := other.Split(); got != nil {
		t.Errorf("Split() without a split = %+v", got)
	}
}

// TestSplitAssignment: over many keys the B arm's share is the weight; a
// key's arm never changes while the weight stays; raising the weight only
// moves keys from A to B; the kind of key is part of the hash.
func TestSplitAssignment(t *testing.T) {
	arms := func(w float64, names ...string) *Arms {
		f := &File{Path: "r.yaml", Split: Split{Rules: "c.yaml", Weight: w}, pos: map[string]Pos{}}
		if len(names) == 2 {
			f.Split.Names = [2]string{names[0], names[1]}
		}
		a := compileSplit(f, Env{Split: &Set{}, Pools: map[string]bool{"": true}}, func(Pos, string, ...any) { t.Fatal("bad") })
		if a == nil {
			t.Fatal("no arms")
		}
		return a
	}
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d@example.com", i)
	}
	weights := []float64{0.01, 0.05, 0.2, 0.5, 0.8, 0.99}
	prev := make([]Arm, n)
	for wi, w := range weights {
		a := arms(w)
		b := 0
		for i, k := range keys {
			arm := a.Assign(ByPrincipal, k)
			if arm != a.Assign(ByPrincipal, k) || arm != arms(w).Assign(ByPrincipal, k) {
				t.Fatalf("weight %v: %q is not sticky", w, k)
			}
			if arm == ArmB {
				b++
			}
			if wi > 0 && prev[i] == ArmB && arm != ArmB {
				t.Fatalf("raising the weight to %v moved %q from b to a", w, k)
			}
			prev[i] = arm
		}
		// Binomial: 5 standard deviations.
		share, tol := float64(b)/n, 5*math.Sqrt(w*(1-w)/n)
		if math.Abs(share-w) > tol {
			t.Errorf("weight %v: b took %.4f of %d keys (tolerance %.4f)", w, share, n, tol)
		}
	}
	// Session keys that look alike (fingerprints share a prefix) spread too.
	a := arms(0.5)
	b := 0
	for i := range n {
		if a.Assign(BySession, fmt.Sprintf("#%d", i)) == ArmB {
			b++
		}
	}
	if share := float64(b) / n; math.Abs(share-0.5) > 0.01 {
		t.Errorf("session keys: b took %.4f", share)
	}
	// The kind of key and the arms' names are hashed: a principal and a
	// session of the same text, or renamed arms, are drawn apart.
	differ, renamed := 0, 0
	c := arms(0.5, "x", "y")
	for _, k := range keys[:1000] {
		if a.Assign(ByPrincipal, k) != a.Assign(BySession, k) {
			differ++
		}
		if a.Assign(ByPrincipal, k) != c.Assign(ByPrincipal, k) {
			renamed++
		}
	}
	if differ < 400 || renamed < 400 {
		t.Errorf("of 1000 keys, %d differ between principal and session, %d between names", differ, renamed)
	}
}

// Assigning an arm allocates nothing: it runs on every request of a split.
func TestSplitAssignAllocs(t *testing.T) {
	f := &File{Path: "r.yaml", Split: Split{Rules: "c.yaml", Weight: 0.3}, pos: map[string]Pos{}}
	a := compileSplit(f, Env{Split: &Set{}, Pools: map[string]bool{"": true}}, func(Pos, string, ...any) { t.Fatal("bad") })
	if a == nil {
		t.Fatal("no arms")
	}
	key := "user-7@example.com"
	if allocs := testing.AllocsPerRun(100, func() { a.Assign(ByPrincipal, key) }); allocs != 0 {
		t.Errorf("Assign allocates %v times", allocs)
	}
}

// TestSplitByRequestParse: split.by_request is a boolean, off by default.
func TestSplitByRequestParse(t *testing.T) {
	f, err := Parse("rules.yaml", []byte(splitBase+"split: {rules: c.yaml, weight: 0.5}\n"))
	if err != nil || f.Split.ByRequest {
		t.Fatalf("Parse() = %+v, %v; want by_request off", f.Split, err)
	}
	if f, err = Parse("rules.yaml", []byte(splitBase+"split: {rules: c.yaml, weight: 0.5, by_request: true}\n")); err != nil || !f.Split.ByRequest {
		t.Fatalf("Parse() = %+v, %v; want by_request on", f.Split, err)
	}
	if _, err = Parse("rules.yaml", []byte(splitBase+"split: {rules: c.yaml, weight: 0.5, by_request: sometimes}\n")); err == nil || !strings.Contains(err.Error(), "rules.yaml:6:") {
		t.Fatalf("Parse(by_request: sometimes) = %v, want an error at line 6", err)
	}
}
