package evaluation

import (
	"bytes"
	"html/template"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/rules"
)

// oracleEvil holds what a value must not carry into a page unescaped:
// markup, both quotes, an ampersand, a plus, a NUL and a byte that is not
// UTF-8.
const oracleEvil = "<script>alert('x'+1)</script> & \"q\" \x00 \xff"

// oracleCase is one input of the equivalence test: a report for WriteHTML,
// an A/B report for WriteABHTML or a shadow report for WriteShadowHTML.
type oracleCase struct {
	name   string
	report *Report
	ab     *ABReport
	shadow *ShadowReport
	// nilReport renders WriteHTML, WriteABHTML or WriteShadowHTML of nil:
	// "report", "ab" or "shadow".
	nilReport string
}

func oracleCases(t *testing.T) []oracleCase {
	t.Helper()
	var cases []oracleCase
	add := func(name string, r *Report) { cases = append(cases, oracleCase{name: name, report: r}) }

	add("nil", nil)
	cases[len(cases)-1].nilReport = "report"
	add("zero", &Report{})
	add("empty", &Report{Spec: "tier1 of nothing", Mode: "tier", N: 0,
		Confusion:   Confusion{Labels: []string{"a", "b"}, Counts: [][]int{{0, 0}, {0, 0}}},
		Reliability: make([]Bin, 15), PerClass: map[string]ClassReport{"a": {}, "b": {}},
		Curves:  map[string][]CurvePoint{"a": nil, "b": {{Floor: 0}, {Floor: 0.5}}},
		Latency: map[string]Percentiles{"tier1": {}}, Reasons: map[string]int{}, Slices: map[string]*Report{"x": nil}})
	add("undefined", &Report{
		Spec: "undefined numbers", N: 3, Accuracy: math.NaN(), MacroF1: math.Inf(1), ECE: math.Inf(-1),
		PerClass:    map[string]ClassReport{"a": {Precision: math.NaN(), F1: math.NaN(), Support: 3}},
		Confusion:   Confusion{Labels: []string{"a", "b", "c"}, Counts: [][]int{{3}, nil}},
		Reliability: []Bin{{Lo: 0, Hi: 0.5, Count: 2, Confidence: math.NaN(), Accuracy: math.Inf(1)}, {Lo: 0.5, Hi: 0.5, Count: 1}},
		Curves:      map[string][]CurvePoint{"a": {{Floor: math.NaN(), Precision: math.NaN(), Coverage: math.Inf(1), Count: 1}, {Floor: 2, Precision: 1, Count: 1}}},
		Latency:     map[string]Percentiles{"tier1": {P50: math.NaN(), P90: math.Inf(1), P99: -4, Count: 3}, "tier2": {P50: 5, P90: 5, P99: 5, Count: 1}},
		Reasons:     map[string]int{"below_floor": 0, "default": -2},
		Compare:     &TierComparison{Tier1Acc: math.NaN(), Tier2Acc: 2},
		By:          "realism",
		Slices:      map[string]*Report{"10": {Accuracy: math.NaN()}, "9": {}, "b": {N: 1, Accuracy: 1}},
	})

	// Everything: per class, reliability, confusion, curves, latency,
	// reasons, the tier-2 comparison and slices.
	add("realistic", htmlTestReport(htmlTestClasses, 4000, 1))
	add("many labels", func() *Report {
		var classes []string
		for i := range 150 {
			classes = append(classes, "class-"+string(rune('a'+i%26))+strings.Repeat("x", i%7))
		}
		return htmlTestReport(classes, 20000, 3)
	}())

	// Names that need escaping everywhere a value goes: text, RCDATA
	// (the title) and quoted attributes (title="…").
	evil := htmlTestReport(append(append([]string(nil), htmlTestClasses[:6]...), oracleEvil, "a+b", `"quoted"`, "it's"), 3000, 2)
	evil.Spec = `rules "<b>bold</b>" & co + 'more'` + "\x00"
	evil.Data = "data/<x>&'y'+\"z\".jsonl"
	evil.DataSHA256 = "<sha>&'\"+0123456789abcdef"
	evil.Mode = "<mode>+&"
	evil.By = `<i>by</i> "realism" + 'x' &`
	evil.Slices[oracleEvil] = &Report{N: 3, Accuracy: 1}
	evil.Slices["a+b & 'c'"] = &Report{N: 1234567, Accuracy: 0.5}
	evil.Reasons[oracleEvil] = 5
	evil.Latency[oracleEvil] = Percentiles{P50: 1, P90: 2, P99: 3, Count: 3}
	add("escapes", evil)

	// Some sections alone, to take each branch of the page's conditions.
	rowsOnly := htmlTestReport([]string{"x", "y", "z"}, 300, 4)
	rowsOnly.Reliability, rowsOnly.Curves, rowsOnly.Latency, rowsOnly.Reasons = nil, nil, nil, nil
	rowsOnly.Compare, rowsOnly.Slices, rowsOnly.Confusion, rowsOnly.DataSHA256 = nil, nil, Confusion{}, ""
	add("rows only, no sha", rowsOnly)

	relOnly := htmlTestReport([]string{"x", "y"}, 500, 5)
	relOnly.PerClass, relOnly.Curves, relOnly.Slices, relOnly.Data, relOnly.Mode = nil, nil, nil, "", ""
	relOnly.Reasons = nil
	relOnly.Latency = map[string]Percentiles{"tier1": {P50: 100, P90: 120, P99: 140, Count: 500}}
	add("reliability and compare, no rows", relOnly)

	reasonsOnly := &Report{Spec: "rules", Mode: "rules", N: 10, Accuracy: 0.5,
		Reasons: map[string]int{"rule": 4, "default": 3, "below_floor": 3}}
	add("reasons only", reasonsOnly)

	// Each card of the per-class table weak, and tier 1 right everywhere.
	strong := htmlTestReport([]string{"alpha", "beta"}, 800, 6)
	for k, c := range strong.PerClass {
		c.F1, c.Precision, c.Recall = 0.99, 0.99, 0.99
		strong.PerClass[k] = c
	}
	add("no weak class", strong)

	// A/B reports: the one of TestAB, an empty one and one with names
	// that need escaping.
	cases = append(cases, oracleCase{name: "ab nil", nilReport: "ab"}, oracleCase{name: "ab zero", ab: &ABReport{}})
	a, b := abOutcomes()
	ra, rb := summarize("tier", []string{"x", "y"}, a), summarize("tier", []string{"x", "y"}, b)
	cases = append(cases, oracleCase{name: "ab", ab: AB("A", "B", ra, rb, a, b, []string{"x", "y"}, 500, 7)})
	ea, eb := append([]Outcome(nil), a...), append([]Outcome(nil), b...)
	for i := range ea {
		if i%3 == 0 {
			ea[i].Pred, ea[i].Pool = oracleEvil, "pool <a>+'"
			eb[i].Pool = `pool "b" & c`
		}
	}
	evilAB := AB(`spec <A> "one" + 'two' &`, oracleEvil, ra, rb, ea, eb, []string{"x", "y", oracleEvil}, 200, 9)
	cases = append(cases, oracleCase{name: "ab escapes", ab: evilAB})

	// Shadow reports: the log of TestReadShadowLog, an empty report and a
	// log whose pools and classes need escaping.
	cases = append(cases, oracleCase{name: "shadow nil", nilReport: "shadow"}, oracleCase{name: "shadow zero", shadow: &ShadowReport{}})
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	code := rules.Decision{Pool: "code", Route: "coding", Class: "code", Score: 0.9, Tier: 1, Reason: rules.ReasonTier1Confident}
	lawLow := rules.Decision{Pool: "general", Class: "law", Score: 0.55, Tier: 1, Reason: rules.ReasonBelowFloor}
	lawT2 := rules.Decision{Pool: "legal", Route: "legal", Class: "law", Score: 0.8, Tier: 2, Reason: rules.ReasonBelowFloor}
	explicit := rules.Decision{Pool: "general", Reason: rules.ReasonRule}
	evilD := rules.Decision{Pool: oracleEvil, Class: "a+b & 'c'", Score: 0.7, Tier: 1, Reason: `reason "<x>" + &`}
	var log strings.Builder
	log.WriteString(shadowLine(t, t0.Add(time.Second), code, code, 3, 4))
	log.WriteString(shadowLine(t, t0, lawLow, lawT2, 2, 9000))
	log.WriteString(shadowLine(t, t0.Add(2*time.Second), explicit, explicit, 1, 1))
	log.WriteString("\n{\"time\":\"2026-11-30T12:00:03Z\",\"live\":{\"po")
	sr, err := ReadShadowLog(strings.NewReader(log.String()))
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, oracleCase{name: "shadow", shadow: sr})
	log.Reset()
	log.WriteString(shadowLine(t, t0, code, evilD, 3, 4))
	log.WriteString(shadowLine(t, t0.Add(time.Minute), evilD, lawT2, 30, 40000))
	log.WriteString(shadowLine(t, t0.Add(time.Hour), evilD, evilD, 3, 4))
	if sr, err = ReadShadowLog(strings.NewReader(log.String())); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, oracleCase{name: "shadow escapes", shadow: sr})
	// Times east of UTC print a '+', which the page escapes.
	zone := time.FixedZone("CEST", 2*3600)
	log.Reset()
	log.WriteString(shadowLine(t, t0.In(zone), code, lawLow, 3, 4))
	log.WriteString(shadowLine(t, t0.Add(time.Minute).In(zone), lawT2, code, 30, 40000))
	if sr, err = ReadShadowLog(strings.NewReader(log.String())); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, oracleCase{name: "shadow east of utc", shadow: sr})
	return cases
}

