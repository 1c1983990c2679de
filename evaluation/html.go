package evaluation

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/a-h/templ"
)

// WriteHTML renders r as one self-contained HTML page: inline CSS and
// inline SVG charts, no script, no external resource. The page is the
// template evalPage (eval_page.templ) over a view computed here; class
// names, specs and slice values are user data, escaped by the template
// wherever they go. Sections with nothing to show are left out; a nil or
// empty report still renders a valid page. The page is built in memory
// and written at once.
func WriteHTML(w io.Writer, r *Report) error {
	if r == nil {
		r = &Report{}
	}
	return writePage(w, evalPage(htmlBuildView(r)))
}

// writePage renders page in memory and writes it to w at once, so that a
// failed render leaves nothing half written.
func writePage(w io.Writer, page templ.Component) error {
	var buf bytes.Buffer
	if err := page.Render(context.Background(), &buf); err != nil {
		return fmt.Errorf("evaluation: render page: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
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
// View model

// htmlView is what the evaluation page shows of a report, formatted:
// the template only places it.
type htmlView struct {
	Spec, Data, SHA, SHAFull, Mode, N, By string
	Classes                               string // "" when the report has none
	Empty                                 bool
	Figures                               []htmlFigure

	Rows    []htmlClassRow
	Macro   htmlClassRow
	HasWeak bool

	// Routes (rules mode): each class route's precision and recall.
	Routes []htmlRouteRow

	Confusion     *heatmapChart
	ConfusionNote string
	TopConfusions []htmlConfusionPair

	Reliability *reliabilityChart
	ECE         string

	Curves []htmlCurveCard

	Latency      []htmlLatencyRow
	LatencyChart *latencyChart
	LatencyLog   bool

	Reasons      *barChart
	ReasonsTotal string

	Compare *htmlCompareView

	Slices      []htmlSliceRow
	SlicesChart *barChart

	Robust *htmlRobustView // nil without a robustness run
}

// htmlFigure is a headline figure; Bar is the CSS width of its gauge.
type htmlFigure struct {
	Label, Value, Hint, Bar string
	Lead                    bool
}

type htmlClassRow struct {
	Name, P, R, F1, Support, Predicted string
	F1Bar                              string // CSS width
	Weak                               bool
}

type htmlRouteRow struct {
	Name, P, R, Taken, Right, Support string
	PBar                              string // CSS width
	Weak                              bool   // precision under htmlPrecisionMark
}

type htmlConfusionPair struct {
	True, Pred, Count, Share string
}

type htmlCurveCard struct {
	Name, Note, Note2 string
	Chart             curveChart
	Reached           bool
}

type htmlLatencyRow struct {
	Tier, P50, P90, P99, Count string
}

type htmlCompareView struct {
	N, Agreement, Tier1Only, Tier2Only string
	Chart                              *barChart
}

type htmlSliceRow struct {
	Value, N, Acc, F1, Coverage, ECE string
	RouteP                           string // rules mode; "" otherwise
}

func htmlBuildView(r *Report) *htmlView {
	v := &htmlView{
		Spec: r.Spec, Data: r.Data, Mode: r.Mode, N: htmlCount(r.N), By: r.By, Empty: r.N == 0,
	}
	if len(r.PerClass) != 0 {
		v.Classes = strconv.Itoa(len(r.PerClass))
	}
	if v.Spec == "" {
		v.Spec = "evaluation"
	}
	if r.DataSHA256 != "" {
		v.SHAFull = r.DataSHA256
		v.SHA = htmlTruncate(r.DataSHA256, 12, "")
	}
	v.Figures = []htmlFigure{
		{Label: "Accuracy", Value: htmlRate(r.Accuracy), Bar: htmlBarWidth(r.Accuracy), Lead: true, Hint: "of " + htmlCount(r.N) + " items"},
		{Label: "Precision", Value: htmlRate(r.MacroPrecision), Bar: htmlBarWidth(r.MacroPrecision), Hint: "macro average"},
		{Label: "Recall", Value: htmlRate(r.MacroRecall), Bar: htmlBarWidth(r.MacroRecall), Hint: "macro average"},
		{Label: "Macro F1", Value: htmlRate(r.MacroF1), Bar: htmlBarWidth(r.MacroF1), Lead: true, Hint: "mean over classes"},
		{Label: "Micro F1", Value: htmlRate(r.MicroF1), Bar: htmlBarWidth(r.MicroF1), Hint: "pooled over items"},
		{Label: "Coverage", Value: htmlRate(r.Coverage), Bar: htmlBarWidth(r.Coverage), Hint: "sent to a class route"},
		{Label: "Escalation", Value: htmlRate(r.EscalationRate), Bar: htmlBarWidth(r.EscalationRate), Hint: "sent toward tier 2"},
		{Label: "ECE", Value: htmlRate(r.ECE), Bar: htmlBarWidth(r.ECE), Hint: "lower is better"},
	}
	if r.AccuracyCI.Hi > 0 { // a report of before the intervals has none
		v.Figures[0].Hint += " · 95% " + htmlInterval(r.AccuracyCI)
	}
	if r.Mode == "rules" { // micro F1 is the accuracy there: route precision instead
		v.Figures = slices.Delete(v.Figures, 4, 5)
		v.Figures = slices.Insert(v.Figures, 1, htmlFigure{Label: "Route prec.", Value: htmlRate(r.RoutePrecision),
			Bar: htmlBarWidth(r.RoutePrecision), Lead: true, Hint: "right, of routed"})
		if ci := r.RoutePrecisionCI; ci != nil {
			v.Figures[1].Hint = "right, of " + htmlCount(r.Routed) + " routed · 95% " + htmlInterval(*ci)
		}
	}
	if r.Robustness != nil { // beside accuracy
		v.Figures = append(v.Figures[:1], append([]htmlFigure{htmlRobustFigure(r.Robustness)}, v.Figures[1:]...)...)
		v.Robust = htmlRobustness(r.Robustness)
	}
	if r.N == 0 { // nothing was measured: no figure, rather than zeros
		for i := range v.Figures {
			v.Figures[i].Value, v.Figures[i].Bar = "–", htmlBarWidth(0)
		}
	}

	// Per-class table, in name order.
	support := 0
	for _, name := range htmlSortedKeys(r.PerClass) {
		c := r.PerClass[name]
		row := htmlClassRow{
			Name: name, P: htmlRate(c.Precision), R: htmlRate(c.Recall), F1: htmlRate(c.F1),
			Support: htmlCount(c.Support), Predicted: htmlCount(c.Predicted), F1Bar: htmlBarWidth(c.F1),
			Weak: c.Support > 0 && htmlFinite(c.F1) < htmlWeakF1,
		}
		v.HasWeak = v.HasWeak || row.Weak
		v.Rows = append(v.Rows, row)
		support += max(c.Support, 0)
	}
	if len(v.Rows) > 0 {
		v.Macro = htmlClassRow{Name: "macro average", P: htmlRate(r.MacroPrecision), R: htmlRate(r.MacroRecall),
			F1: htmlRate(r.MacroF1), Support: htmlCount(support), F1Bar: htmlBarWidth(r.MacroF1)}
	}

	for _, name := range htmlSortedKeys(r.PerRoute) {
		f := r.PerRoute[name]
		v.Routes = append(v.Routes, htmlRouteRow{Name: name, P: htmlRate(f.Precision), R: htmlRate(f.Recall),
			Taken: htmlCount(f.Taken), Right: htmlCount(f.Right), Support: htmlCount(f.Support), PBar: htmlBarWidth(f.Precision),
			Weak: f.Taken > 0 && htmlFinite(f.Precision) < htmlPrecisionMark})
	}

	v.Confusion, v.ConfusionNote, v.TopConfusions = htmlConfusionChart(r.Confusion)

	v.Reliability = htmlReliabilityChart(r.Reliability)
	v.ECE = htmlRate(r.ECE)

	for _, name := range htmlSortedKeys(r.Curves) {
		if card, ok := htmlCurveChart(name, r.Curves[name]); ok {
			v.Curves = append(v.Curves, card)
		}
	}

	v.Latency, v.LatencyChart, v.LatencyLog = htmlLatency(r.Latency)
	v.Reasons, v.ReasonsTotal = htmlReasonsChart(r.Reasons)

	if c := r.Compare; c != nil {
		v.Compare = &htmlCompareView{
			N: htmlCount(c.N), Agreement: htmlRate(c.Agreement), Tier1Only: htmlCount(c.Tier1Only), Tier2Only: htmlCount(c.Tier2Only),
			Chart: htmlCompareChart(c),
		}
	}

	v.Slices, v.SlicesChart = htmlSlices(r)
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

// num formats an SVG coordinate: two decimals at most, never NaN.
func num(x float64) string {
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

// htmlBarWidth is the CSS width of a bar filled to x in [0,1] ("45.6%").
func htmlBarWidth(x float64) string {
	return strconv.FormatFloat(htmlClamp01(x)*100, 'f', 1, 64) + "%"
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

// htmlRamp returns the ramp's colour at t in [0,1].
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

// htmlInterval shows a 95% interval of a share.
func htmlInterval(ci Interval) string {
	return fmt.Sprintf("%.3f–%.3f", htmlFinite(ci.Lo), htmlFinite(ci.Hi))
}
