package rules

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"

	yaml "go.yaml.in/yaml/v3"
)

// Split configures a live A/B split: a share of the traffic these rules
// route is decided by a second rules file instead (the B arm), and each
// arm's decisions and outcomes are counted and logged apart. Unlike a
// shadow, the B arm routes real requests.
type Split struct {
	// Rules is the B arm's rules file (relative to this one). Empty: no
	// split.
	Rules string
	// Weight is the share of callers the B arm takes, in (0, 1).
	Weight float64
	// Log is the JSONL file one line per split request is appended to
	// (relative to this file). Empty: the arms are compared in metrics
	// only.
	Log string
	// Names are the arms' names, A's (these rules) then B's, as they
	// appear in metrics, the log and the x-triage-arm header. Default
	// a and b. Assignment hashes them too: renaming the arms reshuffles
	// who is on which.
	Names [2]string
	// ByRequest assigns a request that has neither a principal nor a
	// conversation (a session header or a fingerprint) by its request id:
	// each such request is drawn anew, so one caller's requests land on
	// both arms. Off (the default), such requests are decided by these
	// rules (A's) outside the split: not counted on either arm, not
	// logged, counted in triage_split_unassigned_total. Loading rules with
	// it on logs a warning.
	ByRequest bool
}

// Arm is a side of a live split.
type Arm uint8

// The arms. ArmNone: the rules have no split.
const (
	ArmNone Arm = iota
	ArmA
	ArmB
)

// Keys the assignment hashes, sticky first.
const (
	ByPrincipal = "principal" // the caller access control named
	BySession   = "session"   // the session header's value, else the conversation's fingerprint
	ByRequest   = "request"   // nothing sticky: the request id (each request drawn anew)
)