// TestRenderMatchesTemplates renders every oracle case with the page
// writers and with the html/template templates the pages were once
// executed from, and wants the same bytes.
func TestRenderMatchesTemplates(t *testing.T) {
	for _, c := range oracleCases(t) {
		t.Run(c.name, func(t *testing.T) {
			var got, want bytes.Buffer
			var err error
			switch {
			case c.nilReport == "report" || c.report != nil:
				err = WriteHTML(&got, c.report)
				r := c.report
				if r == nil {
					r = &Report{}
				}
				oracleExecute(t, &want, htmlPage, oracleHTML(htmlBuildView(r)))
			case c.nilReport == "ab" || c.ab != nil:
				err = WriteABHTML(&got, c.ab)
				r := c.ab
				if r == nil {
					r = &ABReport{}
				}
				oracleExecute(t, &want, abPage, oracleAB(abBuildView(r)))
			default:
				err = WriteShadowHTML(&got, c.shadow)
				r := c.shadow
				if r == nil {
					r = &ShadowReport{}
				}
				oracleExecute(t, &want, shadowPage, oracleShadow(shadowBuildView(r)))
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				g, w := got.String(), want.String()
				i := 0
				for i < len(g) && i < len(w) && g[i] == w[i] {
					i++
				}
				t.Fatalf("%d bytes, the template %d; first difference at byte %d:\nwriter:   %q\ntemplate: %q",
					len(g), len(w), i, g[max(0, i-120):min(len(g), i+120)], w[max(0, i-120):min(len(w), i+120)])
			}
		})
	}
}

