package evaluation

import (
	"fmt"
	"io"
	"math"
)

// WriteABHTML renders an A/B comparison as one self-contained page: the
// headline deltas with their intervals, McNemar's test, per-class F1
// deltas, the agreement matrix and the routing counterfactual.
func WriteABHTML(w io.Writer, r *ABReport) error {
	if r == nil {
		r = &ABReport{}
	}
	return writePage(w, func(o htmlOut) { abWritePage(o, abBuildView(r)) })
}

// abBuildView computes what the A/B page shows of r.
func abBuildView(r *ABReport) *abView {
	v := &abView{R: r, AccA: htmlRate(r.Accuracy.A), AccB: htmlRate(r.Accuracy.B),
		Delta: fmt.Sprintf("%+.3f", htmlFinite(r.Accuracy.Delta)), CI: fmt.Sprintf("[%+.3f, %+.3f]", htmlFinite(r.Accuracy.Lo), htmlFinite(r.Accuracy.Hi)),
		P: fmt.Sprintf("%.3g", htmlFinite(r.McNemar.P)), Agree: htmlRate(r.AgreementRate),
		LatA: htmlMicros(r.LatencyA.P50) + " / " + htmlMicros(r.LatencyA.P99), LatB: htmlMicros(r.LatencyB.P50) + " / " + htmlMicros(r.LatencyB.P99),
		EscA: htmlRate(r.EscalationA), EscB: htmlRate(r.EscalationB)}
	v.Deltas = abDeltaSVG(r.PerClass)
	if len(r.Agreement.Labels) > 0 {
		v.Agreement, _, _ = htmlConfusionSVG(r.Agreement)
	}
	if len(r.Counterfactual.Labels) > 0 {
		v.Counter, _, _ = htmlConfusionSVG(r.Counterfactual)
	}
	return v
}

type abView struct {
	R                                           *ABReport
	AccA, AccB, Delta, CI, P, Agree, LatA, LatB string
	EscA, EscB                                  string
	Deltas, Agreement, Counter                  rawHTML
}

// abDeltaSVG draws each class's F1 delta (B − A) as a bar with its 95%
// interval as a whisker, around a zero line.
func abDeltaSVG(d map[string]Delta) rawHTML {
	keys := htmlSortedKeys(d)
	if len(keys) == 0 {
		return ""
	}
	const rowH, labelW, plotW = 22.0, 150.0, 560.0
	extent := 0.05
	for _, k := range keys {
		extent = math.Max(extent, math.Max(math.Abs(htmlFinite(d[k].Lo)), math.Abs(htmlFinite(d[k].Hi))))
	}
	extent = htmlNiceCeil(extent)
	x := func(v float64) float64 { return labelW + plotW/2 + htmlFinite(v)/extent*plotW/2 }
	h := rowH*float64(len(keys)) + 40
	var s htmlSVG
	s.open(labelW+plotW+20, h, "ab-deltas", "F1 delta per class, B minus A, with 95% bootstrap intervals")
	s.line(x(0), 10, x(0), h-24, `stroke="`+htmlMuted+`" stroke-width="1"`)
	for _, t := range []float64{-extent, -extent / 2, extent / 2, extent} {
		s.line(x(t), 10, x(t), h-24, `stroke="`+htmlGrid+`"`)
		s.text(x(t), h-8, `font-size="10" text-anchor="middle" fill="`+htmlMuted+`"`, fmt.Sprintf("%+.2f", t))
	}
	for i, k := range keys {
		y := 14 + float64(i)*rowH
		v := d[k]
		col := htmlBlue
		if v.Delta < 0 {
			col = htmlVerm
		}
		s.textTitled(labelW-8, y+11, `font-size="12" text-anchor="end" fill="`+htmlInk+`"`, htmlTruncate(k, 22, "…"), k)
		x0, x1 := x(0), x(v.Delta)
		s.rectTitled(math.Min(x0, x1), y+3, math.Abs(x1-x0), rowH-10, `fill="`+col+`" opacity="0.85"`,
			fmt.Sprintf("%s: F1 %.3f → %.3f (%+.3f, 95%% [%+.3f, %+.3f])", k, v.A, v.B, v.Delta, v.Lo, v.Hi))
		s.line(x(v.Lo), y+rowH/2-1, x(v.Hi), y+rowH/2-1, `stroke="`+htmlInk+`" stroke-width="1.5"`)
	}
	return s.close()
}

