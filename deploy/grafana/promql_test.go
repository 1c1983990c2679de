package grafana

// A parser of PromQL expressions, as far as checking a dashboard needs:
// selectors with their matchers, ranges and subqueries, offset and @,
// function calls, aggregations with by and without, and binary operators
// with their precedence, bool, on, ignoring, group_left and group_right.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

type pqNode interface{}

type pqNumber struct{}

type pqString struct{ value string }

type pqMatcher struct{ label, op, value string }

type pqSelector struct {
	name     string
	matchers []pqMatcher
	ranged   bool // followed by [duration]
}

type pqSubquery struct{ expr pqNode }

type pqCall struct {
	fn   string
	args []pqNode
}

type pqAgg struct {
	op       string
	grouping []string
	without  bool
	param    pqNode // topk's k, quantile's φ, count_values' label
	expr     pqNode
}

type pqBinary struct {
	op       string
	lhs, rhs pqNode
	on       bool     // on (matching); else ignoring (matching)
	matching []string // on's or ignoring's labels
	group    string   // "left", "right" or ""
	include  []string // group_left's or group_right's labels
}

var pqAggregators = map[string]bool{"sum": true, "avg": true, "count": true, "min": true, "max": true, "group": true,
	"stddev": true, "stdvar": true, "topk": true, "bottomk": true, "quantile": true, "count_values": true,
	"limitk": true, "limit_ratio": true}

var pqAggParam = map[string]bool{"topk": true, "bottomk": true, "quantile": true, "count_values": true, "limitk": true, "limit_ratio": true}

var pqComparison = map[string]bool{"==": true, "!=": true, "<": true, ">": true, "<=": true, ">=": true}

var pqSetOps = map[string]bool{"and": true, "or": true, "unless": true}