// TestHTMLEscapeMatchesTemplates: htmlOut escapes every byte, and bytes
// that are not UTF-8, as html/template does in text, in a title and in a
// quoted attribute; htmlEsc as template.HTMLEscapeString.
func TestHTMLEscapeMatchesTemplates(t *testing.T) {
	var all []byte
	for b := range 256 {
		all = append(all, byte(b))
	}
	inputs := []string{"", "plain", string(all), oracleEvil, "a+b=c", "\x00\x00", "é · → ≥ \ufdd0 \ufffe \U0001F600", "\xe2\x82", "&amp;"}
	contexts := map[string]*template.Template{
		"text":      template.Must(template.New("").Parse(`<p>{{.}}</p>`)),
		"title":     template.Must(template.New("").Parse(`<title>{{.}}</title>`)),
		"attribute": template.Must(template.New("").Parse(`<p title="{{.}}"></p>`)),
	}
	wrap := map[string][2]string{"text": {"<p>", "</p>"}, "title": {"<title>", "</title>"}, "attribute": {`<p title="`, `"></p>`}}
	for _, in := range inputs {
		for name, tmpl := range contexts {
			var want, got bytes.Buffer
			oracleExecute(t, &want, tmpl, in)
			o := htmlOut{&got}
			o.raw(wrap[name][0])
			o.text(in)
			o.raw(wrap[name][1])
			if got.String() != want.String() {
				t.Errorf("%s %q:\n got %q\nwant %q", name, in, got.String(), want.String())
			}
		}
		if got, want := htmlEsc(in), template.HTMLEscapeString(in); got != want {
			t.Errorf("htmlEsc(%q) = %q, want %q", in, got, want)
		}
	}
	// Numbers and style declarations, as the templates printed them.
	for _, n := range []int{0, 7, -3, 1234567} {
		var want, got bytes.Buffer
		oracleExecute(t, &want, contexts["text"], n)
		o := htmlOut{&got}
		o.raw("<p>")
		o.int(n)
		o.raw("</p>")
		if got.String() != want.String() {
			t.Errorf("int %d: got %q, want %q", n, got.String(), want.String())
		}
	}
	style := template.Must(template.New("").Parse(`<i style="{{.}}"></i>`))
	for _, c := range []rawCSS{htmlBarCSS(0), htmlBarCSS(0.4567), htmlBarCSS(math.NaN()), htmlBarCSS(2)} {
		var want, got bytes.Buffer
		oracleExecute(t, &want, style, template.CSS(c))
		o := htmlOut{&got}
		o.raw(`<i style="`)
		o.css(c)
		o.raw(`"></i>`)
		if got.String() != want.String() {
			t.Errorf("css %q: got %q, want %q", c, got.String(), want.String())
		}
	}
}

