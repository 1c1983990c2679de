package evaluation

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/rules"
)

// DefaultLabel stands for "the default pool" among predictions: what an
// item gets when no class route takes it.
const DefaultLabel = "(default)"

// Item is one labelled example.
type Item struct {
	Text  string
	Label string
	Cols  map[string]string // other columns (source, realism, ...), for slices
}

// Outcome is what happened to one item.
type Outcome struct {
	Label string
	// Pred is the predicted class (tier mode: the top class, or the class
	// the heads-only cascade decided; rules mode: the decided class when a
	// class route took the item, else DefaultLabel). Score is the deciding
	// tier's score of it.
	Pred  string
	Score float32
	// Correct: the predicted class equals the label (tier mode); the route
	// covers the label, or the default pool took a label no route covers
	// (rules mode).
	Correct bool
	// Routed: sent to a class route (rules mode), or predicted a class
	// outside Options.DefaultClasses at or above its floor (tier mode).
	Routed bool
	// ClassRight: the deciding tier's top class equals the label (for
	// calibration, in both modes).
	ClassRight bool
	Tier       int
	Reason     string
	Route      string
	// LabelRoute is the first class route that covers the label (rules
	// mode; empty when none does).
	LabelRoute string
	// Pool is the pool a rule set chose (empty in tier mode).
	Pool    string
	Latency time.Duration
}

// Options tune a run.
type Options struct {
	// Workers score items in parallel; 0 means GOMAXPROCS.
	Workers int
	// Progress, if set, is called as items finish (done, total).
	Progress func(done, total int)
	// DefaultClasses are classes that mean "no specialised subject" (tier
	// mode): predicting one is not coverage. Default {"other"}.
	DefaultClasses []string
	// Floors are per-class floors for tier-mode coverage (missing: 0).
	Floors map[string]float32
}

func (o *Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// parallel runs f over every index with the configured workers, calling
// Progress as items finish. Results are written by index: the reduction
// after it is in input order, so runs are deterministic.
func parallel(n int, o Options, f func(i int)) {
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range min(o.workers(), max(n, 1)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
				if d := done.Add(1); o.Progress != nil {
					o.Progress(int(d), n)
				}
			}
		})
	}
	wg.Wait()
}

// Tier runs one classifier over items: the top class against the label.
func Tier(ctx context.Context, clf classifier.Classifier, tier int, items []Item, o Options) ([]Outcome, error) {
	defaults := defaultClasses(o)
	out := make([]Outcome, len(items))
	var firstErr error
	var errOnce sync.Once
	parallel(len(items), o, func(i int) {
		var r classifier.Result
		t0 := time.Now()
		err := clf.Classify(ctx, items[i].Text, &r)
		lat := time.Since(t0)
		if err != nil {
			errOnce.Do(func() { firstErr = fmt.Errorf("item %d: %w", i, err) })
			return
		}
		right := r.Class == items[i].Label
		out[i] = Outcome{Label: items[i].Label, Pred: r.Class, Score: r.Score, Correct: right, ClassRight: right,
			Routed: !defaults[r.Class] && r.Score >= o.Floors[r.Class], Tier: tier, Latency: lat}
	})
	return out, firstErr
}

// defaultClasses are the classes that are not coverage (Options.DefaultClasses).
func defaultClasses(o Options) map[string]bool {
	if o.DefaultClasses == nil {
		return map[string]bool{"other": true}
	}
	m := map[string]bool{}
	for _, c := range o.DefaultClasses {
		m[c] = true
	}
	return m
}

// Rules runs a rule set's whole decision (the compiled Set the gateway
// runs, Decide included) over items, each asked as a request naming the
// set's first alias with the text as its one user turn, cut by the set's
// window as the gateway would cut it.
// An item is right when the route taken covers its label, or when the
// default pool took a label no route covers.
func Rules(ctx context.Context, set *rules.Set, items []Item, o Options) ([]Outcome, error) {
	covered := map[string]string{} // class → the first route that takes it
	routeClasses := map[string]map[string]bool{}
	for _, r := range set.File().Routes {
		m := map[string]bool{}
		for _, c := range r.When.Classes {
			m[c] = true
			if covered[c] == "" {
				covered[c] = r.Name
			}
		}
		routeClasses[r.Name] = m
	}
	alias := set.Aliases()[0]
	// Load tier 2 first: the figures are of decisions, not of the load. A
	// tier 2 that cannot load shows in the reasons (tier2_unavailable).
	_ = set.LoadTier2()
	out := make([]Outcome, len(items))
	window := set.Window()
	parallel(len(items), o, func(i int) {
		t0 := time.Now()
		d := set.Decide(ctx, rules.Signals{Model: alias, Text: window.Clip(items[i].Text), Header: http.Header{}})
		lat := time.Since(t0)
		label := items[i].Label
		oc := Outcome{Label: label, Pred: DefaultLabel, Score: d.Score, Tier: d.Tier, Reason: d.Reason, Route: d.Route,
			LabelRoute: covered[label], Pool: d.Pool, Latency: lat, ClassRight: d.Class == label}
		if rc := routeClasses[d.Route]; d.Route != "" && len(rc) > 0 {
			oc.Routed = true
			oc.Pred = d.Class
			oc.Correct = rc[label]
		} else {
			oc.Correct = covered[label] == ""
		}
		out[i] = oc
	})
	return out, nil
}