// pqPrecedence of the binary operators, loosest first.
var pqPrecedence = map[string]int{"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, "<": 3, ">": 3, "<=": 3, ">=": 3,
	"+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "atan2": 5, "^": 6}

type pqTokKind int

const (
	pqEOF pqTokKind = iota
	pqIdent
	pqNum
	pqDuration
	pqStr
	pqPunct // ( ) { } [ ] , : @ and the operators
)

type pqTok struct {
	kind pqTokKind
	text string // a string's value, unquoted
	pos  int
}

func lexPromQL(q string) ([]pqTok, error) {
	var toks []pqTok
	i, inRange := 0, false // in [...], a colon is the subquery's, not a name's
	for i < len(q) {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case isIdentStart(c) && !(c == ':' && inRange):
			j := i + 1
			for j < len(q) && (isIdentStart(q[j]) || isDigit(q[j])) {
				j++
			}
			toks = append(toks, pqTok{pqIdent, q[i:j], i})
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(q) && isDigit(q[i+1])):
			// A duration (5m, 1h30m, 100ms), else a number (1, .5, 1e3, 0x1f).
			kind, m := pqDuration, durationRE.FindString(q[i:])
			if m == "" {
				kind, m = pqNum, numberRE.FindString(q[i:])
			}
			if j := i + len(m); m == "" || (j < len(q) && q[j] != ':' && (isIdentStart(q[j]) || isDigit(q[j]) || q[j] == '.')) {
				return nil, fmt.Errorf("at %d: bad number", i)
			}
			toks = append(toks, pqTok{kind, m, i})
			i += len(m)
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(q) && q[j] != c {
				if q[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(q) {
				return nil, fmt.Errorf("at %d: unterminated string", i)
			}
			v, err := unquotePromQL(q[i : j+1])
			if err != nil {
				return nil, fmt.Errorf("at %d: %v", i, err)
			}
			toks = append(toks, pqTok{pqStr, v, i})
			i = j + 1
		default:
			op := ""
			for _, o := range []string{"==", "!=", "=~", "!~", "<=", ">=", "(", ")", "{", "}", "[", "]", ",", ":", "@", "=", "<", ">", "+", "-", "*", "/", "%", "^"} {
				if strings.HasPrefix(q[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("at %d: unexpected %q", i, c)
			}
			toks = append(toks, pqTok{pqPunct, op, i})
			i += len(op)
			if op == "[" || op == "]" {
				inRange = op == "["
			}
		}
	}
	return append(toks, pqTok{pqEOF, "", len(q)}), nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

var (
	durationRE = regexp.MustCompile(`^([0-9]+(ms|[smhdwy]))+`)
	numberRE   = regexp.MustCompile(`^(0[xX][0-9a-fA-F]+|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)`)
)

// unquotePromQL reads a PromQL string: Go's escapes in "..." and '...',
// none in `...`.
func unquotePromQL(s string) (string, error) {
	switch s[0] {
	case '`':
		return s[1 : len(s)-1], nil
	case '\'':
		inner := strings.ReplaceAll(s[1:len(s)-1], `\'`, `'`)
		inner = strings.ReplaceAll(inner, `"`, `\"`)
		s = `"` + inner + `"`
	}
	v, err := strconv.Unquote(s)
	if err != nil {
		return "", fmt.Errorf("bad string %s", s)
	}
	return v, nil
}

type pqParser struct {
	toks []pqTok
	i    int
	src  string
}

func parsePromQL(q string) (pqNode, error) {
	toks, err := lexPromQL(q)
	if err != nil {
		return nil, err
	}
	p := &pqParser{toks: toks, src: q}
	n, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != pqEOF {
		return nil, p.errorf(t, "unexpected %q after the expression", t.text)
	}
	return n, nil
}

func (p *pqParser) peek() pqTok { return p.toks[p.i] }
func (p *pqParser) next() pqTok { t := p.toks[p.i]; p.i++; return t }

func (p *pqParser) errorf(t pqTok, format string, args ...any) error {
	return fmt.Errorf("at %d: %s", t.pos, fmt.Sprintf(format, args...))
}

func (p *pqParser) is(kind pqTokKind, text string) bool {
	t := p.peek()
	return t.kind == kind && t.text == text
}

func (p *pqParser) expect(text string) error {
	if t := p.next(); t.kind != pqPunct || t.text != text {
		return p.errorf(t, "want %q, got %q", text, t.text)
	}
	return nil
}

// binaryOp is the operator at the head of the input, if any.
func (p *pqParser) binaryOp() string {
	t := p.peek()
	if t.kind == pqPunct || (t.kind == pqIdent && pqSetOps[t.text]) || (t.kind == pqIdent && t.text == "atan2") {
		if _, ok := pqPrecedence[t.text]; ok {
			return t.text
		}
	}
	return ""
}

// expr parses operators binding at least as tight as minPrec.
func (p *pqParser) expr(minPrec int) (pqNode, error) {
	lhs, err := p.unary()
	if err != nil {
		return nil, err
	}
	for {
		op := p.binaryOp()
		prec := pqPrecedence[op]
		if op == "" || prec < minPrec {
			return lhs, nil
		}
		p.next()
		b := &pqBinary{op: op, lhs: lhs}
		if p.is(pqIdent, "bool") {
			if !pqComparison[op] {
				return nil, p.errorf(p.peek(), "bool after %s", op)
			}
			p.next()
		}
		if p.is(pqIdent, "on") || p.is(pqIdent, "ignoring") {
			b.on = p.next().text == "on"
			if b.matching, err = p.labelList(); err != nil {
				return nil, err
			}
			if b.matching == nil {
				b.matching = []string{}
			}
			if p.is(pqIdent, "group_left") || p.is(pqIdent, "group_right") {
				b.group = strings.TrimPrefix(p.next().text, "group_")
				if p.is(pqPunct, "(") {
					if b.include, err = p.labelList(); err != nil {
						return nil, err
					}
				}
			}
		}
		next := prec + 1
		if op == "^" {
			next = prec // right-associative
		}
		if b.rhs, err = p.expr(next); err != nil {
			return nil, err
		}
		lhs = b
	}
}

func (p *pqParser) unary() (pqNode, error) {
	if p.is(pqPunct, "-") || p.is(pqPunct, "+") {
		p.next()
		// Unary minus binds looser than ^ (-2^2 is -4).
		return p.expr(pqPrecedence["^"])
	}
	return p.postfix()
}

// postfix parses a primary expression and its ranges, subqueries, offset
// and @ modifiers.
func (p *pqParser) postfix() (pqNode, error) {
	n, err := p.primary()
	if err != nil {
		return nil, err
	}
	for {
		switch {
		case p.is(pqPunct, "["):
			p.next()
			if t := p.next(); t.kind != pqDuration && t.kind != pqNum {
				return nil, p.errorf(t, "want a duration in [...], got %q", t.text)
			}
			if p.is(pqPunct, ":") {
				p.next()
				if t := p.peek(); t.kind == pqDuration || t.kind == pqNum {
					p.next()
				}
				n = &pqSubquery{expr: n}
			} else if sel, ok := n.(*pqSelector); ok && !sel.ranged {
				sel.ranged = true
			} else {
				return nil, p.errorf(p.peek(), "a range applies to a selector only; a subquery needs [range:step]")
			}
			if err := p.expect("]"); err != nil {
				return nil, err
			}
		case p.is(pqIdent, "offset"):
			p.next()
			if p.is(pqPunct, "-") {
				p.next()
			}
			if t := p.next(); t.kind != pqDuration && t.kind != pqNum {
				return nil, p.errorf(t, "want a duration after offset, got %q", t.text)
			}
		case p.is(pqPunct, "@"):
			p.next()
			t := p.next()
			switch {
			case t.kind == pqNum:
			case t.kind == pqIdent && (t.text == "start" || t.text == "end"):
				if err := p.expect("("); err != nil {
					return nil, err
				}
				if err := p.expect(")"); err != nil {
					return nil, err
				}
			default:
				return nil, p.errorf(t, "want a time or start() or end() after @, got %q", t.text)
			}
		default:
			return n, nil
		}
	}
}

func (p *pqParser) primary() (pqNode, error) {
	t := p.peek()
	switch {
	case t.kind == pqNum:
		p.next()
		return &pqNumber{}, nil
	case t.kind == pqDuration:
		p.next()
		return &pqNumber{}, nil // a duration as a number of seconds
	case t.kind == pqStr:
		p.next()
		if p.is(pqPunct, "{") { // never valid: "name"{...} is written {"name", ...}
			return nil, p.errorf(t, "a string before {")
		}
		return &pqString{value: t.text}, nil
	case t.kind == pqPunct && t.text == "(":
		p.next()
		n, err := p.expr(0)
		if err != nil {
			return nil, err
		}
		return n, p.expect(")")
	case t.kind == pqPunct && t.text == "{":
		return p.selector("")
	case t.kind == pqIdent:
		p.next()
		switch {
		case pqAggregators[t.text] && (p.is(pqPunct, "(") || p.is(pqIdent, "by") || p.is(pqIdent, "without")):
			return p.aggregation(t.text)
		case p.is(pqPunct, "("):
			return p.call(t.text)
		case strings.EqualFold(t.text, "inf") || strings.EqualFold(t.text, "nan"):
			return &pqNumber{}, nil
		case isPromQLKeyword(t.text):
			return nil, p.errorf(t, "unexpected %q", t.text)
		}
		return p.selector(t.text)
	}
	return nil, p.errorf(t, "unexpected %q", t.text)
}

func isPromQLKeyword(s string) bool {
	switch s {
	case "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless", "atan2":
		return true
	}
	return false
}

func (p *pqParser) selector(name string) (pqNode, error) {
	sel := &pqSelector{name: name}
	if p.is(pqPunct, "{") {
		p.next()
		for !p.is(pqPunct, "}") {
			t := p.next()
			if t.kind != pqIdent && t.kind != pqStr {
				return nil, p.errorf(t, "want a label name, got %q", t.text)
			}
			if t.kind == pqStr && (p.is(pqPunct, ",") || p.is(pqPunct, "}")) {
				// {"metric.name", ...}: a quoted metric name.
				if sel.name != "" {
					return nil, p.errorf(t, "a second metric name %q", t.text)
				}
				sel.name = t.text
			} else {
				op := p.next()
				if op.kind != pqPunct || (op.text != "=" && op.text != "!=" && op.text != "=~" && op.text != "!~") {
					return nil, p.errorf(op, "want =, !=, =~ or !~ after %s, got %q", t.text, op.text)
				}
				v := p.next()
				if v.kind != pqStr {
					return nil, p.errorf(v, "want a string after %s%s, got %q", t.text, op.text, v.text)
				}
				if op.text == "=~" || op.text == "!~" {
					if _, err := regexp.Compile("^(?:" + v.text + ")$"); err != nil {
						return nil, p.errorf(v, "%s%s%q: %v", t.text, op.text, v.text, err)
					}
				}
				if t.text == "__name__" && op.text == "=" {
					if sel.name != "" {
						return nil, p.errorf(t, "a second metric name %q", v.text)
					}
					sel.name = v.text
				} else {
					sel.matchers = append(sel.matchers, pqMatcher{label: t.text, op: op.text, value: v.text})
				}
			}
			if p.is(pqPunct, ",") {
				p.next()
			} else if !p.is(pqPunct, "}") {
				return nil, p.errorf(p.peek(), "want , or } in a selector, got %q", p.peek().text)
			}
		}
		p.next()
	}
	if sel.name == "" {
		return nil, fmt.Errorf("a selector without a metric name: this check follows named metrics only")
	}
	return sel, nil
}

func (p *pqParser) call(fn string) (pqNode, error) {
	c := &pqCall{fn: fn}
	p.next() // (
	for !p.is(pqPunct, ")") {
		a, err := p.expr(0)
		if err != nil {
			return nil, err
		}
		c.args = append(c.args, a)
		if p.is(pqPunct, ",") {
			p.next()
		} else if !p.is(pqPunct, ")") {
			return nil, p.errorf(p.peek(), "want , or ) in %s(...), got %q", fn, p.peek().text)
		}
	}
	p.next()
	return c, nil
}

func (p *pqParser) aggregation(op string) (pqNode, error) {
	a := &pqAgg{op: op}
	grouping := func() error {
		if p.is(pqIdent, "by") || p.is(pqIdent, "without") {
			if a.grouping != nil {
				return p.errorf(p.peek(), "%s has two grouping clauses", op)
			}
			a.without = p.next().text == "without"
			l, err := p.labelList()
			if err != nil {
				return err
			}
			a.grouping = append([]string{}, l...)
		}
		return nil
	}
	if err := grouping(); err != nil {
		return nil, err
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var err error
	if pqAggParam[op] {
		if a.param, err = p.expr(0); err != nil {
			return nil, err
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
	}
	if a.expr, err = p.expr(0); err != nil {
		return nil, err
	}
	if err := p.expect(")"); err != nil {
		return nil, err
	}
	return a, grouping()
}

// labelList parses ( label, ... ).
func (p *pqParser) labelList() ([]string, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var out []string
	for !p.is(pqPunct, ")") {
		t := p.next()
		if t.kind != pqIdent && t.kind != pqStr {
			return nil, p.errorf(t, "want a label name, got %q", t.text)
		}
		out = append(out, t.text)
		if p.is(pqPunct, ",") {
			p.next()
		} else if !p.is(pqPunct, ")") {
			return nil, p.errorf(p.peek(), "want , or ) in a label list, got %q", p.peek().text)
		}
	}
	p.next()
	return out, nil
}

// TestParsePromQL: the parser reads what the dashboard writes and what
// PromQL allows around it, into the selectors, groupings and matchings
// the check follows; and refuses what is not PromQL.
func TestParsePromQL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`up`, `up`},
		{`rate(x_total{a="1", b=~"2|3", c!="", d!~'4'}[5m])`, `rate(x_total{a="1",b=~"2|3",c!="",d!~"4"}[r])`},
		{`sum by (pool, le) (rate(h_bucket[1m]))`, `sum by(pool,le)(rate(h_bucket[r]))`},
		{`sum(rate(h_bucket[1m])) by (le)`, `sum by(le)(rate(h_bucket[r]))`},
		{`sum without (instance) (x)`, `sum without(instance)(x)`},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket{pool=~".*"}[1h30m])))`, `histogram_quantile(#,sum by(le)(rate(h_bucket{pool=~".*"}[r])))`},
		{`a / on (pool) group_left (backend) b`, `(a / on(pool) group_left(backend) b)`},
		{`a * ignoring (code) b`, `(a * ignoring(code) b)`},
		{`a + b * c`, `(a + (b * c))`},
		{`a - b - c`, `((a - b) - c)`},
		{`a ^ b ^ c`, `(a ^ (b ^ c))`},
		{`a or b and c`, `(a or (b and c))`},
		{`a > bool 1`, `(a > #)`},
		{`-a`, `a`},
		{`count by (version) (info == 1)`, `count by(version)((info == #))`},
		{`topk(5, x)`, `topk(#,x)`},
		{`max_over_time(rate(x[5m])[1h:1m])`, `max_over_time(sub(rate(x[r])))`},
		{`x offset 5m @ start()`, `x`},
		{`x[5m] offset -1h`, `x[r]`},
		{`{__name__="x", a="b"}`, `x{a="b"}`},
		{`{"x", a="b"}`, `x{a="b"}`},
		{`sum(x) # a comment`, `sum(x)`},
		{`x{a="b",}`, `x{a="b"}`},
		{`1e3 * 0x1f + .5 - Inf`, `(((# * #) + #) - #)`},
		{`x{a="b"}[90s:]`, `sub(x{a="b"})`},
	} {
		n, err := parsePromQL(tc.in)
		if err != nil {
			t.Errorf("parsePromQL(%q): %v", tc.in, err)
			continue
		}
		if got := pqFormat(n); got != tc.want {
			t.Errorf("parsePromQL(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{
		``, `sum(`, `rate(x[5m)`, `x{a=1}`, `x{a~"b"}`, `x{a=~"("}`, `sum by (a x`, `x[5]m`, `{a="b"}`,
		`a +`, `a b`, `"s"{a="b"}`, `x{a="b"`, `sum by (a) without (b) (x)`, `a + bool b`, `(a + b)[5m]`,
	} {
		if n, err := parsePromQL(in); err == nil {
			t.Errorf("parsePromQL(%q) = %s, want an error", in, pqFormat(n))
		}
	}
}

// pqFormat prints a parsed expression in a normal form for the tests.
func pqFormat(n pqNode) string {
	switch n := n.(type) {
	case *pqNumber:
		return "#"
	case *pqString:
		return strconv.Quote(n.value)
	case *pqSubquery:
		return "sub(" + pqFormat(n.expr) + ")"
	case *pqSelector:
		s := n.name
		if len(n.matchers) > 0 {
			var ms []string
			for _, m := range n.matchers {
				ms = append(ms, m.label+m.op+strconv.Quote(m.value))
			}
			s += "{" + strings.Join(ms, ",") + "}"
		}
		if n.ranged {
			s += "[r]"
		}
		return s
	case *pqCall:
		var as []string
		for _, a := range n.args {
			as = append(as, pqFormat(a))
		}
		return n.fn + "(" + strings.Join(as, ",") + ")"
	case *pqAgg:
		s := n.op
		if n.grouping != nil {
			clause := " by"
			if n.without {
				clause = " without"
			}
			s += clause + "(" + strings.Join(n.grouping, ",") + ")"
		}
		s += "("
		if n.param != nil {
			s += pqFormat(n.param) + ","
		}
		return s + pqFormat(n.expr) + ")"
	case *pqBinary:
		s := "(" + pqFormat(n.lhs) + " " + n.op
		if n.matching != nil {
			m := " ignoring"
			if n.on {
				m = " on"
			}
			s += m + "(" + strings.Join(n.matching, ",") + ")"
		}
		if n.group != "" {
			s += " group_" + n.group + "(" + strings.Join(n.include, ",") + ")"
		}
		return s + " " + pqFormat(n.rhs) + ")"
	}
	return fmt.Sprintf("%T", n)
}
