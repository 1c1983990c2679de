package evaluation

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A Perturbation is noise a real user adds to a prompt that should not
// change where it goes: a typo, a greeting, a trailing "thanks". Apply
// must be deterministic in rng (the same stream gives the same text) and
// may return text unchanged when the noise does not apply (lowercase of a
// text in lower case already).
type Perturbation struct {
	Name string // short, stable: the key in reports
	Does string // what it does, in a sentence, for the report
	// Apply returns text with the noise added, drawing its choices from rng.
	Apply func(text string, rng *rand.Rand) string
}

// Perturbations are the noise a robustness run applies, in report order.
// Each is seeded per row (see Robust), so a run is reproducible and a row
// gets the same noise whatever else is sampled.
func Perturbations() []Perturbation {
	return []Perturbation{
		{Name: "typos", Does: "one typo per 20 words of four letters or more (at least one): two neighbouring letters swapped, one dropped, one doubled, or one struck as its QWERTY neighbour; never a word's first letter", Apply: typos},
		{Name: "lowercase", Does: "the whole text in lower case", Apply: func(s string, _ *rand.Rand) string { return strings.ToLower(s) }},
		{Name: "uppercase", Does: "the whole text in capitals", Apply: func(s string, _ *rand.Rand) string { return strings.ToUpper(s) }},
		{Name: "greeting", Does: "a greeting before the text: " + quoteList(greetings), Apply: func(s string, rng *rand.Rand) string {
			return pick(rng, greetings) + pick(rng, []string{" ", "\n"}) + s
		}},
		{Name: "quick-question", Does: `"Quick question: " before the text`, Apply: func(s string, _ *rand.Rand) string { return "Quick question: " + s }},
		{Name: "sign-off", Does: "a sign-off after the text, on its own line: " + quoteList(signOffs), Apply: func(s string, rng *rand.Rand) string {
			return s + "\n\n" + pick(rng, signOffs)
		}},
		{Name: "thanks", Does: "a trailing thanks on the same line: " + quoteList(thanks), Apply: func(s string, rng *rand.Rand) string {
			return strings.TrimRight(s, " \t\r\n") + " " + pick(rng, thanks)
		}},
		{Name: "whitespace", Does: "a blank line before and trailing spaces after the text, and one space in ten between words doubled, or made a tab or a line break", Apply: whitespace},
	}
}

var (
	greetings = []string{"Hi!", "Hello,", "Hey,", "Hi there,", "Good morning!", "Hello everyone,"}
	signOffs  = []string{"Thanks in advance!", "Best regards,\nAlex", "Cheers", "Any help appreciated."}
	thanks    = []string{"thanks", "Thanks!", "thx", "thank you"}
)

func pick(rng *rand.Rand, from []string) string { return from[rng.IntN(len(from))] }

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}

// qwerty holds each lower-case letter's neighbours on a QWERTY keyboard.
var qwerty = map[rune]string{
	'q': "wa", 'w': "qes", 'e': "wrd", 'r': "etf", 't': "ryg", 'y': "tuh", 'u': "yij", 'i': "uok", 'o': "ipl", 'p': "ol",
	'a': "qsz", 's': "adwx", 'd': "sfec", 'f': "dgrv", 'g': "fhtb", 'h': "gjyn", 'j': "hkum", 'k': "jli", 'l': "ko",
	'z': "ax", 'x': "zcs", 'c': "xvd", 'v': "cbf", 'b': "vng", 'n': "bmh", 'm': "nj",
}

// typos puts a typo in one word of four letters or more per twenty such
// words (at least one), at a letter other than the word's first.
func typos(s string, rng *rand.Rand) string {
	type span struct{ lo, hi int } // byte offsets of a run of letters
	var words []span
	start := -1
	for i, r := range s + " " {
		switch {
		case unicode.IsLetter(r) && start < 0:
			start = i
		case !unicode.IsLetter(r) && start >= 0:
			if utf8.RuneCountInString(s[start:i]) >= 4 {
				words = append(words, span{start, i})
			}
			start = -1
		}
	}
	if len(words) == 0 {
		return s
	}
	n := max(1, len(words)/20)
	chosen := rng.Perm(len(words))[:n]
	slices.Sort(chosen)
	var b strings.Builder
	b.Grow(len(s) + n)
	at := 0
	for _, w := range chosen {
		sp := words[w]
		b.WriteString(s[at:sp.lo])
		b.WriteString(typo([]rune(s[sp.lo:sp.hi]), rng))
		at = sp.hi
	}
	b.WriteString(s[at:])
	return b.String()
}