var armName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,31}$`)

// parseSplit reads the split section.
func (p *parser) parseSplit(n *yaml.Node, f *File) {
	f.pos["split"] = pos(n)
	weight := false
	p.mapping(n, "split", map[string]func(*yaml.Node){
		"rules": func(n *yaml.Node) { f.Split.Rules = p.str(n); f.pos["split.rules"] = pos(n) },
		"weight": func(n *yaml.Node) {
			weight = true
			f.Split.Weight = p.unit(n)
			if f.Split.Weight <= 0 || f.Split.Weight >= 1 {
				p.bad(n, fmt.Sprintf("split.weight: want a share strictly between 0 and 1 (the B arm's), got %q; without a split remove the section, for all traffic make the candidate the rules", n.Value))
			}
		},
		"log":        func(n *yaml.Node) { f.Split.Log = p.str(n) },
		"by_request": func(n *yaml.Node) { f.Split.ByRequest = p.boolean(n); f.pos["split.by_request"] = pos(n) },
		"names": func(n *yaml.Node) {
			names := p.strs(n)
			if len(names) != 2 {
				p.bad(n, fmt.Sprintf("split.names: want two names, A's then B's, got %d", len(names)))
				return
			}
			for _, s := range names {
				if !armName.MatchString(s) {
					p.bad(n, fmt.Sprintf("split.names: %q: want lower-case letters, digits, '_', '.' or '-', up to 32", s))
					return
				}
			}
			if names[0] == names[1] {
				p.bad(n, fmt.Sprintf("split.names: both arms are named %q", names[0]))
				return
			}
			f.Split.Names = [2]string{names[0], names[1]}
		},
	})
	if f.Split.Rules == "" {
		p.bad(n, "split.rules: required (the B arm's rules file)")
	}
	if !weight {
		p.bad(n, "split.weight: required (the B arm's share of callers, between 0 and 1)")
	}
}

// Arms is a compiled split: immutable, safe for concurrent use.
type Arms struct {
	b         *Set
	weight    float64
	names     [2]string
	log       string
	salt      uint64
	byRequest bool
}

// compileSplit checks the split section against env and builds its Arms
// (nil without a split).
func compileSplit(f *File, env Env, bad func(Pos, string, ...any)) *Arms {
	sp := f.Split
	switch {
	case env.Shadow != nil && env.Shadow.split != nil:
		bad(f.pos["shadow.rules"], "shadow.rules: %s has a split; a shadow cannot have one", f.Shadow.Rules)
	}
	switch {
	case sp.Rules != "" && env.Split == nil:
		bad(f.pos["split.rules"], "split.rules: %s was not loaded", sp.Rules)
		return nil
	case sp.Rules == "" && env.Split != nil:
		bad(f.pos["split"], "split: a split rule set was given but the file names none (split.rules)")
		return nil
	case env.Split == nil:
		return nil
	case env.Split.split != nil:
		bad(f.pos["split.rules"], "split.rules: %s has a split of its own; an arm cannot be split again", sp.Rules)
		return nil
	case env.Split.shadow != nil:
		bad(f.pos["split.rules"], "split.rules: %s has a shadow; shadow the traffic from this file instead", sp.Rules)
		return nil
	}
	b := env.Split
	pools := slices.Sorted(maps.Keys(env.Pools))
	refs := []string{b.def}
	for _, r := range b.routes {
		refs = append(refs, r.pool, r.fallback)
	}
	for _, pool := range refs {
		if pool != "" && !env.Pools[pool] {
			bad(f.pos["split.rules"], "split.rules: %s routes to pool %q, which this gateway does not have%s", sp.Rules, pool, known(pool, pools, "pools"))
			return nil
		}
	}
	a := &Arms{b: b, weight: sp.Weight, names: sp.Names, log: sp.Log, byRequest: sp.ByRequest}
	if a.names[0] == "" {
		a.names = [2]string{"a", "b"}
	}
	a.salt = fnvString(fnvString(fnvOffset, a.names[0]+"\x00"), a.names[1]+"\x00")
	if a.log != "" && !filepath.IsAbs(a.log) {
		a.log = filepath.Join(filepath.Dir(f.Path), a.log)
	}
	return a
}

// Split is the rules' live split; nil without one.
func (s *Set) Split() *Arms { return s.split }

// arm is the rule set that decides a request on arm a: the split's
// candidate for ArmB, else s.
func (s *Set) arm(a Arm) *Set {
	if a == ArmB && s.split != nil {
		return s.split.b
	}
	return s
}

// ByRequest says whether a request with nothing sticky to assign it by is
// assigned by its request id (split.by_request) rather than left outside
// the split, on A's rules.
func (a *Arms) ByRequest() bool { return a.byRequest }

// ArmVersion is the rules version of the set that decides a request on arm
// a: the candidate's for ArmB, else these rules'.
func (s *Set) ArmVersion(a Arm) string { return s.arm(a).Version() }

// Candidate is the B arm's rule set.
func (a *Arms) Candidate() *Set { return a.b }

// Weight is the B arm's share of callers.
func (a *Arms) Weight() float64 { return a.weight }

// Name is an arm's name ("" for ArmNone).
func (a *Arms) Name(arm Arm) string {
	if arm == ArmA || arm == ArmB {
		return a.names[arm-1]
	}
	return ""
}

// Log is the split log's path, resolved against the rules file's
// directory; empty without one.
func (a *Arms) Log() string { return a.log }

// Assign is the arm of a caller known by key, of the kind by (ByPrincipal,
// BySession, ByRequest). The key is hashed (FNV-1a, salted with the arms'
// names) to a point in [0, 1) that falls on B below the weight: the same
// key always gets the same arm while the weight stays, and raising the
// weight moves only keys from A to B (those between the old and the new
// weight). It does not allocate.
func (a *Arms) Assign(by, key string) Arm {
	if a.point(by, key) < a.weight {
		return ArmB
	}
	return ArmA
}

// point is where key falls in [0, 1).
func (a *Arms) point(by, key string) float64 {
	h := fnvString(a.salt, by)
	h = fnvByte(h, 0)
	h = fnvString(h, key)
	// FNV's low bits mix poorly for short keys: finish with a 64-bit
	// avalanche (splitmix64's) before taking the top 53 bits.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return float64(h>>11) / (1 << 53)
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }
