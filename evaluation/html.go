package evaluation

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WriteHTML renders r as one self-contained HTML page: inline CSS and
// inline SVG charts drawn here, no script, no external resource. Class
// names, specs and slice values are user data and are escaped everywhere.
// Sections with nothing to show are left out; a nil or empty report still
// renders a valid page. The page is built in memory and written at once.
func WriteHTML(w io.Writer, r *Report) error {
	if r == nil {
		r = &Report{}
	}
	return writePage(w, func(o htmlOut) { htmlWritePage(o, htmlBuildView(r)) })
}

// The palette: Okabe–Ito (colour-blind safe) for categories, a
// single-hue blue ramp for intensities.
const (
	htmlBlue   = "#0072B2"
	htmlOrange = "#E69F00"
	htmlSky    = "#56B4E9"
	htmlGreen  = "#009E73"
	htmlVerm   = "#D55E00"
	htmlInk    = "#1f2430"
	htmlMuted  = "#6b7280"
	htmlGrid   = "#e6e8ec"
	htmlEmpty  = "#f3f4f6"
)

// htmlBlues is ColorBrewer's Blues-9, the heatmap's ramp.
var htmlBlues = [][3]float64{
	{0xf7, 0xfb, 0xff}, {0xde, 0xeb, 0xf7}, {0xc6, 0xdb, 0xef}, {0x9e, 0xca, 0xe1},
	{0x6b, 0xae, 0xd6}, {0x42, 0x92, 0xc6}, {0x21, 0x71, 0xb5}, {0x08, 0x51, 0x9c}, {0x08, 0x30, 0x6b},
}

// htmlWeakF1 is the F1 under which a class is tinted as weak.
const htmlWeakF1 = 0.6

// htmlPrecisionMark is the precision a curve's marker looks for.
const htmlPrecisionMark = 0.9

// ---------------------------------------------------------------------------
// Writing a page
//
// The pages are written by plain Go code rather than by html/template:
// executing any template makes the linker keep every exported method of
// every type in the binary. The writers escape exactly as html/template
// escaped the same values in the same places (render_oracle_test.go keeps
// the templates and compares).

// rawHTML is markup built here (the SVG charts, whose text went through
// htmlEsc): a page writes it as it is.
type rawHTML string

// rawCSS is a style declaration built here from numbers.
type rawCSS string

// htmlOut writes a page: markup as it is, values escaped.
type htmlOut struct{ b *bytes.Buffer }

// raw writes markup.
func (o htmlOut) raw(s string) { o.b.WriteString(s) }

// html writes markup built here.
func (o htmlOut) html(h rawHTML) { o.b.WriteString(string(h)) }

// text writes a value in text, in a <title> or in a quoted attribute
// value, escaped as html/template escapes it there: NUL, both quotes, '&',
// '+', '<' and '>'.
func (o htmlOut) text(s string) { o.b.Write(htmlEscapeAppend(o.b.AvailableBuffer(), s, true)) }

// int writes a number as the templates printed it.
func (o htmlOut) int(n int) { o.text(strconv.Itoa(n)) }

// writePage builds a page in memory and writes it to w at once.
func writePage(w io.Writer, page func(htmlOut)) error {
	var buf bytes.Buffer
	page(htmlOut{&buf})
	_, err := w.Write(buf.Bytes())
	return err
}

// cells writes vals as escaped table cells, between a row's opening and
// closing cell tags.
func (o htmlOut) cells(vals ...string) {
	for i, v := range vals {
		if i > 0 {
			o.raw(`</td><td>`)
		}
		o.text(v)
	}
}

// css writes a style declaration into a quoted style attribute; like
// html/template, it escapes it as any attribute value (declarations made
// of numbers hold nothing to escape).
func (o htmlOut) css(c rawCSS) { o.text(string(c)) }

// htmlEscapeAppend appends s to dst with NUL replaced by U+FFFD and '"',
// '&', '\”, '<', '>' and, when plus is set, '+' replaced by character
// references, as html/template escapes text and attribute values. Other
// bytes, invalid UTF-8 included, are copied.
func htmlEscapeAppend(dst []byte, s string, plus bool) []byte {
	last := 0
	for i := 0; i < len(s); i++ {
		var rep string
		switch s[i] {
		case 0:
			rep = "\uFFFD"
		case '"':
			rep = "&#34;"
		case '&':
			rep = "&amp;"
		case '\'':
			rep = "&#39;"
		case '+':
			if !plus {
				continue
			}
			rep = "&#43;"
		case '<':
			rep = "&lt;"
		case '>':
			rep = "&gt;"
		default:
			continue
		}
		dst = append(dst, s[last:i]...)
		dst = append(dst, rep...)
		last = i + 1
	}
	return append(dst, s[last:]...)
}

// ---------------------------------------------------------------------------
// View model

type htmlView struct {
	Spec, Data, SHA, SHAFull, Mode, N, By string
	Classes                               int
	Empty                                 bool
	Figures                               []htmlFigure

	Rows    []htmlClassRow
	Macro   htmlClassRow
	HasWeak bool

	Confusion      rawHTML
	ConfusionNote  string
	TopConfusions  []htmlConfusionPair
	ConfusionShown bool

	Reliability rawHTML
	ECE         string

	Curves []htmlCurveCard

	Latency    []htmlLatencyRow
	LatencySVG rawHTML
	LatencyLog bool

	Reasons      rawHTML
	ReasonsTotal string

	Compare *htmlCompareView

	Slices    []htmlSliceRow
	SlicesSVG rawHTML
}

type htmlFigure struct {
	Label, Value, Hint string
	Bar                rawCSS
	Lead               bool
}

type htmlClassRow struct {
	Name, P, R, F1, Support, Predicted string
	F1Bar                              rawCSS
	Weak                               bool
}

type htmlConfusionPair struct {
	True, Pred, Count, Share string
	Bar                      rawCSS
}

type htmlCurveCard struct {
	Name, Note, Note2 string
	SVG               rawHTML
	Reached           bool
}

type htmlLatencyRow struct {
	Tier, P50, P90, P99, Count string
}

type htmlCompareView struct {
	N, Tier1, Tier2, Agreement, Tier1Only, Tier2Only string
	SVG                                              rawHTML
}

type htmlSliceRow struct {
	Value, N, Acc, F1, Coverage, ECE string
}