func oracleExecute(t *testing.T, w *bytes.Buffer, tmpl *template.Template, data any) {
	t.Helper()
	if err := tmpl.Execute(w, data); err != nil {
		t.Fatal(err)
	}
}

// The views as the templates want them: the same fields, with markup and
// style as template.HTML and template.CSS. TestOracleViewsMirror checks
// that no field is missing.

type oracleHTMLView struct {
	Spec, Data, SHA, SHAFull, Mode, N, By string
	Classes                               int
	Empty                                 bool
	Figures                               []oracleFigure

	Rows    []oracleClassRow
	Macro   oracleClassRow
	HasWeak bool

	Confusion      template.HTML
	ConfusionNote  string
	TopConfusions  []oracleConfusionPair
	ConfusionShown bool

	Reliability template.HTML
	ECE         string

	Curves []oracleCurveCard

	Latency    []htmlLatencyRow
	LatencySVG template.HTML
	LatencyLog bool

	Reasons      template.HTML
	ReasonsTotal string

	Compare *oracleCompareView

	Slices    []htmlSliceRow
	SlicesSVG template.HTML
}

type oracleFigure struct {
	Label, Value, Hint string
	Bar                template.CSS
	Lead               bool
}

type oracleClassRow struct {
	Name, P, R, F1, Support, Predicted string
	F1Bar                              template.CSS
	Weak                               bool
}

type oracleConfusionPair struct {
	True, Pred, Count, Share string
	Bar                      template.CSS
}

type oracleCurveCard struct {
	Name, Note, Note2 string
	SVG               template.HTML
	Reached           bool
}

type oracleCompareView struct {
	N, Tier1, Tier2, Agreement, Tier1Only, Tier2Only string
	SVG                                              template.HTML
}

type oracleABView struct {
	R                                           *ABReport
	AccA, AccB, Delta, CI, P, Agree, LatA, LatB string
	EscA, EscB                                  string
	Deltas, Agreement, Counter                  template.HTML
}

type oracleShadowView struct {
	R                                      *ShadowReport
	Agree, ClassAgree, From, To            string
	LatLive, LatShadow, EscLive, EscShadow string
	Counter, Classes                       template.HTML
	ReasonsLive, ReasonsShadow             template.HTML
}

func oracleClass(r htmlClassRow) oracleClassRow {
	return oracleClassRow{Name: r.Name, P: r.P, R: r.R, F1: r.F1, Support: r.Support, Predicted: r.Predicted,
		F1Bar: template.CSS(r.F1Bar), Weak: r.Weak}
}

