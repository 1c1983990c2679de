package grafana

// Checking a parsed expression against a gateway's exposition.

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// exposition is what a gateway's /metrics has: each sample name a query
// can select, with its labels and the values seen for each.
type exposition struct {
	samples map[string]*exposed
	types   map[string]dto.MetricType // by family name
	used    map[string]bool           // families a checked query selected
}

type exposed struct {
	family string
	typ    dto.MetricType
	suffix string                     // "_bucket", "_sum", "_count" for a histogram's series, else ""
	labels map[string]map[string]bool // label -> values seen
}

// targetLabels are attached by Prometheus to every series it scrapes; the
// gateway does not expose them, but a dashboard may select on them.
var targetLabels = []string{"instance", "job"}

func exposeFrom(t *testing.T, text string) *exposition {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	exp := &exposition{samples: map[string]*exposed{}, types: map[string]dto.MetricType{}, used: map[string]bool{}}
	add := func(name, family, suffix string, typ dto.MetricType, lps []*dto.LabelPair, extra ...string) {
		s := exp.samples[name]
		if s == nil {
			s = &exposed{family: family, typ: typ, suffix: suffix, labels: map[string]map[string]bool{}}
			exp.samples[name] = s
		}
		for _, lp := range lps {
			if s.labels[lp.GetName()] == nil {
				s.labels[lp.GetName()] = map[string]bool{}
			}
			s.labels[lp.GetName()][lp.GetValue()] = true
		}
		for i := 0; i+1 < len(extra); i += 2 {
			if s.labels[extra[i]] == nil {
				s.labels[extra[i]] = map[string]bool{}
			}
			s.labels[extra[i]][extra[i+1]] = true
		}
	}
	for name, f := range fams {
		exp.types[name] = f.GetType()
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				for _, b := range m.GetHistogram().GetBucket() {
					add(name+"_bucket", name, "_bucket", f.GetType(), m.GetLabel(), "le", model.FloatString(b.GetUpperBound()).String())
				}
				add(name+"_bucket", name, "_bucket", f.GetType(), m.GetLabel(), "le", "+Inf")
				add(name+"_sum", name, "_sum", f.GetType(), m.GetLabel())
				add(name+"_count", name, "_count", f.GetType(), m.GetLabel())
			case dto.MetricType_SUMMARY:
				for _, q := range m.GetSummary().GetQuantile() {
					add(name, name, "", f.GetType(), m.GetLabel(), "quantile", model.FloatString(q.GetQuantile()).String())
				}
				add(name+"_sum", name, "_sum", f.GetType(), m.GetLabel())
				add(name+"_count", name, "_count", f.GetType(), m.GetLabel())
			default:
				add(name, name, "", f.GetType(), m.GetLabel())
			}
		}
		if len(f.GetMetric()) == 0 && f.GetType() != dto.MetricType_HISTOGRAM && f.GetType() != dto.MetricType_SUMMARY {
			add(name, name, "", f.GetType(), nil) // a family with no series yet
		}
	}
	return exp
}

// known adds values a label of a metric can have beyond those seen. A
// metric or label the gateway did not expose stays missing: the check
// reports it.
func (e *exposition) known(sample, label string, values ...string) {
	if s := e.samples[sample]; s != nil && s.labels[label] != nil {
		for _, v := range values {
			s.labels[label][v] = true
		}
	}
}

// lookup resolves a selected name to its series, or says why it is not one.
func (e *exposition) lookup(name string) (*exposed, error) {
	if s, ok := e.samples[name]; ok {
		e.used[s.family] = true
		return s, nil
	}
	if typ, ok := e.types[name]; ok && (typ == dto.MetricType_HISTOGRAM || typ == dto.MetricType_SUMMARY) {
		return nil, fmt.Errorf("%s is a %s: select %s_bucket, _sum or _count", name, strings.ToLower(typ.String()), name)
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if typ, ok := e.types[base]; ok {
				return nil, fmt.Errorf("%s: %s is a %s, not a histogram", name, base, strings.ToLower(typ.String()))
			}
		}
	}
	// Names sharing a prefix with it, to show what it may have become.
	var near []string
	for n := range e.samples {
		if k := min(len(name), len(n), len("triage_")+4); n[:k] == name[:k] {
			near = append(near, n)
		}
	}
	slices.Sort(near)
	if len(near) > 0 {
		return nil, fmt.Errorf("no metric %s on /metrics (near: %s)", name, strings.Join(near, ", "))
	}
	return nil, fmt.Errorf("no metric %s on /metrics", name)
}

