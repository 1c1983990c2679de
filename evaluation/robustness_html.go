package evaluation

import (
	"strconv"
)

// htmlRobustView is what the evaluation page shows of a robustness run
// (the template robustnessCard, robustness.templ).
type htmlRobustView struct {
	What, Seed, Rows, Rate, Flips, N string
	Perturbations                    []htmlPerturbationRow
	Total                            htmlPerturbationRow
	// Names are the perturbations' names, the columns of the group tables.
	Names         []string
	Classes, Cuts []htmlFlipGroupRow
	By            string
	Moves         []htmlConfusionPair
}

type htmlPerturbationRow struct {
	Name, Does, N, Flips, Rate, Bar, Broke, Mended, Unchanged string
}

// htmlFlipGroupRow is a class's or a slice's flip rates: overall, then one
// cell per perturbation.
type htmlFlipGroupRow struct {
	Name, N, Rate string
	Cells         []htmlFlipCell
}

// htmlFlipCell is one rate, tinted by how high it is.
type htmlFlipCell struct {
	Rate, Bg, Fg, Title string
}

// htmlFlipScale is the flip rate at which a cell's tint is darkest.
const htmlFlipScale = 0.25

// htmlRobustFigure is the headline figure of a robustness run, shown
// beside accuracy; the section says whether routes or classes flipped.
func htmlRobustFigure(rb *Robustness) htmlFigure {
	return htmlFigure{Label: "Flip rate", Value: htmlRate(rb.Rate), Bar: htmlBarWidth(rb.Rate), Hint: "under noise"}
}

func htmlRobustness(rb *Robustness) *htmlRobustView {
	if rb == nil {
		return nil
	}
	v := &htmlRobustView{What: rb.JudgedOn, Seed: strconv.FormatUint(rb.Seed, 10), Rate: htmlRate(rb.Rate),
		Flips: htmlCount(rb.Flips.Flips), N: htmlCount(rb.N), By: rb.By}
	if v.What == "" {
		v.What = "decision"
	}
	v.Rows = htmlCount(rb.Rows) + " of " + htmlCount(rb.Of) + " rows"
	for _, p := range rb.Perturbations {
		v.Names = append(v.Names, p.Name)
		v.Perturbations = append(v.Perturbations, htmlPerturbationRow{Name: p.Name, Does: p.Does, N: htmlCount(p.N),
			Flips: htmlCount(p.Flips.Flips), Rate: htmlRate(p.Rate), Bar: htmlBarWidth(p.Rate / htmlFlipScale),
			Broke: htmlCount(p.Broke), Mended: htmlCount(p.Mended), Unchanged: htmlCount(p.Unchanged)})
	}
	v.Total = htmlPerturbationRow{Name: "all", N: htmlCount(rb.N), Flips: htmlCount(rb.Flips.Flips), Rate: htmlRate(rb.Rate),
		Bar: htmlBarWidth(rb.Rate / htmlFlipScale), Broke: htmlCount(rb.Broke), Mended: htmlCount(rb.Mended)}
	v.Classes = htmlFlipGroups(rb.PerClass, v.Names)
	v.Cuts = htmlFlipGroups(rb.Slices, v.Names)
	for _, m := range rb.Moves[:min(len(rb.Moves), 10)] {
		v.Moves = append(v.Moves, htmlConfusionPair{True: m.From, Pred: m.To, Count: htmlCount(m.Count),
			Share: htmlRate(ratio(m.Count, rb.Flips.Flips))})
	}
	return v
}

func htmlFlipGroups(groups map[string]GroupFlips, names []string) []htmlFlipGroupRow {
	var rows []htmlFlipGroupRow
	for _, k := range htmlSortedKeys(groups) {
		g := groups[k]
		row := htmlFlipGroupRow{Name: k, N: htmlCount(g.N), Rate: htmlRate(g.Rate)}
		for _, name := range names {
			f, ok := g.ByPerturbation[name]
			if !ok || f.N == 0 {
				row.Cells = append(row.Cells, htmlFlipCell{Rate: "–", Bg: htmlEmpty, Fg: htmlMuted, Title: name + ": no text changed"})
				continue
			}
			t := htmlClamp01(f.Rate / htmlFlipScale)
			fg := htmlInk
			if t > 0.55 {
				fg = "#ffffff"
			}
			row.Cells = append(row.Cells, htmlFlipCell{Rate: htmlRate(f.Rate), Bg: htmlRamp(t), Fg: fg,
				Title: name + ": " + htmlCount(f.Flips) + " of " + htmlCount(f.N) + " changed"})
		}
		rows = append(rows, row)
	}
	return rows
}