func htmlBuildView(r *Report) *htmlView {
	v := &htmlView{
		Spec: r.Spec, Data: r.Data, Mode: r.Mode, N: htmlCount(r.N), By: r.By,
		Classes: len(r.PerClass), Empty: r.N == 0,
	}
	if v.Spec == "" {
		v.Spec = "evaluation"
	}
	if r.DataSHA256 != "" {
		v.SHAFull = r.DataSHA256
		v.SHA = htmlTruncate(r.DataSHA256, 12, "")
	}
	v.Figures = []htmlFigure{
		{Label: "Accuracy", Value: htmlRate(r.Accuracy), Bar: htmlBarCSS(r.Accuracy), Lead: true, Hint: "of " + htmlCount(r.N) + " items"},
		{Label: "Precision", Value: htmlRate(r.MacroPrecision), Bar: htmlBarCSS(r.MacroPrecision), Hint: "macro average"},
		{Label: "Recall", Value: htmlRate(r.MacroRecall), Bar: htmlBarCSS(r.MacroRecall), Hint: "macro average"},
		{Label: "Macro F1", Value: htmlRate(r.MacroF1), Bar: htmlBarCSS(r.MacroF1), Lead: true, Hint: "mean over classes"},
		{Label: "Micro F1", Value: htmlRate(r.MicroF1), Bar: htmlBarCSS(r.MicroF1), Hint: "pooled over items"},
		{Label: "Coverage", Value: htmlRate(r.Coverage), Bar: htmlBarCSS(r.Coverage), Hint: "sent to a class route"},
		{Label: "Escalation", Value: htmlRate(r.EscalationRate), Bar: htmlBarCSS(r.EscalationRate), Hint: "sent toward tier 2"},
		{Label: "ECE", Value: htmlRate(r.ECE), Bar: htmlBarCSS(r.ECE), Hint: "lower is better"},
	}
	if r.N == 0 { // nothing was measured: no figure, rather than zeros
		for i := range v.Figures {
			v.Figures[i].Value, v.Figures[i].Bar = "–", htmlBarCSS(0)
		}
	}

	// Per-class table, in name order.
	names := htmlSortedKeys(r.PerClass)
	support := 0
	for _, name := range names {
		c := r.PerClass[name]
		row := htmlClassRow{
			Name: name, P: htmlRate(c.Precision), R: htmlRate(c.Recall), F1: htmlRate(c.F1),
			Support: htmlCount(c.Support), Predicted: htmlCount(c.Predicted), F1Bar: htmlBarCSS(c.F1),
			Weak: c.Support > 0 && htmlFinite(c.F1) < htmlWeakF1,
		}
		v.HasWeak = v.HasWeak || row.Weak
		v.Rows = append(v.Rows, row)
		support += max(c.Support, 0)
	}
	if len(v.Rows) > 0 {
		v.Macro = htmlClassRow{Name: "macro average", P: htmlRate(r.MacroPrecision), R: htmlRate(r.MacroRecall),
			F1: htmlRate(r.MacroF1), Support: htmlCount(support), Predicted: "", F1Bar: htmlBarCSS(r.MacroF1)}
	}

	v.Confusion, v.ConfusionNote, v.TopConfusions = htmlConfusionSVG(r.Confusion)
	v.ConfusionShown = v.Confusion != ""

	v.Reliability = htmlReliabilitySVG(r.Reliability)
	v.ECE = htmlRate(r.ECE)

	for _, name := range htmlSortedKeys(r.Curves) {
		if card, ok := htmlCurveChart(name, r.Curves[name]); ok {
			v.Curves = append(v.Curves, card)
		}
	}

	v.Latency, v.LatencySVG, v.LatencyLog = htmlLatency(r.Latency)
	v.Reasons, v.ReasonsTotal = htmlReasonsSVG(r.Reasons)

	if c := r.Compare; c != nil {
		v.Compare = &htmlCompareView{
			N: htmlCount(c.N), Tier1: htmlRate(c.Tier1Acc), Tier2: htmlRate(c.Tier2Acc),
			Agreement: htmlRate(c.Agreement), Tier1Only: htmlCount(c.Tier1Only), Tier2Only: htmlCount(c.Tier2Only),
			SVG: htmlCompareSVG(c),
		}
	}

	v.Slices, v.SlicesSVG = htmlSlices(r)
	return v
}

// ---------------------------------------------------------------------------
// Formatting

// htmlFinite turns NaN and infinities into 0, so nothing undefined reaches
// the page.
func htmlFinite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// htmlRate formats a rate with three decimals ("–" when undefined).
func htmlRate(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', 3, 64)
}

// htmlCount formats a count with thousands separators.
func htmlCount(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// htmlShortCount abbreviates a count for a small space (1.2k, 34k, 1.5M).
func htmlShortCount(n int) string {
	switch {
	case n < 1000:
		return strconv.Itoa(n)
	case n < 10000:
		return strconv.FormatFloat(float64(n)/1000, 'f', 1, 64) + "k"
	case n < 1000000:
		return strconv.Itoa(n/1000) + "k"
	default:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	}
}

// htmlMicros formats a latency given in microseconds.
func htmlMicros(us float64) string {
	us = htmlFinite(us)
	switch {
	case us == 0:
		return "0 µs"
	case us < 10:
		return strconv.FormatFloat(us, 'f', 2, 64) + " µs"
	case us < 1000:
		return strconv.FormatFloat(us, 'f', 0, 64) + " µs"
	case us < 10000:
		return strconv.FormatFloat(us/1000, 'f', 2, 64) + " ms"
	case us < 1e6:
		return strconv.FormatFloat(us/1000, 'f', 1, 64) + " ms"
	default:
		return strconv.FormatFloat(us/1e6, 'f', 2, 64) + " s"
	}
}

// htmlMicrosTick formats an axis tick in microseconds, without the
// decimals a round tick does not need ("1 ms", "250 µs").
func htmlMicrosTick(us float64) string {
	us = htmlFinite(us)
	unit, div := "µs", 1.0
	switch {
	case us >= 1e6:
		unit, div = "s", 1e6
	case us >= 1000:
		unit, div = "ms", 1000
	}
	return strconv.FormatFloat(us/div, 'f', -1, 64) + " " + unit
}

// htmlN formats an SVG coordinate: two decimals at most, never NaN.
func htmlN(x float64) string {
	x = math.Round(htmlFinite(x)*100) / 100
	if x == 0 {
		return "0"
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}

func htmlClamp01(x float64) float64 {
	x = htmlFinite(x)
	return math.Max(0, math.Min(1, x))
}

// htmlBarCSS is the width of a 0..1 bar as trusted CSS built from a number.
func htmlBarCSS(x float64) rawCSS {
	return rawCSS("width:" + strconv.FormatFloat(htmlClamp01(x)*100, 'f', 1, 64) + "%")
}

// htmlTruncate shortens s to at most n runes, ending with suffix when cut.
func htmlTruncate(s string, n int, suffix string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + suffix
}

// htmlSortedKeys returns m's keys in natural order.
func htmlSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return htmlNaturalLess(keys[a], keys[b]) })
	return keys
}

// htmlNaturalLess orders strings with runs of digits compared as numbers
// ("class-9" before "class-10"), then bytewise.
func htmlNaturalLess(a, b string) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		if htmlIsDigit(ca) && htmlIsDigit(cb) {
			si, sj := i, j
			for i < len(a) && htmlIsDigit(a[i]) {
				i++
			}
			for j < len(b) && htmlIsDigit(b[j]) {
				j++
			}
			na := strings.TrimLeft(a[si:i], "0")
			nb := strings.TrimLeft(b[sj:j], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			continue
		}
		if ca != cb {
			return ca < cb
		}
		i++
		j++
	}
	if len(a)-i != len(b)-j {
		return len(a)-i < len(b)-j
	}
	return a < b
}

func htmlIsDigit(c byte) bool { return c >= '0' && c <= '9' }

// htmlBlue returns the ramp's colour at t in [0,1].
func htmlRamp(t float64) string {
	t = htmlClamp01(t) * float64(len(htmlBlues)-1)
	i := int(math.Floor(t))
	if i >= len(htmlBlues)-1 {
		i = len(htmlBlues) - 2
	}
	f := t - float64(i)
	a, b := htmlBlues[i], htmlBlues[i+1]
	return fmt.Sprintf("#%02x%02x%02x",
		int(math.Round(a[0]+(b[0]-a[0])*f)), int(math.Round(a[1]+(b[1]-a[1])*f)), int(math.Round(a[2]+(b[2]-a[2])*f)))
}

// ---------------------------------------------------------------------------
// SVG building

// htmlSVG accumulates SVG markup. Numbers go through htmlN; text content
// through htmlEsc; attribute values other than numbers are constants.
type htmlSVG struct{ b strings.Builder }

// htmlEsc escapes text for the charts as template.HTMLEscapeString did:
// like htmlOut.text, but '+' is left alone.
func htmlEsc(s string) string {
	if !strings.ContainsAny(s, "\x00\"&'<>") {
		return s
	}
	return string(htmlEscapeAppend(nil, s, false))
}

func (s *htmlSVG) open(w, h float64, class, label string) {
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" class="%s" width="%s" height="%s" viewBox="0 0 %s %s" role="img" aria-label="%s">`,
		class, htmlN(w), htmlN(h), htmlN(w), htmlN(h), htmlEsc(label))
}

func (s *htmlSVG) close() rawHTML {
	s.b.WriteString("</svg>")
	return rawHTML(s.b.String())
}

func (s *htmlSVG) rect(x, y, w, h float64, attrs string) {
	fmt.Fprintf(&s.b, `<rect x="%s" y="%s" width="%s" height="%s" %s/>`, htmlN(x), htmlN(y), htmlN(math.Max(0, w)), htmlN(math.Max(0, h)), attrs)
}