// pqLabels is what an expression's result carries: a scalar, or a vector
// with these labels.
type pqLabels struct {
	scalar bool
	labels map[string]bool
	// unknown: an error inside was reported already; checks against
	// these labels would only repeat it.
	unknown bool
}

var pqUnknown = pqLabels{unknown: true, labels: map[string]bool{}}

func (l pqLabels) sorted() []string { return slices.Sorted(maps.Keys(l.labels)) }

func checkPromQL(q string, exp *exposition) []error {
	n, err := parsePromQL(q)
	if err != nil {
		return []error{err}
	}
	c := &pqChecker{exp: exp}
	c.labelsOf(n)
	return c.errs
}

var labelValuesQuery = regexp.MustCompile(`^\s*label_values\((.*?),?\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// checkLabelValues checks a query variable's label_values(selector, label).
func checkLabelValues(q string, exp *exposition) []error {
	m := labelValuesQuery.FindStringSubmatch(q)
	if m == nil {
		return []error{fmt.Errorf("%q is not label_values(selector, label)", q)}
	}
	if strings.TrimSpace(m[1]) == "" {
		for _, s := range exp.samples {
			if s.labels[m[2]] != nil {
				return nil
			}
		}
		return []error{fmt.Errorf("no metric has the label %s", m[2])}
	}
	n, err := parsePromQL(m[1])
	if err != nil {
		return []error{err}
	}
	c := &pqChecker{exp: exp}
	got := c.labelsOf(n)
	if !got.scalar && !got.unknown && !got.labels[m[2]] {
		c.errorf("label_values: %s has no label %s (it has %v)", m[1], m[2], got.sorted())
	}
	return c.errs
}

type pqChecker struct {
	exp  *exposition
	errs []error
}

func (c *pqChecker) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// counterFuncs need a counter's (or a histogram's series') range.
var counterFuncs = map[string]bool{"rate": true, "irate": true, "increase": true, "resets": true}

// gaugeFuncs need a gauge's range.
var gaugeFuncs = map[string]bool{"delta": true, "idelta": true, "deriv": true, "predict_linear": true,
	"holt_winters": true, "double_exponential_smoothing": true}

// scalarFuncs return a scalar, or a vector without labels.
var scalarFuncs = map[string]bool{"scalar": true, "time": true, "vector": true, "pi": true, "absent": true, "absent_over_time": true}

// labelFuncs read or make labels named in strings; the check does not
// follow them.
var labelFuncs = map[string]bool{"label_replace": true, "label_join": true, "sort_by_label": true, "sort_by_label_desc": true, "info": true}

var knownFuncs = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Fields(`abs acos acosh asin asinh atan atanh avg_over_time ceil changes clamp clamp_max clamp_min
		cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg exp floor histogram_avg histogram_count
		histogram_fraction histogram_quantile histogram_stddev histogram_stdvar histogram_sum hour last_over_time ln log10 log2
		mad_over_time max_over_time min_over_time minute month present_over_time quantile_over_time rad round sgn sin sinh sort
		sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh timestamp year`) {
		m[f] = true
	}
	for _, set := range []map[string]bool{counterFuncs, gaugeFuncs, scalarFuncs, labelFuncs} {
		maps.Copy(m, set)
	}
	return m
}()

func (c *pqChecker) labelsOf(n pqNode) pqLabels {
	switch n := n.(type) {
	case *pqNumber, *pqString:
		return pqLabels{scalar: true}
	case *pqSubquery:
		return c.labelsOf(n.expr)
	case *pqSelector:
		return c.selector(n)
	case *pqCall:
		return c.call(n)
	case *pqAgg:
		return c.agg(n)
	case *pqBinary:
		return c.binary(n)
	}
	panic(fmt.Sprintf("unknown node %T", n))
}

func (c *pqChecker) selector(n *pqSelector) pqLabels {
	s, err := c.exp.lookup(n.name)
	if err != nil {
		c.errs = append(c.errs, err)
		return pqUnknown
	}
	out := pqLabels{labels: map[string]bool{}}
	for l := range s.labels {
		out.labels[l] = true
	}
	for _, l := range targetLabels {
		out.labels[l] = true
	}
	for _, m := range n.matchers {
		if m.label == "__name__" {
			continue
		}
		values, ok := s.labels[m.label]
		if !ok {
			if !slices.Contains(targetLabels, m.label) {
				c.errorf("%s has no label %s (it has %v)", n.name, m.label, slices.Sorted(maps.Keys(s.labels)))
			}
			continue
		}
		for _, v := range literalValues(m) {
			if !values[v] {
				c.errorf("%s{%s%s%q}: %s is not a value of %s (seen: %v)", n.name, m.label, m.op, m.value, v, m.label, slices.Sorted(maps.Keys(values)))
			}
		}
	}
	return out
}

var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_-]+(\|[A-Za-z0-9_-]+)*$`)

