package tenancy

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func mustKey(t testing.TB, principal string, groups ...string) (string, Key) {
	t.Helper()
	secret, k, err := NewKey(principal, groups, time.Time{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k
}

func bearer(secret string) http.Header {
	return http.Header{"Authorization": {"Bearer " + secret}}
}

func compile(t testing.TB, cfg Config, keys ...Key) *Snapshot {
	t.Helper()
	if errs := cfg.Validate(Known{Pools: []string{"general", "code", "legal"}, Models: []string{"auto", "llama", "coder"},
		Routes: []string{"coding", "legal"}, Classes: []string{"law", "computer science", "other"}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	s, err := Compile(&cfg, keys, nil, NewLimiter())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestKeysFileRoundTrip(t *testing.T) {
	secret, k := mustKey(t, "alice", "eng")
	if !strings.HasPrefix(secret, "sk-triage-"+k.ID+"-") || KeyID(secret) != k.ID {
		t.Fatalf("secret %q does not carry id %q", secret, k.ID)
	}
	var buf bytes.Buffer
	if err := FormatKeys(&buf, []Key{k}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), secret[len("sk-triage-"+k.ID+"-"):]) {
		t.Fatal("the keys file holds the secret")
	}
	keys, err := ParseKeys(strings.NewReader("# issued by ops\n\n" + buf.String()))
	if err != nil || len(keys) != 1 || keys[0].Principal != "alice" || keys[0].sum != k.sum {
		t.Fatalf("ParseKeys: %v %+v", err, keys)
	}
	s := compile(t, Config{KeysFile: "k"}, keys...)
	c, d := s.Authenticate(bearer(secret), t0)
	if d != nil || c.Principal().Name != "alice" || c.Principal().Groups[0] != "eng" {
		t.Fatalf("Authenticate: %v", d)
	}
}

// ReloadKeys: an empty keys file after a set with keys keeps the set,
// unless it says it is empty; with nothing before, empty is empty.
func TestReloadKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.jsonl")
	_, k := mustKey(t, "alice")
	prev := []Key{k}
	for _, tc := range []struct {
		name, content string
		prev          []Key
		want          int
		kept          bool
	}{
		{"truncated", "", prev, 1, true},
		{"the header alone", "# triage API keys: sha256 hashes, one key a line; managed by `triage keys`\n", prev, 1, true},
		{"emptied", "# all withdrawn\n" + KeysEmptyMarker + "\n", prev, 0, false},
		{"emptied, spaces", "  " + KeysEmptyMarker + "  \n", prev, 0, false},
		{"first load", "", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			keys, kept, err := ReloadKeys(path, tc.prev)
			if err != nil || len(keys) != tc.want || kept != tc.kept {
				t.Errorf("ReloadKeys = %d keys, kept %v, %v; want %d, %v", len(keys), kept, err, tc.want, tc.kept)
			}
		})
	}
	if err := AppendKey(path, k); err != nil {
		t.Fatal(err)
	}
	if keys, kept, err := ReloadKeys(path, nil); err != nil || len(keys) != 1 || kept {
		t.Errorf("a file with a key: %d keys, kept %v, %v", len(keys), kept, err)
	}
	if _, _, err := ReloadKeys(filepath.Join(t.TempDir(), "none"), prev); err == nil {
		t.Error("a missing file: no error")
	}
}

func TestKeysFileBadLines(t *testing.T) {
	_, k := mustKey(t, "alice")
	var good bytes.Buffer
	_ = FormatKeys(&good, []Key{k})
	in := "not json\n" + good.String() + good.String() +
		`{"id":"zz","principal":"b","hash":"sha256:00"}` + "\n" +
		`{"id":"0123abcd","principal":"","hash":"sha256:` + strings.Repeat("0", 64) + `"}` + "\n" +
		`{"id":"0123abce","principal":"c","hash":"md5:00","extra":1}` + "\n"
	_, err := ParseKeys(strings.NewReader(in))
	if err == nil {
		t.Fatal("bad lines accepted")
	}
	for _, want := range []string{"line 1: not a key", "line 3: id", "is also on line 2", "line 4: id \"zz\"", "line 5: principal", "line 6: not a key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := ParseKeys(strings.NewReader(strings.Repeat("x", 70<<10))); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("an endless line: %v", err)
	}
}

func TestAuthenticate(t *testing.T) {
	secret, k := mustKey(t, "alice")
	expSecret, exp, _ := NewKey("bob", nil, t0.Add(time.Hour), t0)
	revSecret, rev := mustKey(t, "carol")
	rev.Revoked = t0
	s := compile(t, Config{KeysFile: "k"}, k, exp, rev)
	wrong := secret[:len(secret)-1] + "x"
	if secret[len(secret)-1] == 'x' {
		wrong = secret[:len(secret)-1] + "y"
	}
	for _, tc := range []struct {
		name string
		h    http.Header
		at   time.Time
		want string // "" ok, else a word of the message
	}{
		{"bearer", bearer(secret), t0, ""},
		{"lowercase bearer", http.Header{"Authorization": {"bearer " + secret}}, t0, ""},
		{"x-api-key", http.Header{"X-Api-Key": {secret}}, t0, ""},
		{"none", http.Header{}, t0, "No API key"},
		{"basic", http.Header{"Authorization": {"Basic abc"}}, t0, "No API key"},
		{"wrong secret", bearer(wrong), t0, "Incorrect"},
		{"unknown id", bearer("sk-triage-00000000-" + strings.Repeat("a", 40)), t0, "Incorrect"},
		{"not a key", bearer("hello"), t0, "Incorrect"},
		{"expiring, valid", bearer(expSecret), t0.Add(59 * time.Minute), ""},
		{"expired", bearer(expSecret), t0.Add(time.Hour), "expired"},
		{"revoked", bearer(revSecret), t0, "revoked"},
	} {
		c, d := s.Authenticate(tc.h, tc.at)
		switch {
		case tc.want == "" && d != nil:
			t.Errorf("%s: refused: %v", tc.name, d)
		case tc.want != "" && (d == nil || d.Status != 401 || d.Code != "invalid_api_key" || !strings.Contains(d.Message, tc.want)):
			t.Errorf("%s: got %+v, want 401 saying %q", tc.name, d, tc.want)
		case d != nil && strings.Contains(d.Message, secret[20:]):
			t.Errorf("%s: the message quotes the secret", tc.name)
		case d == nil && c.Principal() == nil:
			t.Errorf("%s: no principal", tc.name)
		}
	}
}

func TestPolicies(t *testing.T) {
	f := false
	cfg := Config{KeysFile: "k", Policies: []Policy{
		{Principal: "alice", Models: []string{"auto"}, Direct: &f},
		{Group: "legal-team", Pools: []string{"legal", "general"}, Routes: []string{"legal", "default"}},
		{Group: "*", Models: []string{"auto", "llama"}, Classes: []string{"other", "computer science"}},
	}}
	_, alice := mustKey(t, "alice", "legal-team")
	_, lena := mustKey(t, "lena", "legal-team")
	_, eve := mustKey(t, "eve")
	s := compile(t, cfg, alice, lena, eve)
	c := func(k Key) Caller { return Caller{e: s.keys[k.ID]} }
	check := func(what string, d *Denial, code string) {
		t.Helper()
		if code == "" && d != nil || code != "" && (d == nil || d.Code != code || d.Status != 403) {
			t.Errorf("%s: %+v, want %q", what, d, code)
		}
	}
	// alice's own policy wins over her group's: auto only, no direct names.
	check("alice auto", c(alice).AllowModel("auto", true), "")
	check("alice llama", c(alice).AllowModel("llama", false), "model_not_allowed")
	check("alice code pool", c(alice).AllowRoute("code", "coding", "computer science"), "")
	// lena: her group's policy (any model; legal and general pools).
	check("lena coder", c(lena).AllowModel("coder", false), "")
	check("lena legal", c(lena).AllowRoute("legal", "legal", "law"), "")
	check("lena coding", c(lena).AllowRoute("code", "coding", "computer science"), "permission_denied")
	check("lena default", c(lena).AllowRoute("general", "", "other"), "")
	// eve: everyone's policy.
	check("eve llama", c(eve).AllowModel("llama", false), "")
	check("eve coder", c(eve).AllowModel("coder", false), "model_not_allowed")
	check("eve law", c(eve).AllowRoute("legal", "legal", "law"), "permission_denied")
	check("eve by name", c(eve).AllowRoute("general", "", ""), "")
}

func TestConfigValidate(t *testing.T) {
	cfg := Config{Policies: []Policy{
		{Principal: "a", Group: "g"},
		{Group: "g", Pools: []string{"gpu"}, Routes: []string{"x"}, Limits: Limits{RequestsPerMinute: -1, Per: "tenant"}},
		{Group: "g"},
		{Principal: "p", Limits: Limits{Per: "group"}},
	}}
	errs := cfg.Validate(Known{Pools: []string{"general"}, Routes: []string{"coding"}})
	all := ""
	for _, e := range errs {
		all += e.Error() + "\n"
	}
	for _, want := range []string{
		"access.keys_file: policies need credentials",
		"access.policies[0]: name exactly one of principal or group",
		`access.policies[1].pools[0]: no pool named "gpu"; the pools are "general"`,
		`access.policies[1].routes[0]: no route named "x"; the routes are "coding", "default"`,
		"access.policies[1].limits.requests_per_minute: must not be negative",
		`access.policies[1].limits.per: must be key, principal or group, got "tenant"`,
		`access.policies[2]: a second policy for group "g" (also policies[1])`,
		`access.policies[3].limits.per: "group" counts a group's members together`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in:\n%s", want, all)
		}
	}
}

func TestRequestsPerMinute(t *testing.T) {
	secret, k := mustKey(t, "alice")
	s := compile(t, Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Limits: Limits{RequestsPerMinute: 60}}}}, k)
	c, _ := s.Authenticate(bearer(secret), t0)
	now := t0
	// A full minute's burst, then one a second.
	for i := range 60 {
		a, d := c.Admit(now, 0)
		if d != nil {
			t.Fatalf("request %d refused: %v", i, d)
		}
		if a.Limit != 60 || a.Remaining != 59-i {
			t.Fatalf("request %d: limit %d remaining %d, want 60 and %d", i, a.Limit, a.Remaining, 59-i)
		}
	}
	a, d := c.Admit(now, 0)
	if d == nil || d.Status != 429 || d.Code != "rate_limit_exceeded" || d.RetryAfter != time.Second || a.Limit != 60 {
		t.Fatalf("61st request: %+v %+v", a, d)
	}
	if !strings.Contains(d.Message, "60 requests per minute") || !strings.Contains(d.Message, "1s") {
		t.Errorf("message %q", d.Message)
	}
	if _, d := c.Admit(now.Add(999*time.Millisecond), 0); d == nil {
		t.Fatal("admitted before the interval passed")
	}
	if a, d := c.Admit(now.Add(time.Second), 0); d != nil || a.Remaining != 0 {
		t.Fatalf("a second later: %+v %v", a, d)
	}
	// A quiet minute refills the whole budget.
	if a, d := c.Admit(now.Add(2*time.Minute), 0); d != nil || a.Remaining != 59 || a.Reset != time.Second {
		t.Fatalf("after a quiet minute: %+v %v", a, d)
	}
}

