package evaluation

import (
	"hash/fnv"
	"sort"
)

// Scored is one item's evidence for fitting floors: a tier's top class and
// its calibrated score, the true label, and the item's group (its source,
// for leave-one-group-out checks).
type Scored struct {
	Pred  string
	Score float32
	Label string
	Group string
	Key   string // for the row folds (the text); empty uses the index
}

// FloorOptions tune FitFloors.
type FloorOptions struct {
	// TargetPrecision is the precision each class's floor must reach.
	// Default 0.9.
	TargetPrecision float64
	// Classes are the classes to fit floors for; default every predicted
	// class.
	Classes []string
	// Robust also requires the target in every group on its own (with at
	// least MinGroup predictions at the floor): floors that hold when the
	// traffic's sources shift, at some cost in coverage.
	Robust   bool
	MinGroup int // default 20
	// Folds cross-validates over rows. Default 5.
	Folds int
	// MaxEscalation, when above 0, caps the share of items predicted as a
	// floored class but below its floor (sent on to tier 2): the target is
	// lowered until the floors fit the budget.
	MaxEscalation float64
}

// FloorFit is one class's fitted floor and what it costs.
type FloorFit struct {
	Class string `json:"class"`
	// Floor is the least score trusted; Reachable is false when no floor
	// reaches the target (the floor is then 1: never trusted alone).
	Floor     float64 `json:"floor"`
	Reachable bool    `json:"reachable"`
	// On all the data the floor was fitted on:
	Support   int     `json:"support"`   // items labelled with the class
	Predicted int     `json:"predicted"` // items predicted as the class (any score)
	Precision float64 `json:"precision"` // at the floor
	Coverage  float64 `json:"coverage"`  // share of the class's items predicted at or above the floor
	// Cross-validated over rows: floors fitted without a fold, judged on it.
	CVPrecision float64 `json:"cv_precision"`
	CVCoverage  float64 `json:"cv_coverage"`
}

// GroupResult is how floors fitted without a group did on it.
type GroupResult struct {
	N         int     `json:"n"`
	Routed    int     `json:"routed"`    // items predicted at or above their class's floor
	Precision float64 `json:"precision"` // of those
	Coverage  float64 `json:"coverage"`  // routed and right, over items of floored classes
}

// FloorReport is the outcome of FitFloors.
type FloorReport struct {
	Target     float64                `json:"target_precision"`
	Achieved   float64                `json:"achieved_target"` // lower than Target when the escalation budget forced it
	Classes    []FloorFit             `json:"classes"`
	CV         GroupResult            `json:"cv"`
	ByGroup    map[string]GroupResult `json:"by_group,omitempty"` // leave-one-group-out
	Escalation float64                `json:"escalation"`         // share of items below their class's floor
}

// FitFloors fits a floor per class: the lowest score at which the class's
// predictions reach the target precision (the most coverage that keeps
// it), and judges the floors on data that did not fit them.
func FitFloors(items []Scored, o FloorOptions) FloorReport {
	if o.TargetPrecision == 0 {
		o.TargetPrecision = 0.9
	}
	if o.MinGroup == 0 {
		o.MinGroup = 20
	}
	if o.Folds == 0 {
		o.Folds = 5
	}
	classes := o.Classes
	if classes == nil {
		seen := map[string]bool{}
		for _, it := range items {
			if !seen[it.Pred] {
				seen[it.Pred] = true
				classes = append(classes, it.Pred)
			}
		}
		sort.Strings(classes)
	}
	target := o.TargetPrecision
	floors := fit(items, classes, target, o)
	if o.MaxEscalation > 0 {
		for target > 0.5 && escalation(items, floors) > o.MaxEscalation {
			target -= 0.01
			floors = fit(items, classes, target, o)
		}
	}
	rep := FloorReport{Target: o.TargetPrecision, Achieved: target, Escalation: escalation(items, floors), ByGroup: map[string]GroupResult{}}
	// Cross-validation over rows.
	var cvRight, cvRouted, cvOfClass int
	perClass := map[string][3]int{} // right, routed, of class
	for k := range o.Folds {
		var trainSet, held []Scored
		for i, it := range items {
			if fold(it, i, o.Folds) == k {
				held = append(held, it)
			} else {
				trainSet = append(trainSet, it)
			}
		}
		f := fit(trainSet, classes, target, o)
		for _, it := range held {
			if _, ok := f[it.Label]; ok {
				cvOfClass++
				v := perClass[it.Label]
				v[2]++
				perClass[it.Label] = v
			}
			pf, pok := f[it.Pred]
			if pok && float64(it.Score) >= pf {
				cvRouted++
				v := perClass[it.Pred]
				v[1]++
				if it.Pred == it.Label {
					cvRight++
					v[0]++
				}
				perClass[it.Pred] = v
			}
		}
	}
	rep.CV = result(len(items), cvRight, cvRouted, cvOfClass)
	// Leave one group out.
	groups := map[string]bool{}
	for _, it := range items {
		if it.Group != "" {
			groups[it.Group] = true
		}
	}
	if len(groups) > 1 {
		for g := range groups {
			var rest, held []Scored
			for _, it := range items {
				if it.Group == g {
					held = append(held, it)
				} else {
					rest = append(rest, it)
				}
			}
			f := fit(rest, classes, target, o)
			right, routed, ofClass := judge(held, f)
			rep.ByGroup[g] = result(len(held), right, routed, ofClass)
		}
	}
	for _, c := range classes {
		ff := FloorFit{Class: c, Floor: floors[c], Reachable: floors[c] <= 1}
		if !ff.Reachable {
			ff.Floor = 1
		}
		right, routed := 0, 0
		for _, it := range items {
			if it.Label == c {
				ff.Support++
			}
			if it.Pred == c {
				ff.Predicted++
				if float64(it.Score) >= floors[c] {
					routed++
					if it.Label == c {
						right++
					}
				}
			}
		}
		if routed > 0 {
			ff.Precision = float64(right) / float64(routed)
		}
		if ff.Support > 0 {
			ff.Coverage = float64(right) / float64(ff.Support)
		}
		v := perClass[c]
		if v[1] > 0 {
			ff.CVPrecision = float64(v[0]) / float64(v[1])
		}
		if v[2] > 0 {
			ff.CVCoverage = float64(v[0]) / float64(v[2])
		}
		rep.Classes = append(rep.Classes, ff)
	}
	return rep
}