// literalValues are the values a matcher names outright: an equality's,
// or each of a regex that is only an alternation of words; none for a
// pattern.
func literalValues(m pqMatcher) []string {
	switch {
	case m.value == "":
		return nil
	case m.op == "=" || m.op == "!=":
		return []string{m.value}
	case literalAlternation.MatchString(m.value):
		return strings.Split(m.value, "|")
	}
	return nil
}

func (c *pqChecker) call(n *pqCall) pqLabels {
	if !knownFuncs[n.fn] {
		c.errorf("unknown function %s", n.fn)
		return pqUnknown
	}
	if labelFuncs[n.fn] {
		c.errorf("%s makes or reads labels named in strings, which this check does not follow: use another form", n.fn)
		return pqUnknown
	}
	args := make([]pqLabels, len(n.args))
	for i, a := range n.args {
		args[i] = c.labelsOf(a)
	}
	if counterFuncs[n.fn] || gaugeFuncs[n.fn] {
		want := "a counter"
		ok := func(s *exposed) bool {
			return s.typ == dto.MetricType_COUNTER || s.suffix != "" || s.typ == dto.MetricType_UNTYPED
		}
		if gaugeFuncs[n.fn] {
			want = "a gauge"
			ok = func(s *exposed) bool { return s.typ == dto.MetricType_GAUGE || s.typ == dto.MetricType_UNTYPED }
		}
		if len(n.args) == 0 {
			c.errorf("%s() needs a range", n.fn)
		} else if sel, isSel := n.args[0].(*pqSelector); isSel {
			if !sel.ranged {
				c.errorf("%s(%s): needs a range ([...])", n.fn, sel.name)
			} else if s, err := c.exp.lookup(sel.name); err == nil && !ok(s) {
				c.errorf("%s(%s): %s is a %s, %s wants %s", n.fn, sel.name, sel.name, strings.ToLower(s.typ.String()), n.fn, want)
			}
		} else if _, isSub := n.args[0].(*pqSubquery); !isSub {
			c.errorf("%s: needs a range selector or a subquery", n.fn)
		}
	}
	switch {
	case n.fn == "histogram_quantile" || n.fn == "histogram_fraction":
		if len(args) < 2 || !args[0].scalar || args[len(args)-1].scalar {
			c.errorf("%s: wants a scalar, then a vector", n.fn)
			return pqUnknown
		}
		v := args[len(args)-1]
		if v.unknown {
			return pqUnknown
		}
		if !v.labels["le"] {
			c.errorf("%s: its vector has no le label (it has %v): sum by (le, ...) over a histogram's _bucket", n.fn, v.sorted())
		}
		out := maps.Clone(v.labels)
		delete(out, "le")
		return pqLabels{labels: out}
	case scalarFuncs[n.fn]:
		return pqLabels{labels: map[string]bool{}, scalar: n.fn == "scalar" || n.fn == "time" || n.fn == "pi"}
	}
	for _, a := range args {
		if !a.scalar {
			return pqLabels{labels: maps.Clone(a.labels), unknown: a.unknown}
		}
	}
	return pqLabels{scalar: true}
}

func (c *pqChecker) agg(n *pqAgg) pqLabels {
	if n.param != nil {
		if _, isStr := n.param.(*pqString); isStr {
			c.errorf("%s names a label in a string, which this check does not follow: use another form", n.op)
			return pqUnknown
		}
		c.labelsOf(n.param)
	}
	in := c.labelsOf(n.expr)
	if in.scalar {
		c.errorf("%s over a scalar", n.op)
		return pqUnknown
	}
	if in.unknown {
		return pqUnknown
	}
	for _, l := range n.grouping {
		if !in.labels[l] {
			clause := "by"
			if n.without {
				clause = "without"
			}
			c.errorf("%s %s (%s): %s is not a label of what it aggregates (that has %v)", n.op, clause, strings.Join(n.grouping, ", "), l, in.sorted())
		}
	}
	switch {
	case n.op == "topk" || n.op == "bottomk" || n.op == "limitk" || n.op == "limit_ratio":
		return pqLabels{labels: maps.Clone(in.labels)}
	case n.without:
		out := maps.Clone(in.labels)
		for _, l := range n.grouping {
			delete(out, l)
		}
		return pqLabels{labels: out}
	}
	out := map[string]bool{}
	for _, l := range n.grouping {
		out[l] = true
	}
	return pqLabels{labels: out}
}