// Limits of several policies all count; a request one refuses counts
// against none, and per: group makes one count for all members.
func TestLimitsCombineAndRefund(t *testing.T) {
	s1, a := mustKey(t, "alice", "team")
	s2, b := mustKey(t, "bob", "team")
	s := compile(t, Config{KeysFile: "k", Policies: []Policy{
		{Principal: "alice", Limits: Limits{RequestsPerMinute: 100}},
		{Group: "team", Limits: Limits{RequestsPerMinute: 3, Per: "group"}},
	}}, a, b)
	ca, _ := s.Authenticate(bearer(s1), t0)
	cb, _ := s.Authenticate(bearer(s2), t0)
	for _, c := range []Caller{ca, cb, ca} {
		if _, d := c.Admit(t0, 0); d != nil {
			t.Fatal(d)
		}
	}
	if adm, d := cb.Admit(t0, 0); d == nil || adm.Limit != 3 {
		t.Fatalf("the group's 4th request: %+v %v", adm, d)
	}
	// alice's own 100/min counted 2, not the refused third.
	if adm, d := ca.Admit(t0, 0); d == nil {
		t.Fatal("group limit not applied to alice")
	} else if r := &s.keys[a.ID].rates[0]; r.limit != 100 {
		t.Fatalf("first rate is %d/min", r.limit)
	} else if _, rem, _, _ := r.take(t0.Sub(s.keys[a.ID].epoch).Nanoseconds()); rem != 97 {
		t.Fatalf("alice's own limit: %d left after 2 admitted (+1 now), want 97; admission %+v", rem, adm)
	}
}

