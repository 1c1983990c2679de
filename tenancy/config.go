package tenancy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Config is the gateway's access section. Without a keys file (and so
// without credentials to check) access control is off and every request
// is served.
type Config struct {
	// KeysFile is the API keys file (JSON lines, see ParseKeys), relative
	// to the config file; `triage keys` manages it. It is re-read on
	// reload and a bad line rejects the reload whole.
	KeysFile string `koanf:"keys_file"`
	// JWT accepts bearer tokens signed by an identity provider: the
	// principal and groups come from their claims. Prefer setting the
	// HS256 secret through TRIAGE_ACCESS__JWT__SECRET to writing it here.
	JWT JWTConfig `koanf:"jwt"`
	// CacheSaltSecret is the secret each principal's cache salt is
	// derived from (pools[].cache_salt): an HMAC-SHA256 of the principal's
	// name under it, which neither shows the name to a replica nor can be
	// computed by a tenant. At least 32 bytes; give every gateway replica
	// the same one, or a tenant's requests through two replicas do not
	// share the prefix cache. Prefer setting it through
	// TRIAGE_ACCESS__CACHE_SALT_SECRET to writing it here. Default:
	// derived from jwt.secret when there is one, else random at start
	// (this replica's alone, and new on each restart).
	CacheSaltSecret string `koanf:"cache_salt_secret"`
	// Policies say what principals and groups may do and how much. A
	// request is judged by its principal's policy, else its first group's
	// (in the key's order) that has one, else the policy for "*", else it
	// may use everything; the limits of every policy that applies (the
	// principal's, each group's, "*") count it.
	Policies []Policy `koanf:"policies"`
	// StateFile keeps the budgets' use across restarts (written every 10s
	// and at shutdown, atomically; relative to the config). Default: none,
	// and a restart forgets what was spent.
	StateFile string `koanf:"state_file"`
	// UsageLog records each authenticated request's usage, a JSON line
	// each (time, request_id, principal, key, pool, route, class, model,
	// status, prompt_tokens, completion_tokens), relative to the config;
	// written in the background and rotated by size. Default: none.
	UsageLog string `koanf:"usage_log"`
	// Prices are what each pool's tokens cost, for cost budgets (pool →
	// price). A pool without a price costs nothing.
	Prices map[string]Price `koanf:"prices"`
	// Redis shares the requests- and tokens-per-minute limits and the budgets across
	// gateway replicas (see shared.go); off without an address. Changing
	// it takes a restart.
	Redis RedisConfig `koanf:"redis"`
	// UsageLogMaxBytes rotates the usage log past this size (keeping 5
	// old files). Default 100 MiB.
	UsageLogMaxBytes int64 `koanf:"usage_log_max_bytes"`
	// ReserveTokens is the completion a request that sets no max_tokens
	// (nor max_completion_tokens, max_output_tokens) is counted as, in
	// tokens, against its tokens-per-minute limits and budgets until its
	// usage settles the count: without it such a request would be counted
	// as its prompt alone and could overshoot a budget by a whole
	// response. A request whose reservation does not fit what is left is
	// refused; one whose completion runs past it overshoots by the
	// difference at most. Default 1024; at most 1,000,000.
	ReserveTokens int64 `koanf:"reserve_tokens"`
	// BudgetMetricsPerMember reports each key's or principal's own budget
	// (a policy whose budget counts per key, or a group's per principal)
	// in triage_budget_remaining_tokens too, labelled key:<key id> or
	// principal:<name>: one series per member, so off by default, and
	// only budgets a whole group or a named principal shares are reported.
	BudgetMetricsPerMember bool `koanf:"budget_metrics_per_member"`
}

// DefaultReserveTokens is ReserveTokens' default: the completion a
// request without max_tokens is counted as until it settles.
const DefaultReserveTokens = 1024

// maxReserveTokens bounds ReserveTokens.
const maxReserveTokens = 1_000_000

// Reserve is the ReserveTokens in effect.
func (c *Config) Reserve() int64 {
	if c.ReserveTokens > 0 {
		return c.ReserveTokens
	}
	return DefaultReserveTokens
}

// UsageLogKeep is how many rotated usage logs are kept.
const UsageLogKeep = 5

// UsageLogSize is the usage log's rotation size in effect.
func (c *Config) UsageLogSize() int64 {
	if c.UsageLogMaxBytes > 0 {
		return c.UsageLogMaxBytes
	}
	return 100 << 20
}