// abWritePage writes the A/B page of v.
func abWritePage(o htmlOut, v *abView) {
	r := v.R
	o.raw(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>triage ab · `)
	o.text(r.SpecA)
	o.raw(` vs `)
	o.text(r.SpecB)
	o.raw(`</title>
<style>` + htmlCSS + `</style>
</head>
<body>
<div class="wrap">
<header>
  <div class="kicker">triage · A/B comparison</div>
  <h1>A: `)
	o.text(r.SpecA)
	o.raw(`<br>B: `)
	o.text(r.SpecB)
	o.raw(`</h1>
  <div class="meta"><span class="chip"><b>N</b>`)
	o.int(r.N)
	o.raw(`</span><span class="chip"><b>agreement</b>`)
	o.text(v.Agree)
	o.raw(`</span></div>
</header>
<section class="figs" aria-label="headline figures">
  <div class="fig lead"><div class="l">Accuracy A</div><div class="v">`)
	o.text(v.AccA)
	o.raw(`</div><div class="h">`)
	o.text(r.SpecA)
	o.raw(`</div></div>
  <div class="fig lead"><div class="l">Accuracy B</div><div class="v">`)
	o.text(v.AccB)
	o.raw(`</div><div class="h">`)
	o.text(r.SpecB)
	o.raw(`</div></div>
  <div class="fig"><div class="l">B − A</div><div class="v">`)
	o.text(v.Delta)
	o.raw(`</div><div class="h">95% `)
	o.text(v.CI)
	o.raw(`</div></div>
  <div class="fig"><div class="l">McNemar p</div><div class="v">`)
	o.text(v.P)
	o.raw(`</div><div class="h">only A right `)
	o.int(r.McNemar.OnlyA)
	o.raw(` · only B `)
	o.int(r.McNemar.OnlyB)
	o.raw(`</div></div>
  <div class="fig"><div class="l">Routed elsewhere</div><div class="v">`)
	o.int(r.Differ)
	o.raw(`</div><div class="h">items A and B send apart</div></div>
  <div class="fig"><div class="l">Latency p50 / p99</div><div class="v">A `)
	o.text(v.LatA)
	o.raw(`</div><div class="h">B `)
	o.text(v.LatB)
	o.raw(`</div></div>
  <div class="fig"><div class="l">Escalation</div><div class="v">`)
	o.text(v.EscA)
	o.raw(` → `)
	o.text(v.EscB)
	o.raw(`</div><div class="h">A → B</div></div>
</section>
`)
	if v.Deltas != "" {
		o.raw(`<section class="card"><h2>F1 per class, B − A</h2><p class="sub">Bars are the change, whiskers the 95% bootstrap interval; blue where B is better.</p>`)
		o.html(v.Deltas)
		o.raw(`</section>`)
	}
	o.raw("\n")
	if v.Agreement != "" {
		o.raw(`<section class="card"><h2>Agreement</h2><p class="sub">Rows: A's prediction; columns: B's.</p>`)
		o.html(v.Agreement)
		o.raw(`</section>`)
	}
	o.raw("\n")
	if v.Counter != "" {
		o.raw(`<section class="card"><h2>Routing counterfactual</h2><p class="sub">Rows: where A would send an item (a pool for rule sets, else the class); columns: where B would.</p>`)
		o.html(v.Counter)
		o.raw(`</section>`)
	}
	o.raw(`
</div>
</body>
</html>
`)
}
