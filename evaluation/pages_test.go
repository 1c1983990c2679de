package evaluation

import (
	"bytes"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/triagegw/triage/rules"
)

// pageEvil holds what a value must not carry into a page unescaped:
// markup, both quotes, an ampersand, a plus, a NUL and a byte that is not
// UTF-8.
const pageEvil = "<script>alert('x'+1)</script> & \"q\" \x00 \xff"

// hostile is a label that breaks out of text, of a quoted attribute and
// of a <script> or <style> element if any of them fails to escape it.
const hostile = `</script><img src=x onerror=alert(1)>"'&`

// The sections each kind of page may have, by id.
var (
	evalSections   = []string{"classes", "reliability", "confusion", "curves", "latency", "reasons", "compare", "slices"}
	abSections     = []string{"deltas", "agreement", "counterfactual"}
	shadowSections = []string{"counterfactual", "classes", "reasons-live", "reasons-shadow"}
)

// pageCase is one input of the page tests: a report for WriteHTML, an
// A/B report for WriteABHTML or a shadow report for WriteShadowHTML, and
// the sections its page must show (every other section of its kind must
// be absent).
type pageCase struct {
	name   string
	report *Report
	ab     *ABReport
	shadow *ShadowReport
	// nilReport renders WriteHTML, WriteABHTML or WriteShadowHTML of nil:
	// "report", "ab" or "shadow".
	nilReport string
	sections  []string
}

func (c pageCase) kind() string {
	switch {
	case c.nilReport == "report" || c.report != nil:
		return "report"
	case c.nilReport == "ab" || c.ab != nil:
		return "ab"
	}
	return "shadow"
}

// render writes the page of c.
func (c pageCase) render(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch c.kind() {
	case "report":
		err = WriteHTML(&b, c.report)
	case "ab":
		err = WriteABHTML(&b, c.ab)
	default:
		err = WriteShadowHTML(&b, c.shadow)
	}
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	return b.String()
}

