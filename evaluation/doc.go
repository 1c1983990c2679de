// Package evaluation runs a classifier tier or a whole rule set over a
// labelled dataset and says how well it routes: per-class precision, recall
// and F1, accuracy, macro and micro averages, coverage (the share routed to
// a class route rather than the default), the confusion matrix, calibration
// (expected calibration error and reliability bins), escalation rate and
// reasons, precision–coverage curves per class, latency per tier, all
// repeated per slice of any column; and, when asked, robustness: how often
// the decision changes under seeded noise a user adds (Robust). It renders
// text, JSON and a self-contained HTML page, and fits floors
// (calibration): per class, or per route of a rule set (FitRoutes), on
// the user's own labels leaning on public data when both are given
// (RouteFitOptions.PriorWeight). Shares measured on labels come with
// their 95% interval (Wilson), and A/B differences with a paired
// bootstrap interval, so a figure says how many labels stand behind it.
//
// The HTML pages (evaluation, A/B, shadow) are templ templates: the
// *.templ files hold the markup, and the pinned templ generator (the
// go:generate line below) turns them into the committed *_templ.go files,
// plain Go that escapes each value for where it goes. No template is
// interpreted at run time and html/template is not used: executing one
// would keep every exported method in the binary, the gateway's too.
// What the pages show (numbers, colours, chart coordinates) is computed
// in plain Go: html.go, charts.go, ab_html.go, shadow_html.go. After
// changing a .templ file, run go generate ./evaluation; a test fails
// while the generated files are stale.
//
// Runs use every core and are deterministic: items are scored in parallel
// and reduced in input order. Nothing here keeps state between calls.
package evaluation

//go:generate go run github.com/a-h/templ/cmd/templ@v0.3.1100 generate