func oracleHTML(v *htmlView) *oracleHTMLView {
	o := &oracleHTMLView{
		Spec: v.Spec, Data: v.Data, SHA: v.SHA, SHAFull: v.SHAFull, Mode: v.Mode, N: v.N, By: v.By,
		Classes: v.Classes, Empty: v.Empty,
		Macro: oracleClass(v.Macro), HasWeak: v.HasWeak,
		Confusion: template.HTML(v.Confusion), ConfusionNote: v.ConfusionNote, ConfusionShown: v.ConfusionShown,
		Reliability: template.HTML(v.Reliability), ECE: v.ECE,
		Latency: v.Latency, LatencySVG: template.HTML(v.LatencySVG), LatencyLog: v.LatencyLog,
		Reasons: template.HTML(v.Reasons), ReasonsTotal: v.ReasonsTotal,
		Slices: v.Slices, SlicesSVG: template.HTML(v.SlicesSVG),
	}
	for _, f := range v.Figures {
		o.Figures = append(o.Figures, oracleFigure{Label: f.Label, Value: f.Value, Hint: f.Hint, Bar: template.CSS(f.Bar), Lead: f.Lead})
	}
	for _, r := range v.Rows {
		o.Rows = append(o.Rows, oracleClass(r))
	}
	for _, p := range v.TopConfusions {
		o.TopConfusions = append(o.TopConfusions, oracleConfusionPair{True: p.True, Pred: p.Pred, Count: p.Count, Share: p.Share, Bar: template.CSS(p.Bar)})
	}
	for _, c := range v.Curves {
		o.Curves = append(o.Curves, oracleCurveCard{Name: c.Name, Note: c.Note, Note2: c.Note2, SVG: template.HTML(c.SVG), Reached: c.Reached})
	}
	if c := v.Compare; c != nil {
		o.Compare = &oracleCompareView{N: c.N, Tier1: c.Tier1, Tier2: c.Tier2, Agreement: c.Agreement,
			Tier1Only: c.Tier1Only, Tier2Only: c.Tier2Only, SVG: template.HTML(c.SVG)}
	}
	return o
}

func oracleAB(v *abView) *oracleABView {
	return &oracleABView{R: v.R, AccA: v.AccA, AccB: v.AccB, Delta: v.Delta, CI: v.CI, P: v.P, Agree: v.Agree,
		LatA: v.LatA, LatB: v.LatB, EscA: v.EscA, EscB: v.EscB,
		Deltas: template.HTML(v.Deltas), Agreement: template.HTML(v.Agreement), Counter: template.HTML(v.Counter)}
}

func oracleShadow(v *shadowView) *oracleShadowView {
	return &oracleShadowView{R: v.R, Agree: v.Agree, ClassAgree: v.ClassAgree, From: v.From, To: v.To,
		LatLive: v.LatLive, LatShadow: v.LatShadow, EscLive: v.EscLive, EscShadow: v.EscShadow,
		Counter: template.HTML(v.Counter), Classes: template.HTML(v.Classes),
		ReasonsLive: template.HTML(v.ReasonsLive), ReasonsShadow: template.HTML(v.ReasonsShadow)}
}

// TestOracleViewsMirror: each mirror has the fields of its view, by name,
// with rawHTML as template.HTML and rawCSS as template.CSS.
func TestOracleViewsMirror(t *testing.T) {
	mirror := map[reflect.Type]reflect.Type{
		reflect.TypeFor[htmlView]():          reflect.TypeFor[oracleHTMLView](),
		reflect.TypeFor[htmlFigure]():        reflect.TypeFor[oracleFigure](),
		reflect.TypeFor[htmlClassRow]():      reflect.TypeFor[oracleClassRow](),
		reflect.TypeFor[htmlConfusionPair](): reflect.TypeFor[oracleConfusionPair](),
		reflect.TypeFor[htmlCurveCard]():     reflect.TypeFor[oracleCurveCard](),
		reflect.TypeFor[htmlCompareView]():   reflect.TypeFor[oracleCompareView](),
		reflect.TypeFor[abView]():            reflect.TypeFor[oracleABView](),
		reflect.TypeFor[shadowView]():        reflect.TypeFor[oracleShadowView](),
		reflect.TypeFor[rawHTML]():           reflect.TypeFor[template.HTML](),
		reflect.TypeFor[rawCSS]():            reflect.TypeFor[template.CSS](),
	}
	var mirrored func(v, o reflect.Type) bool
	mirrored = func(v, o reflect.Type) bool {
		if m, ok := mirror[v]; ok {
			return m == o
		}
		if v.Kind() != o.Kind() {
			return false
		}
		switch v.Kind() {
		case reflect.Pointer, reflect.Slice:
			return mirrored(v.Elem(), o.Elem())
		}
		return v == o
	}
	for v, o := range mirror {
		if v.Kind() != reflect.Struct {
			continue
		}
		if v.NumField() != o.NumField() {
			t.Errorf("%v has %d fields, its mirror %v %d", v, v.NumField(), o, o.NumField())
			continue
		}
		for i := range v.NumField() {
			fv, fo := v.Field(i), o.Field(i)
			if fv.Name != fo.Name || !mirrored(fv.Type, fo.Type) {
				t.Errorf("%v.%s %v is mirrored as %v.%s %v", v, fv.Name, fv.Type, o, fo.Name, fo.Type)
			}
		}
	}
}