// Escalated reports whether a decision reason sent the item toward tier 2
// (whether or not tier 2 then decided).
func Escalated(reason string) bool {
	switch reason {
	case rules.ReasonBelowFloor, rules.ReasonClassRequiresTier2, rules.ReasonUnfamiliar, rules.ReasonTier2Timeout, rules.ReasonTier2Shed, rules.ReasonTier2EncoderDown, rules.ReasonTier2Unavailable, rules.ReasonTier2Error, rules.ReasonClientGone:
		return true
	}
	return false
}

// Summarize builds the report of a run. In tier mode classes are the
// classifier's classes (they appear in per-class figures even without
// support); in rules mode they are the classes some route takes, and the
// default pool is judged as one more class, DefaultLabel (right when it
// takes an item no route covers). by, when set, repeats the report per
// value of that column.
func Summarize(mode string, classes []string, items []Item, out []Outcome, by string) *Report {
	r := summarize(mode, classes, out)
	if by == "" {
		return r
	}
	r.By = by
	groups := map[string][]Outcome{}
	for i, it := range items {
		v := it.Cols[by]
		if v == "" {
			v = "(none)"
		}
		groups[v] = append(groups[v], out[i])
	}
	r.Slices = map[string]*Report{}
	for v, g := range groups {
		s := summarize(mode, classes, g)
		s.Curves = nil // keep slices compact
		r.Slices[v] = s
	}
	return r
}

func summarize(mode string, classes []string, out []Outcome) *Report {
	r := &Report{Mode: mode, N: len(out), PerClass: map[string]ClassReport{}, Latency: map[string]Percentiles{}, Reasons: map[string]int{}}
	// The label set: the classifier's classes, any label seen, and the
	// default in rules mode.
	labels := append([]string(nil), classes...)
	seen := map[string]bool{}
	for _, c := range labels {
		seen[c] = true
	}
	for _, o := range out {
		for _, l := range []string{o.Label, o.Pred} {
			if !seen[l] && l != DefaultLabel {
				seen[l] = true
				labels = append(labels, l)
			}
		}
	}
	sort.Strings(labels)
	if mode == "rules" {
		labels = append(labels, DefaultLabel)
	}
	idx := map[string]int{}
	for i, l := range labels {
		idx[l] = i
	}
	r.Confusion = Confusion{Labels: labels, Counts: make([][]int, len(labels))}
	for i := range r.Confusion.Counts {
		r.Confusion.Counts[i] = make([]int, len(labels))
	}
	tp := map[string]int{}      // right, by predicted class
	tpLabel := map[string]int{} // right, by label (recall; rules mode)
	pred := map[string]int{}
	support := map[string]int{}
	correct, routed, esc, tpAll, predAll, supportRouted := 0, 0, 0, 0, 0, 0
	for _, o := range out {
		r.Confusion.Counts[idx[o.Label]][idx[o.Pred]]++
		support[o.Label]++
		if o.Correct {
			correct++
		}
		if o.Routed {
			routed++
		}
		if o.Reason != "" {
			r.Reasons[o.Reason]++
			if Escalated(o.Reason) {
				esc++
			}
		}
		if o.Pred != DefaultLabel {
			pred[o.Pred]++
			predAll++
			// In rules mode a decision is right when its route covers the
			// label, whichever of the route's classes it was decided as.
			if mode == "rules" && o.Correct || mode != "rules" && o.Pred == o.Label {
				tp[o.Pred]++
				tpLabel[o.Label]++
				tpAll++
			}
		}
	}
	if len(r.Reasons) == 0 {
		r.Reasons = nil
	}
	n := float64(max(len(out), 1))
	r.Accuracy = float64(correct) / n
	r.AccuracyCI = Wilson(correct, len(out))
	r.Coverage = float64(routed) / n
	r.EscalationRate = float64(esc) / n
	judged := labels // the classes per-class figures and macro averages are over
	if mode == "rules" {
		judged = append(append([]string(nil), classes...), DefaultLabel)
		covered := map[string]bool{}
		for _, c := range classes {
			covered[c] = true
		}
		support[DefaultLabel] = 0
		for _, o := range out {
			if !covered[o.Label] {
				support[DefaultLabel]++
			}
			if o.Pred == DefaultLabel {
				pred[DefaultLabel]++
				if o.Correct {
					tp[DefaultLabel]++
					tpLabel[DefaultLabel]++
				}
			}
		}
	}
	counted := 0
	for _, c := range judged {
		if c == DefaultLabel && mode != "rules" {
			continue
		}
		cr := ClassReport{Support: support[c], Predicted: pred[c]}
		if pred[c] > 0 {
			cr.Precision = float64(tp[c]) / float64(pred[c])
		}
		if support[c] > 0 {
			cr.Recall = float64(tpLabel[c]) / float64(support[c])
		}
		if cr.Precision+cr.Recall > 0 {
			cr.F1 = 2 * cr.Precision * cr.Recall / (cr.Precision + cr.Recall)
		}
		r.PerClass[c] = cr
		if cr.Support > 0 {
			counted++
			r.MacroPrecision += cr.Precision
			r.MacroRecall += cr.Recall
			r.MacroF1 += cr.F1
			supportRouted += cr.Support
		}
	}
	if counted > 0 {
		r.MacroPrecision /= float64(counted)
		r.MacroRecall /= float64(counted)
		r.MacroF1 /= float64(counted)
	}
	if predAll > 0 {
		r.MicroPrecision = float64(tpAll) / float64(predAll)
	}
	if supportRouted > 0 {
		r.MicroRecall = float64(tpAll) / float64(supportRouted)
	}
	if mode == "rules" {
		// Every item gets a route or the default: micro figures are the
		// accuracy.
		r.MicroPrecision, r.MicroRecall = r.Accuracy, r.Accuracy
		r.RoutePrecision, r.PerRoute = routeFigures(out)
		right := 0
		for _, o := range out {
			if o.Routed {
				r.Routed++
				if o.Correct {
					right++
				}
			}
		}
		ci := Wilson(right, r.Routed)
		r.RoutePrecisionCI = &ci
	}
	if r.MicroPrecision+r.MicroRecall > 0 {
		r.MicroF1 = 2 * r.MicroPrecision * r.MicroRecall / (r.MicroPrecision + r.MicroRecall)
	}
	r.ECE, r.Reliability = reliability(out, 15)
	r.Curves = curves(out, labels, support)
	lat := map[string][]float64{}
	for _, o := range out {
		key := "decision"
		if mode == "tier" {
			key = fmt.Sprintf("tier%d", o.Tier)
		}
		lat[key] = append(lat[key], float64(o.Latency.Nanoseconds())/1000)
	}
	for k, v := range lat {
		r.Latency[k] = percentiles(v)
	}
	return r
}

