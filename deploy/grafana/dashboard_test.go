package grafana

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
	"github.com/triagegw/triage/router"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/metrics"
	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/sim"
	"github.com/triagegw/triage/tenancy"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/routertest"
)

const dashboardPath = "triage.json"

// TestDashboardMatchesGateway starts a gateway with rules (tier 2 on), a
// shadow set and access control, sends it requests that make every family
// of metrics appear (a refused one among them), and checks each PromQL
// expression of the dashboard, and each variable's label_values query,
// against what its /metrics exposes.
func TestDashboardMatchesGateway(t *testing.T) {
	exp := exposeFrom(t, scrapeBusyGateway(t))
	// Values the gateway has but a short run cannot show: the reasons a
	// decision can have, the refusal codes (pre-made, but listed anyway).
	exp.known("triage_decisions_total", "reason", rules.ReasonExplicitModel, rules.ReasonTier1Confident, rules.ReasonBelowFloor,
		rules.ReasonClassRequiresTier2, rules.ReasonUnfamiliar, rules.ReasonTier2Timeout, rules.ReasonTier2Shed, rules.ReasonTier2EncoderDown, rules.ReasonTier2Unavailable, rules.ReasonTier2Error, rules.ReasonClientGone,
		rules.ReasonDefault, rules.ReasonRule, rules.ReasonSession)
	exp.known("triage_decisions_total", "tier", "0", "1", "2")
	exp.known("triage_limited_total", "reason", metrics.LimitReasons...)

	d := loadDashboard(t, dashboardPath)
	exprs := d.expressions()
	if len(exprs) < 20 {
		t.Fatalf("%s: %d PromQL expressions; the panels were not found", dashboardPath, len(exprs))
	}
	for _, e := range exprs {
		q, err := d.substitute(e.expr)
		if err != nil {
			t.Errorf("%s: %v", e.where, err)
			continue
		}
		var errs []error
		if e.labelValues {
			errs = checkLabelValues(q, exp)
		} else {
			errs = checkPromQL(q, exp)
		}
		for _, err := range errs {
			t.Errorf("%s: %s\n\t%v", e.where, e.expr, err)
		}
	}
	// And the other way: a metric the gateway gained is shown, or said
	// to be left out on purpose.
	for name := range exp.types {
		if strings.HasPrefix(name, "triage_") && !exp.used[name] && notOnDashboard[name] == "" {
			t.Errorf("the gateway exposes %s and no panel of %s shows it: add one, or name it in notOnDashboard with the reason", name, dashboardPath)
		}
	}
}

// notOnDashboard are the gateway's metrics the dashboard leaves out, and
// why.
var notOnDashboard = map[string]string{}

// TestDashboardShape checks what Grafana needs to import the dashboard
// anywhere: a Prometheus data source chosen by a variable, used by every
// panel and query; the pool and route variables; unique panel ids.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t, dashboardPath)
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion = %d, want a current Grafana's (39 or later)", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed to import and link the dashboard", d.UID, d.Title)
	}
	vars := map[string]dashVar{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || v.queryText() != "prometheus" {
		t.Errorf("datasource variable: type %q query %q, want type datasource, query prometheus", v.Type, v.queryText())
	}
	for name, metric := range map[string]string{"pool": "triage_requests_total", "route": "triage_decisions_total"} {
		v, ok := vars[name]
		if !ok || v.Type != "query" || !strings.HasPrefix(v.queryText(), "label_values("+metric) || !strings.HasSuffix(v.queryText(), ", "+name+")") {
			t.Errorf("variable %s: type %q query %q, want a query label_values(%s..., %s)", name, v.Type, v.queryText(), metric, name)
		}
	}
	ids := map[int]string{}
	for _, p := range d.allPanels() {
		if prev, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${datasource}" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: query %q: datasource %+v, refId %q (must be ${datasource} and unique)", p.Title, tg.Expr, tg.Datasource, tg.RefID)
			}
			refs[tg.RefID] = true
		}
	}
}