// The templates the pages were executed from until the binary stopped
// linking html/template, kept as the oracle of TestRenderMatchesTemplates.

var htmlPage = template.Must(template.New("report").Parse(htmlPageSource))

const htmlPageSource = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>triage eval · {{.Spec}}</title>
<style>
` + htmlCSS + `</style>
</head>
<body>
<div class="wrap">
<header>
  <div class="kicker">triage · evaluation report</div>
  <h1>{{.Spec}}</h1>
  <div class="meta">
    {{if .Data}}<span class="chip"><b>data</b>{{.Data}}{{if .SHA}} · <code title="sha256 {{.SHAFull}}">sha256 {{.SHA}}</code>{{end}}</span>{{end}}
    {{if .Mode}}<span class="chip"><b>mode</b>{{.Mode}}</span>{{end}}
    <span class="chip"><b>N</b>{{.N}}</span>
    {{if .Classes}}<span class="chip"><b>classes</b>{{.Classes}}</span>{{end}}
    {{if .Slices}}<span class="chip"><b>sliced by</b>{{.By}}</span>{{end}}
  </div>
</header>

<section class="figs" aria-label="headline figures">
{{range .Figures}}  <div class="fig{{if .Lead}} lead{{end}}"><div class="l">{{.Label}}</div><div class="v">{{.Value}}</div><div class="h">{{.Hint}}</div><div class="bar"><i style="{{.Bar}}"></i></div></div>
{{end}}</section>
{{if .Empty}}<div class="notice">No items were evaluated: the report is empty.</div>{{end}}

{{if or .Rows .Reliability}}
<div class="row{{if and .Rows .Reliability}} two{{end}}">
{{if .Rows}}
<section class="card" id="classes">
  <h2>Per class</h2>
  <p class="sub">Precision, recall and F1 per class, in name order.{{if .HasWeak}} Classes with F1 under 0.6 are tinted.{{end}}</p>
  <table>
    <thead><tr><th>class</th><th>precision</th><th>recall</th><th>F1</th><th></th><th>support</th><th>predicted</th></tr></thead>
    <tbody>
{{range .Rows}}    <tr{{if .Weak}} class="weak"{{end}}><td class="name" title="{{.Name}}">{{.Name}}</td><td>{{.P}}</td><td>{{.R}}</td><td class="f1">{{.F1}}</td><td class="barcell"><div class="mini"><i style="{{.F1Bar}}"></i></div></td><td>{{.Support}}</td><td>{{.Predicted}}</td></tr>
{{end}}    <tr class="total"><td>{{.Macro.Name}}</td><td>{{.Macro.P}}</td><td>{{.Macro.R}}</td><td>{{.Macro.F1}}</td><td class="barcell"><div class="mini"><i style="{{.Macro.F1Bar}}"></i></div></td><td>{{.Macro.Support}}</td><td></td></tr>
    </tbody>
  </table>
</section>
{{end}}
{{if .Reliability}}
<section class="card" id="reliability">
  <h2>Reliability <span class="tag">ECE {{.ECE}}</span></h2>
  <p class="sub">Accuracy per bin of the deciding tier's top score. On the dashed diagonal, a score means what it says.</p>
  {{.Reliability}}
  <div class="legend"><span><span class="sw" style="background:#0072B2"></span>accuracy</span><span><span class="sw" style="background:rgba(213,94,0,.22);border:1px dashed #D55E00"></span>gap to calibration</span><span><span class="sw" style="background:#56B4E9"></span>items per bin</span></div>
</section>
{{end}}
</div>
{{end}}

{{if .ConfusionShown}}
<section class="card" id="confusion">
  <h2>Confusion</h2>
  <p class="sub">{{.ConfusionNote}}</p>
  <div class="cm">
    <div class="cm-chart">{{.Confusion}}</div>
    {{if .TopConfusions}}<div class="cm-side">
      <h3>Most frequent confusions</h3>
      <ul class="pairs">
{{range .TopConfusions}}        <li><span class="who" title="{{.True}} → {{.Pred}}">{{.True}}<span class="arrow">→</span>{{.Pred}}</span><span class="n">{{.Count}}</span><span class="s">{{.Share}}</span></li>
{{end}}      </ul>
      <p class="sub" style="margin-top:8px">Count, and share of the true label's items.</p>
    </div>{{end}}
  </div>