func pageCases(t *testing.T) []pageCase {
	t.Helper()
	var cases []pageCase
	add := func(name string, r *Report, sections ...string) {
		cases = append(cases, pageCase{name: name, report: r, sections: sections})
	}

	cases = append(cases, pageCase{name: "nil", nilReport: "report"})
	add("zero", &Report{})
	add("empty", &Report{Spec: "tier1 of nothing", Mode: "tier", N: 0,
		Confusion:   Confusion{Labels: []string{"a", "b"}, Counts: [][]int{{0, 0}, {0, 0}}},
		Reliability: make([]Bin, 15), PerClass: map[string]ClassReport{"a": {}, "b": {}},
		Curves:  map[string][]CurvePoint{"a": nil, "b": {{Floor: 0}, {Floor: 0.5}}},
		Latency: map[string]Percentiles{"tier1": {}}, Reasons: map[string]int{}, Slices: map[string]*Report{"x": nil}},
		"classes", "curves")
	add("undefined", &Report{
		Spec: "undefined numbers", N: 3, Accuracy: math.NaN(), MacroF1: math.Inf(1), ECE: math.Inf(-1),
		PerClass:    map[string]ClassReport{"a": {Precision: math.NaN(), F1: math.NaN(), Support: 3}},
		Confusion:   Confusion{Labels: []string{"a", "b", "c"}, Counts: [][]int{{3}, nil}}, // ragged
		Reliability: []Bin{{Lo: 0, Hi: 0.5, Count: 2, Confidence: math.NaN(), Accuracy: math.Inf(1)}, {Lo: 0.5, Hi: 0.5, Count: 1}},
		Curves:      map[string][]CurvePoint{"a": {{Floor: math.NaN(), Precision: math.NaN(), Coverage: math.Inf(1), Count: 1}, {Floor: 2, Precision: 1, Count: 1}}},
		Latency:     map[string]Percentiles{"tier1": {P50: math.NaN(), P90: math.Inf(1), P99: -4, Count: 3}, "tier2": {P50: 5, P90: 5, P99: 5, Count: 1}},
		Reasons:     map[string]int{"below_floor": 0, "default": -2},
		Compare:     &TierComparison{Tier1Acc: math.NaN(), Tier2Acc: 2},
		By:          "realism",
		Slices:      map[string]*Report{"10": {Accuracy: math.NaN()}, "9": {}, "b": {N: 1, Accuracy: 1}},
	}, "classes", "reliability", "confusion", "curves", "latency", "compare", "slices")

	// Everything: per class, reliability, confusion, curves, latency,
	// reasons, the tier-2 comparison and slices.
	add("realistic", htmlTestReport(htmlTestClasses, 4000, 1), evalSections...)
	add("many labels", func() *Report {
		var classes []string
		for i := range 150 {
			classes = append(classes, "class-"+string(rune('a'+i%26))+strings.Repeat("x", i%7))
		}
		return htmlTestReport(classes, 20000, 3)
	}(), evalSections...)

	// Names that need escaping everywhere a value goes: text, RCDATA
	// (the title) and quoted attributes (title="…").
	evil := htmlTestReport(append(append([]string(nil), htmlTestClasses[:6]...), pageEvil, "a+b", `"quoted"`, "it's"), 3000, 2)
	evil.Spec = `rules "<b>bold</b>" & co + 'more'` + "\x00"
	evil.Data = "data/<x>&'y'+\"z\".jsonl"
	evil.DataSHA256 = "<sha>&'\"+0123456789abcdef"
	evil.Mode = "<mode>+&"
	evil.By = `<i>by</i> "realism" + 'x' &`
	evil.Slices[pageEvil] = &Report{N: 3, Accuracy: 1}
	evil.Slices["a+b & 'c'"] = &Report{N: 1234567, Accuracy: 0.5}
	evil.Reasons[pageEvil] = 5
	evil.Latency[pageEvil] = Percentiles{P50: 1, P90: 2, P99: 3, Count: 3}
	add("escapes", evil, evalSections...)

	// Some sections alone, to take each branch of the page's conditions.
	rowsOnly := htmlTestReport([]string{"x", "y", "z"}, 300, 4)
	rowsOnly.Reliability, rowsOnly.Curves, rowsOnly.Latency, rowsOnly.Reasons = nil, nil, nil, nil
	rowsOnly.Compare, rowsOnly.Slices, rowsOnly.Confusion, rowsOnly.DataSHA256 = nil, nil, Confusion{}, ""
	add("rows only, no sha", rowsOnly, "classes")

	relOnly := htmlTestReport([]string{"x", "y"}, 500, 5)
	relOnly.PerClass, relOnly.Curves, relOnly.Slices, relOnly.Data, relOnly.Mode = nil, nil, nil, "", ""
	relOnly.Reasons = nil
	relOnly.Latency = map[string]Percentiles{"tier1": {P50: 100, P90: 120, P99: 140, Count: 500}}
	add("reliability and compare, no rows", relOnly, "reliability", "confusion", "latency", "compare")

	reasonsOnly := &Report{Spec: "rules", Mode: "rules", N: 10, Accuracy: 0.5,
		Reasons: map[string]int{"rule": 4, "default": 3, "below_floor": 3}}
	add("reasons only", reasonsOnly, "reasons")

	// No class weak.
	strong := htmlTestReport([]string{"alpha", "beta"}, 800, 6)
	for k, c := range strong.PerClass {
		c.F1, c.Precision, c.Recall = 0.99, 0.99, 0.99
		strong.PerClass[k] = c
	}
	add("no weak class", strong, evalSections...)

	// A/B reports: the one of TestAB, an empty one and one with names
	// that need escaping.
	cases = append(cases, pageCase{name: "ab nil", nilReport: "ab"}, pageCase{name: "ab zero", ab: &ABReport{}})
	a, b := abOutcomes()
	ra, rb := summarize("tier", []string{"x", "y"}, a), summarize("tier", []string{"x", "y"}, b)
	cases = append(cases, pageCase{name: "ab", ab: AB("A", "B", ra, rb, a, b, []string{"x", "y"}, 500, 7), sections: abSections})
	ea, eb := append([]Outcome(nil), a...), append([]Outcome(nil), b...)
	for i := range ea {
		if i%3 == 0 {
			ea[i].Pred, ea[i].Pool = pageEvil, "pool <a>+'"
			eb[i].Pool = `pool "b" & c`
		}
	}
	evilAB := AB(`spec <A> "one" + 'two' &`, pageEvil, ra, rb, ea, eb, []string{"x", "y", pageEvil}, 200, 9)
	cases = append(cases, pageCase{name: "ab escapes", ab: evilAB, sections: abSections})

	// Shadow reports: the log of TestReadShadowLog, an empty report and a
	// log whose pools and classes need escaping.
	cases = append(cases, pageCase{name: "shadow nil", nilReport: "shadow"}, pageCase{name: "shadow zero", shadow: &ShadowReport{}})
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	code := rules.Decision{Pool: "code", Route: "coding", Class: "code", Score: 0.9, Tier: 1, Reason: rules.ReasonTier1Confident}
	lawLow := rules.Decision{Pool: "general", Class: "law", Score: 0.55, Tier: 1, Reason: rules.ReasonBelowFloor}
	lawT2 := rules.Decision{Pool: "legal", Route: "legal", Class: "law", Score: 0.8, Tier: 2, Reason: rules.ReasonBelowFloor}
	explicit := rules.Decision{Pool: "general", Reason: rules.ReasonRule}
	evilD := rules.Decision{Pool: pageEvil, Class: "a+b & 'c'", Score: 0.7, Tier: 1, Reason: `reason "<x>" + &`}
	shadowCase := func(name string, lines ...string) {
		t.Helper()
		sr, err := ReadShadowLog(strings.NewReader(strings.Join(lines, "")))
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, pageCase{name: name, shadow: sr, sections: shadowSections})
	}
	shadowCase("shadow",
		shadowLine(t, t0.Add(time.Second), code, code, 3, 4),
		shadowLine(t, t0, lawLow, lawT2, 2, 9000),
		shadowLine(t, t0.Add(2*time.Second), explicit, explicit, 1, 1),
		"\n{\"time\":\"2026-11-30T12:00:03Z\",\"live\":{\"po")
	shadowCase("shadow escapes",
		shadowLine(t, t0, code, evilD, 3, 4),
		shadowLine(t, t0.Add(time.Minute), evilD, lawT2, 30, 40000),
		shadowLine(t, t0.Add(time.Hour), evilD, evilD, 3, 4))
	// Times east of UTC print a '+'.
	zone := time.FixedZone("CEST", 2*3600)
	shadowCase("shadow east of utc",
		shadowLine(t, t0.In(zone), code, lawLow, 3, 4),
		shadowLine(t, t0.Add(time.Minute).In(zone), lawT2, code, 30, 40000))
	return cases
}