func TestConcurrentLimit(t *testing.T) {
	secret, k := mustKey(t, "alice")
	s := compile(t, Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Limits: Limits{Concurrent: 2, RequestsPerMinute: 1000}}}}, k)
	c, _ := s.Authenticate(bearer(secret), t0)
	a1, _ := c.Admit(t0, 0)
	a2, _ := c.Admit(t0, 0)
	if _, d := c.Admit(t0, 0); d == nil || !strings.Contains(d.Message, "at most 2 at once") {
		t.Fatalf("third concurrent: %v", d)
	}
	a1.Release()
	a1.Release() // once only
	a3, d := c.Admit(t0, 0)
	if d != nil {
		t.Fatalf("after a release: %v", d)
	}
	a2.Release()
	a3.Release()
	if n := s.keys[k.ID].slots[0].c.inflight.Load(); n != 0 {
		t.Fatalf("%d in flight after all released", n)
	}
}

// Many goroutines on one limit admit exactly the limit.
func TestRequestsPerMinuteConcurrent(t *testing.T) {
	secret, k := mustKey(t, "alice")
	s := compile(t, Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Limits: Limits{RequestsPerMinute: 500}}}}, k)
	c, _ := s.Authenticate(bearer(secret), t0)
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			n := 0
			for range 200 {
				if _, d := c.Admit(t0, 0); d == nil {
					n++
				}
			}
			mu.Lock()
			admitted += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if admitted != 500 {
		t.Fatalf("admitted %d of 1600 at a limit of 500", admitted)
	}
}

