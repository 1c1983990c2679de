package label

import (
	"math"
	"slices"
)

// State is what the page shows.
type State struct {
	// Item is the prompt to label; nil when none is left.
	Item    *Item        `json:"item"`
	Classes []ClassCount `json:"classes"`
	// Labelled counts the labels in the file (Foreign of them for
	// prompts this sample does not hold); Unsure the "not sure" marks;
	// Skipped the prompts put aside in this session; Total the sample's
	// prompts; Left those not labelled or marked.
	Labelled  int       `json:"labelled"`
	Foreign   int       `json:"foreign,omitempty"`
	Unsure    int       `json:"unsure"`
	Skipped   int       `json:"skipped"`
	Total     int       `json:"total"`
	Left      int       `json:"left"`
	CanUndo   bool      `json:"can_undo"`
	Precision Precision `json:"precision"`
	Out       string    `json:"out"`
	Source    string    `json:"source"`
}

// ClassCount is a class, its key on the page and its labels so far.
type ClassCount struct {
	Name  string `json:"name"`
	Key   string `json:"key"`
	Count int    `json:"count"`
}

// Precision is the gateway's route precision on the labels so far, and
// how many more labels would narrow its estimate to the margin.
//
// A labelled prompt the gateway sent to a class route counts (the routed
// ones), and is right when its label is one of the route's classes.
// Estimate is right/routed; Low and High are the Wilson score interval at
// 95% (z = 1.96). The labels needed for a 95% interval of half-width m
// are n = z²·p(1−p)/m², with p the estimate once 30 routed labels are in
// (0.5 before: the most n can be); More is what n lacks, divided by the
// share of the sample's prompts that went to a class route (the routed
// labels come at that rate); more than Left when the sample is too small.
type Precision struct {
	Routed     int     `json:"routed"`
	Right      int     `json:"right"`
	Estimate   float64 `json:"estimate"`
	Low        float64 `json:"low"`
	High       float64 `json:"high"`
	Margin     float64 `json:"margin"`
	Needed     int     `json:"needed_routed"`
	More       int     `json:"more"`
	RoutedRate float64 `json:"routed_rate"`
}

const z95 = 1.959964

// State is the session's state now.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Labelled: len(s.labelled), Foreign: s.foreign, Unsure: len(s.notSure), Skipped: len(s.skipped),
		Total: len(s.items), CanUndo: len(s.done) > 0, Out: s.o.Out, Source: s.o.Source}
	st.Left = st.Total - (st.Labelled - st.Foreign) - st.Unsure
	if i, ok := s.current(); ok {
		it := s.items[i]
		st.Item = &it
	}
	counts := map[string]int{}
	for _, l := range s.labelled {
		counts[l]++
	}
	for _, c := range s.classes {
		st.Classes = append(st.Classes, ClassCount{Name: c, Key: s.keys[c], Count: counts[c]})
	}
	routedItems := 0
	for i := range s.items {
		it := &s.items[i]
		if len(it.RouteClasses) == 0 {
			continue
		}
		routedItems++
		if l, ok := s.labelled[it.ID]; ok {
			st.Precision.Routed++
			if slices.Contains(it.RouteClasses, l) {
				st.Precision.Right++
			}
		}
	}
	st.Precision.RoutedRate = float64(routedItems) / float64(len(s.items))
	st.Precision.fill(s.o.Margin)
	return st
}

func (p *Precision) fill(margin float64) {
	p.Margin = margin
	n := float64(p.Routed)
	q := 0.5
	if p.Routed > 0 {
		p.Estimate = float64(p.Right) / n
		p.Low, p.High = wilson(p.Right, p.Routed)
	}
	if p.Routed >= 30 {
		q = p.Estimate
	}
	// A perfect or hopeless estimate still has an interval: take p no
	// nearer 0 or 1 than one label in the sample.
	if p.Routed > 0 {
		q = math.Min(math.Max(q, 1/(n+1)), n/(n+1))
	}
	p.Needed = int(math.Ceil(z95 * z95 * q * (1 - q) / (margin * margin)))
	lack := max(p.Needed-p.Routed, 0)
	if lack == 0 || p.RoutedRate == 0 {
		return
	}
	p.More = int(math.Ceil(float64(lack) / p.RoutedRate))
}

// wilson is the Wilson score interval at 95% for k successes in n.
func wilson(k, n int) (lo, hi float64) {
	p, nf := float64(k)/float64(n), float64(n)
	z2 := z95 * z95
	centre := (p + z2/(2*nf)) / (1 + z2/nf)
	half := z95 * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / (1 + z2/nf)
	return math.Max(0, centre-half), math.Min(1, centre+half)
}
