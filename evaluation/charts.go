package evaluation

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// The charts of the report pages. Each is computed here as coordinates,
// colours and labels in a plain struct, and drawn by its template in
// charts.templ; nothing here writes markup. Coordinates are SVG user
// units; num formats them.

// point is a position in a chart.
type point struct{ X, Y float64 }

// box is a rectangle; newBox never gives it a negative size.
type box struct{ X, Y, W, H float64 }

func newBox(x, y, w, h float64) box { return box{x, y, math.Max(0, w), math.Max(0, h)} }

// segment is a straight line.
type segment struct{ X1, Y1, X2, Y2 float64 }

// label is chart text at (X, Y). Title, when it differs from Text, is the
// whole value of a shortened label, shown on hover.
type label struct {
	X, Y        float64
	Text, Title string
}

// Hover says whether the label carries a hover title.
func (l label) Hover() bool { return l.Title != "" && l.Title != l.Text }

// shortLabel is full at (x, y), cut to n runes, with full as its title.
func shortLabel(x, y float64, full string, n int) label {
	return label{X: x, Y: y, Text: htmlTruncate(full, n, "…"), Title: full}
}

// paint is how a shape is filled and stroked: SVG attribute values, ""
// for an attribute left out. Each shape of charts.templ writes the ones
// it can have.
type paint struct {
	Fill, FillOpacity, Opacity               string
	Stroke, StrokeOpacity, StrokeWidth, Dash string
	RX                                       string // rounded corners
}

// font is how a label is set: SVG attribute values, "" for one left out
// (the stylesheet's). Axis sets an axis title (the stylesheet's
// axis-title); Inert lets the pointer through to the shape underneath.
type font struct {
	Anchor, Size, Weight, Fill string
	Axis, Inert                bool
}

// captionFont sets what a chart's axis measures, and its ticks' values.
var captionFont = font{Anchor: "middle", Size: "9.5", Fill: htmlMuted}

// tick is a grid line and its label.
type tick struct {
	Line  segment
	Label label
}

// viewBox is the viewBox attribute of a chart w wide and h high.
func viewBox(w, h float64) string { return "0 0 " + num(w) + " " + num(h) }

// polyPoints is the points attribute of a polyline through pts.
func polyPoints(pts []point) string {
	b := make([]byte, 0, len(pts)*12)
	for i, p := range pts {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, num(p.X)...)
		b = append(b, ',')
		b = append(b, num(p.Y)...)
	}
	return string(b)
}

// htmlTextWidth estimates the width of text at a font size (sans-serif).
func htmlTextWidth(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * size * 0.6
}

// ---------------------------------------------------------------------------
// Confusion heatmap

// heatmapChart is a count matrix shaded by each cell's share of its row.
type heatmapChart struct {
	W, H   float64
	XTitle label   // "predicted →"
	YTitle float64 // centre of the rotated "← true label"
	Grid   box     // the matrix's background
	// Cells in row order; cells with no item are drawn (plain) only up
	// to 60 labels.
	Cells []heatCell

	// Labels says whether rows and columns are labelled (cells are at
	// least 8 units wide); LabelSize and TotalSize are font sizes.
	Labels    bool
	LabelSize float64
	TotalSize float64
	Rows      []label // row labels, right-aligned left of the grid
	Totals    []label // the row's item count, right of the grid
	Cols      []label // column labels, rotated at their position
	NLabel    label   // "n" above the totals

	Stops              []gradientStop // the legend's ramp
	Legend             box
	LegendLo, LegendHi label
}

// heatCell is one cell.
type heatCell struct {
	box
	Empty   bool
	Fill    string
	Outline bool // a diagonal cell large enough to outline
	Title   string
	// Count is written in the cell when it fits ("" when not), at At in
	// CountSize and CountFill.
	Count     string
	At        point
	CountSize float64
	CountFill string
}

type gradientStop struct {
	Offset float64
	Colour string
}