func result(n, right, routed, ofClass int) GroupResult {
	r := GroupResult{N: n, Routed: routed}
	if routed > 0 {
		r.Precision = float64(right) / float64(routed)
	}
	if ofClass > 0 {
		r.Coverage = float64(right) / float64(ofClass)
	}
	return r
}

// judge applies floors to items: right and routed predictions, and the
// items whose label has a floor.
func judge(items []Scored, floors map[string]float64) (right, routed, ofClass int) {
	for _, it := range items {
		if _, ok := floors[it.Label]; ok {
			ofClass++
		}
		if f, ok := floors[it.Pred]; ok && float64(it.Score) >= f {
			routed++
			if it.Pred == it.Label {
				right++
			}
		}
	}
	return
}

func fold(it Scored, i, k int) int {
	h := fnv.New32a()
	if it.Key != "" {
		h.Write([]byte(it.Key))
	} else {
		h.Write([]byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)})
	}
	return int(h.Sum32() % uint32(k))
}

// escalation is the share of items predicted as a floored class below its
// floor.
func escalation(items []Scored, floors map[string]float64) float64 {
	if len(items) == 0 {
		return 0
	}
	n := 0
	for _, it := range items {
		if f, ok := floors[it.Pred]; ok && float64(it.Score) < f {
			n++
		}
	}
	return float64(n) / float64(len(items))
}

// fit returns each class's floor (above 1 when the target is unreachable).
func fit(items []Scored, classes []string, target float64, o FloorOptions) map[string]float64 {
	floors := map[string]float64{}
	for _, c := range classes {
		floors[c] = floorFor(items, c, target, "")
		if !o.Robust {
			continue
		}
		// The floor must hold in each group with enough predictions.
		groups := map[string]int{}
		for _, it := range items {
			if it.Pred == c && it.Group != "" {
				groups[it.Group]++
			}
		}
		for g, n := range groups {
			if n < o.MinGroup {
				continue
			}
			if gf := floorFor(items, c, target, g); gf > floors[c] {
				floors[c] = gf
			}
		}
	}
	return floors
}

// floorFor is the lowest floor at which class c's predictions (in group g,
// or all when g is "") reach the target precision: the score of the k-th
// best prediction for the largest k whose top k are precise enough. It is
// 2 (above any score) when no k is.
func floorFor(items []Scored, c string, target float64, g string) float64 {
	var preds []Scored
	for _, it := range items {
		if it.Pred == c && (g == "" || it.Group == g) {
			preds = append(preds, it)
		}
	}
	sort.SliceStable(preds, func(i, j int) bool { return preds[i].Score > preds[j].Score })
	best := 2.0
	right := 0
	for k, it := range preds {
		if it.Label == c {
			right++
		}
		// A floor can only sit between distinct scores: take ties whole.
		if k+1 < len(preds) && preds[k+1].Score == it.Score {
			continue
		}
		if float64(right)/float64(k+1) >= target {
			best = float64(it.Score)
		}
	}
	return best
}