func (c *pqChecker) binary(n *pqBinary) pqLabels {
	l, r := c.labelsOf(n.lhs), c.labelsOf(n.rhs)
	switch {
	case l.unknown || r.unknown:
		return pqUnknown
	case l.scalar && r.scalar:
		return pqLabels{scalar: true}
	case r.scalar:
		return l
	case l.scalar:
		return r
	}
	for _, lb := range n.matching {
		if n.on && (!l.labels[lb] || !r.labels[lb]) {
			c.errorf("%s on (%s): %s must be a label of both sides (left %v, right %v)", n.op, strings.Join(n.matching, ", "), lb, l.sorted(), r.sorted())
		}
		if !n.on && !l.labels[lb] && !r.labels[lb] {
			c.errorf("%s ignoring (%s): neither side has %s (left %v, right %v)", n.op, strings.Join(n.matching, ", "), lb, l.sorted(), r.sorted())
		}
	}
	if n.op == "or" {
		out := maps.Clone(l.labels)
		maps.Copy(out, r.labels)
		return pqLabels{labels: out}
	}
	// The labels each side is matched on: on's, or all but ignoring's.
	// Series whose values of these differ never match, so sides that
	// carry different ones give nothing (group_left's many side is told
	// apart by labels outside them).
	key := func(s map[string]bool) map[string]bool {
		out := map[string]bool{}
		for lb := range s {
			if n.on == slices.Contains(n.matching, lb) {
				out[lb] = true
			}
		}
		return out
	}
	lk, rk := key(l.labels), key(r.labels)
	if !maps.Equal(lk, rk) {
		c.errorf("%s: the two sides are matched on different labels (left %v, right %v), so nothing matches: aggregate both by the same labels, or say on (...)",
			n.op, slices.Sorted(maps.Keys(lk)), slices.Sorted(maps.Keys(rk)))
	}
	one := r
	if n.group == "right" {
		one = l
	}
	for _, lb := range n.include {
		if !one.labels[lb] {
			c.errorf("%s group_%s (%s): %s is not a label of the one side (%v)", n.op, n.group, strings.Join(n.include, ", "), lb, one.sorted())
		}
	}
	// The result's labels: and and unless keep the left side's series;
	// group_left and group_right the many side's, plus those included
	// from the one side; a one-to-one match the matched labels.
	switch {
	case n.op == "and" || n.op == "unless":
		return pqLabels{labels: maps.Clone(l.labels)}
	case n.group != "":
		many := l
		if n.group == "right" {
			many = r
		}
		out := maps.Clone(many.labels)
		for _, lb := range n.include {
			out[lb] = true
		}
		return pqLabels{labels: out}
	}
	return pqLabels{labels: lk}
}

// checkExposition is a gateway's /metrics in little: a counter, a gauge
// and a histogram.
const checkExposition = `# TYPE req_total counter
req_total{pool="a",code="200"} 1
req_total{pool="a",code="500"} 1
# TYPE dec_total counter
dec_total{route="r",tier="1"} 1
# TYPE healthy gauge
healthy{pool="a",backend="x"} 1
# TYPE lat_seconds histogram
lat_seconds_bucket{pool="a",le="0.1"} 1
lat_seconds_bucket{pool="a",le="+Inf"} 1
lat_seconds_sum{pool="a"} 0.05
lat_seconds_count{pool="a"} 1
`