</section>
{{end}}

{{if .Curves}}
<section class="card cards" id="curves">
  <h2>Precision and coverage by floor</h2>
  <p class="sub">What a class's score floor costs: as the floor rises, precision climbs and coverage (recall) falls. The green mark is the lowest floor where precision reaches 0.9.</p>
  <div class="legend" style="margin:0 0 10px"><span><span class="sw line" style="border-color:#0072B2"></span>precision</span><span><span class="sw dash" style="border-color:#E69F00"></span>coverage</span><span><span class="sw" style="background:#009E73"></span>first floor with precision ≥ 0.9</span></div>
  <div class="smalls">
{{range .Curves}}    <div class="small{{if .Reached}} ok{{end}}"><div class="t" title="{{.Name}}">{{.Name}}</div>{{.SVG}}<div class="n">{{.Note}}<br>{{.Note2}}</div></div>
{{end}}  </div>
</section>
{{end}}

{{if or .Latency .Reasons .Compare}}
<div class="row three">
{{if .Latency}}
<section class="card" id="latency">
  <h2>Latency</h2>
  <p class="sub">Per tier, p50, p90 and p99{{if .LatencyLog}} (log scale){{end}}.</p>
  <div class="lat">
  <table>
    <thead><tr><th>tier</th><th>p50</th><th>p90</th><th>p99</th><th>count</th></tr></thead>
    <tbody>
{{range .Latency}}    <tr><td class="name">{{.Tier}}</td><td>{{.P50}}</td><td>{{.P90}}</td><td>{{.P99}}</td><td>{{.Count}}</td></tr>
{{end}}    </tbody>
  </table>
  {{if .LatencySVG}}<div class="lat-chart">{{.LatencySVG}}</div>{{end}}
  </div>
</section>
{{end}}
{{if .Reasons}}
<section class="card" id="reasons">
  <h2>Decision reasons <span class="tag">{{.ReasonsTotal}} decisions</span></h2>
  <p class="sub">Why each item went where it went.</p>
  {{.Reasons}}
  <div class="legend"><span><span class="sw" style="background:#E69F00"></span>sends toward tier 2</span><span><span class="sw" style="background:#0072B2"></span>decided without tier 2</span></div>
</section>
{{end}}
{{with .Compare}}
<section class="card" id="compare">
  <h2>Tier 1 vs tier 2</h2>
  <p class="sub">Over the {{.N}} items where both tiers ran.</p>
  {{.SVG}}
  <div class="stats">
    <div class="stat"><div class="l">items</div><div class="v">{{.N}}</div></div>
    <div class="stat"><div class="l">agreement</div><div class="v">{{.Agreement}}</div></div>
    <div class="stat"><div class="l">only tier 1 right</div><div class="v">{{.Tier1Only}}</div></div>
    <div class="stat"><div class="l">only tier 2 right</div><div class="v">{{.Tier2Only}}</div></div>
  </div>
</section>
{{end}}
</div>
{{end}}

{{if .Slices}}
<section class="card" id="slices">
  <h2>Slices <span class="tag">by {{.By}}</span></h2>
  <p class="sub">The report repeated per value of {{.By}}; the dashed line is the overall accuracy.</p>
  <div class="split">
    <table>
      <thead><tr><th>{{.By}}</th><th>N</th><th>accuracy</th><th>macro F1</th><th>coverage</th><th>ECE</th></tr></thead>
      <tbody>
{{range .Slices}}      <tr><td class="name" title="{{.Value}}">{{.Value}}</td><td>{{.N}}</td><td>{{.Acc}}</td><td>{{.F1}}</td><td>{{.Coverage}}</td><td>{{.ECE}}</td></tr>
{{end}}      </tbody>
    </table>
    <div>{{.SlicesSVG}}</div>
  </div>
</section>
{{end}}