// ---------------------------------------------------------------------------
// Reading a page

// voidElements have no end tag.
var voidElements = map[string]bool{"area": true, "base": true, "br": true, "col": true, "embed": true, "hr": true,
	"img": true, "input": true, "link": true, "meta": true, "source": true, "track": true, "wbr": true}

// checkPage parses page and checks what holds for every report page: an
// HTML5 document whose every element is closed where it was opened, one
// stylesheet and no script, nothing loaded from elsewhere, no undefined
// number, each chart with its size and accessible name.
func checkPage(t *testing.T, page string) *html.Node {
	t.Helper()
	// Balance, from the tokens: the parser would repair what the page
	// got wrong.
	z := html.NewTokenizer(strings.NewReader(page))
	var open []string
	for tt := z.Next(); tt != html.ErrorToken; tt = z.Next() {
		name, _ := z.TagName()
		switch tt {
		case html.StartTagToken:
			if !voidElements[string(name)] {
				open = append(open, string(name))
			}
		case html.EndTagToken:
			if len(open) == 0 || open[len(open)-1] != string(name) {
				t.Fatalf("</%s> closes %v", name, open)
			}
			open = open[:len(open)-1]
		}
	}
	if z.Err() != io.EOF {
		t.Fatalf("tokenize: %v", z.Err())
	}
	if len(open) != 0 {
		t.Fatalf("never closed: %v", open)
	}

	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if d := doc.FirstChild; d == nil || d.Type != html.DoctypeNode || d.Data != "html" {
		t.Errorf("no <!DOCTYPE html>")
	}
	if n := len(elements(elements(doc, "head")[0], "title")); n != 1 {
		t.Errorf("%d <title> elements in the head", n)
	}
	if n := len(elements(doc, "style")); n != 1 {
		t.Errorf("%d <style> elements", n)
	}
	for _, tag := range []string{"script", "link", "img", "iframe", "object", "embed", "image", "use", "foreignObject", "a"} {
		if n := len(elements(doc, tag)); n > 0 {
			t.Errorf("%d <%s> elements", n, tag)
		}
	}
	walk(doc, func(n *html.Node) {
		if n.Type == html.TextNode {
			for _, bad := range []string{"NaN", "Inf"} {
				if strings.Contains(n.Data, bad) {
					t.Errorf("text %q holds %s", n.Data, bad)
				}
			}
		}
		for _, a := range n.Attr {
			if strings.HasPrefix(a.Key, "on") || a.Key == "href" || a.Key == "src" || strings.HasSuffix(a.Key, ":href") {
				t.Errorf("<%s> has %s=%q", n.Data, a.Key, a.Val)
			}
			if strings.Contains(a.Val, "NaN") || strings.Contains(a.Val, "Inf") {
				t.Errorf("<%s %s=%q>", n.Data, a.Key, a.Val)
			}
			if strings.Contains(a.Val, "url(") && a.Val != "url(#hm-ramp)" {
				t.Errorf("<%s %s=%q> loads something", n.Data, a.Key, a.Val)
			}
			if strings.Contains(a.Val, "zTemplUnsupported") {
				t.Errorf("<%s %s=%q>: a style the template refused", n.Data, a.Key, a.Val)
			}
		}
	})
	for _, svg := range elements(doc, "svg") {
		for _, k := range []string{"width", "height", "viewBox", "role", "aria-label"} {
			if attr(svg, k) == "" {
				t.Errorf("<svg class=%q> lacks %s", attr(svg, "class"), k)
			}
		}
	}
	style := textOf(elements(doc, "style")[0])
	for _, bad := range []string{"@import", "url(", "</", "expression("} {
		if strings.Contains(style, bad) {
			t.Errorf("stylesheet holds %q", bad)
		}
	}
	return doc
}