// TestCheckPromQLFindsDrift: every way a dashboard can drift from the
// gateway fails the check, and what is right passes it.
func TestCheckPromQLFindsDrift(t *testing.T) {
	exp := exposeFrom(t, checkExposition)
	exp.known("dec_total", "tier", "3")
	exp.known("dec_total", "reason", "why") // not a label of dec_total: stays missing
	for _, tc := range []struct{ expr, wantErr string }{
		{`sum(rate(dec_total{tier="3"}[1m]))`, ``},
		{`sum(rate(dec_total{reason="why"}[1m]))`, `dec_total has no label reason`},
		{`sum by (pool) (rate(req_total{pool=~".*", code=~"5.."}[1m])) / sum by (pool) (rate(req_total[1m]))`, ``},
		{`histogram_quantile(0.9, sum by (le, pool) (rate(lat_seconds_bucket{instance=~".*"}[1m])))`, ``},
		{`sum(rate(lat_seconds_sum[1m])) / sum(rate(lat_seconds_count[1m]))`, ``},
		{`min by (pool, backend) (healthy) == 0`, ``},
		{`sum(rate(req_total{code="200"}[1m])) / sum(rate(req_total[1m]))`, ``},
		{`sum by (pool) (rate(req_total[1m])) / on (pool) group_left () sum by (pool) (healthy)`, ``},
		{`sum by (instance) (healthy)`, ``},
		{`sum(rate(dec_total{tier="1|2"}[1m]))`, `1|2 is not a value`},
		{`rate(requests_total[1m])`, `no metric requests_total`},
		{`rate(req_total{status="200"}[1m])`, `req_total has no label status`},
		{`sum by (status) (rate(req_total[1m]))`, `status is not a label of what it aggregates`},
		{`sum without (status) (rate(req_total[1m]))`, `status is not a label of what it aggregates`},
		{`sum(rate(req_total{code="299"}[1m]))`, `299 is not a value of code`},
		{`sum(rate(dec_total{tier=~"1|2"}[1m]))`, `2 is not a value of tier`},
		{`rate(lat_seconds[1m])`, `lat_seconds is a histogram`},
		{`rate(req_bucket[1m])`, `no metric req_bucket`},
		{`rate(req_total_bucket[1m])`, `req_total is a counter, not a histogram`},
		{`rate(healthy[1m])`, `healthy is a gauge, rate wants a counter`},
		{`rate(req_total)`, `needs a range`},
		{`deriv(req_total[5m])`, `req_total is a counter, deriv wants a gauge`},
		{`histogram_quantile(0.9, sum by (pool) (rate(lat_seconds_bucket[1m])))`, `no le label`},
		{`sum by (pool) (rate(req_total[1m])) / sum(rate(req_total[1m]))`, `matched on different labels`},
		{`sum by (pool) (rate(req_total[1m])) / on (route) sum by (pool) (healthy)`, `route must be a label of both sides`},
		{`rate(req_total[1m]) / ignoring (route) rate(req_total[1m])`, `neither side has route`},
		{`sum by (pool) (rate(req_total[1m])) / on (pool) group_left (route) sum by (pool, backend) (healthy)`, `route is not a label of the one side`},
		{`label_replace(req_total, "p", "$1", "pool", "(.*)")`, `label_replace makes or reads labels`},
		{`count_values("v", req_total)`, `count_values names a label in a string`},
		{`rat(req_total[1m])`, `unknown function rat`},
		{`sum(rate(req_total[1m]) by (pool)`, `want`},
	} {
		var errs []error
		if n, err := parsePromQL(tc.expr); err != nil {
			errs = []error{err}
		} else {
			c := &pqChecker{exp: exp}
			c.labelsOf(n)
			errs = c.errs
		}
		switch {
		case tc.wantErr == "" && len(errs) > 0:
			t.Errorf("checkPromQL(%s) = %v, want no error", tc.expr, errs)
		case tc.wantErr != "" && !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), tc.wantErr) }):
			t.Errorf("checkPromQL(%s) = %v, want an error saying %q", tc.expr, errs, tc.wantErr)
		}
	}
	for _, tc := range []struct{ q, wantErr string }{
		{`label_values(req_total{pool=~".*"}, pool)`, ``},
		{`label_values(pool)`, ``},
		{`label_values(req_total, route)`, `has no label route`},
		{`label_values(reqs_total, pool)`, `no metric reqs_total`},
		{`label_values(colour)`, `no metric has the label colour`},
		{`query_result(req_total)`, `not label_values`},
	} {
		errs := checkLabelValues(tc.q, exp)
		switch {
		case tc.wantErr == "" && len(errs) > 0:
			t.Errorf("checkLabelValues(%s) = %v, want no error", tc.q, errs)
		case tc.wantErr != "" && !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), tc.wantErr) }):
			t.Errorf("checkLabelValues(%s) = %v, want an error saying %q", tc.q, errs, tc.wantErr)
		}
	}
}