<footer>triage eval · a self-contained page: no script, no external resources</footer>
</div>
</body>
</html>
`

var abPage = template.Must(template.New("ab").Parse(abPageSource))

const abPageSource = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>triage ab · {{.R.SpecA}} vs {{.R.SpecB}}</title>
<style>` + htmlCSS + `</style>
</head>
<body>
<div class="wrap">
<header>
  <div class="kicker">triage · A/B comparison</div>
  <h1>A: {{.R.SpecA}}<br>B: {{.R.SpecB}}</h1>
  <div class="meta"><span class="chip"><b>N</b>{{.R.N}}</span><span class="chip"><b>agreement</b>{{.Agree}}</span></div>
</header>
<section class="figs" aria-label="headline figures">
  <div class="fig lead"><div class="l">Accuracy A</div><div class="v">{{.AccA}}</div><div class="h">{{.R.SpecA}}</div></div>
  <div class="fig lead"><div class="l">Accuracy B</div><div class="v">{{.AccB}}</div><div class="h">{{.R.SpecB}}</div></div>
  <div class="fig"><div class="l">B − A</div><div class="v">{{.Delta}}</div><div class="h">95% {{.CI}}</div></div>
  <div class="fig"><div class="l">McNemar p</div><div class="v">{{.P}}</div><div class="h">only A right {{.R.McNemar.OnlyA}} · only B {{.R.McNemar.OnlyB}}</div></div>
  <div class="fig"><div class="l">Routed elsewhere</div><div class="v">{{.R.Differ}}</div><div class="h">items A and B send apart</div></div>
  <div class="fig"><div class="l">Latency p50 / p99</div><div class="v">A {{.LatA}}</div><div class="h">B {{.LatB}}</div></div>
  <div class="fig"><div class="l">Escalation</div><div class="v">{{.EscA}} → {{.EscB}}</div><div class="h">A → B</div></div>
</section>
{{if .Deltas}}<section class="card"><h2>F1 per class, B − A</h2><p class="sub">Bars are the change, whiskers the 95% bootstrap interval; blue where B is better.</p>{{.Deltas}}</section>{{end}}
{{if .Agreement}}<section class="card"><h2>Agreement</h2><p class="sub">Rows: A's prediction; columns: B's.</p>{{.Agreement}}</section>{{end}}
{{if .Counter}}<section class="card"><h2>Routing counterfactual</h2><p class="sub">Rows: where A would send an item (a pool for rule sets, else the class); columns: where B would.</p>{{.Counter}}</section>{{end}}
</div>
</body>
</html>
`

var shadowPage = template.Must(template.New("shadow").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>triage ab · live vs shadow</title>
<style>` + htmlCSS + `</style>
</head>
<body>
<div class="wrap">
<header>
  <div class="kicker">triage · live vs shadow decisions</div>
  <h1>{{.R.N}} sampled requests</h1>
  <div class="meta"><span class="chip"><b>from</b>{{.From}}</span><span class="chip"><b>to</b>{{.To}}</span>{{if .R.Skipped}}<span class="chip"><b>skipped lines</b>{{.R.Skipped}}</span>{{end}}</div>
</header>
<section class="figs" aria-label="headline figures">
  <div class="fig lead"><div class="l">Same pool</div><div class="v">{{.Agree}}</div><div class="h">{{.R.Differ}} routed elsewhere</div></div>
  <div class="fig"><div class="l">Same class</div><div class="v">{{.ClassAgree}}</div><div class="h">where both classified</div></div>
  <div class="fig"><div class="l">Decision p50 / p99</div><div class="v">live {{.LatLive}}</div><div class="h">shadow {{.LatShadow}}</div></div>
  <div class="fig"><div class="l">Escalation</div><div class="v">{{.EscLive}} → {{.EscShadow}}</div><div class="h">live → shadow</div></div>
</section>
<p class="sub">Live traffic has no labels: these figures are agreement and cost, not accuracy.</p>
{{if .Counter}}<section class="card"><h2>Routing counterfactual</h2><p class="sub">Rows: the pool live routing chose; columns: the pool the shadow rules would have.</p>{{.Counter}}</section>{{end}}
{{if .Classes}}<section class="card"><h2>Top classes</h2><p class="sub">Rows: the live deciding tier's class; columns: the shadow's.</p>{{.Classes}}</section>{{end}}
{{if .ReasonsLive}}<section class="card"><h2>Reasons, live</h2>{{.ReasonsLive}}</section>{{end}}
{{if .ReasonsShadow}}<section class="card"><h2>Reasons, shadow</h2>{{.ReasonsShadow}}</section>{{end}}
</div>
</body>
</html>
`))
