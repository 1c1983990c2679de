package evaluation

import (
	"fmt"
	"io"
	"slices"
	"strconv"
)

// WriteABHTML renders an A/B comparison as one self-contained page (the
// template abPage, ab_page.templ): the headline deltas with their
// intervals, McNemar's test, per-class F1 deltas, the agreement matrix
// and the routing counterfactual.
func WriteABHTML(w io.Writer, r *ABReport) error {
	if r == nil {
		r = &ABReport{}
	}
	return writePage(w, abPage(abBuildView(r)))
}

// abView is what the A/B page shows of a report, formatted.
type abView struct {
	SpecA, SpecB, N, Agree string
	Figures                []htmlFigure
	Deltas                 *deltaChart
	Agreement, Counter     *heatmapChart
}

// abBuildView computes what the A/B page shows of r.
func abBuildView(r *ABReport) *abView {
	v := &abView{SpecA: r.SpecA, SpecB: r.SpecB, N: strconv.Itoa(r.N), Agree: htmlRate(r.AgreementRate)}
	v.Figures = []htmlFigure{
		{Label: "Accuracy A", Value: htmlRate(r.Accuracy.A), Hint: r.SpecA, Lead: true},
		{Label: "Accuracy B", Value: htmlRate(r.Accuracy.B), Hint: r.SpecB, Lead: true},
		{Label: "B − A", Value: fmt.Sprintf("%+.3f", htmlFinite(r.Accuracy.Delta)),
			Hint: fmt.Sprintf("95%% [%+.3f, %+.3f]", htmlFinite(r.Accuracy.Lo), htmlFinite(r.Accuracy.Hi))},
		{Label: "McNemar p", Value: fmt.Sprintf("%.3g", htmlFinite(r.McNemar.P)),
			Hint: "only A right " + strconv.Itoa(r.McNemar.OnlyA) + " · only B " + strconv.Itoa(r.McNemar.OnlyB)},
		{Label: "Routed elsewhere", Value: strconv.Itoa(r.Differ), Hint: "items A and B send apart"},
		{Label: "Latency p50 / p99", Value: "A " + htmlMicros(r.LatencyA.P50) + " / " + htmlMicros(r.LatencyA.P99),
			Hint: "B " + htmlMicros(r.LatencyB.P50) + " / " + htmlMicros(r.LatencyB.P99)},
		{Label: "Escalation", Value: htmlRate(r.EscalationA) + " → " + htmlRate(r.EscalationB), Hint: "A → B"},
	}
	if r.Accuracy.CIA != nil && r.Accuracy.CIB != nil {
		v.Figures[0].Hint += " · 95% " + htmlInterval(*r.Accuracy.CIA)
		v.Figures[1].Hint += " · 95% " + htmlInterval(*r.Accuracy.CIB)
	}
	if d := r.RoutePrecision; d != nil {
		hint := func(ci *Interval) string {
			if ci == nil {
				return ""
			}
			return "95% " + htmlInterval(*ci)
		}
		v.Figures = slices.Insert(v.Figures, 3,
			htmlFigure{Label: "Route prec. A", Value: htmlRate(d.A), Hint: hint(d.CIA), Lead: true},
			htmlFigure{Label: "Route prec. B", Value: htmlRate(d.B), Hint: hint(d.CIB), Lead: true},
			htmlFigure{Label: "Route prec. B − A", Value: fmt.Sprintf("%+.3f", htmlFinite(d.Delta)),
				Hint: fmt.Sprintf("95%% [%+.3f, %+.3f] paired", htmlFinite(d.Lo), htmlFinite(d.Hi))})
	}
	v.Deltas = abDeltaChart(r.PerClass)
	v.Agreement, _, _ = htmlConfusionChart(r.Agreement)
	v.Counter, _, _ = htmlConfusionChart(r.Counterfactual)
	return v
}