// rectTitled draws a rect with a hover title (escaped).
func (s *htmlSVG) rectTitled(x, y, w, h float64, attrs, title string) {
	fmt.Fprintf(&s.b, `<rect x="%s" y="%s" width="%s" height="%s" %s><title>%s</title></rect>`,
		htmlN(x), htmlN(y), htmlN(math.Max(0, w)), htmlN(math.Max(0, h)), attrs, htmlEsc(title))
}

func (s *htmlSVG) line(x1, y1, x2, y2 float64, attrs string) {
	fmt.Fprintf(&s.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" %s/>`, htmlN(x1), htmlN(y1), htmlN(x2), htmlN(y2), attrs)
}

// text writes escaped text at (x, y).
func (s *htmlSVG) text(x, y float64, attrs, content string) {
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" %s>%s</text>`, htmlN(x), htmlN(y), attrs, htmlEsc(content))
}

// textTitled writes escaped text with an escaped hover title (the full
// value of a truncated label).
func (s *htmlSVG) textTitled(x, y float64, attrs, content, title string) {
	if title == content {
		s.text(x, y, attrs, content)
		return
	}
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" %s><title>%s</title>%s</text>`, htmlN(x), htmlN(y), attrs, htmlEsc(title), htmlEsc(content))
}

// polyline joins points (pairs) with a line.
func (s *htmlSVG) polyline(pts [][2]float64, attrs string) {
	if len(pts) == 0 {
		return
	}
	var b strings.Builder
	for i, p := range pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(htmlN(p[0]) + "," + htmlN(p[1]))
	}
	fmt.Fprintf(&s.b, `<polyline points="%s" fill="none" %s/>`, b.String(), attrs)
}

func (s *htmlSVG) circle(x, y, r float64, attrs string) {
	fmt.Fprintf(&s.b, `<circle cx="%s" cy="%s" r="%s" %s/>`, htmlN(x), htmlN(y), htmlN(r), attrs)
}

// htmlTextWidth estimates the width of text at a font size (sans-serif).
func htmlTextWidth(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * size * 0.6
}

// ---------------------------------------------------------------------------
// Confusion heatmap

func htmlConfusionSVG(c Confusion) (rawHTML, string, []htmlConfusionPair) {
	n := len(c.Labels)
	if n == 0 {
		return "", "", nil
	}
	count := func(i, j int) int {
		if i < len(c.Counts) && j < len(c.Counts[i]) && c.Counts[i][j] > 0 {
			return c.Counts[i][j]
		}
		return 0
	}
	rowSum := make([]int, n)
	total := 0
	for i := range n {
		for j := range n {
			rowSum[i] += count(i, j)
		}
		total += rowSum[i]
	}
	if total == 0 {
		return "", "", nil
	}

	cell := math.Max(3, math.Min(38, math.Floor(760/float64(n))))
	showLabels := cell >= 8
	showCounts := cell >= 20
	drawEmpty := n <= 60
	font := math.Max(7, math.Min(12, cell-2))
	labels := make([]string, n)
	maxW := 0.0
	for i, l := range c.Labels {
		labels[i] = htmlTruncate(l, 22, "…")
		maxW = math.Max(maxW, htmlTextWidth(labels[i], font))
	}
	labW := 8.0
	if showLabels {
		labW = maxW + 10
	}
	grid := cell * float64(n)
	const axisTitle = 22.0
	left := axisTitle + labW
	top := axisTitle + 8.0
	if showLabels {
		top = axisTitle + labW*0.71 + 10
	}
	right := 60.0
	if showLabels {
		right = math.Max(right, labW*0.71-cell/2+12)
	}
	legendH := 46.0
	W, H := left+grid+right, top+grid+legendH

	var s htmlSVG
	s.open(W, H, "heatmap", "confusion matrix")
	s.text(left+grid/2, 14, `text-anchor="middle" class="axis-title"`, "predicted →")
	fmt.Fprintf(&s.b, `<text transform="translate(12 %s) rotate(-90)" text-anchor="middle" class="axis-title">← true label</text>`, htmlN(top+grid/2))
	s.rect(left, top, grid, grid, `fill="`+htmlEmpty+`"`)

	gap := 1.0
	if cell < 8 {
		gap = 0
	}
	for i := range n {
		y := top + float64(i)*cell
		for j := range n {
			x := left + float64(j)*cell
			k := count(i, j)
			if k == 0 {
				if drawEmpty {
					s.rect(x+gap/2, y+gap/2, cell-gap, cell-gap, `fill="#fafbfc"`)
				}
				continue
			}
			share := float64(k) / float64(rowSum[i])
			shade := 0.1 + 0.9*share
			attrs := `fill="` + htmlRamp(shade) + `"`
			if i == j && cell >= 10 {
				attrs += ` stroke="` + htmlInk + `" stroke-opacity="0.45" stroke-width="1"`
			}
			title := fmt.Sprintf("true %s → predicted %s: %s of %s (%.1f%%)", c.Labels[i], c.Labels[j], htmlCount(k), htmlCount(rowSum[i]), share*100)
			s.rectTitled(x+gap/2, y+gap/2, cell-gap, cell-gap, attrs, title)
			if showCounts {
				txt := htmlShortCount(k)
				cf := math.Min(11, cell*0.32)
				if htmlTextWidth(txt, cf) <= cell-4 {
					fill := htmlInk
					if shade > 0.55 {
						fill = "#ffffff"
					}
					s.text(x+cell/2, y+cell/2+cf*0.36, fmt.Sprintf(`text-anchor="middle" font-size="%s" fill="%s" pointer-events="none"`, htmlN(cf), fill), txt)
				}
			}
		}
	}
	if showLabels {
		fs := htmlN(font)
		for i := range n {
			y := top + (float64(i)+0.5)*cell + font*0.35
			s.textTitled(left-6, y, `text-anchor="end" font-size="`+fs+`"`, labels[i], c.Labels[i])
			s.text(left+grid+6, y, `font-size="`+htmlN(math.Min(font, 11))+`" fill="`+htmlMuted+`"`, htmlShortCount(rowSum[i]))
		}
		for j := range n {
			x := left + (float64(j)+0.5)*cell
			y := top - 6
			fmt.Fprintf(&s.b, `<text transform="translate(%s %s) rotate(-45)" font-size="%s">`, htmlN(x), htmlN(y), fs)
			if labels[j] != c.Labels[j] {
				s.b.WriteString("<title>" + htmlEsc(c.Labels[j]) + "</title>")
			}
			s.b.WriteString(htmlEsc(labels[j]) + "</text>")
		}
		s.text(left+grid+6, top-6, `font-size="10" fill="`+htmlMuted+`"`, "n")
	}

	// Legend: the ramp, 0% to 100% of the row.
	ly := top + grid + 18
	lw := math.Min(200, math.Max(120, grid/3))
	s.b.WriteString(`<defs><linearGradient id="hm-ramp" x1="0" x2="1" y1="0" y2="0">`)
	for i := range htmlBlues {
		t := float64(i) / float64(len(htmlBlues)-1)
		fmt.Fprintf(&s.b, `<stop offset="%s" stop-color="%s"/>`, htmlN(t), htmlRamp(t))
	}
	s.b.WriteString(`</linearGradient></defs>`)
	s.rect(left, ly, lw, 10, `fill="url(#hm-ramp)" stroke="`+htmlGrid+`"`)
	s.text(left, ly+23, `font-size="10" fill="`+htmlMuted+`"`, "0%")
	s.text(left+lw, ly+23, `font-size="10" text-anchor="end" fill="`+htmlMuted+`"`, "100% of the row")
	note := "Cells are shaded by their share of the row (items with that true label); the diagonal is outlined."
	if !showCounts {
		note = "Cells are shaded by their share of the row; hover a cell for its count."
	}

	// The largest off-diagonal cells.
	var pairs []struct{ i, j, k int }
	for i := range n {
		for j := range n {
			if k := count(i, j); i != j && k > 0 {
				pairs = append(pairs, struct{ i, j, k int }{i, j, k})
			}
		}
	}
	sort.SliceStable(pairs, func(a, b int) bool {
		if pairs[a].k != pairs[b].k {
			return pairs[a].k > pairs[b].k
		}
		if pairs[a].i != pairs[b].i {
			return pairs[a].i < pairs[b].i
		}
		return pairs[a].j < pairs[b].j
	})
	var top8 []htmlConfusionPair
	topN := 10
	if !showLabels {
		topN = 16 // the list is the only place labels show
	}
	for _, p := range pairs[:min(len(pairs), topN)] {
		share := float64(p.k) / float64(rowSum[p.i])
		top8 = append(top8, htmlConfusionPair{
			True: c.Labels[p.i], Pred: c.Labels[p.j], Count: htmlCount(p.k),
			Share: strconv.FormatFloat(share*100, 'f', 1, 64) + "%", Bar: htmlBarCSS(share),
		})
	}
	return s.close(), note, top8
}

