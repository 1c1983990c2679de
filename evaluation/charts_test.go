package evaluation

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestFormatting(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{htmlCount(0), "0"}, {htmlCount(999), "999"}, {htmlCount(1000), "1,000"}, {htmlCount(-1234567), "-1,234,567"},
		{htmlRate(0.12345), "0.123"}, {htmlRate(1), "1.000"}, {htmlRate(math.NaN()), "–"}, {htmlRate(math.Inf(-1)), "–"},
		{htmlShortCount(999), "999"}, {htmlShortCount(1234), "1.2k"}, {htmlShortCount(34567), "34k"}, {htmlShortCount(1500000), "1.5M"},
		{htmlMicros(0), "0 µs"}, {htmlMicros(1.234), "1.23 µs"}, {htmlMicros(182), "182 µs"}, {htmlMicros(1930), "1.93 ms"},
		{htmlMicros(48200), "48.2 ms"}, {htmlMicros(2.5e6), "2.50 s"}, {htmlMicros(math.NaN()), "0 µs"},
		{htmlMicrosTick(1000), "1 ms"}, {htmlMicrosTick(250), "250 µs"}, {htmlMicrosTick(1e7), "10 s"},
		{num(12.345), "12.35"}, {num(-0.001), "0"}, {num(math.NaN()), "0"}, {num(math.Inf(1)), "0"}, {num(3), "3"},
		{htmlBarWidth(0.4567), "45.7%"}, {htmlBarWidth(math.NaN()), "0.0%"}, {htmlBarWidth(2), "100.0%"}, {htmlBarWidth(-1), "0.0%"},
		{htmlTruncate("abcdef", 4, "…"), "abcd…"}, {htmlTruncate("→→→", 3, "…"), "→→→"},
		{viewBox(440, 12.5), "0 0 440 12.5"},
		{polyPoints([]point{{1, 2}, {3.456, math.NaN()}}), "1,2 3.46,0"}, {polyPoints(nil), ""},
		{htmlRamp(0), "#f7fbff"}, {htmlRamp(1), "#08306b"}, {htmlRamp(math.NaN()), "#f7fbff"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	keys := htmlSortedKeys(map[string]int{"class-10": 0, "class-9": 0, "class-09": 0, "b": 0, "a": 0})
	if want := []string{"a", "b", "class-09", "class-9", "class-10"}; !slices.Equal(keys, want) {
		t.Errorf("natural order %q, want %q", keys, want)
	}
}

func TestConfusionChart(t *testing.T) {
	long := strings.Repeat("x", 30)
	c := Confusion{Labels: []string{"a", "b", long}, Counts: [][]int{{8, 2, 0}, {0, 5, 0}, {1, 0, 0}}}
	h, note, pairs := htmlConfusionChart(c)
	if h == nil {
		t.Fatal("no chart")
	}
	if len(h.Cells) != 9 {
		t.Fatalf("%d cells, want 9 (3 labels: empty cells drawn too)", len(h.Cells))
	}
	at := func(i, j int) heatCell { return h.Cells[i*3+j] }
	if k := at(0, 0); k.Empty || !k.Outline || k.Fill != htmlRamp(0.1+0.9*0.8) || k.Count != "8" || k.CountFill != "#ffffff" {
		t.Errorf("cell a→a %+v", k)
	}
	if k := at(0, 1); k.Outline || k.Count != "2" || k.CountFill != htmlInk || k.Title != "true a → predicted b: 2 of 10 (20.0%)" {
		t.Errorf("cell a→b %+v", k)
	}
	if k := at(2, 0); k.Outline || k.Fill != "#08306b" {
		t.Errorf("cell %s→a, the whole row: %+v", long, k)
	}
	if k := at(1, 0); !k.Empty || k.W != 37 || k.H != 37 {
		t.Errorf("empty cell %+v, want 38-unit cells less a 1-unit gap", k)
	}
	if !h.Labels || len(h.Rows) != 3 || len(h.Cols) != 3 || len(h.Totals) != 3 {
		t.Fatalf("labels: %v, %d rows, %d columns", h.Labels, len(h.Rows), len(h.Cols))
	}
	if r := h.Rows[2]; r.Text != strings.Repeat("x", 22)+"…" || r.Title != long || !r.Hover() || h.Rows[0].Hover() {
		t.Errorf("long row label %+v", r)
	}
	if got := []string{h.Totals[0].Text, h.Totals[1].Text, h.Totals[2].Text}; !slices.Equal(got, []string{"10", "5", "1"}) {
		t.Errorf("row totals %q", got)
	}
	if len(h.Stops) != len(htmlBlues) || h.Stops[len(h.Stops)-1] != (gradientStop{1, "#08306b"}) {
		t.Errorf("legend stops %+v", h.Stops)
	}
	if !strings.Contains(note, "outlined") {
		t.Errorf("note %q", note)
	}
	want := []htmlConfusionPair{{"a", "b", "2", "20.0%"}, {long, "a", "1", "100.0%"}}
	if !slices.Equal(pairs, want) {
		t.Errorf("pairs %+v, want %+v", pairs, want)
	}

	// 150 labels: cells too small for text or labels; empty cells not
	// drawn; the list is longer, as it is the only place labels show.
	var labels []string
	counts := make([][]int, 150)
	for i := range 150 {
		labels = append(labels, "c"+strconv.Itoa(i))
		counts[i] = make([]int, 150)
		counts[i][i], counts[i][(i+1)%150] = 10, i%5
	}
	h, note, pairs = htmlConfusionChart(Confusion{Labels: labels, Counts: counts})
	if h.Labels || len(h.Rows) != 0 || !strings.Contains(note, "hover") || len(pairs) != 16 {
		t.Errorf("150 labels: labels %v, %d rows, note %q, %d pairs", h.Labels, len(h.Rows), note, len(pairs))
	}
	for _, k := range h.Cells {
		if k.Empty || k.Count != "" {
			t.Fatalf("150 labels: cell %+v", k)
		}
	}

	for name, c := range map[string]Confusion{"none": {}, "zero": {Labels: []string{"a"}, Counts: [][]int{{0}}}, "negative": {Labels: []string{"a"}, Counts: [][]int{{-3}}}} {
		if h, _, _ := htmlConfusionChart(c); h != nil {
			t.Errorf("%s: a chart of nothing", name)
		}
	}
}

func TestReliabilityChart(t *testing.T) {
	c := htmlReliabilityChart([]Bin{
		{Lo: 0, Hi: 0.5, Count: 0},
		{Lo: 0.5, Hi: 0.75, Count: 10, Confidence: 0.6, Accuracy: 0.6},
		{Lo: 0.75, Hi: 1, Count: 20, Confidence: 0.9, Accuracy: 0.7},
	})
	if c == nil || len(c.Bins) != 2 || len(c.Grid) != 6 {
		t.Fatalf("chart %+v", c)
	}
	calibrated, over := c.Bins[0], c.Bins[1]
	if calibrated.Gap != nil || over.Gap == nil {
		t.Errorf("gaps: %v, %v; want none where accuracy is the confidence", calibrated.Gap, over.Gap)
	}
	// The plot is 380 wide from x=46 and 290 high from y=12.
	if math.Abs(over.Mean.X-(46+0.9*380)) > 1e-9 || math.Abs(over.Mean.Y-(12+0.3*290)) > 1e-9 {
		t.Errorf("mean point %+v", over.Mean)
	}
	if over.Count.H != 70 || calibrated.Count.H != 35 {
		t.Errorf("histogram heights %v, %v; want the largest bin full (70)", over.Count.H, calibrated.Count.H)
	}
	if over.Items != "20 items" || over.CountLabel.Text != "20" || !strings.HasPrefix(over.Title, "confidence 0.750–1.000: 20 items, accuracy 0.700") {
		t.Errorf("bin texts %q, %q, %q", over.Items, over.CountLabel.Text, over.Title)
	}
	if c.Grid[5].YLabel.Text != "1.0" || c.Grid[0].XLabel.Text != "0.0" {
		t.Errorf("axis labels %+v", c.Grid)
	}
	if htmlReliabilityChart(make([]Bin, 15)) != nil {
		t.Errorf("a chart of empty bins")
	}
}

func TestCurveChart(t *testing.T) {
	pts := []CurvePoint{{Floor: 0.8, Precision: 0.92, Coverage: 0.4, Count: 4}, {Floor: 0, Precision: 0.6, Coverage: 1, Count: 10},
		{Floor: 0.5, Precision: 0.8, Coverage: 0.7, Count: 7}, {Floor: 0.9, Precision: 0, Coverage: 0, Count: 0}}
	card, ok := htmlCurveChart("law", pts)
	if !ok || !card.Reached || card.Note != "precision ≥ 0.9 from floor 0.80" || card.Note2 != "coverage there 0.400" {
		t.Fatalf("card %+v", card)
	}
	c := card.Chart
	if c.Name != "law" || len(c.Coverage) != 4 || len(c.Precision) != 3 || len(c.Dots) != 3 {
		t.Errorf("%d coverage, %d precision points, %d dots; want precision left out where nothing is predicted", len(c.Coverage), len(c.Precision), len(c.Dots))
	}
	if c.Coverage[0].X >= c.Coverage[1].X {
		t.Errorf("points not in floor order: %+v", c.Coverage)
	}
	if m := c.Mark; m == nil || m.Label.Text != "≥0.9 @ 0.80" || m.Anchor != "end" {
		t.Errorf("mark %+v; want its label to the left where it would leave the plot", m)
	}
	if len(c.XTicks) != 5 || c.XTicks[1].Label.Text != "" || c.XTicks[2].Label.Text != "0.5" {
		t.Errorf("x ticks %+v", c.XTicks)
	}

	card, _ = htmlCurveChart("math", []CurvePoint{{Floor: 0.1, Precision: 0.85, Coverage: 0.5}, {Floor: 0.2, Precision: 0.8, Coverage: 0.3}})
	if card.Reached || card.Chart.Mark != nil || card.Note != "precision peaks at 0.850" || card.Note2 != "never reaches 0.9" {
		t.Errorf("never reaching: %+v", card)
	}
	card, _ = htmlCurveChart("low", []CurvePoint{{Floor: 0.1, Precision: 0.95, Count: 1}})
	if card.Chart.Mark.Anchor != "start" {
		t.Errorf("a mark on the left anchored %q", card.Chart.Mark.Anchor)
	}
	var many []CurvePoint
	for i := range 30 {
		many = append(many, CurvePoint{Floor: float64(i) / 30, Precision: 0.5})
	}
	if card, _ := htmlCurveChart("many", many); len(card.Chart.Dots) != 0 || len(card.Chart.Precision) != 30 {
		t.Errorf("30 points: %d dots", len(card.Chart.Dots))
	}
	if _, ok := htmlCurveChart("none", nil); ok {
		t.Errorf("a card without points")
	}
}

func TestLatencyChart(t *testing.T) {
	rows, c, log := htmlLatency(map[string]Percentiles{"tier1": {P50: 100, P90: 200, P99: 300, Count: 5}, "idle": {}})
	if log || c == nil || len(rows) != 1 || len(c.Groups) != 1 {
		t.Fatalf("linear: log %v, %d rows, chart %+v", log, len(rows), c)
	}
	var ticks []string
	for _, tk := range c.Ticks {
		ticks = append(ticks, tk.Label.Text)
	}
	if !slices.Equal(ticks, []string{"0 µs", "125 µs", "250 µs", "375 µs", "500 µs"}) || c.Caption.Text != "microseconds, linear scale" {
		t.Errorf("linear ticks %q, caption %q", ticks, c.Caption.Text)
	}
	if b := c.Groups[0].Bars; len(b) != 3 || b[2].Fill != "#003a5c" || b[0].Value.Text != "p50 100 µs" || b[2].Title != "tier1 p99: 300 µs" {
		t.Errorf("bars %+v", b)
	}
	if w := c.Groups[0].Bars[2].W; math.Abs(w-0.6*(350-74-c.Axis.X1)) > 1e-9 {
		t.Errorf("p99 bar %v wide, want 0.6 of the plot", w)
	}

	rows, c, log = htmlLatency(map[string]Percentiles{
		"decision": {P50: 240, P90: 9100, P99: 48200, Count: 1}, "zeta": {P50: 1000, Count: 1},
		"tier1": {P50: 182, P90: 431, P99: 1930, Count: 1}, "tier2": {P50: 3000, Count: 1},
	})
	var order []string
	for _, r := range rows {
		order = append(order, r.Tier)
	}
	if !log || !slices.Equal(order, []string{"tier1", "tier2", "decision", "zeta"}) {
		t.Errorf("log %v, order %q", log, order)
	}
	ticks = nil
	for _, tk := range c.Ticks {
		ticks = append(ticks, tk.Label.Text)
	}
	if !slices.Equal(ticks, []string{"100 µs", "1 ms", "10 ms", "100 ms"}) || c.Caption.Text != "log scale" {
		t.Errorf("log ticks %q", ticks)
	}
	if rows, c, _ := htmlLatency(nil); rows != nil || c != nil {
		t.Errorf("latency of nothing: %v, %v", rows, c)
	}
}

func TestBarCharts(t *testing.T) {
	c, total := htmlReasonsChart(map[string]int{"default": 1, "tier1_confident": 6, "below_floor": 3, "never": 0})
	if total != "10" || len(c.Rows) != 3 {
		t.Fatalf("total %q, %d rows", total, len(c.Rows))
	}
	var got []string
	for _, r := range c.Rows {
		got = append(got, r.Label.Text+" "+r.Fill+" "+r.Value.Text)
	}
	want := []string{"tier1_confident " + htmlBlue + " 6 · 60.0%", "below_floor " + htmlOrange + " 3 · 30.0%", "default " + htmlBlue + " 1 · 10.0%"}
	if !slices.Equal(got, want) {
		t.Errorf("reasons %q, want %q", got, want)
	}
	if c.Rows[0].W != 2*c.Rows[1].W {
		t.Errorf("bars not to scale: %v, %v", c.Rows[0].W, c.Rows[1].W)
	}
	if c, _ := htmlReasonsChart(map[string]int{"x": -1}); c != nil {
		t.Errorf("a chart of no reason")
	}

	r := &Report{Accuracy: 1, Slices: map[string]*Report{"10": {Accuracy: 0.5}, "9": {}, "b": {}, "a10": {}, "a2": {}, "gone": nil}}
	rows, s := htmlSlices(r)
	got = nil
	for _, r := range rows {
		got = append(got, r.Value)
	}
	if !slices.Equal(got, []string{"9", "10", "a2", "a10", "b"}) {
		t.Errorf("slice order %q", got)
	}
	if s.Reference == nil || s.ReferenceAnchor != "end" || s.ReferenceLabel.Text != "all 1.000" || len(s.Ticks) != 5 {
		t.Errorf("slices chart: reference %v anchored %q, %q", s.Reference, s.ReferenceAnchor, s.ReferenceLabel.Text)
	}

	cmp := htmlCompareChart(&TierComparison{Tier1Acc: 0.5, Tier2Acc: math.NaN()})
	if cmp.Rows[0].Value.Text != "0.500" || cmp.Rows[1].Value.Text != "–" || cmp.Rows[1].W != 0 || cmp.Rows[0].W != 127 {
		t.Errorf("compare rows %+v", cmp.Rows)
	}
}

func TestDeltaChart(t *testing.T) {
	c := abDeltaChart(map[string]Delta{"up": {A: 0.5, B: 0.56, Delta: 0.06, Lo: 0.01, Hi: 0.08}, "down": {Delta: -0.04, Lo: -0.07, Hi: 0.02}})
	if c == nil || len(c.Rows) != 2 {
		t.Fatalf("chart %+v", c)
	}
	var ticks []string
	for _, tk := range c.Ticks {
		ticks = append(ticks, tk.Label.Text)
	}
	if !slices.Equal(ticks, []string{"-0.10", "-0.05", "+0.05", "+0.10"}) {
		t.Errorf("ticks %q", ticks)
	}
	down, up := c.Rows[0], c.Rows[1]
	if down.Label.Text != "down" || down.Fill != htmlVerm || up.Fill != htmlBlue {
		t.Errorf("rows %q %s, %q %s", down.Label.Text, down.Fill, up.Label.Text, up.Fill)
	}
	// x(v) = 150 + 280 + v/0.1*280: zero at 430.
	if down.X != 430-0.4*280 || math.Abs(down.X+down.W-430) > 1e-9 || up.X != 430 {
		t.Errorf("bars from %v (%v wide) and %v; want both to reach zero", down.X, down.W, up.X)
	}
	if up.Interval.X1 != 430+0.1*280 || up.Title != "up: F1 0.500 → 0.560 (+0.060, 95% [+0.010, +0.080])" {
		t.Errorf("up %+v", up)
	}
	if abDeltaChart(nil) != nil {
		t.Errorf("a chart of no class")
	}
}