// A reload keeps the counts of the tenants it keeps, and drops the rest.
func TestLimiterOutlivesSnapshots(t *testing.T) {
	secret, k := mustKey(t, "alice")
	_, k2 := mustKey(t, "bob")
	l := NewLimiter()
	cfg := Config{KeysFile: "k", Policies: []Policy{{Group: "*", Limits: Limits{RequestsPerMinute: 2}}}}
	s1, _ := Compile(&cfg, []Key{k, k2}, nil, l)
	c, _ := s1.Authenticate(bearer(secret), t0)
	c.Admit(t0, 0)
	c.Admit(t0, 0)
	s2, _ := Compile(&cfg, []Key{k}, nil, l)
	s2.Retain()
	if l.Len() != 1 {
		t.Fatalf("%d counters after bob left, want 1", l.Len())
	}
	c, _ = s2.Authenticate(bearer(secret), t0)
	if _, d := c.Admit(t0, 0); d == nil {
		t.Fatal("the reload forgot alice's count")
	}
}

func TestTokensPerMinuteSettle(t *testing.T) {
	secret, k := mustKey(t, "alice")
	s := compile(t, Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Limits: Limits{TokensPerMinute: 1000}}}}, k)
	c, _ := s.Authenticate(bearer(secret), t0)
	a, d := c.Admit(t0, 600)
	if d != nil || a.TokLimit != 1000 || a.TokRemaining != 400 {
		t.Fatalf("first: %+v %v", a, d)
	}
	if _, d := c.Admit(t0, 500); d == nil || d.Code != "rate_limit_exceeded" {
		t.Fatalf("600+500 of 1000 admitted: %v", d)
	}
	// The response used 100: 900 are free again.
	a.Settle(100, 0, "")
	a.Settle(5000, 0, "") // once only
	b, d := c.Admit(t0, 900)
	if d != nil || b.TokRemaining != 0 {
		t.Fatalf("after settling at 100: %+v %v", b, d)
	}
	b.Settle(0, 0, "") // failed: refunded
	if _, d := c.Admit(t0, 900); d != nil {
		t.Fatalf("after a refund: %v", d)
	}
	if _, d := c.Admit(t0, 5000); d == nil || !strings.Contains(d.Message, "more than alice's limit of 1000 tokens per minute") {
		t.Fatalf("a request larger than the limit: %v", d)
	}
}