// typo changes w (four letters or more) at a letter after its first.
func typo(w []rune, rng *rand.Rand) string {
	if rng.IntN(4) == 0 { // two neighbours swapped
		i := 1 + rng.IntN(len(w)-2)
		if w[i] == w[i+1] {
			return string(slices.Delete(w, i, i+1)) // swapping "ll" changes nothing: one dropped
		}
		w[i], w[i+1] = w[i+1], w[i]
		return string(w)
	}
	i := 1 + rng.IntN(len(w)-1)
	switch rng.IntN(3) {
	case 0: // dropped
		return string(slices.Delete(w, i, i+1))
	case 1: // doubled
		return string(slices.Insert(w, i, w[i]))
	default: // struck as a neighbouring key, in the letter's case
		nb := qwerty[unicode.ToLower(w[i])]
		if nb == "" {
			return string(slices.Insert(w, i, w[i])) // not one of the keyboard's letters: doubled
		}
		r := rune(nb[rng.IntN(len(nb))])
		if unicode.IsUpper(w[i]) {
			r = unicode.ToUpper(r)
		}
		w[i] = r
		return string(w)
	}
}

// whitespace adds a blank line before the text and trailing spaces after
// it, and changes one gap in ten between words: doubled, a tab, or a line
// break.
func whitespace(s string, rng *rand.Rand) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/8 + 8)
	b.WriteString("\n\n")
	for i, r := range s {
		if r == ' ' && i > 0 && i+1 < len(s) && s[i-1] != ' ' && s[i+1] != ' ' && rng.IntN(10) == 0 {
			b.WriteString(pick(rng, []string{"  ", "\t", "\n"}))
			continue
		}
		b.WriteRune(r)
	}
	b.WriteString("  \n")
	return b.String()
}

// RobustOptions tune Robust.
type RobustOptions struct {
	// Seed seeds every perturbation's choices and the row sample.
	Seed uint64
	// Rows, when above 0 and below the number of items, is how many rows
	// to perturb, sampled with Seed; otherwise every row.
	Rows int
	// By, when set, repeats the flip rates per value of that column.
	By string
	// Perturbations are the noise applied; nil means Perturbations().
	Perturbations []Perturbation
}

// Flips counts decisions that changed under noise.
type Flips struct {
	N     int     `json:"n"`     // perturbed texts decided
	Flips int     `json:"flips"` // decided otherwise than the original
	Rate  float64 `json:"flip_rate"`
}

func (f *Flips) add(flip bool) {
	f.N++
	if flip {
		f.Flips++
	}
}

func (f *Flips) finish() { f.Rate = ratio(f.Flips, f.N) }

// PerturbationFlips is one perturbation's effect.
type PerturbationFlips struct {
	Name string `json:"name"`
	Does string `json:"does"`
	Flips
	// Unchanged counts the rows the perturbation left as they were (no
	// word to misspell, already in lower case): not decided again, not
	// in N.
	Unchanged int `json:"unchanged,omitempty"`
	// Broke counts flips from a right decision to a wrong one, Mended from
	// wrong to right.
	Broke  int `json:"broke"`
	Mended int `json:"mended"`
}

// GroupFlips is a class's or a slice's flips, overall and per perturbation.
type GroupFlips struct {
	Flips
	ByPerturbation map[string]Flips `json:"by_perturbation"`
}

func (g *GroupFlips) add(pert string, flip bool) {
	g.Flips.add(flip)
	if g.ByPerturbation == nil {
		g.ByPerturbation = map[string]Flips{}
	}
	f := g.ByPerturbation[pert]
	f.add(flip)
	g.ByPerturbation[pert] = f
}

func (g *GroupFlips) finish() {
	g.Flips.finish()
	for k, f := range g.ByPerturbation {
		f.finish()
		g.ByPerturbation[k] = f
	}
}

// Move is a change of decision under noise and how often it happened.
type Move struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Count int    `json:"count"`
}

// Robustness is how often a decision changes under the noise real users
// add. In rules mode the decision is the route (DefaultLabel for the
// default pool); in tier mode, the top class.
type Robustness struct {
	// JudgedOn is "route" (rules mode) or "class" (tier mode).
	JudgedOn string `json:"judged_on"`
	Seed     uint64 `json:"seed"`
	// Rows perturbed, of Of rows evaluated.
	Rows int `json:"rows"`
	Of   int `json:"of"`
	// Flips over every perturbed text; Broke and Mended as per
	// perturbation.
	Flips
	Broke         int                 `json:"broke"`
	Mended        int                 `json:"mended"`
	Perturbations []PerturbationFlips `json:"perturbations"`
	// PerClass is by the items' label.
	PerClass map[string]GroupFlips `json:"per_class"`
	By       string                `json:"by,omitempty"`
	Slices   map[string]GroupFlips `json:"slices,omitempty"`
	// Moves are the changes of decision, most frequent first.
	Moves []Move `json:"moves,omitempty"`
}