// ---------------------------------------------------------------------------
// Reliability diagram

func htmlReliabilitySVG(bins []Bin) rawHTML {
	maxCount := 0
	for _, b := range bins {
		maxCount = max(maxCount, b.Count)
	}
	if maxCount == 0 {
		return ""
	}
	const (
		W, left, right, top = 440.0, 46.0, 14.0, 12.0
		plotH, gapH, histH  = 290.0, 22.0, 70.0
		bottom              = 40.0
	)
	plotW := W - left - right
	H := top + plotH + gapH + histH + bottom
	x := func(v float64) float64 { return left + htmlClamp01(v)*plotW }
	y := func(v float64) float64 { return top + (1-htmlClamp01(v))*plotH }
	hy0 := top + plotH + gapH

	var s htmlSVG
	s.open(W, H, "reliability", "reliability diagram")
	s.rect(left, top, plotW, plotH, `fill="#fbfcfd" stroke="`+htmlGrid+`"`)
	for i := 0; i <= 5; i++ {
		t := float64(i) / 5
		s.line(left, y(t), left+plotW, y(t), `stroke="`+htmlGrid+`"`)
		s.line(x(t), top, x(t), top+plotH, `stroke="`+htmlGrid+`"`)
		s.text(left-6, y(t)+3.5, `text-anchor="end" font-size="10" fill="`+htmlMuted+`"`, strconv.FormatFloat(t, 'f', 1, 64))
		s.text(x(t), hy0+histH+14, `text-anchor="middle" font-size="10" fill="`+htmlMuted+`"`, strconv.FormatFloat(t, 'f', 1, 64))
	}
	s.line(x(0), y(0), x(1), y(1), `stroke="`+htmlMuted+`" stroke-dasharray="5 4" stroke-width="1.2"`)
	for _, b := range bins {
		lo, hi := htmlClamp01(b.Lo), htmlClamp01(b.Hi)
		if b.Count <= 0 || hi <= lo {
			continue
		}
		x0, x1 := x(lo)+1, x(hi)-1
		acc, conf := htmlClamp01(b.Accuracy), htmlClamp01(b.Confidence)
		title := fmt.Sprintf("confidence %s–%s: %s items, accuracy %s, mean confidence %s",
			htmlRate(lo), htmlRate(hi), htmlCount(b.Count), htmlRate(acc), htmlRate(conf))
		s.rectTitled(x0, y(acc), x1-x0, y(0)-y(acc), `fill="`+htmlBlue+`" fill-opacity="0.85"`, title)
		g0, g1 := math.Min(acc, conf), math.Max(acc, conf)
		if g1-g0 > 0.002 {
			s.rect(x0, y(g1), x1-x0, y(g0)-y(g1), `fill="`+htmlVerm+`" fill-opacity="0.22" stroke="`+htmlVerm+`" stroke-width="1" stroke-dasharray="3 2"`)
		}
		s.circle(x(conf), y(acc), 2.4, `fill="#ffffff" stroke="`+htmlInk+`" stroke-width="1"`)
		// Histogram of counts underneath.
		hh := float64(b.Count) / float64(maxCount) * histH
		s.rectTitled(x0, hy0+histH-hh, x1-x0, hh, `fill="`+htmlSky+`"`, fmt.Sprintf("%s items", htmlCount(b.Count)))
		if txt := htmlShortCount(b.Count); htmlTextWidth(txt, 9) <= x1-x0+6 {
			ty := hy0 + histH - hh - 3
			s.text((x0+x1)/2, ty, `text-anchor="middle" font-size="9" fill="`+htmlMuted+`"`, txt)
		}
	}
	s.line(left, hy0+histH, left+plotW, hy0+histH, `stroke="`+htmlMuted+`"`)
	fmt.Fprintf(&s.b, `<text transform="translate(12 %s) rotate(-90)" text-anchor="middle" class="axis-title">accuracy</text>`, htmlN(top+plotH/2))
	fmt.Fprintf(&s.b, `<text transform="translate(12 %s) rotate(-90)" text-anchor="middle" font-size="10" fill="%s">items</text>`, htmlN(hy0+histH/2), htmlMuted)
	s.text(left+plotW/2, H-6, `text-anchor="middle" class="axis-title"`, "confidence (mean top score)")
	return s.close()
}

// ---------------------------------------------------------------------------
// Precision–coverage small multiples

func htmlCurveChart(name string, pts []CurvePoint) (htmlCurveCard, bool) {
	if len(pts) == 0 {
		return htmlCurveCard{}, false
	}
	pts = append([]CurvePoint(nil), pts...)
	sort.SliceStable(pts, func(a, b int) bool { return htmlFinite(pts[a].Floor) < htmlFinite(pts[b].Floor) })
	anyCount := false
	for _, p := range pts {
		anyCount = anyCount || p.Count > 0
	}
	const (
		W, H                     = 204.0, 132.0
		left, right, top, bottom = 26.0, 8.0, 8.0, 18.0
	)
	plotW, plotH := W-left-right, H-top-bottom
	lo, hi := 0.0, 1.0
	for _, p := range pts {
		f := htmlFinite(p.Floor)
		lo, hi = math.Min(lo, f), math.Max(hi, f)
	}
	x := func(v float64) float64 { return left + (htmlFinite(v)-lo)/(hi-lo)*plotW }
	y := func(v float64) float64 { return top + (1-htmlClamp01(v))*plotH }

	var s htmlSVG
	s.open(W, H, "curve", "precision and coverage by floor: "+name)
	s.rect(left, top, plotW, plotH, `fill="#fbfcfd" stroke="`+htmlGrid+`"`)
	for _, t := range []float64{0, 0.5, 1} {
		s.line(left, y(t), left+plotW, y(t), `stroke="`+htmlGrid+`"`)
		s.text(left-5, y(t)+3.5, `text-anchor="end" font-size="9" fill="`+htmlMuted+`"`, strconv.FormatFloat(t, 'f', 1, 64))
	}
	for _, t := range []float64{0, 0.25, 0.5, 0.75, 1} {
		if t < lo || t > hi {
			continue
		}
		s.line(x(t), top+plotH, x(t), top+plotH+3, `stroke="`+htmlMuted+`"`)
		if t == 0 || t == 0.5 || t == 1 {
			s.text(x(t), top+plotH+13, `text-anchor="middle" font-size="9" fill="`+htmlMuted+`"`, strconv.FormatFloat(t, 'f', 1, 64))
		}
	}
	s.line(left, y(htmlPrecisionMark), left+plotW, y(htmlPrecisionMark), `stroke="`+htmlGreen+`" stroke-opacity="0.5" stroke-dasharray="2 3"`)

	var cov, prec [][2]float64
	mark, maxP := -1, 0.0
	for i, p := range pts {
		cov = append(cov, [2]float64{x(p.Floor), y(p.Coverage)})
		if anyCount && p.Count == 0 {
			continue // precision is undefined where nothing is predicted
		}
		prec = append(prec, [2]float64{x(p.Floor), y(p.Precision)})
		maxP = math.Max(maxP, htmlFinite(p.Precision))
		if mark < 0 && htmlFinite(p.Precision) >= htmlPrecisionMark {
			mark = i
		}
	}
	s.polyline(cov, `stroke="`+htmlOrange+`" stroke-width="2" stroke-dasharray="5 3" stroke-linejoin="round"`)
	s.polyline(prec, `stroke="`+htmlBlue+`" stroke-width="2" stroke-linejoin="round"`)
	if len(prec) <= 24 {
		for _, p := range prec {
			s.circle(p[0], p[1], 1.8, `fill="`+htmlBlue+`"`)
		}
	}
	card := htmlCurveCard{Name: name}
	if mark >= 0 {
		p := pts[mark]
		mx := x(p.Floor)
		s.line(mx, top, mx, top+plotH, `stroke="`+htmlGreen+`" stroke-width="1.5"`)
		s.circle(mx, y(p.Precision), 3.2, `fill="`+htmlGreen+`" stroke="#ffffff" stroke-width="1"`)
		label := "≥0.9 @ " + strconv.FormatFloat(htmlFinite(p.Floor), 'f', 2, 64)
		anchor, tx := "start", mx+4
		if mx+4+htmlTextWidth(label, 9) > left+plotW {
			anchor, tx = "end", mx-4
		}
		s.text(tx, top+plotH-6, `text-anchor="`+anchor+`" font-size="9" font-weight="600" fill="#00694d"`, label)
		card.Reached = true
		card.Note = "precision ≥ 0.9 from floor " + strconv.FormatFloat(htmlFinite(p.Floor), 'f', 2, 64)
		card.Note2 = "coverage there " + htmlRate(p.Coverage)
	} else {
		card.Note = "precision peaks at " + htmlRate(maxP)
		card.Note2 = "never reaches 0.9"
	}
	card.SVG = s.close()
	return card, true
}