// htmlConfusionChart lays out c as a heatmap with a note on how to read it
// and the largest off-diagonal cells; nil when c counts nothing.
func htmlConfusionChart(c Confusion) (*heatmapChart, string, []htmlConfusionPair) {
	n := len(c.Labels)
	if n == 0 {
		return nil, "", nil
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
		return nil, "", nil
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
	const legendH = 46.0
	h := &heatmapChart{
		W: left + grid + right, H: top + grid + legendH,
		XTitle: label{X: left + grid/2, Y: 14, Text: "predicted →"},
		YTitle: top + grid/2,
		Grid:   newBox(left, top, grid, grid),
		Labels: showLabels, LabelSize: font, TotalSize: math.Min(font, 11),
	}

	gap := 1.0
	if cell < 8 {
		gap = 0
	}
	for i := range n {
		y := top + float64(i)*cell
		for j := range n {
			x := left + float64(j)*cell
			k := count(i, j)
			b := newBox(x+gap/2, y+gap/2, cell-gap, cell-gap)
			if k == 0 {
				if drawEmpty {
					h.Cells = append(h.Cells, heatCell{box: b, Empty: true})
				}
				continue
			}
			share := float64(k) / float64(rowSum[i])
			shade := 0.1 + 0.9*share
			hc := heatCell{box: b, Fill: htmlRamp(shade), Outline: i == j && cell >= 10,
				Title: fmt.Sprintf("true %s → predicted %s: %s of %s (%.1f%%)", c.Labels[i], c.Labels[j], htmlCount(k), htmlCount(rowSum[i]), share*100)}
			if showCounts {
				txt := htmlShortCount(k)
				cf := math.Min(11, cell*0.32)
				if htmlTextWidth(txt, cf) <= cell-4 {
					hc.Count, hc.At, hc.CountSize, hc.CountFill = txt, point{x + cell/2, y + cell/2 + cf*0.36}, cf, htmlInk
					if shade > 0.55 {
						hc.CountFill = "#ffffff"
					}
				}
			}
			h.Cells = append(h.Cells, hc)
		}
	}
	if showLabels {
		for i := range n {
			y := top + (float64(i)+0.5)*cell + font*0.35
			h.Rows = append(h.Rows, label{X: left - 6, Y: y, Text: labels[i], Title: c.Labels[i]})
			h.Totals = append(h.Totals, label{X: left + grid + 6, Y: y, Text: htmlShortCount(rowSum[i])})
		}
		for j := range n {
			h.Cols = append(h.Cols, label{X: left + (float64(j)+0.5)*cell, Y: top - 6, Text: labels[j], Title: c.Labels[j]})
		}
		h.NLabel = label{X: left + grid + 6, Y: top - 6, Text: "n"}
	}

	// Legend: the ramp, 0% to 100% of the row.
	ly := top + grid + 18
	lw := math.Min(200, math.Max(120, grid/3))
	for i := range htmlBlues {
		t := float64(i) / float64(len(htmlBlues)-1)
		h.Stops = append(h.Stops, gradientStop{Offset: t, Colour: htmlRamp(t)})
	}
	h.Legend = newBox(left, ly, lw, 10)
	h.LegendLo = label{X: left, Y: ly + 23, Text: "0%"}
	h.LegendHi = label{X: left + lw, Y: ly + 23, Text: "100% of the row"}
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
	topN := 10
	if !showLabels {
		topN = 16 // the list is the only place labels show
	}
	var worst []htmlConfusionPair
	for _, p := range pairs[:min(len(pairs), topN)] {
		share := float64(p.k) / float64(rowSum[p.i])
		worst = append(worst, htmlConfusionPair{
			True: c.Labels[p.i], Pred: c.Labels[p.j], Count: htmlCount(p.k),
			Share: strconv.FormatFloat(share*100, 'f', 1, 64) + "%",
		})
	}
	return h, note, worst
}

// ---------------------------------------------------------------------------
// Reliability diagram

// reliabilityChart is accuracy against mean top score per bin, with the
// bins' item counts underneath.
type reliabilityChart struct {
	W, H     float64
	Plot     box
	Grid     []reliabilityTick
	Diagonal segment
	Bins     []reliabilityBin
	Baseline segment // under the count histogram
	// AccuracyY and ItemsY centre the rotated axis titles.
	AccuracyY, ItemsY float64
	XTitle            label
}

// reliabilityTick is one value of both axes: its grid lines and labels.
type reliabilityTick struct {
	H, V           segment
	YLabel, XLabel label
}

type reliabilityBin struct {
	Accuracy box // the bar, up to the bin's accuracy
	Title    string
	Gap      *box  // between accuracy and mean confidence, when visible
	Mean     point // (mean confidence, accuracy)
	Count    box   // the histogram bar
	Items    string
	// CountLabel is the count above its bar, when it fits (Text "").
	CountLabel label
}

func htmlReliabilityChart(bins []Bin) *reliabilityChart {
	maxCount := 0
	for _, b := range bins {
		maxCount = max(maxCount, b.Count)
	}
	if maxCount == 0 {
		return nil
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

	c := &reliabilityChart{W: W, H: H, Plot: newBox(left, top, plotW, plotH),
		Diagonal: segment{x(0), y(0), x(1), y(1)}, Baseline: segment{left, hy0 + histH, left + plotW, hy0 + histH},
		AccuracyY: top + plotH/2, ItemsY: hy0 + histH/2,
		XTitle: label{X: left + plotW/2, Y: H - 6, Text: "confidence (mean top score)"}}
	for i := 0; i <= 5; i++ {
		t := float64(i) / 5
		txt := strconv.FormatFloat(t, 'f', 1, 64)
		c.Grid = append(c.Grid, reliabilityTick{
			H: segment{left, y(t), left + plotW, y(t)}, V: segment{x(t), top, x(t), top + plotH},
			YLabel: label{X: left - 6, Y: y(t) + 3.5, Text: txt}, XLabel: label{X: x(t), Y: hy0 + histH + 14, Text: txt},
		})
	}
	for _, b := range bins {
		lo, hi := htmlClamp01(b.Lo), htmlClamp01(b.Hi)
		if b.Count <= 0 || hi <= lo {
			continue
		}
		x0, x1 := x(lo)+1, x(hi)-1
		acc, conf := htmlClamp01(b.Accuracy), htmlClamp01(b.Confidence)
		rb := reliabilityBin{
			Accuracy: newBox(x0, y(acc), x1-x0, y(0)-y(acc)),
			Title: fmt.Sprintf("confidence %s–%s: %s items, accuracy %s, mean confidence %s",
				htmlRate(lo), htmlRate(hi), htmlCount(b.Count), htmlRate(acc), htmlRate(conf)),
			Mean:  point{x(conf), y(acc)},
			Items: htmlCount(b.Count) + " items",
		}
		if g0, g1 := math.Min(acc, conf), math.Max(acc, conf); g1-g0 > 0.002 {
			g := newBox(x0, y(g1), x1-x0, y(g0)-y(g1))
			rb.Gap = &g
		}
		hh := float64(b.Count) / float64(maxCount) * histH
		rb.Count = newBox(x0, hy0+histH-hh, x1-x0, hh)
		if txt := htmlShortCount(b.Count); htmlTextWidth(txt, 9) <= x1-x0+6 {
			rb.CountLabel = label{X: (x0 + x1) / 2, Y: hy0 + histH - hh - 3, Text: txt}
		}
		c.Bins = append(c.Bins, rb)
	}
	return c
}

// ---------------------------------------------------------------------------
// Precision–coverage small multiples

// curveChart is one class's precision and coverage as the floor rises.
type curveChart struct {
	W, H   float64
	Name   string
	Plot   box
	YTicks []tick
	XTicks []tick // Label.Text "" for an unlabelled tick
	Target segment
	// Coverage and Precision are the two lines; Dots mark precision's
	// points when there are few.
	Coverage, Precision []point
	Dots                []point
	Mark                *curveMark
}

// curveMark is the lowest floor where precision reaches the target.
type curveMark struct {
	Line   segment
	Dot    point
	Label  label
	Anchor string // text-anchor of Label
}

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

	c := curveChart{W: W, H: H, Name: name, Plot: newBox(left, top, plotW, plotH),
		Target: segment{left, y(htmlPrecisionMark), left + plotW, y(htmlPrecisionMark)}}
	for _, t := range []float64{0, 0.5, 1} {
		c.YTicks = append(c.YTicks, tick{Line: segment{left, y(t), left + plotW, y(t)},
			Label: label{X: left - 5, Y: y(t) + 3.5, Text: strconv.FormatFloat(t, 'f', 1, 64)}})
	}
	for _, t := range []float64{0, 0.25, 0.5, 0.75, 1} {
		if t < lo || t > hi {
			continue
		}
		tk := tick{Line: segment{x(t), top + plotH, x(t), top + plotH + 3}}
		if t == 0 || t == 0.5 || t == 1 {
			tk.Label = label{X: x(t), Y: top + plotH + 13, Text: strconv.FormatFloat(t, 'f', 1, 64)}
		}
		c.XTicks = append(c.XTicks, tk)
	}

	mark, maxP := -1, 0.0
	for i, p := range pts {
		c.Coverage = append(c.Coverage, point{x(p.Floor), y(p.Coverage)})
		if anyCount && p.Count == 0 {
			continue // precision is undefined where nothing is predicted
		}
		c.Precision = append(c.Precision, point{x(p.Floor), y(p.Precision)})
		maxP = math.Max(maxP, htmlFinite(p.Precision))
		if mark < 0 && htmlFinite(p.Precision) >= htmlPrecisionMark {
			mark = i
		}
	}
	if len(c.Precision) <= 24 {
		c.Dots = c.Precision
	}
	card := htmlCurveCard{Name: name}
	if mark >= 0 {
		p := pts[mark]
		mx := x(p.Floor)
		floor := strconv.FormatFloat(htmlFinite(p.Floor), 'f', 2, 64)
		m := &curveMark{Line: segment{mx, top, mx, top + plotH}, Dot: point{mx, y(p.Precision)}, Anchor: "start"}
		m.Label = label{X: mx + 4, Y: top + plotH - 6, Text: "≥0.9 @ " + floor}
		if mx+4+htmlTextWidth(m.Label.Text, 9) > left+plotW {
			m.Anchor, m.Label.X = "end", mx-4
		}
		c.Mark = m
		card.Reached = true
		card.Note = "precision ≥ 0.9 from floor " + floor
		card.Note2 = "coverage there " + htmlRate(p.Coverage)
	} else {
		card.Note = "precision peaks at " + htmlRate(maxP)
		card.Note2 = "never reaches 0.9"
	}
	card.Chart = c
	return card, true
}

// ---------------------------------------------------------------------------
// Latency

// latencyChart is p50, p90 and p99 per tier as bars, on a linear or a log
// scale.
type latencyChart struct {
	W, H    float64
	Ticks   []tick
	Groups  []latencyGroup
	Axis    segment
	Caption label
}

type latencyGroup struct {
	Label label
	Bars  []bar
}

// bar is a horizontal bar with a hover title and a value beside it.
type bar struct {
	box
	Fill, Title string
	Value       label
}

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

// htmlLatency lays out the latency table's rows and its chart (nil when
// there is nothing to draw); log says the chart's scale is logarithmic.
func htmlLatency(lat map[string]Percentiles) (rows []htmlLatencyRow, chart *latencyChart, log bool) {
	tiers := htmlTierOrder(htmlSortedKeys(lat))
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
		return rows, nil, false
	}
	log = hi/lo > 30
	var d0, d1 float64
	if log {
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
		if log {
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
	chart = &latencyChart{W: W, H: H, Axis: segment{left, top - 2, left, top + plotH + 4}}

	var ticks []float64
	if log {
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
		if !log && tv == 0 {
			tx = left
		}
		chart.Ticks = append(chart.Ticks, tick{Line: segment{tx, top - 2, tx, top + plotH + 4},
			Label: label{X: tx, Y: top + plotH + 16, Text: htmlMicrosTick(tv)}})
	}
	colours := []string{htmlSky, htmlBlue, "#003a5c"}
	names := []string{"p50", "p90", "p99"}
	for gi, t := range shown {
		p := lat[t]
		gy := top + float64(gi)*(groupH+group)
		g := latencyGroup{Label: shortLabel(left-8, gy+groupH/2+4, t, 14)}
		for k, v := range []float64{p.P50, p.P90, p.P99} {
			by := gy + float64(k)*(barH+barGap)
			w := scale(v)
			g.Bars = append(g.Bars, bar{box: newBox(left, by, w, barH), Fill: colours[k], Title: t + " " + names[k] + ": " + htmlMicros(v),
				Value: label{X: left + w + 4, Y: by + barH - 1.5, Text: names[k] + " " + htmlMicros(v)}})
		}
		chart.Groups = append(chart.Groups, g)
	}
	caption := "microseconds, linear scale"
	if log {
		caption = "log scale"
	}
	chart.Caption = label{X: left + plotW/2, Y: H - 3, Text: caption}
	return rows, chart, log
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
// Decision reasons

// barChart is a column of labelled horizontal bars, with optional grid
// ticks, a reference line and a caption.
type barChart struct {
	W, H  float64
	Ticks []tick
	Rows  []barRow
	// Reference is a dashed line across the bars (the overall figure);
	// ReferenceLabel, anchored at ReferenceAnchor, says what it is.
	Reference       *segment
	ReferenceLabel  label
	ReferenceAnchor string
	Caption         label // Text "" for none
}

// barRow is one bar with its label on the left.
type barRow struct {
	Label label
	bar
}

// htmlReasonsChart draws the decision reasons by count, largest first;
// total is how many decisions they cover.
func htmlReasonsChart(reasons map[string]int) (chart *barChart, total string) {
	type kv struct {
		k string
		v int
	}
	var list []kv
	sum, maxV := 0, 0
	for k, v := range reasons {
		if v > 0 {
			list = append(list, kv{k, v})
			sum += v
			maxV = max(maxV, v)
		}
	}
	if sum == 0 {
		return nil, ""
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
	chart = &barChart{W: W, H: top + float64(len(list))*(barH+gap) + 2}
	for i, e := range list {
		y := top + float64(i)*(barH+gap)
		colour := htmlBlue
		if Escalated(e.k) {
			colour = htmlOrange
		}
		w := float64(e.v) / float64(maxV) * plotW
		share := float64(e.v) / float64(sum)
		chart.Rows = append(chart.Rows, barRow{Label: shortLabel(left-6, y+barH-4, e.k, 24), bar: bar{
			box: newBox(left, y, math.Max(w, 1), barH), Fill: colour,
			Title: fmt.Sprintf("%s: %s (%.1f%%)", e.k, htmlCount(e.v), share*100),
			Value: label{X: left + w + 5, Y: y + barH - 4, Text: htmlCount(e.v) + " · " + strconv.FormatFloat(share*100, 'f', 1, 64) + "%"},
		}})
	}
	return chart, htmlCount(sum)
}

// ---------------------------------------------------------------------------
// Tier 1 vs tier 2

func htmlCompareChart(c *TierComparison) *barChart {
	const (
		W, left, right, top, barH, gap = 350.0, 50.0, 46.0, 6.0, 22.0, 10.0
	)
	plotW := W - left - right
	H := top + 2*barH + gap + 26
	chart := &barChart{W: W, H: H, Caption: label{X: left + plotW/2, Y: H - 1, Text: "accuracy"}}
	for i := 0; i <= 4; i++ {
		t := float64(i) / 4
		x := left + t*plotW
		chart.Ticks = append(chart.Ticks, tick{Line: segment{x, top - 2, x, top + 2*barH + gap + 3},
			Label: label{X: x, Y: top + 2*barH + gap + 15, Text: strconv.FormatFloat(t, 'f', 2, 64)}})
	}
	for i, e := range []struct {
		name, colour string
		v            float64
	}{{"tier 1", htmlSky, c.Tier1Acc}, {"tier 2", htmlBlue, c.Tier2Acc}} {
		y := top + float64(i)*(barH+gap)
		w := htmlClamp01(e.v) * plotW
		chart.Rows = append(chart.Rows, barRow{Label: label{X: left - 8, Y: y + barH - 7, Text: e.name}, bar: bar{
			box: newBox(left, y, w, barH), Fill: e.colour,
			Value: label{X: left + w + 5, Y: y + barH - 7, Text: htmlRate(e.v)},
		}})
	}
	return chart
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

// htmlSlices lays out the slices' table rows and their accuracy chart,
// with the overall accuracy as a reference line.
func htmlSlices(r *Report) ([]htmlSliceRow, *barChart) {
	var keys []string
	for k, s := range r.Slices {
		if s != nil {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	sort.Slice(keys, func(a, b int) bool { return htmlSliceLess(keys[a], keys[b]) })
	var rows []htmlSliceRow
	maxLab := 0.0
	for _, k := range keys {
		s := r.Slices[k]
		row := htmlSliceRow{Value: k, N: htmlCount(s.N), Acc: htmlRate(s.Accuracy), F1: htmlRate(s.MacroF1),
			Coverage: htmlRate(s.Coverage), ECE: htmlRate(s.ECE)}
		if r.Mode == "rules" {
			row.RouteP = htmlRate(s.RoutePrecision)
		}
		rows = append(rows, row)
		maxLab = math.Max(maxLab, htmlTextWidth(htmlTruncate(k, 24, "…"), 11))
	}
	const (
		W, right, top, barH, gap = 460.0, 52.0, 20.0, 16.0, 7.0
	)
	left := math.Min(maxLab+12, 180)
	plotW := W - left - right
	plotH := float64(len(keys))*(barH+gap) - gap
	H := top + plotH + 26
	chart := &barChart{W: W, H: H, Caption: label{X: left + plotW/2, Y: H - 1, Text: "accuracy"}}
	for i := 0; i <= 4; i++ {
		t := float64(i) / 4
		x := left + t*plotW
		chart.Ticks = append(chart.Ticks, tick{Line: segment{x, top - 4, x, top + plotH + 3},
			Label: label{X: x, Y: top + plotH + 15, Text: strconv.FormatFloat(t, 'f', 2, 64)}})
	}
	for i, k := range keys {
		sl := r.Slices[k]
		y := top + float64(i)*(barH+gap)
		w := htmlClamp01(sl.Accuracy) * plotW
		chart.Rows = append(chart.Rows, barRow{Label: shortLabel(left-6, y+barH-4, k, 24), bar: bar{
			box: newBox(left, y, w, barH), Fill: htmlBlue,
			Title: fmt.Sprintf("%s: accuracy %s over %s items", k, htmlRate(sl.Accuracy), htmlCount(sl.N)),
			Value: label{X: left + w + 5, Y: y + barH - 4, Text: htmlRate(sl.Accuracy)},
		}})
	}
	// The overall accuracy as a reference.
	ax := left + htmlClamp01(r.Accuracy)*plotW
	chart.Reference = &segment{ax, top - 6, ax, top + plotH + 3}
	chart.ReferenceAnchor = "middle"
	if ax > left+plotW-30 {
		chart.ReferenceAnchor = "end"
	}
	chart.ReferenceLabel = label{X: ax, Y: top - 9, Text: "all " + htmlRate(r.Accuracy)}
	return rows, chart
}

// ---------------------------------------------------------------------------
// A/B: F1 delta per class

// deltaChart is each class's F1 delta (B − A) as a bar from zero, with its
// 95% interval as a whisker.
type deltaChart struct {
	W, H  float64
	Zero  segment
	Ticks []tick
	Rows  []deltaRow
}

type deltaRow struct {
	barRow
	Interval segment
}

func abDeltaChart(d map[string]Delta) *deltaChart {
	keys := htmlSortedKeys(d)
	if len(keys) == 0 {
		return nil
	}
	const rowH, labelW, plotW = 22.0, 150.0, 560.0
	extent := 0.05
	for _, k := range keys {
		extent = math.Max(extent, math.Max(math.Abs(htmlFinite(d[k].Lo)), math.Abs(htmlFinite(d[k].Hi))))
	}
	extent = htmlNiceCeil(extent)
	x := func(v float64) float64 { return labelW + plotW/2 + htmlFinite(v)/extent*plotW/2 }
	h := rowH*float64(len(keys)) + 40
	c := &deltaChart{W: labelW + plotW + 20, H: h, Zero: segment{x(0), 10, x(0), h - 24}}
	for _, t := range []float64{-extent, -extent / 2, extent / 2, extent} {
		c.Ticks = append(c.Ticks, tick{Line: segment{x(t), 10, x(t), h - 24},
			Label: label{X: x(t), Y: h - 8, Text: fmt.Sprintf("%+.2f", t)}})
	}
	for i, k := range keys {
		y := 14 + float64(i)*rowH
		v := d[k]
		col := htmlBlue
		if v.Delta < 0 {
			col = htmlVerm
		}
		x0, x1 := x(0), x(v.Delta)
		c.Rows = append(c.Rows, deltaRow{
			barRow: barRow{Label: shortLabel(labelW-8, y+11, k, 22), bar: bar{
				box: newBox(math.Min(x0, x1), y+3, math.Abs(x1-x0), rowH-10), Fill: col,
				Title: fmt.Sprintf("%s: F1 %.3f → %.3f (%+.3f, 95%% [%+.3f, %+.3f])", k, v.A, v.B, v.Delta, v.Lo, v.Hi),
			}},
			Interval: segment{x(v.Lo), y + rowH/2 - 1, x(v.Hi), y + rowH/2 - 1},
		})
	}
	return c
}