func walk(n *html.Node, f func(*html.Node)) {
	f(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

// elements are n's descendants named tag (SVG names as the parser
// adjusts them: foreignObject, linearGradient).
func elements(n *html.Node, tag string) []*html.Node {
	var out []*html.Node
	walk(n, func(m *html.Node) {
		if m.Type == html.ElementNode && m.Data == tag {
			out = append(out, m)
		}
	})
	return out
}

// docTitle is the text of the document's title.
func docTitle(doc *html.Node) string {
	return textOf(elements(elements(doc, "head")[0], "title")[0])
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, class string) bool {
	return slices.Contains(strings.Fields(attr(n, "class")), class)
}

// byID is the element whose id is id, or nil.
func byID(doc *html.Node, id string) *html.Node {
	var found *html.Node
	walk(doc, func(n *html.Node) {
		if found == nil && n.Type == html.ElementNode && attr(n, "id") == id {
			found = n
		}
	})
	return found
}

// byClass are the elements of n with class.
func byClass(n *html.Node, class string) []*html.Node {
	var out []*html.Node
	walk(n, func(m *html.Node) {
		if m.Type == html.ElementNode && hasClass(m, class) {
			out = append(out, m)
		}
	})
	return out
}

// textOf is the text n holds.
func textOf(n *html.Node) string {
	var b strings.Builder
	walk(n, func(m *html.Node) {
		if m.Type == html.TextNode {
			b.WriteString(m.Data)
		}
	})
	return b.String()
}

// cellTexts are the texts of a table row's cells.
func cellTexts(tr *html.Node) []string {
	var out []string
	for c := tr.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && (c.Data == "td" || c.Data == "th") {
			out = append(out, textOf(c))
		}
	}
	return out
}

// figureTexts maps each headline figure's label to its value and hint.
func figureTexts(t *testing.T, doc *html.Node) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	for _, f := range byClass(doc, "fig") {
		part := func(class string) string {
			if l := byClass(f, class); len(l) == 1 {
				return textOf(l[0])
			}
			t.Fatalf("figure without one .%s", class)
			return ""
		}
		out[part("l")] = [2]string{part("v"), part("h")}
	}
	return out
}