// routeFigures are the rules-mode route precision, overall and per class
// route.
func routeFigures(out []Outcome) (float64, map[string]RouteFigure) {
	per := map[string]RouteFigure{}
	hits := map[string]int{} // taken by the first route that covers the label
	taken, right := 0, 0
	for _, o := range out {
		if o.LabelRoute != "" {
			f := per[o.LabelRoute]
			f.Support++
			per[o.LabelRoute] = f
		}
		if !o.Routed {
			continue
		}
		f := per[o.Route]
		f.Taken++
		taken++
		if o.Correct {
			f.Right++
			right++
			if o.Route == o.LabelRoute {
				hits[o.Route]++
			}
		}
		per[o.Route] = f
	}
	if len(per) == 0 {
		return 0, nil
	}
	for name, f := range per {
		f.Precision, f.Recall = ratio(f.Right, f.Taken), ratio(hits[name], f.Support)
		per[name] = f
	}
	return ratio(right, taken), per
}

// reliability bins the top scores into equal-width bins of confidence.
func reliability(out []Outcome, bins int) (float64, []Bin) {
	bs := make([]Bin, bins)
	for i := range bs {
		bs[i].Lo, bs[i].Hi = float64(i)/float64(bins), float64(i+1)/float64(bins)
	}
	for _, o := range out {
		if o.Tier == 0 {
			continue
		}
		b := min(int(float64(o.Score)*float64(bins)), bins-1)
		bs[b].Count++
		bs[b].Confidence += float64(o.Score)
		if o.ClassRight {
			bs[b].Accuracy++
		}
	}
	var ece float64
	n := 0
	for _, b := range bs {
		n += b.Count
	}
	for i := range bs {
		if c := bs[i].Count; c > 0 {
			ece += abs(bs[i].Accuracy-bs[i].Confidence) / float64(max(n, 1))
			bs[i].Confidence /= float64(c)
			bs[i].Accuracy /= float64(c)
		}
	}
	return ece, bs
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// curveFloors are the floors a precision–coverage curve is drawn at.
var curveFloors = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99}

func curves(out []Outcome, labels []string, support map[string]int) map[string][]CurvePoint {
	res := map[string][]CurvePoint{}
	for _, c := range labels {
		if c == DefaultLabel || support[c] == 0 {
			continue
		}
		var pts []CurvePoint
		for _, f := range curveFloors {
			n, right := 0, 0
			for _, o := range out {
				if o.Tier > 0 && o.Pred == c && float64(o.Score) >= f {
					n++
					if o.ClassRight {
						right++
					}
				}
			}
			p := CurvePoint{Floor: f, Count: n, Coverage: float64(right) / float64(support[c])}
			if n > 0 {
				p.Precision = float64(right) / float64(n)
			}
			pts = append(pts, p)
		}
		res[c] = pts
	}
	return res
}

func percentiles(v []float64) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	sort.Float64s(v)
	at := func(q float64) float64 { return v[min(int(q*float64(len(v))), len(v)-1)] }
	return Percentiles{P50: at(0.5), P90: at(0.9), P99: at(0.99), Count: len(v)}
}