// Policy is what a principal, a group or everyone ("*") may do.
type Policy struct {
	// Principal or Group names whom it is for (exactly one); "*" in
	// either: everyone.
	Principal string `koanf:"principal"`
	Group     string `koanf:"group"`
	// Models lists the model names (as clients send them: pool models,
	// aliases, rules aliases such as auto) it may name; empty: any.
	Models []string `koanf:"models"`
	// Pools, Routes and Classes bound where a request may go: the pool
	// chosen, the rules route taken ("default" for the default pool), the
	// class decided; empty: any.
	Pools   []string `koanf:"pools"`
	Routes  []string `koanf:"routes"`
	Classes []string `koanf:"classes"`
	// Direct: it may name a pool's model directly; false: only rules
	// aliases (the router decides the pool). Default true.
	Direct *bool `koanf:"direct"`
	// Pins sends its requests the rules classify as a class to a pool of
	// its own (class → pool), whatever route the rules take: a tenant's
	// own legal model, say. Checked against Pools like any pool.
	Pins map[string]string `koanf:"pins"`
	// Limits count the requests it makes.
	Limits Limits `koanf:"limits"`
	// Budget caps its tokens per day and month; it counts as Limits.Per
	// says.
	Budget Budget `koanf:"budget"`
}

// Limits bound a tenant's traffic. Zero: no limit.
type Limits struct {
	// RequestsPerMinute admits this many requests a minute, with a burst
	// of as many (GCRA: one request back every 60s/limit).
	RequestsPerMinute int `koanf:"requests_per_minute"`
	// Concurrent caps the requests in flight at once, on each replica:
	// it is never shared through access.redis (a replica that dies
	// holding slots would hold them until a lease ran out), so N replicas
	// admit up to N × Concurrent. With access.redis set, PerReplica must
	// say so.
	Concurrent int `koanf:"concurrent"`
	// PerReplica says that Concurrent counts each replica's requests
	// alone. Required (true) when access.redis shares the other limits,
	// so that a config does not read as a deployment-wide cap it is not;
	// default false, which is the same thing without Redis.
	PerReplica bool `koanf:"per_replica"`
	// TokensPerMinute admits this many tokens a minute (GCRA, a minute's
	// worth at once): a request counts as its estimate (EstimateTokens)
	// until its response's usage replaces it.
	TokensPerMinute int `koanf:"tokens_per_minute"`
	// Per is what shares one counter: "key" (each API key its own),
	// "principal" (default: each principal its own, whichever key it
	// uses), or "group" (for a group's policy: all its members together).
	Per string `koanf:"per"`
}

func (l Limits) any() bool {
	return l.RequestsPerMinute > 0 || l.Concurrent > 0 || l.TokensPerMinute > 0
}

// Price is a pool's price, in dollars per million tokens (so microdollars
// per token).
type Price struct {
	// PromptPerMillion is the price of a million prompt tokens.
	PromptPerMillion float64 `koanf:"prompt_per_million"`
	// CompletionPerMillion is the price of a million completion tokens.
	CompletionPerMillion float64 `koanf:"completion_per_million"`
}

// Enabled reports whether access control is on.
func (c *Config) Enabled() bool { return c.KeysFile != "" || c.JWT.Enabled() }

// Known is what the policies may name: the pools, the model names clients
// may send, the rules' routes and classes.
type Known struct {
	Pools, Models, Routes, Classes []string
}