// A request without max_tokens is counted as its prompt and
// access.reserve_tokens until it settles: two such requests in flight
// cannot spend a budget that holds one, and the budget is overshot by
// at most what a completion runs past the reservation.
func TestBudgetReservesWithoutMaxTokens(t *testing.T) {
	for _, reserve := range []int64{0, 300} {
		secret, k := mustKey(t, "alice")
		s := compile(t, Config{KeysFile: "k", ReserveTokens: reserve, Policies: []Policy{{Principal: "alice", Budget: Budget{TokensPerDay: 2000}}}}, k)
		c, _ := s.Authenticate(bearer(secret), t0)
		want := reserve
		if want == 0 {
			want = DefaultReserveTokens
		}
		if got := c.Estimate(40, 0); got != 10+want {
			t.Errorf("reserve %d: Estimate(40 bytes, no max_tokens) = %d, want %d", reserve, got, 10+want)
		}
		if got := c.Estimate(40, 7); got != 17 {
			t.Errorf("reserve %d: Estimate(40 bytes, max_tokens 7) = %d, want 17", reserve, got)
		}
		var held []Admission
		for {
			a, d := c.Admit(t0, c.Estimate(40, 0))
			if d != nil {
				if d.Code != "insufficient_quota" {
					t.Fatal(d)
				}
				break
			}
			held = append(held, a)
		}
		if n := int64(len(held)); n != 2000/(10+want) {
			t.Errorf("reserve %d: %d requests without max_tokens admitted at once on a budget of 2000, want %d", reserve, n, 2000/(10+want))
		}
		for i := range held {
			held[i].Settle(10, want+5, "") // each runs 5 past its reservation
		}
		used := c.e.budgets[0].c.used.Load()
		if bound := 2000 + int64(len(held))*5; used > bound {
			t.Errorf("reserve %d: %d used of a budget of 2000, past the bound %d", reserve, used, bound)
		}
	}
	cfg := Config{KeysFile: "k", ReserveTokens: -1}
	if errs := cfg.Validate(Known{}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "access.reserve_tokens: must be from 0") {
		t.Errorf("a negative reserve: %v", errs)
	}
}

func TestBudgetsPerDayAndRestart(t *testing.T) {
	secret, k := mustKey(t, "alice", "team")
	cfg := Config{KeysFile: "k", Policies: []Policy{{Group: "team", Budget: Budget{TokensPerDay: 1000, TokensPerMonth: 1500}, Limits: Limits{Per: "group"}}}}
	l := NewLimiter()
	s, _ := Compile(&cfg, []Key{k}, nil, l)
	c, _ := s.Authenticate(bearer(secret), t0)
	a, d := c.Admit(t0, 300)
	if d != nil {
		t.Fatal(d)
	}
	a.Settle(800, 0, "") // more than estimated: counted in full
	if _, d := c.Admit(t0, 300); d == nil || d.Code != "insufficient_quota" || d.Status != 429 ||
		!strings.Contains(d.Message, "budget of 1000 tokens this day") || d.RetryAfter != 12*time.Hour {
		t.Fatalf("over the daily budget: %+v", d)
	}
	// Saved and restored: a restart keeps the 800 spent.
	path := t.TempDir() + "/state.json"
	if err := l.Save(path, t0); err != nil {
		t.Fatal(err)
	}
	l2 := NewLimiter()
	if err := l2.Load(path); err != nil {
		t.Fatal(err)
	}
	s2, _ := Compile(&cfg, []Key{k}, nil, l2)
	c2, _ := s2.Authenticate(bearer(secret), t0)
	if _, d := c2.Admit(t0, 300); d == nil {
		t.Fatal("the restart forgot the day's spending")
	}
	// The next day: the daily budget renews, the month's 800 of 1500 stays.
	next := t0.Add(24 * time.Hour)
	a, d = c2.Admit(next, 600)
	if d != nil {
		t.Fatalf("the next day: %v", d)
	}
	a.Settle(600, 0, "")
	if _, d := c2.Admit(next, 200); d == nil || !strings.Contains(d.Message, "1500 tokens this month") {
		t.Fatalf("the month's budget: %v", d)
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := NewLimiter().Load(path); err == nil {
		t.Fatal("a broken state file loaded")
	}
}

func TestConfigValidateRedisLimits(t *testing.T) {
	cfg := Config{KeysFile: "k", Redis: RedisConfig{Addr: "localhost:6379"},
		Policies: []Policy{{Group: "*", Limits: Limits{RequestsPerMinute: 100_000_000}}}}
	errs := cfg.Validate(Known{})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "access.policies[0].limits.requests_per_minute: at most 60000000 when shared") {
		t.Fatalf("%v", errs)
	}
	// A concurrency limit is each replica's own: with Redis, the config
	// must say so.
	cfg = Config{KeysFile: "k", Redis: RedisConfig{Addr: "localhost:6379"},
		Policies: []Policy{{Group: "*", Limits: Limits{RequestsPerMinute: 60, Concurrent: 4}}}}
	errs = cfg.Validate(Known{})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "access.policies[0].limits.concurrent: counts each replica's requests alone") ||
		!strings.Contains(errs[0].Error(), "per_replica: true") {
		t.Fatalf("concurrent with redis, per_replica unset: %v", errs)
	}
	cfg.Policies[0].Limits.PerReplica = true
	if errs := cfg.Validate(Known{}); len(errs) != 0 {
		t.Fatalf("concurrent with redis, per_replica: true: %v", errs)
	}
	cfg.Redis = RedisConfig{}
	cfg.Policies[0].Limits.PerReplica = false
	if errs := cfg.Validate(Known{}); len(errs) != 0 {
		t.Fatalf("concurrent without redis: %v", errs)
	}
	// Without credentials there are no limits to share, but sessions are.
	cfg = Config{Redis: RedisConfig{Addr: "localhost:6379"}}
	if errs := cfg.Validate(Known{}); len(errs) != 0 {
		t.Fatalf("redis without credentials: %v", errs)
	}
}

