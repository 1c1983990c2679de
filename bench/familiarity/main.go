// Command familiarity measures how well cheap familiarity signals tell
// tier 1's confident errors from its confident right answers: for each
// evaluation file, the items whose top class scores at least -confident,
// split into right and wrong, and the AUROC (the chance a wrong item scores
// as less familiar than a right one; 0.5 is no signal) of
//
//   - the top probability itself (what the floors already use),
//   - the cosine distance of the text's feature vector to the centroid of
//     its predicted class (one dot product at tier 1's cost),
//   - the distance to the nearest training text (what a cache of the
//     training set would give; too slow for tier 1, the ceiling of the idea),
//   - and a mix of the first two.
//
// Run from the repository's root:
//
//	go run ./bench/familiarity -heads models/heads/subjects -models var/models \
//	    -train ../shared/datasets/subjects/train.jsonl \
//	    ../shared/datasets/subjects/dev.jsonl ../shared/datasets/assistant/prompts.jsonl datasets/examples/subjects.jsonl
//
// Exam-style rows (realism exam, exam_wordproblem) are left out: the
// question is real user text.
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"sort"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/datasets"
)

// read reads a labelled JSONL file's rows that are not exam questions.
func read(path string) ([]datasets.Row, error) {
	set, err := datasets.ReadJSONL(path)
	if err != nil {
		return nil, err
	}
	var out []datasets.Row
	for _, r := range set.Rows {
		if r.Realism != "exam" && r.Realism != "exam_wordproblem" {
			out = append(out, r)
		}
	}
	return out, nil
}

// auroc is P(a wrong item's score > a right item's), ties counting half.
func auroc(wrong, right []float64) float64 {
	r := append([]float64(nil), right...)
	sort.Float64s(r)
	var s float64
	for _, w := range wrong {
		lo := sort.SearchFloat64s(r, w)
		hi := sort.Search(len(r), func(i int) bool { return r[i] > w })
		s += float64(lo) + float64(hi-lo)/2
	}
	return s / float64(len(wrong)*len(right))
}

func dot(a, b []float32) float64 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return float64(s)
}

func main() {
	headsDir := flag.String("heads", "models/heads/subjects", "heads artifact")
	modelsDir := flag.String("models", "var/models", "models directory")
	trainPath := flag.String("train", "", "the heads' training data (for the centroids and the nearest text)")
	confident := flag.Float64("confident", 0.8, "a top probability at or above this is confident")
	flag.Parse()
	h, err := classifier.LoadHeads(*headsDir)
	if err != nil {
		log.Fatal(err)
	}
	m, err := static.Load(h, *modelsDir)
	if err != nil {
		log.Fatal(err)
	}
	classes := m.Classes()
	idx := map[string]int{}
	for i, c := range classes {
		idx[c] = i
	}
	d := m.Head().Dims
	train, err := read(*trainPath)
	if err != nil {
		log.Fatal(err)
	}
	var feats [][]float32
	var y []int
	for _, r := range train {
		c, ok := idx[r.Label]
		if !ok {
			continue
		}
		f := make([]float32, d)
		if _, ok := m.Features(r.Text, f); !ok {
			log.Fatal("the heads' tier 1 is folded: no feature vectors")
		}
		classifier.L2Normalize(f)
		feats, y = append(feats, f), append(y, c)
	}
	cent, err := classifier.NewCentroids(feats, y, len(classes), d, "user")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("heads %s, centroids of %d training texts (real-user rows only), confident: top probability >= %.2f\n", *headsDir, len(feats), *confident)
	probs := make([]float32, len(classes))
	f := make([]float32, d)
	for _, path := range flag.Args() {
		rows, err := read(path)
		if err != nil {
			log.Fatal(err)
		}
		type item struct {
			p, centroid, nearest float64
			wrong                bool
		}
		var items []item
		for _, r := range rows {
			m.Probs(r.Text, probs)
			top := 0
			for j := range probs {
				if probs[j] > probs[top] {
					top = j
				}
			}
			if float64(probs[top]) < *confident {
				continue
			}
			m.Features(r.Text, f)
			classifier.L2Normalize(f)
			best := -1.0
			for _, g := range feats {
				best = max(best, dot(f, g))
			}
			items = append(items, item{p: float64(probs[top]), centroid: float64(cent.Distance(f, top)), nearest: 1 - best, wrong: classes[top] != r.Label})
		}
		score := func(s func(item) float64) float64 {
			var w, r []float64
			for _, it := range items {
				if it.wrong {
					w = append(w, s(it))
				} else {
					r = append(r, s(it))
				}
			}
			if len(w) == 0 || len(r) == 0 {
				return math.NaN()
			}
			return auroc(w, r)
		}
		nw := 0
		for _, it := range items {
			if it.wrong {
				nw++
			}
		}
		fmt.Printf("%s: %d confident, %d wrong (%.1f%%)\n", path, len(items), nw, 100*float64(nw)/float64(max(1, len(items))))
		fmt.Printf("  AUROC  top probability %.3f  centroid distance %.3f  nearest training text %.3f\n",
			score(func(it item) float64 { return -it.p }),
			score(func(it item) float64 { return it.centroid }),
			score(func(it item) float64 { return it.nearest }))
		// What escalating the least familiar confident items costs: to
		// take half the confident errors away from tier 1, the share of
		// all confident items that must go to tier 2 instead.
		half := func(s func(item) float64) float64 {
			v := make([]float64, len(items))
			for i, it := range items {
				v[i] = s(it)
			}
			order := make([]int, len(items))
			for i := range order {
				order[i] = i
			}
			sort.Slice(order, func(a, b int) bool { return v[order[a]] > v[order[b]] })
			caught := 0
			for n, i := range order {
				if items[i].wrong {
					caught++
				}
				if 2*caught >= nw {
					return float64(n+1) / float64(len(items))
				}
			}
			return 1
		}
		fmt.Printf("  to escalate half the confident errors, escalate this share of confident items: by top probability %.1f%%, by centroid distance %.1f%%\n",
			100*half(func(it item) float64 { return -it.p }), 100*half(func(it item) float64 { return it.centroid }))
		for _, a := range []float64{1, 3, 10, 30} {
			fmt.Printf("  mix: centroid distance - ln(1-p)/%-3g AUROC %.3f\n", a, score(func(it item) float64 {
				return it.centroid + math.Log(1-it.p+1e-9)/a
			}))
		}
	}
}