// chips maps each header chip's label to its value.
func chips(doc *html.Node) map[string]string {
	out := map[string]string{}
	for _, c := range byClass(doc, "chip") {
		b := elements(c, "b")[0]
		out[textOf(b)] = strings.TrimPrefix(textOf(c), textOf(b))
	}
	return out
}

// rowsOf are the texts of the cells of every body row of the table in
// section id.
func rowsOf(t *testing.T, doc *html.Node, id string) [][]string {
	t.Helper()
	sec := byID(doc, id)
	if sec == nil {
		t.Fatalf("no section %q", id)
	}
	var out [][]string
	for _, tbody := range elements(sec, "tbody") {
		for _, tr := range elements(tbody, "tr") {
			out = append(out, cellTexts(tr))
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// The tests

// TestPages renders every case: a well-formed page with the sections its
// report has, and none of the others; the same page twice.
func TestPages(t *testing.T) {
	for _, c := range pageCases(t) {
		t.Run(c.name, func(t *testing.T) {
			page := c.render(t)
			doc := checkPage(t, page)
			all := map[string][]string{"report": evalSections, "ab": abSections, "shadow": shadowSections}[c.kind()]
			for _, id := range all {
				sec := byID(doc, id)
				if want := slices.Contains(c.sections, id); want != (sec != nil) {
					t.Errorf("section %q shown: %v, want %v", id, sec != nil, want)
				}
				if sec != nil && len(elements(sec, "h2")) != 1 {
					t.Errorf("section %q has no heading", id)
				}
			}
			if c.kind() == "report" {
				r := c.report
				if r == nil {
					r = &Report{}
				}
				notice := strings.Contains(textOf(doc), "No items were evaluated")
				if notice != (r.N == 0) {
					t.Errorf("N=%d, empty notice shown: %v", r.N, notice)
				}
			}
			if again := c.render(t); again != page {
				t.Errorf("two renders differ")
			}
		})
	}
}

// TestEvalPageFigures: the numbers of the evaluation page, formatted as
// they always were.
func TestEvalPageFigures(t *testing.T) {
	r := htmlTestReport(htmlTestClasses, 4000, 1)
	doc := checkPage(t, htmlRender(t, r))
	if got := docTitle(doc); got != "triage eval · tier1 of models/heads/subjects" {
		t.Errorf("title %q", got)
	}
	wantChips := map[string]string{"data": "datasets/mmlu-subjects.test.jsonl · sha256 9f2c4e1ab07d", "mode": "tier",
		"N": "4,000", "classes": "14", "sliced by": "realism"}
	if got := chips(doc); !equalMaps(got, wantChips) {
		t.Errorf("chips %q, want %q", got, wantChips)
	}
	if code := elements(byClass(doc, "meta")[0], "code"); len(code) != 1 || attr(code[0], "title") != "sha256 "+r.DataSHA256 {
		t.Errorf("the sha256 chip does not carry the whole hash")
	}
	wantFigs := map[string][2]string{
		"Accuracy": {"0.662", "of 4,000 items"}, "Precision": {"0.672", "macro average"}, "Recall": {"0.704", "macro average"},
		"Macro F1": {"0.678", "mean over classes"}, "Micro F1": {"0.662", "pooled over items"}, "Coverage": {"0.780", "sent to a class route"},
		"Escalation": {"0.191", "sent toward tier 2"}, "ECE": {"0.044", "lower is better"},
	}
	if got := figureTexts(t, doc); !equalMaps(got, wantFigs) {
		t.Errorf("figures %q, want %q", got, wantFigs)
	}
	// With its interval (2,648 right of 4,000), and a rule set's route
	// precision with its own, over the items routed.
	withCI := *r
	withCI.AccuracyCI = Wilson(2648, 4000)
	withCI.Mode, withCI.RoutePrecision, withCI.Routed = "rules", 0.9, 300
	withCI.RoutePrecisionCI = &Interval{0.862, 0.929}
	got := figureTexts(t, checkPage(t, htmlRender(t, &withCI)))
	if h := got["Accuracy"][1]; h != "of 4,000 items · 95% 0.647–0.676" {
		t.Errorf("accuracy hint %q", h)
	}
	if h := got["Route prec."]; h != [2]string{"0.900", "right, of 300 routed · 95% 0.862–0.929"} {
		t.Errorf("route precision figure %q", h)
	}
	lead := 0
	for _, f := range byClass(doc, "fig") {
		if hasClass(f, "lead") {
			lead++
		}
		if i := elements(f, "i"); len(i) != 1 || !regexp.MustCompile(`^width:\d+\.\d%;?$`).MatchString(attr(i[0], "style")) {
			t.Errorf("figure gauge style %q", attr(i[0], "style"))
		}
	}
	if lead != 2 {
		t.Errorf("%d lead figures, want 2", lead)
	}

	rows := rowsOf(t, doc, "classes")
	if len(rows) != len(htmlTestClasses)+1 {
		t.Fatalf("%d rows in the per-class table", len(rows))
	}
	for i, want := range [][]string{
		{"biology", "0.731", "0.619", "0.670", "", "535", "453"},
		{"business", "0.652", "0.515", "0.576", "", "557", "440"},
		{"macro average", "0.672", "0.704", "0.678", "", "4,000", ""},
	} {
		got := rows[[]int{0, 1, len(rows) - 1}[i]]
		if !slices.Equal(got, want) {
			t.Errorf("row %q, want %q", got, want)
		}
	}
	var weak []string
	for _, tr := range elements(byID(doc, "classes"), "tr") {
		if hasClass(tr, "weak") {
			weak = append(weak, cellTexts(tr)[0])
		}
	}
	if !slices.Equal(weak, []string{"business", "computer science", "physics"}) {
		t.Errorf("weak rows %q", weak)
	}

	if got := textOf(elements(byID(doc, "reliability"), "h2")[0]); got != "Reliability ECE 0.044" {
		t.Errorf("reliability heading %q", got)
	}
	pairs := byClass(byID(doc, "confusion"), "who")
	if len(pairs) != 10 || textOf(pairs[0]) != "business→chemistry" || attr(pairs[0], "title") != "business → chemistry" {
		t.Errorf("%d confusions, first %q", len(pairs), textOf(pairs[0]))
	}
	if n := byClass(byID(doc, "confusion"), "n"); textOf(n[0]) != "135" || textOf(byClass(byID(doc, "confusion"), "s")[0]) != "24.2%" {
		t.Errorf("first confusion counts %q", textOf(n[0]))
	}
	if got := len(byClass(byID(doc, "curves"), "small")); got != len(htmlTestClasses) {
		t.Errorf("%d curve cards", got)
	}
	if got := len(byClass(byID(doc, "curves"), "ok")); got != 7 {
		t.Errorf("%d curve cards reach 0.9, want 7", got)
	}
	if got := rowsOf(t, doc, "latency"); !slices.EqualFunc(got, [][]string{
		{"tier1", "182 µs", "431 µs", "1.93 ms", "4,000"}, {"decision", "240 µs", "9.10 ms", "48.2 ms", "4,000"},
	}, slices.Equal) {
		t.Errorf("latency rows %q", got)
	}
	if !strings.Contains(textOf(byID(doc, "latency")), "(log scale)") {
		t.Errorf("latency spanning decades is not said to be on a log scale")
	}
	if got := textOf(elements(byID(doc, "reasons"), "h2")[0]); got != "Decision reasons 4,000 decisions" {
		t.Errorf("reasons heading %q", got)
	}
	var stats []string
	for _, s := range byClass(byID(doc, "compare"), "stat") {
		stats = append(stats, textOf(s))
	}
	if !slices.Equal(stats, []string{"items840", "agreement0.701", "only tier 1 right80", "only tier 2 right240"}) {
		t.Errorf("tier comparison %q", stats)
	}
	if got := rowsOf(t, doc, "slices"); !slices.EqualFunc(got, [][]string{
		{"paraphrased", "1,333", "0.801", "0.772", "0.760", "0.058"},
		{"real-world", "667", "0.655", "0.611", "0.690", "0.104"},
		{"synthetic", "2,000", "0.912", "0.884", "0.830", "0.031"},
	}, slices.Equal) {
		t.Errorf("slice rows %q", got)
	}
}

func TestABPageFigures(t *testing.T) {
	a, b := abOutcomes()
	ra, rb := summarize("tier", []string{"x", "y"}, a), summarize("tier", []string{"x", "y"}, b)
	r := AB("A", "B", ra, rb, a, b, []string{"x", "y"}, 500, 7)
	var buf bytes.Buffer
	if err := WriteABHTML(&buf, r); err != nil {
		t.Fatal(err)
	}
	doc := checkPage(t, buf.String())
	if got := textOf(elements(doc, "h1")[0]); got != "A: AB: B" {
		t.Errorf("heading %q", got)
	}
	if got := chips(doc); !equalMaps(got, map[string]string{"N": "100", "agreement": "0.850"}) {
		t.Errorf("chips %q", got)
	}
	figs := figureTexts(t, doc)
	for label, want := range map[string][2]string{
		"Accuracy A": {"0.700", "A · 95% 0.604–0.781"}, "Accuracy B": {"0.850", "B · 95% 0.767–0.907"}, "McNemar p": {"6.1e-05", "only A right 0 · only B 15"},
		"Routed elsewhere": {"15", "items A and B send apart"}, "Escalation": {"0.000 → 0.000", "A → B"},
	} {
		if figs[label] != want {
			t.Errorf("figure %s = %q, want %q", label, figs[label], want)
		}
	}
	if d := figs["B − A"]; d[0] != "+0.150" || !regexp.MustCompile(`^95% \[\+0\.\d{3}, \+0\.\d{3}\]$`).MatchString(d[1]) {
		t.Errorf("B − A %q", d)
	}
	if l := figs["Latency p50 / p99"]; !regexp.MustCompile(`^A \S+ (µs|ms|s) / \S+ (µs|ms|s)$`).MatchString(l[0]) {
		t.Errorf("latency %q", l)
	}
	if n := len(elements(byID(doc, "deltas"), "rect")); n != 2 {
		t.Errorf("%d delta bars, want one per class", n)
	}
}

func TestShadowPageFigures(t *testing.T) {
	var sr *ShadowReport
	for _, c := range pageCases(t) {
		if c.name == "shadow" {
			sr = c.shadow
		}
	}
	var buf bytes.Buffer
	if err := WriteShadowHTML(&buf, sr); err != nil {
		t.Fatal(err)
	}
	doc := checkPage(t, buf.String())
	if got := textOf(elements(doc, "h1")[0]); got != "3 sampled requests" {
		t.Errorf("heading %q", got)
	}
	want := map[string]string{"from": "2026-11-30T12:00:00Z", "to": "2026-11-30T12:00:02Z", "skipped lines": "1"}
	if got := chips(doc); !equalMaps(got, want) {
		t.Errorf("chips %q, want %q", got, want)
	}
	figs := figureTexts(t, doc)
	for label, want := range map[string][2]string{
		"Same pool": {"0.667", "1 routed elsewhere"}, "Same class": {"1.000", "where both classified"},
		"Decision p50 / p99": {"live 2.00 µs / 3.00 µs", "shadow 4.00 µs / 9.00 ms"}, "Escalation": {"0.333 → 0.333", "live → shadow"},
	} {
		if figs[label] != want {
			t.Errorf("figure %s = %q, want %q", label, figs[label], want)
		}
	}
}

// TestPagesEscapeHostileLabels puts a label that would break out of any
// context through every user-controlled string of each report: it shows,
// decoded, in text, in attributes and in the document title, and the page
// gains no element or attribute from it.
func TestPagesEscapeHostileLabels(t *testing.T) {
	r := htmlTestReport(append(append([]string(nil), htmlTestClasses[:5]...), hostile), 2000, 4)
	r.Spec, r.Data, r.DataSHA256, r.Mode, r.By = hostile, "data/"+hostile+".jsonl", hostile, hostile, hostile
	r.Slices[hostile] = &Report{N: 3, Accuracy: 1}
	r.Reasons[hostile] = 5
	r.Latency[hostile] = Percentiles{P50: 1, P90: 2, P99: 3, Count: 3}

	a, b := abOutcomes()
	for i := range a {
		if i%4 == 0 {
			a[i].Pred, a[i].Pool, b[i].Pool = hostile, hostile, hostile+"b"
		}
	}
	ra, rb := summarize("tier", []string{"x", "y", hostile}, a), summarize("tier", []string{"x", "y", hostile}, b)
	ab := AB(hostile, hostile+"B", ra, rb, a, b, []string{"x", "y", hostile}, 100, 3)

	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	evil := rules.Decision{Pool: hostile, Class: hostile, Score: 0.7, Tier: 1, Reason: hostile}
	plain := rules.Decision{Pool: "general", Class: "law", Score: 0.9, Tier: 1, Reason: rules.ReasonTier1Confident}
	sr, err := ReadShadowLog(strings.NewReader(shadowLine(t, t0, plain, evil, 3, 4) + shadowLine(t, t0.Add(time.Second), evil, plain, 5, 6)))
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name  string
		write func(io.Writer) error
		// title says whether the label is in the document's title, attrs
		// whether the page puts it in attribute values.
		title, attrs bool
	}{
		{"eval", func(w io.Writer) error { return WriteHTML(w, r) }, true, true},
		{"ab", func(w io.Writer) error { return WriteABHTML(w, ab) }, true, false},
		{"shadow", func(w io.Writer) error { return WriteShadowHTML(w, sr) }, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := c.write(&buf); err != nil {
				t.Fatal(err)
			}
			page := buf.String()
			// Raw, the label (or any part of it that is markup) is nowhere:
			// the page has no script, image or event handler of its own.
			for _, raw := range []string{hostile, "</script", "<img", "onerror=alert(1)>", `"'&`} {
				if i := strings.Index(page, raw); i >= 0 {
					t.Errorf("page holds %q raw: …%s…", raw, page[max(0, i-80):min(len(page), i+80)])
				}
			}
			doc := checkPage(t, page)
			var inText, inAttr, inSVG int
			walk(doc, func(n *html.Node) {
				if n.Type == html.TextNode && strings.Contains(n.Data, hostile) {
					inText++
					if p := n.Parent; p != nil && p.Data == "title" && p.Namespace == "svg" {
						inSVG++
					}
				}
				for _, a := range n.Attr {
					if strings.Contains(a.Val, hostile) {
						inAttr++
					}
				}
			})
			if inText < 3 || inSVG < 1 || (inAttr > 0) != c.attrs {
				t.Errorf("the label shows, decoded, in %d texts (%d chart titles) and %d attributes", inText, inSVG, inAttr)
			}
			if got := docTitle(doc); strings.Contains(got, hostile) != c.title {
				t.Errorf("document title %q", got)
			}
			if style := textOf(elements(doc, "style")[0]); strings.Contains(style, "alert") {
				t.Errorf("the label reached the stylesheet")
			}
		})
	}
}

func equalMaps[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