// Cost budgets: admitted at the dearest pool's price, settled at the
// price of the pool that answered.
func TestCostBudget(t *testing.T) {
	secret, k := mustKey(t, "alice")
	cfg := Config{KeysFile: "k",
		Prices:   map[string]Price{"general": {PromptPerMillion: 1, CompletionPerMillion: 2}, "code": {PromptPerMillion: 0.5, CompletionPerMillion: 0.5}},
		Policies: []Policy{{Principal: "alice", Budget: Budget{CostPerDay: 0.001}}}}
	s := compile(t, cfg, k)
	c, _ := s.Authenticate(bearer(secret), t0)
	a, d := c.Admit(t0, 100) // 200 µ$ at the dearest price
	if d != nil {
		t.Fatal(d)
	}
	a.Settle(100, 50, "general") // 100 + 100 µ$
	a, d = c.Admit(t0, 400)      // 200 + 800 µ$: exactly the budget
	if d != nil {
		t.Fatal(d)
	}
	a.Settle(400, 200, "code") // 300 µ$ on the cheaper pool: 500 spent
	if _, d := c.Admit(t0, 250); d != nil {
		t.Fatalf("500 µ$ spent, 500 reserved: %v", d)
	}
	if _, d := c.Admit(t0, 1); d == nil || d.Code != "insufficient_quota" || !strings.Contains(d.Message, "budget of $0.001 this day") {
		t.Fatalf("over the cost budget: %+v", d)
	}
	bad := Config{KeysFile: "k", Policies: []Policy{{Principal: "alice", Budget: Budget{CostPerDay: 1}}}}
	if errs := bad.Validate(Known{}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "needs access.prices") {
		t.Fatalf("a cost budget without prices: %v", errs)
	}
	bad = Config{KeysFile: "k", Prices: map[string]Price{"gpu": {PromptPerMillion: -1}}}
	if errs := bad.Validate(Known{Pools: []string{"general"}}); len(errs) != 2 {
		t.Fatalf("a price for no pool, negative: %v", errs)
	}
}

// Budgets reports what a whole group or a named principal shares; a
// member's own budget (counted per key or per principal) only when the
// config opts in, labelled by key id or principal name, never a secret.
func TestBudgetMetricsPerMember(t *testing.T) {
	_, ka := mustKey(t, "alice", "trial")
	_, kb := mustKey(t, "bob", "staff")
	cfg := Config{KeysFile: "k", Policies: []Policy{
		{Group: "trial", Limits: Limits{Per: "key"}, Budget: Budget{TokensPerDay: 100}},
		{Group: "staff", Budget: Budget{TokensPerMonth: 500}}, // per principal
		{Principal: "carol", Budget: Budget{TokensPerDay: 7}},
	}}
	_, kc := mustKey(t, "carol")
	policies := func(on bool) []string {
		cfg.BudgetMetricsPerMember = on
		s, err := Compile(&cfg, []Key{ka, kb, kc}, nil, NewLimiter())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range s.Budgets(time.Now()) {
			out = append(out, b.Policy+"/"+b.Period)
		}
		return out
	}
	if got := policies(false); !slices.Equal(got, []string{"principal:carol/day"}) {
		t.Fatalf("default: %v", got)
	}
	want := []string{"key:" + ka.ID + "/day", "principal:bob/month", "principal:carol/day"}
	if got := policies(true); !slices.Equal(got, want) {
		t.Fatalf("per member: %v, want %v", got, want)
	}
}