// ---------------------------------------------------------------------------
// Latency

func htmlTierOrder(keys []string) []string {
	rank := map[string]int{"tier1": 0, "tier2": 1, "decision": 2}
	sort.SliceStable(keys, func(a, b int) bool {
		ra, oka := rank[keys[a]]
		rb, okb := rank[keys[b]]
		switch {
		case oka && okb:
			return ra < rb
		case oka != okb:
			return oka
		}
		return keys[a] < keys[b]
	})
	return keys
}

func htmlLatency(lat map[string]Percentiles) ([]htmlLatencyRow, rawHTML, bool) {
	tiers := htmlTierOrder(htmlSortedKeys(lat))
	var rows []htmlLatencyRow
	var shown []string
	lo, hi := math.Inf(1), 0.0
	for _, t := range tiers {
		p := lat[t]
		if p.Count == 0 && htmlFinite(p.P50) == 0 && htmlFinite(p.P90) == 0 && htmlFinite(p.P99) == 0 {
			continue
		}
		rows = append(rows, htmlLatencyRow{Tier: t, P50: htmlMicros(p.P50), P90: htmlMicros(p.P90), P99: htmlMicros(p.P99), Count: htmlCount(p.Count)})
		shown = append(shown, t)
		for _, v := range []float64{p.P50, p.P90, p.P99} {
			if v = htmlFinite(v); v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if len(rows) == 0 || hi <= 0 {
		return rows, "", false
	}
	logScale := hi/lo > 30
	var d0, d1 float64
	if logScale {
		d0 = math.Pow(10, math.Floor(math.Log10(lo)))
		d1 = math.Pow(10, math.Ceil(math.Log10(hi)))
		if d1 <= d0 {
			d1 = d0 * 10
		}
	} else {
		d0, d1 = 0, htmlNiceCeil(hi)
	}
	maxLab := 0.0
	for _, t := range shown {
		maxLab = math.Max(maxLab, htmlTextWidth(htmlTruncate(t, 14, "…"), 11))
	}
	const (
		W, right, top       = 350.0, 74.0, 8.0
		barH, barGap, group = 11.0, 3.0, 14.0
	)
	left := maxLab + 14
	plotW := W - left - right
	scale := func(v float64) float64 {
		v = htmlFinite(v)
		if logScale {
			if v <= d0 {
				return 0
			}
			return (math.Log10(v) - math.Log10(d0)) / (math.Log10(d1) - math.Log10(d0)) * plotW
		}
		return math.Max(0, v-d0) / (d1 - d0) * plotW
	}
	groupH := 3*barH + 2*barGap
	plotH := float64(len(shown))*groupH + float64(len(shown)-1)*group
	H := top + plotH + 34

	var s htmlSVG
	s.open(W, H, "latency", "latency per tier")
	// Ticks.
	var ticks []float64
	if logScale {
		for v := d0; v <= d1*1.0001; v *= 10 {
			ticks = append(ticks, v)
		}
	} else {
		for i := 0; i <= 4; i++ {
			ticks = append(ticks, d0+(d1-d0)*float64(i)/4)
		}
	}
	for _, tv := range ticks {
		tx := left + scale(tv)
		if !logScale && tv == 0 {
			tx = left
		}
		s.line(tx, top-2, tx, top+plotH+4, `stroke="`+htmlGrid+`"`)
		s.text(tx, top+plotH+16, `text-anchor="middle" font-size="9.5" fill="`+htmlMuted+`"`, htmlMicrosTick(tv))
	}
	colours := []string{htmlSky, htmlBlue, "#003a5c"}
	names := []string{"p50", "p90", "p99"}
	for gi, t := range shown {
		p := lat[t]
		gy := top + float64(gi)*(groupH+group)
		s.textTitled(left-8, gy+groupH/2+4, `text-anchor="end" font-size="11" font-weight="600"`, htmlTruncate(t, 14, "…"), t)
		for k, v := range []float64{p.P50, p.P90, p.P99} {
			by := gy + float64(k)*(barH+barGap)
			w := scale(v)
			s.rectTitled(left, by, w, barH, `rx="1.5" fill="`+colours[k]+`"`, t+" "+names[k]+": "+htmlMicros(v))
			s.text(left+w+4, by+barH-1.5, `font-size="10" fill="`+htmlInk+`"`, names[k]+" "+htmlMicros(v))
		}
	}
	s.line(left, top-2, left, top+plotH+4, `stroke="`+htmlMuted+`"`)
	axis := "microseconds, linear scale"
	if logScale {
		axis = "log scale"
	}
	s.text(left+plotW/2, H-3, `text-anchor="middle" font-size="9.5" fill="`+htmlMuted+`"`, axis)
	return rows, s.close(), logScale
}

// htmlNiceCeil rounds x up to 1, 2, 2.5 or 5 times a power of ten.
func htmlNiceCeil(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// ---------------------------------------------------------------------------
// Escalation reasons

func htmlReasonsSVG(reasons map[string]int) (rawHTML, string) {
	type kv struct {
		k string
		v int
	}
	var list []kv
	total, maxV := 0, 0
	for k, v := range reasons {
		if v > 0 {
			list = append(list, kv{k, v})
			total += v
			maxV = max(maxV, v)
		}
	}
	if total == 0 {
		return "", ""
	}
	sort.Slice(list, func(a, b int) bool {
		if list[a].v != list[b].v {
			return list[a].v > list[b].v
		}
		return list[a].k < list[b].k
	})
	maxLab := 0.0
	for _, e := range list {
		maxLab = math.Max(maxLab, htmlTextWidth(htmlTruncate(e.k, 24, "…"), 11))
	}
	const (
		W, right, top, barH, gap = 350.0, 86.0, 4.0, 16.0, 6.0
	)
	left := math.Min(maxLab+12, 150)
	plotW := W - left - right
	H := top + float64(len(list))*(barH+gap) + 2
	var s htmlSVG
	s.open(W, H, "reasons", "decision reasons")
	for i, e := range list {
		y := top + float64(i)*(barH+gap)
		colour := htmlBlue
		if escalated(e.k) {
			colour = htmlOrange
		}
		w := float64(e.v) / float64(maxV) * plotW
		share := float64(e.v) / float64(total)
		s.textTitled(left-6, y+barH-4, `text-anchor="end" font-size="11"`, htmlTruncate(e.k, 24, "…"), e.k)
		s.rectTitled(left, y, math.Max(w, 1), barH, `rx="2" fill="`+colour+`"`, fmt.Sprintf("%s: %s (%.1f%%)", e.k, htmlCount(e.v), share*100))
		s.text(left+w+5, y+barH-4, `font-size="10.5" fill="`+htmlInk+`"`,
			htmlCount(e.v)+" · "+strconv.FormatFloat(share*100, 'f', 1, 64)+"%")
	}
	return s.close(), htmlCount(total)
}

// ---------------------------------------------------------------------------
// Tier 1 vs tier 2

func htmlCompareSVG(c *TierComparison) rawHTML {
	const (
		W, left, right, top, barH, gap = 350.0, 50.0, 46.0, 6.0, 22.0, 10.0
	)
	plotW := W - left - right
	H := top + 2*barH + gap + 26
	var s htmlSVG
	s.open(W, H, "compare", "tier 1 and tier 2 accuracy")
	for i := 0; i <= 4; i++ {
		t := float64(i) / 4
		x := left + t*plotW
		s.line(x, top-2, x, top+2*barH+gap+3, `stroke="`+htmlGrid+`"`)
		s.text(x, top+2*barH+gap+15, `text-anchor="middle" font-size="9.5" fill="`+htmlMuted+`"`, strconv.FormatFloat(t, 'f', 2, 64))
	}
	for i, e := range []struct {
		name, colour string
		v            float64
	}{{"tier 1", htmlSky, c.Tier1Acc}, {"tier 2", htmlBlue, c.Tier2Acc}} {
		y := top + float64(i)*(barH+gap)
		w := htmlClamp01(e.v) * plotW
		s.text(left-8, y+barH-7, `text-anchor="end" font-size="11" font-weight="600"`, e.name)
		s.rect(left, y, w, barH, `rx="2" fill="`+e.colour+`"`)
		s.text(left+w+5, y+barH-7, `font-size="11" font-weight="600" fill="`+htmlInk+`"`, htmlRate(e.v))
	}
	s.text(left+plotW/2, H-1, `text-anchor="middle" font-size="9.5" fill="`+htmlMuted+`"`, "accuracy")
	return s.close()
}

// ---------------------------------------------------------------------------
// Slices

// htmlSliceLess orders slice values: numbers numerically, then text in
// natural order.
func htmlSliceLess(a, b string) bool {
	num := func(s string) (float64, bool) {
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
	}
	fa, oka := num(a)
	fb, okb := num(b)
	switch {
	case oka && okb && fa != fb:
		return fa < fb
	case oka != okb:
		return oka
	}
	return htmlNaturalLess(a, b)
}

func htmlSlices(r *Report) ([]htmlSliceRow, rawHTML) {
	var keys []string
	for k, s := range r.Slices {
		if s != nil {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, ""
	}
	sort.Slice(keys, func(a, b int) bool { return htmlSliceLess(keys[a], keys[b]) })
	var rows []htmlSliceRow
	maxLab := 0.0
	for _, k := range keys {
		s := r.Slices[k]
		rows = append(rows, htmlSliceRow{Value: k, N: htmlCount(s.N), Acc: htmlRate(s.Accuracy), F1: htmlRate(s.MacroF1),
			Coverage: htmlRate(s.Coverage), ECE: htmlRate(s.ECE)})
		maxLab = math.Max(maxLab, htmlTextWidth(htmlTruncate(k, 24, "…"), 11))
	}
	const (
		W, right, top, barH, gap = 460.0, 52.0, 20.0, 16.0, 7.0
	)
	left := math.Min(maxLab+12, 180)
	plotW := W - left - right
	plotH := float64(len(keys))*(barH+gap) - gap
	H := top + plotH + 26
	var s htmlSVG
	s.open(W, H, "slices", "accuracy per slice")
	for i := 0; i <= 4; i++ {
		t := float64(i) / 4
		x := left + t*plotW
		s.line(x, top-4, x, top+plotH+3, `stroke="`+htmlGrid+`"`)
		s.text(x, top+plotH+15, `text-anchor="middle" font-size="9.5" fill="`+htmlMuted+`"`, strconv.FormatFloat(t, 'f', 2, 64))
	}
	for i, k := range keys {
		sl := r.Slices[k]
		y := top + float64(i)*(barH+gap)
		w := htmlClamp01(sl.Accuracy) * plotW
		s.textTitled(left-6, y+barH-4, `text-anchor="end" font-size="11"`, htmlTruncate(k, 24, "…"), k)
		s.rectTitled(left, y, w, barH, `rx="2" fill="`+htmlBlue+`"`, fmt.Sprintf("%s: accuracy %s over %s items", k, htmlRate(sl.Accuracy), htmlCount(sl.N)))
		s.text(left+w+5, y+barH-4, `font-size="10.5" fill="`+htmlInk+`"`, htmlRate(sl.Accuracy))
	}
	// The overall accuracy as a reference.
	ax := left + htmlClamp01(r.Accuracy)*plotW
	s.line(ax, top-6, ax, top+plotH+3, `stroke="`+htmlVerm+`" stroke-width="1.5" stroke-dasharray="4 3"`)
	anchor := "middle"
	if ax > left+plotW-30 {
		anchor = "end"
	}
	s.text(ax, top-9, `text-anchor="`+anchor+`" font-size="9.5" font-weight="600" fill="`+htmlVerm+`"`, "all "+htmlRate(r.Accuracy))
	s.text(left+plotW/2, H-1, `text-anchor="middle" font-size="9.5" fill="`+htmlMuted+`"`, "accuracy")
	return rows, s.close()
}

// ---------------------------------------------------------------------------
// The page

// htmlCSS styles every report page.
const htmlCSS = `:root{--ink:#1f2430;--muted:#6b7280;--line:#e6e8ec;--bg:#f4f5f7;--card:#fff;--blue:#0072B2;--sky:#56B4E9;--orange:#E69F00;--verm:#D55E00;--green:#009E73;--weak:#fdf1e1}
*{box-sizing:border-box}
html{background:var(--bg)}
body{margin:0;color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans","Liberation Sans",Arial,sans-serif;-webkit-font-smoothing:antialiased}
.wrap{max-width:1240px;margin:0 auto;padding:22px 20px 40px}
header{background:linear-gradient(135deg,#0b2e4f 0%,#0f4c7a 100%);color:#fff;border-radius:14px;padding:20px 24px 18px}
.kicker{font-size:11.5px;letter-spacing:.12em;text-transform:uppercase;opacity:.75}
h1{font-size:24px;line-height:1.25;margin:4px 0 10px;font-weight:700;word-break:break-word}
.meta{display:flex;flex-wrap:wrap;gap:6px 10px;font-size:13px}
.chip{background:rgba(255,255,255,.12);border:1px solid rgba(255,255,255,.18);border-radius:999px;padding:2px 10px;word-break:break-all}
.chip b{font-weight:600;opacity:.7;margin-right:4px}
.chip code{font:12px/1 ui-monospace,"DejaVu Sans Mono",monospace;opacity:.9}
.figs{display:grid;grid-template-columns:repeat(8,minmax(0,1fr));gap:10px;margin:14px 0 0}
.fig{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:11px 13px 12px;box-shadow:0 1px 2px rgba(16,24,40,.04)}
.fig .l{font-size:11px;letter-spacing:.06em;text-transform:uppercase;color:var(--muted);font-weight:600;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.fig .v{font-size:30px;font-weight:700;letter-spacing:-.02em;font-variant-numeric:tabular-nums;line-height:1.15;margin-top:2px}
.fig.lead .v{color:#0b4f80}
.fig .h{font-size:11px;color:var(--muted);white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.fig .bar{height:4px;background:#eceef2;border-radius:2px;margin-top:8px;overflow:hidden}
.fig .bar i{display:block;height:100%;background:var(--blue);border-radius:2px}
.notice{margin-top:14px;background:#fff8e6;border:1px solid #f3d9a4;border-radius:10px;padding:10px 14px}
.card{background:var(--card);border:1px solid var(--line);border-radius:14px;padding:16px 18px 18px;margin-top:16px;box-shadow:0 1px 2px rgba(16,24,40,.04);min-width:0}
.row{display:grid;gap:16px;margin-top:16px}
.row>.card{margin-top:0}
.row.two{grid-template-columns:minmax(0,7fr) minmax(0,5fr);align-items:start}
.row.three{grid-template-columns:repeat(auto-fit,minmax(360px,1fr))}
h2{font-size:16px;margin:0 0 2px;font-weight:700}
h2 .tag{font-weight:600;color:var(--muted);font-size:14px;margin-left:6px}
.sub{color:var(--muted);font-size:12.5px;margin:0 0 12px}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums;font-size:13px}
th{font-size:10.5px;letter-spacing:.06em;text-transform:uppercase;color:var(--muted);font-weight:600;text-align:right;padding:6px 8px;border-bottom:1.5px solid var(--line);white-space:nowrap}
td{padding:5px 8px;text-align:right;border-bottom:1px solid #f0f1f4;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
td.name{max-width:220px;overflow:hidden;text-overflow:ellipsis;font-weight:500}
tr.weak td{background:var(--weak)}
tr.weak td.f1{color:#9a3c00;font-weight:600}
tr.total td{border-top:1.5px solid var(--line);border-bottom:0;font-weight:600;color:#374151}
td.barcell{width:120px}
.mini{height:7px;background:#eceef2;border-radius:4px;overflow:hidden}
.mini i{display:block;height:100%;background:var(--blue);border-radius:4px}
tr.weak .mini i{background:var(--orange)}
.muted{color:var(--muted)}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px;color:var(--muted);margin:8px 0 0}
.sw{display:inline-block;width:12px;height:12px;border-radius:3px;vertical-align:-2px;margin-right:5px}
.sw.line{height:0;border-top:2.5px solid;border-radius:0;width:18px;vertical-align:3px}
.sw.dash{height:0;border-top:2.5px dashed;border-radius:0;width:18px;vertical-align:3px}
svg{max-width:100%;height:auto;display:block;overflow:visible}
svg{fill:#1f2430}
svg text{font-family:inherit}
svg .axis-title{font-size:11px;fill:var(--muted);font-weight:600;letter-spacing:.03em}
.cm{display:flex;flex-wrap:wrap;gap:20px 28px;align-items:flex-start}
.cm-side{flex:1 1 280px;min-width:260px}
.cm-side h3,.cards h3{font-size:12px;letter-spacing:.06em;text-transform:uppercase;color:var(--muted);margin:4px 0 8px;font-weight:600}
.pairs{list-style:none;margin:0;padding:0;font-size:12.5px}
.pairs li{display:grid;grid-template-columns:minmax(0,1fr) 48px 50px;gap:8px;align-items:center;padding:4px 0;border-bottom:1px solid #f0f1f4}
.pairs .who{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.pairs .arrow{color:var(--muted);margin:0 4px}
.pairs .n{text-align:right;font-variant-numeric:tabular-nums;font-weight:600}
.pairs .s{text-align:right;font-variant-numeric:tabular-nums;color:var(--muted)}
.smalls{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:12px}
.small{border:1px solid #eef0f3;border-radius:10px;padding:8px 8px 6px;min-width:0}
.small .t{font-weight:600;font-size:13px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;padding:0 2px}
.small .n{font-size:11px;line-height:1.35;color:var(--muted);padding:1px 2px 2px}
.small.ok .n{color:#00694d}
.stats{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:8px;margin-top:12px}
.stat{background:#f7f8fa;border-radius:8px;padding:6px 10px}
.stat .l{font-size:10.5px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em}
.stat .v{font-size:17px;font-weight:700;font-variant-numeric:tabular-nums}
.lat{display:flex;flex-wrap:wrap;gap:14px 36px;align-items:flex-start}
.lat table{flex:1 1 320px;width:auto;max-width:560px}
.lat-chart{flex:0 1 350px}
.split{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:24px;align-items:start}
footer{color:var(--muted);font-size:12px;text-align:center;margin-top:22px}
@media (max-width:1100px){.figs{grid-template-columns:repeat(4,minmax(0,1fr))}.row.two,.lat{display:flex;flex-wrap:wrap;gap:14px 36px;align-items:flex-start}
.lat table{flex:1 1 320px;width:auto;max-width:560px}
.lat-chart{flex:0 1 350px}
.split{grid-template-columns:1fr}}
`

// htmlWritePage writes the report page of v.
func htmlWritePage(o htmlOut, v *htmlView) {
	o.raw(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>triage eval · `)
	o.text(v.Spec)
	o.raw(`</title>
<style>
` + htmlCSS + `</style>
</head>
<body>
<div class="wrap">
<header>
  <div class="kicker">triage · evaluation report</div>
  <h1>`)
	o.text(v.Spec)
	o.raw(`</h1>
  <div class="meta">
    `)
	if v.Data != "" {
		o.raw(`<span class="chip"><b>data</b>`)
		o.text(v.Data)
		if v.SHA != "" {
			o.raw(` · <code title="sha256 `)
			o.text(v.SHAFull)
			o.raw(`">sha256 `)
			o.text(v.SHA)
			o.raw(`</code>`)
		}
		o.raw(`</span>`)
	}
	o.raw("\n    ")
	if v.Mode != "" {
		o.raw(`<span class="chip"><b>mode</b>`)
		o.text(v.Mode)
		o.raw(`</span>`)
	}
	o.raw(`
    <span class="chip"><b>N</b>`)
	o.text(v.N)
	o.raw("</span>\n    ")
	if v.Classes != 0 {
		o.raw(`<span class="chip"><b>classes</b>`)
		o.int(v.Classes)
		o.raw(`</span>`)
	}
	o.raw("\n    ")
	if len(v.Slices) > 0 {
		o.raw(`<span class="chip"><b>sliced by</b>`)
		o.text(v.By)
		o.raw(`</span>`)
	}
	o.raw(`
  </div>
</header>

<section class="figs" aria-label="headline figures">
`)
	for _, f := range v.Figures {
		o.raw(`  <div class="fig`)
		if f.Lead {
			o.raw(` lead`)
		}
		o.raw(`"><div class="l">`)
		o.text(f.Label)
		o.raw(`</div><div class="v">`)
		o.text(f.Value)
		o.raw(`</div><div class="h">`)
		o.text(f.Hint)
		o.raw(`</div><div class="bar"><i style="`)
		o.css(f.Bar)
		o.raw("\"></i></div></div>\n")
	}
	o.raw("</section>\n")
	if v.Empty {
		o.raw(`<div class="notice">No items were evaluated: the report is empty.</div>`)
	}
	o.raw("\n\n")

	// Per class and reliability, side by side when both are there.
	if len(v.Rows) > 0 || v.Reliability != "" {
		o.raw(`
<div class="row`)
		if len(v.Rows) > 0 && v.Reliability != "" {
			o.raw(` two`)
		}
		o.raw("\">\n")
		if len(v.Rows) > 0 {
			o.raw(`
<section class="card" id="classes">
  <h2>Per class</h2>
  <p class="sub">Precision, recall and F1 per class, in name order.`)
			if v.HasWeak {
				o.raw(` Classes with F1 under 0.6 are tinted.`)
			}
			o.raw(`</p>
  <table>
    <thead><tr><th>class</th><th>precision</th><th>recall</th><th>F1</th><th></th><th>support</th><th>predicted</th></tr></thead>
    <tbody>
`)
			for _, row := range v.Rows {
				o.raw(`    <tr`)
				if row.Weak {
					o.raw(` class="weak"`)
				}
				o.raw(`><td class="name" title="`)
				o.text(row.Name)
				o.raw(`">`)
				o.cells(row.Name, row.P, row.R)
				o.raw(`</td><td class="f1">`)
				o.text(row.F1)
				o.raw(`</td><td class="barcell"><div class="mini"><i style="`)
				o.css(row.F1Bar)
				o.raw(`"></i></div></td><td>`)
				o.text(row.Support)
				o.raw(`</td><td>`)
				o.text(row.Predicted)
				o.raw("</td></tr>\n")
			}
			m := v.Macro
			o.raw(`    <tr class="total"><td>`)
			o.cells(m.Name, m.P, m.R, m.F1)
			o.raw(`</td><td class="barcell"><div class="mini"><i style="`)
			o.css(m.F1Bar)
			o.raw(`"></i></div></td><td>`)
			o.text(m.Support)
			o.raw(`</td><td></td></tr>
    </tbody>
  </table>
</section>
`)
		}
		o.raw("\n")
		if v.Reliability != "" {
			o.raw(`
<section class="card" id="reliability">
  <h2>Reliability <span class="tag">ECE `)
			o.text(v.ECE)
			o.raw(`</span></h2>
  <p class="sub">Accuracy per bin of the deciding tier's top score. On the dashed diagonal, a score means what it says.</p>
  `)
			o.html(v.Reliability)
			o.raw(`
  <div class="legend"><span><span class="sw" style="background:#0072B2"></span>accuracy</span><span><span class="sw" style="background:rgba(213,94,0,.22);border:1px dashed #D55E00"></span>gap to calibration</span><span><span class="sw" style="background:#56B4E9"></span>items per bin</span></div>
</section>
`)
		}
		o.raw("\n</div>\n")
	}
	o.raw("\n\n")

	if v.ConfusionShown {
		o.raw(`
<section class="card" id="confusion">
  <h2>Confusion</h2>
  <p class="sub">`)
		o.text(v.ConfusionNote)
		o.raw(`</p>
  <div class="cm">
    <div class="cm-chart">`)
		o.html(v.Confusion)
		o.raw("</div>\n    ")
		if len(v.TopConfusions) > 0 {
			o.raw(`<div class="cm-side">
      <h3>Most frequent confusions</h3>
      <ul class="pairs">
`)
			for _, p := range v.TopConfusions {
				o.raw(`        <li><span class="who" title="`)
				o.text(p.True)
				o.raw(` → `)
				o.text(p.Pred)
				o.raw(`">`)
				o.text(p.True)
				o.raw(`<span class="arrow">→</span>`)
				o.text(p.Pred)
				o.raw(`</span><span class="n">`)
				o.text(p.Count)
				o.raw(`</span><span class="s">`)
				o.text(p.Share)
				o.raw("</span></li>\n")
			}
			o.raw(`      </ul>
      <p class="sub" style="margin-top:8px">Count, and share of the true label's items.</p>
    </div>`)
		}
		o.raw(`
  </div>
</section>
`)
	}
	o.raw("\n\n")

	if len(v.Curves) > 0 {
		o.raw(`
<section class="card cards" id="curves">
  <h2>Precision and coverage by floor</h2>
  <p class="sub">What a class's score floor costs: as the floor rises, precision climbs and coverage (recall) falls. The green mark is the lowest floor where precision reaches 0.9.</p>
  <div class="legend" style="margin:0 0 10px"><span><span class="sw line" style="border-color:#0072B2"></span>precision</span><span><span class="sw dash" style="border-color:#E69F00"></span>coverage</span><span><span class="sw" style="background:#009E73"></span>first floor with precision ≥ 0.9</span></div>
  <div class="smalls">
`)
		for _, c := range v.Curves {
			o.raw(`    <div class="small`)
			if c.Reached {
				o.raw(` ok`)
			}
			o.raw(`"><div class="t" title="`)
			o.text(c.Name)
			o.raw(`">`)
			o.text(c.Name)
			o.raw(`</div>`)
			o.html(c.SVG)
			o.raw(`<div class="n">`)
			o.text(c.Note)
			o.raw(`<br>`)
			o.text(c.Note2)
			o.raw("</div></div>\n")
		}
		o.raw(`  </div>
</section>
`)
	}
	o.raw("\n\n")

	// Latency, reasons and the tier comparison in one row.
	if len(v.Latency) > 0 || v.Reasons != "" || v.Compare != nil {
		o.raw("\n<div class=\"row three\">\n")
		if len(v.Latency) > 0 {
			o.raw(`
<section class="card" id="latency">
  <h2>Latency</h2>
  <p class="sub">Per tier, p50, p90 and p99`)
			if v.LatencyLog {
				o.raw(` (log scale)`)
			}
			o.raw(`.</p>
  <div class="lat">
  <table>
    <thead><tr><th>tier</th><th>p50</th><th>p90</th><th>p99</th><th>count</th></tr></thead>
    <tbody>
`)
			for _, l := range v.Latency {
				o.raw(`    <tr><td class="name">`)
				o.cells(l.Tier, l.P50, l.P90, l.P99, l.Count)
				o.raw("</td></tr>\n")
			}
			o.raw(`    </tbody>
  </table>
  `)
			if v.LatencySVG != "" {
				o.raw(`<div class="lat-chart">`)
				o.html(v.LatencySVG)
				o.raw(`</div>`)
			}
			o.raw(`
  </div>
</section>
`)
		}
		o.raw("\n")
		if v.Reasons != "" {
			o.raw(`
<section class="card" id="reasons">
  <h2>Decision reasons <span class="tag">`)
			o.text(v.ReasonsTotal)
			o.raw(` decisions</span></h2>
  <p class="sub">Why each item went where it went.</p>
  `)
			o.html(v.Reasons)
			o.raw(`
  <div class="legend"><span><span class="sw" style="background:#E69F00"></span>sends toward tier 2</span><span><span class="sw" style="background:#0072B2"></span>decided without tier 2</span></div>
</section>
`)
		}
		o.raw("\n")
		if c := v.Compare; c != nil {
			o.raw(`
<section class="card" id="compare">
  <h2>Tier 1 vs tier 2</h2>
  <p class="sub">Over the `)
			o.text(c.N)
			o.raw(` items where both tiers ran.</p>
  `)
			o.html(c.SVG)
			o.raw(`
  <div class="stats">
    <div class="stat"><div class="l">items</div><div class="v">`)
			o.text(c.N)
			o.raw(`</div></div>
    <div class="stat"><div class="l">agreement</div><div class="v">`)
			o.text(c.Agreement)
			o.raw(`</div></div>
    <div class="stat"><div class="l">only tier 1 right</div><div class="v">`)
			o.text(c.Tier1Only)
			o.raw(`</div></div>
    <div class="stat"><div class="l">only tier 2 right</div><div class="v">`)
			o.text(c.Tier2Only)
			o.raw(`</div></div>
  </div>
</section>
`)
		}
		o.raw("\n</div>\n")
	}
	o.raw("\n\n")

	if len(v.Slices) > 0 {
		o.raw(`
<section class="card" id="slices">
  <h2>Slices <span class="tag">by `)
		o.text(v.By)
		o.raw(`</span></h2>
  <p class="sub">The report repeated per value of `)
		o.text(v.By)
		o.raw(`; the dashed line is the overall accuracy.</p>
  <div class="split">
    <table>
      <thead><tr><th>`)
		o.text(v.By)
		o.raw(`</th><th>N</th><th>accuracy</th><th>macro F1</th><th>coverage</th><th>ECE</th></tr></thead>
      <tbody>
`)
		for _, s := range v.Slices {
			o.raw(`      <tr><td class="name" title="`)
			o.text(s.Value)
			o.raw(`">`)
			o.cells(s.Value, s.N, s.Acc, s.F1, s.Coverage, s.ECE)
			o.raw("</td></tr>\n")
		}
		o.raw(`      </tbody>
    </table>
    <div>`)
		o.html(v.SlicesSVG)
		o.raw(`</div>
  </div>
</section>
`)
	}
	o.raw(`

<footer>triage eval · a self-contained page: no script, no external resources</footer>
</div>
</body>
</html>
`)
}