// scrapeBusyGateway runs a gateway in front of three sim replicas with a
// rules file (tier 2 on, a shadow candidate), keys and a budget, on a
// registry with the Go and process collectors as `triage serve` registers
// them; sends it requests of every kind, a refused one among them; and
// returns its /metrics.
func scrapeBusyGateway(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.jsonl")
	secret, key, err := tenancy.NewKey("alice", nil, time.Time{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := tenancy.AppendKey(keys, key); err != nil {
		t.Fatal(err)
	}
	off := false
	cfg := &config.Config{DefaultPool: "general"}
	for _, p := range []struct{ name, model string }{{"general", "llama"}, {"code", "coder"}, {"legal", "saul"}} {
		pc := pool.Config{Name: p.name, Model: p.model, Health: pool.Health{Enabled: &off}}
		replicas := 1
		if p.name == "code" {
			// Balanced by prefix over replicas modelled as vLLM's, whose
			// /metrics the pool scrapes: the triage_replica_* gauges.
			pc.Balance, replicas = pool.BalancePrefix, 2
		}
		for range replicas {
			s, err := sim.New(sim.Options{Model: p.model, Name: p.name, Chunks: 4, Perf: sim.Perf{Enabled: pc.Balance == pool.BalancePrefix}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			rep := httptest.NewServer(s)
			t.Cleanup(rep.Close)
			pc.Replicas = append(pc.Replicas, pool.Replica{URL: rep.URL})
		}
		cfg.Pools = append(cfg.Pools, pc)
	}
	cfg.Access = tenancy.Config{KeysFile: keys, Policies: []tenancy.Policy{{Principal: "alice", Budget: tenancy.Budget{TokensPerDay: 1_000_000}}}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	// Live: "lease" is below law's tier-1 floor and goes to tier 2, which
	// is sure. The candidate trusts tier 1 only at 0.95, without tier 2:
	// it sends "rebase" and "lease" to the default pool (differ) and
	// agrees on "banana".
	tier1 := &classifiertest.Fixed{Rules: []classifiertest.Rule{
		{Contains: "rebase", Class: "code", Score: 0.93},
		{Contains: "lease", Class: "law", Score: 0.55},
	}, Default: classifier.Scored{Class: "other", Score: 0.8}}
	tier2 := &classifiertest.Fixed{Rules: []classifiertest.Rule{{Contains: "lease", Class: "law", Score: 0.9}},
		Default: classifier.Scored{Class: "other", Score: 0.9}}
	const routes = `routes:
  - {name: coding, when: {class: code}, pool: code, fallback: general}
  - {name: legal, when: {class: law}, pool: legal}
default: general
`
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("candidate.yaml", "alias: auto\nfloors: {tier1: 0.95}\n"+routes)
	write("rules.yaml", "alias: auto\nfloors: {tier1: 0.6, tier2: 0.5}\n"+routes+
		"tier2: {enabled: true, budget: 5s}\nshadow: {rules: candidate.yaml, sample: 1}\nsplit: {rules: arm.yaml, weight: 0.5}\n")
	// The split's B arm decides as the live rules do, whichever arm alice
	// is on.
	write("arm.yaml", "alias: auto\nfloors: {tier1: 0.6, tier2: 0.5}\n"+routes+"tier2: {enabled: true, budget: 5s}\n")
	compile := func(name string, shadow, split *rules.Set) *rules.Set {
		f, err := rules.ParseFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		classes := []string{"code", "law", "other"}
		head := classifier.Linear{Kind: "softmax", Classes: classes, Dims: 1, W: make([]float32, 3), B: make([]float32, 3)}
		heads := &classifier.Heads{Format: 1, Name: "t", Version: "1", Classes: classes, Dir: "/h",
			Tier1: &classifier.Tier{Head: head}, Tier2: &classifier.Tier{Head: head}}
		s, err := rules.Compile(f, rules.Env{Pools: cfg.PoolNames(), Heads: heads, Tier1: tier1,
			Tier2: func() (classifier.Classifier, error) { return tier2, nil }, Shadow: shadow, Split: split})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	set := compile("rules.yaml", compile("candidate.yaml", nil, nil), compile("arm.yaml", nil, nil))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gw, err := router.New(cfg, set, router.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + routertest.Serve(t, gw, routertest.Options{})

	do := func(method, path, body string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: read body: %v", method, path, err)
		}
		return resp, string(b)
	}
	chat := func(model, text string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"` + text + `"}]}`
	}
	auth := []string{"Authorization", "Bearer " + secret}
	for _, tc := range []struct{ text, route, tier string }{
		{"how do I rebase onto main", "coding", "1"},
		{"my lease", "legal", "2"},
		{"banana bread", "default", "1"},
	} {
		r, body := do("POST", "/v1/chat/completions", chat("auto", tc.text), auth...)
		if r.StatusCode != 200 || r.Header.Get("X-Triage-Route") != tc.route || r.Header.Get("X-Triage-Tier") != tc.tier {
			t.Fatalf("%q: status %d route %q tier %q, want 200 %s %s (%s)", tc.text, r.StatusCode, r.Header.Get("X-Triage-Route"), r.Header.Get("X-Triage-Tier"), tc.route, tc.tier, body)
		}
	}
	for _, tc := range []struct {
		what, body string
		auth       []string
		want       int
	}{
		{"a stream naming a pool's model", `{"model":"coder","stream":true,"messages":[{"role":"user","content":"hi"}]}`, auth, 200},
		{"no key", chat("llama", "hi"), nil, 401},
		{"a bad body", `{"model":`, auth, 400},
	} {
		if r, body := do("POST", "/v1/chat/completions", tc.body, tc.auth...); r.StatusCode != tc.want {
			t.Fatalf("%s: %d, want %d (%s)", tc.what, r.StatusCode, tc.want, body)
		}
	}
	// The shadow decides off the request path: wait for its three.
	var m string
	testenv.WaitWithin(t, 5*time.Second, "the three shadow decisions counted and the code pool's replicas scraped", func() (bool, string) {
		var r *http.Response
		r, m = do("GET", "/metrics", "")
		if r.StatusCode != 200 {
			t.Fatalf("/metrics: %d", r.StatusCode)
		}
		return strings.Contains(m, `triage_shadow_decisions_total{result="agree"} 1`) && strings.Contains(m, `triage_shadow_decisions_total{result="differ"} 2`) &&
			strings.Count(m, "\ntriage_replica_requests_running{") == 2, m // and both replicas' metrics scraped
	})
	return m
}

type dashboard struct {
	SchemaVersion int         `json:"schemaVersion"`
	UID           string      `json:"uid"`
	Title         string      `json:"title"`
	Panels        []dashPanel `json:"panels"`
	Templating    struct {
		List []dashVar `json:"list"`
	} `json:"templating"`
}

type dashRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashPanel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource dashRef     `json:"datasource"`
	Panels     []dashPanel `json:"panels"` // a collapsed row's
	Targets    []struct {
		Datasource dashRef `json:"datasource"`
		Expr       string  `json:"expr"`
		RefID      string  `json:"refId"`
	} `json:"targets"`
}

type dashVar struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": ...}
	Definition string          `json:"definition"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

func (v dashVar) queryText() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	json.Unmarshal(v.Query, &o)
	return o.Query
}

func loadDashboard(t *testing.T, path string) *dashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &d
}

func (d *dashboard) allPanels() []dashPanel {
	var out []dashPanel
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

type dashExpr struct {
	where, expr string
	labelValues bool // a variable's label_values(...) query
}

// expressions are the dashboard's PromQL: every panel's queries and every
// query variable's.
func (d *dashboard) expressions() []dashExpr {
	var out []dashExpr
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) != "" {
				out = append(out, dashExpr{where: fmt.Sprintf("panel %d %q query %s", p.ID, p.Title, tg.RefID), expr: tg.Expr})
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		for _, q := range []string{v.queryText(), v.Definition} {
			if q != "" {
				out = append(out, dashExpr{where: "variable $" + v.Name, expr: q, labelValues: true})
			}
		}
	}
	return out
}

var dashVarRef = regexp.MustCompile(`\$\{(\w+)(?::[\w]+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// substitute replaces Grafana's variables as Grafana does with "All"
// chosen: the dashboard's own by their allValue, the interval ones by a
// duration.
func (d *dashboard) substitute(q string) (string, error) {
	vals := map[string]string{"__rate_interval": "1m", "__interval": "1m", "__range": "1h", "__range_s": "3600", "__interval_ms": "60000"}
	for _, v := range d.Templating.List {
		if v.Type == "query" || v.Type == "custom" {
			if !v.IncludeAll || v.AllValue == "" {
				vals[v.Name] = "UNSET"
			} else {
				vals[v.Name] = v.AllValue
			}
		}
	}
	var bad []string
	out := dashVarRef.ReplaceAllStringFunc(q, func(ref string) string {
		m := dashVarRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := vals[name]
		if !ok || v == "UNSET" {
			bad = append(bad, ref)
		}
		return v
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("%s: variables without a value to check with (no such variable, or no allValue): %v", q, bad)
	}
	return out, nil
}

// TestDashboardSubstitute: Grafana's variables are replaced as with "All"
// chosen, and one the dashboard does not define is an error.
func TestDashboardSubstitute(t *testing.T) {
	d := &dashboard{}
	d.Templating.List = []dashVar{{Name: "pool", Type: "query", IncludeAll: true, AllValue: ".*"}, {Name: "one", Type: "query"}}
	for _, tc := range []struct{ in, want string }{
		{`rate(x{pool=~"$pool"}[$__rate_interval])`, `rate(x{pool=~".*"}[1m])`},
		{`x{pool=~"${pool}"} offset $__interval`, `x{pool=~".*"} offset 1m`},
		{`x{pool=~"${pool:regex}", p=~"[[pool]]"}[$__range]`, `x{pool=~".*", p=~".*"}[1h]`},
	} {
		if got, err := d.substitute(tc.in); err != nil || got != tc.want {
			t.Errorf("substitute(%q) = %q, %v, want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{`x{a=~"$nope"}`, `x{a=~"$one"}`} {
		if got, err := d.substitute(in); err == nil {
			t.Errorf("substitute(%q) = %q, want an error", in, got)
		}
	}
}