// decided is what a flip compares: the route in rules mode, the top class
// in tier mode.
func decided(mode string, o Outcome) string {
	if mode != "rules" {
		return o.Pred
	}
	if o.Route == "" {
		return DefaultLabel
	}
	return o.Route
}

// Robust measures how often decisions change under noise. base are the
// outcomes of items (from the same runner); run decides a batch of
// perturbed items the way the originals were decided (Rules or Tier with
// the same set or classifier, the cascade when the originals had one),
// so every figure comes from the real decision. Each perturbation of each
// sampled row draws from its own stream, seeded by Seed, the
// perturbation's name and the row's index: the same seed gives the same
// texts, in any order and with any number of workers.
func Robust(ctx context.Context, mode string, items []Item, base []Outcome, run func(context.Context, []Item) ([]Outcome, error), o RobustOptions) (*Robustness, error) {
	if len(base) != len(items) {
		return nil, fmt.Errorf("robustness: %d outcomes for %d items", len(base), len(items))
	}
	perts := o.Perturbations
	if perts == nil {
		perts = Perturbations()
	}
	rows := SampleRows(len(items), o.Rows, o.Seed)
	type trial struct{ row, pert int }
	var trials []trial
	var texts []Item
	unchanged := make([]int, len(perts))
	for p, pert := range perts {
		for _, i := range rows {
			it := items[i]
			text := pert.Apply(it.Text, rowRand(o.Seed, pert.Name, i))
			if text == it.Text {
				unchanged[p]++
				continue
			}
			trials = append(trials, trial{i, p})
			texts = append(texts, Item{Text: text, Label: it.Label, Cols: it.Cols})
		}
	}
	out, err := run(ctx, texts)
	if err != nil {
		return nil, fmt.Errorf("robustness: %w", err)
	}
	if len(out) != len(texts) {
		return nil, fmt.Errorf("robustness: %d outcomes for %d perturbed items", len(out), len(texts))
	}
	judged := "class"
	if mode == "rules" {
		judged = "route"
	}
	r := &Robustness{JudgedOn: judged, Seed: o.Seed, Rows: len(rows), Of: len(items), PerClass: map[string]GroupFlips{}}
	r.Perturbations = make([]PerturbationFlips, len(perts))
	for p, pert := range perts {
		r.Perturbations[p] = PerturbationFlips{Name: pert.Name, Does: pert.Does, Unchanged: unchanged[p]}
	}
	if o.By != "" {
		r.By, r.Slices = o.By, map[string]GroupFlips{}
	}
	moves := map[[2]string]int{}
	for k, t := range trials {
		was, now := base[t.row], out[k]
		from, to := decided(mode, was), decided(mode, now)
		flip := from != to
		pf := &r.Perturbations[t.pert]
		pf.add(flip)
		r.Flips.add(flip)
		if flip {
			moves[[2]string{from, to}]++
			if was.Correct && !now.Correct {
				pf.Broke++
				r.Broke++
			} else if !was.Correct && now.Correct {
				pf.Mended++
				r.Mended++
			}
		}
		name := perts[t.pert].Name
		g := r.PerClass[was.Label]
		g.add(name, flip)
		r.PerClass[was.Label] = g
		if o.By != "" {
			v := items[t.row].Cols[o.By]
			if v == "" {
				v = "(none)"
			}
			g := r.Slices[v]
			g.add(name, flip)
			r.Slices[v] = g
		}
	}
	r.Flips.finish()
	for i := range r.Perturbations {
		r.Perturbations[i].finish()
	}
	for _, m := range []map[string]GroupFlips{r.PerClass, r.Slices} {
		for k, g := range m {
			g.finish()
			m[k] = g
		}
	}
	for k, n := range moves {
		r.Moves = append(r.Moves, Move{From: k[0], To: k[1], Count: n})
	}
	sort.Slice(r.Moves, func(a, b int) bool {
		ma, mb := r.Moves[a], r.Moves[b]
		if ma.Count != mb.Count {
			return ma.Count > mb.Count
		}
		if ma.From != mb.From {
			return ma.From < mb.From
		}
		return ma.To < mb.To
	})
	return r, nil
}

// SampleRows is the rows a robustness run perturbs: k of n, chosen with
// seed and in input order, or all n when k is 0 or not below n.
func SampleRows(n, k int, seed uint64) []int {
	if k <= 0 || k >= n {
		rows := make([]int, n)
		for i := range rows {
			rows[i] = i
		}
		return rows
	}
	rows := rand.New(rand.NewPCG(seed, 0x726f7773)).Perm(n)[:k] // "rows"
	slices.Sort(rows)
	return rows
}

// rowRand is the stream perturbation name draws from for row i.
func rowRand(seed uint64, name string, i int) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()^uint64(i)*0x9e3779b97f4a7c15))
}
