package evaluation

import (
	"io"
	"strconv"
	"time"
)

// WriteShadowHTML renders a shadow log comparison as one self-contained
// page (the template shadowPage, shadow_page.templ): agreement, cost and
// escalation per side, where the shadow would have routed differently,
// and how the top classes line up.
func WriteShadowHTML(w io.Writer, r *ShadowReport) error {
	if r == nil {
		r = &ShadowReport{}
	}
	return writePage(w, shadowPage(shadowBuildView(r)))
}

// shadowView is what the shadow page shows of a report, formatted.
type shadowView struct {
	N, From, To, Skipped       string // Skipped "" when none was
	Figures                    []htmlFigure
	Counter, Classes           *heatmapChart
	ReasonsLive, ReasonsShadow *barChart
}

// shadowBuildView computes what the shadow page shows of r.
func shadowBuildView(r *ShadowReport) *shadowView {
	v := &shadowView{N: strconv.Itoa(r.N), From: r.From.Format(time.RFC3339), To: r.To.Format(time.RFC3339)}
	v.Figures = []htmlFigure{
		{Label: "Same pool", Value: htmlRate(r.PoolAgreement), Hint: strconv.Itoa(r.Differ) + " routed elsewhere", Lead: true},
		{Label: "Same class", Value: htmlRate(r.ClassAgreement), Hint: "where both classified"},
		{Label: "Decision p50 / p99", Value: "live " + htmlMicros(r.Live.Latency.P50) + " / " + htmlMicros(r.Live.Latency.P99),
			Hint: "shadow " + htmlMicros(r.Shadow.Latency.P50) + " / " + htmlMicros(r.Shadow.Latency.P99)},
		{Label: "Escalation", Value: htmlRate(r.Live.Escalation) + " → " + htmlRate(r.Shadow.Escalation), Hint: "live → shadow"},
	}
	if r.Skipped != 0 {
		v.Skipped = strconv.Itoa(r.Skipped)
	}
	v.Counter, _, _ = htmlConfusionChart(r.Counterfactual)
	v.Classes, _, _ = htmlConfusionChart(r.Classes)
	v.ReasonsLive, _ = htmlReasonsChart(r.Live.Reasons)
	v.ReasonsShadow, _ = htmlReasonsChart(r.Shadow.Reasons)
	return v
}