// Validate reports every problem in c, each with its path under
// "access"; names the policies use are checked against known.
func (c *Config) Validate(known Known) []error {
	var errs []error
	bad := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("access.%s: %s", path, fmt.Sprintf(format, a...)))
	}
	if !c.Enabled() && len(c.Policies) > 0 {
		bad("keys_file", "policies need credentials to apply to: name a keys file (triage keys create --file FILE makes one) or configure jwt")
	}
	if n := len(c.CacheSaltSecret); n > 0 && n < minSaltSecret {
		bad("cache_salt_secret", "is %d bytes; at least %d are needed", n, minSaltSecret)
	}
	errs = append(errs, c.Redis.Validate()...)
	for _, pool := range slices.Sorted(maps.Keys(c.Prices)) {
		pr := c.Prices[pool]
		if known.Pools != nil && !slices.Contains(known.Pools, pool) {
			bad("prices."+pool, "no pool named %q; the pools are %s", pool, quote(known.Pools))
		}
		if pr.PromptPerMillion < 0 || pr.CompletionPerMillion < 0 || pr.PromptPerMillion > 1e6 || pr.CompletionPerMillion > 1e6 {
			bad("prices."+pool, "prices are dollars per million tokens, from 0 to 1,000,000")
		}
	}
	if c.ReserveTokens < 0 || c.ReserveTokens > maxReserveTokens {
		bad("reserve_tokens", "must be from 0 (the default, %d) to %d tokens, got %d", DefaultReserveTokens, maxReserveTokens, c.ReserveTokens)
	}
	if c.UsageLogMaxBytes < 0 {
		bad("usage_log_max_bytes", "must not be negative, got %d", c.UsageLogMaxBytes)
	}
	seen := map[string]int{}
	for i, p := range c.Policies {
		path := fmt.Sprintf("policies[%d]", i)
		who := p.who()
		switch {
		case (p.Principal == "") == (p.Group == ""):
			bad(path, "name exactly one of principal or group")
		case p.Principal == "*" && p.Group == "":
			who = "*"
		case p.Group == "*":
			who = "*"
		}
		if j, dup := seen[who]; dup && who != "" {
			bad(path, "a second policy for %s (also policies[%d])", whoName(p), j)
		} else {
			seen[who] = i
		}
		check := func(field string, names, valid []string, what string) {
			if valid == nil {
				return // not known here
			}
			for j, n := range names {
				if !slices.Contains(valid, n) {
					bad(fmt.Sprintf("%s.%s[%d]", path, field, j), "no %s named %q; the %ss are %s", what, n, what, quote(valid))
				}
			}
		}
		check("pools", p.Pools, known.Pools, "pool")
		check("models", p.Models, known.Models, "model")
		routes := known.Routes
		if routes != nil || known.Pools != nil {
			routes = append(slices.Clone(routes), "default")
		}
		check("routes", p.Routes, routes, "route")
		check("classes", p.Classes, known.Classes, "class")
		for _, class := range slices.Sorted(maps.Keys(p.Pins)) {
			check("pins", []string{class}, known.Classes, "class")
			check("pins."+class, []string{p.Pins[class]}, known.Pools, "pool")
		}
		l := p.Limits
		if l.RequestsPerMinute < 0 {
			bad(path+".limits.requests_per_minute", "must not be negative, got %d", l.RequestsPerMinute)
		}
		if c.Redis.Enabled() && l.RequestsPerMinute > maxRedisPerMinute {
			bad(path+".limits.requests_per_minute", "at most %d when shared through access.redis (Redis counts in microseconds), got %d", maxRedisPerMinute, l.RequestsPerMinute)
		}
		if l.Concurrent < 0 {
			bad(path+".limits.concurrent", "must not be negative, got %d", l.Concurrent)
		}
		if c.Redis.Enabled() && l.Concurrent > 0 && !l.PerReplica {
			bad(path+".limits.concurrent", "counts each replica's requests alone, also with access.redis (which shares requests_per_minute, tokens_per_minute and budgets): set per_replica: true to say so, and size it as the deployment's cap divided by the replicas")
		}
		if l.TokensPerMinute < 0 {
			bad(path+".limits.tokens_per_minute", "must not be negative, got %d", l.TokensPerMinute)
		}
		if p.Budget.TokensPerDay < 0 {
			bad(path+".budget.tokens_per_day", "must not be negative, got %d", p.Budget.TokensPerDay)
		}
		if p.Budget.TokensPerMonth < 0 {
			bad(path+".budget.tokens_per_month", "must not be negative, got %d", p.Budget.TokensPerMonth)
		}
		if p.Budget.CostPerDay < 0 || p.Budget.CostPerMonth < 0 || p.Budget.CostPerDay > 1e9 || p.Budget.CostPerMonth > 1e9 {
			bad(path+".budget", "cost_per_day and cost_per_month are dollars, from 0 to 1,000,000,000")
		}
		if (p.Budget.CostPerDay > 0 || p.Budget.CostPerMonth > 0) && len(c.Prices) == 0 {
			bad(path+".budget", "a cost budget needs access.prices (dollars per million tokens, per pool)")
		}
		switch l.Per {
		case "", "key", "principal":
		case "group":
			if p.Group == "" || p.Group == "*" {
				bad(path+".limits.per", "\"group\" counts a group's members together; this policy is not a group's")
			}
		default:
			bad(path+".limits.per", "must be key, principal or group, got %q", l.Per)
		}
	}
	return errs
}

// who is the policy's lookup key: "p:NAME", "g:NAME" or "*".
func (p *Policy) who() string {
	switch {
	case p.Principal == "*" || p.Group == "*":
		return "*"
	case p.Principal != "":
		return "p:" + p.Principal
	case p.Group != "":
		return "g:" + p.Group
	}
	return ""
}

func whoName(p Policy) string {
	switch {
	case p.Principal == "*" || p.Group == "*":
		return "everyone (*)"
	case p.Principal != "":
		return "principal " + fmt.Sprintf("%q", p.Principal)
	}
	return "group " + fmt.Sprintf("%q", p.Group)
}

func quote(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
