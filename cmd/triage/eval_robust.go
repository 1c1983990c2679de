package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/triagegw/triage/evaluation"
)

// robustFlags are eval's robustness flags: whether to measure how often
// decisions change under noise, on how many rows, with which seed, and
// the bar.
type robustFlags struct {
	on      bool
	rows    int
	seed    uint64
	maxFlip float64
}

func (r *robustFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&r.on, "robustness", false, "also measure robustness: decide every row again under each of "+
		fmt.Sprint(len(evaluation.Perturbations()))+" kinds of noise a user adds ("+perturbationNames()+") and report how often the route (--rules) or the class (--heads) changes; "+
		"it multiplies the evaluation's classifier work by as many, tier 2 included (off by default)")
	fs.IntVar(&r.rows, "robustness-rows", 0, "with --robustness: perturb this many rows, sampled with --seed (0: every row)")
	fs.Uint64Var(&r.seed, "seed", 1, "with --robustness: the seed of the noise and of the row sample (the same seed gives the same texts)")
	fs.Float64Var(&r.maxFlip, "max-flip-rate", -1, "fail above this share of decisions changed by noise (implies --robustness)")
}

func perturbationNames() string {
	var names []string
	for _, p := range evaluation.Perturbations() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// check refuses what cannot be measured.
func (r *robustFlags) check(stderr io.Writer) error {
	if r.rows < 0 {
		fmt.Fprintf(stderr, "triage eval: --robustness-rows %d: want 0 (every row) or more\n", r.rows)
		return errUsage
	}
	if r.maxFlip > 1 {
		fmt.Fprintf(stderr, "triage eval: --max-flip-rate %g: a share, from 0 to 1\n", r.maxFlip)
		return errUsage
	}
	return nil
}

func (r *robustFlags) enabled() bool { return r.on || r.maxFlip >= 0 }

// labels adds the robustness runs' progress labels after labels, one per
// run of the evaluation.
func (r *robustFlags) labels(labels []string) []string {
	if !r.enabled() {
		return labels
	}
	out := append([]string(nil), labels...)
	for _, l := range labels {
		out = append(out, strings.Replace(l, "eval: ", "eval: robustness, ", 1))
	}
	return out
}

// measure runs the robustness evaluation when it is asked for, saying on
// stderr what it cost: decide is the evaluated decision, the one out came
// from.
func (r *robustFlags) measure(ctx context.Context, stderr io.Writer, mode string, items []evaluation.Item, out []evaluation.Outcome, by string,
	decide func(context.Context, []evaluation.Item) ([]evaluation.Outcome, error)) (*evaluation.Robustness, error) {
	if !r.enabled() {
		return nil, nil
	}
	start := time.Now()
	rb, err := evaluation.Robust(ctx, mode, items, out, decide, evaluation.RobustOptions{Seed: r.seed, Rows: r.rows, By: by})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "eval: robustness: %d perturbed texts of %d rows decided in %s\n", rb.N, rb.Rows, time.Since(start).Round(time.Millisecond))
	return rb, nil
}

// printRobustnessLine is the headline: the share of decisions noise
// changed, under accuracy.
func printRobustnessLine(w io.Writer, rb *evaluation.Robustness) {
	if rb == nil {
		return
	}
	what := "routes"
	if rb.JudgedOn == "class" {
		what = "top classes"
	}
	fmt.Fprintf(w, "robustness: %.2f%% of %s change under noise (%d of %d perturbed texts; %d rows of %d, %d perturbations, seed %d; right→wrong %d, wrong→right %d)\n",
		100*rb.Rate, what, rb.Flips.Flips, rb.N, rb.Rows, rb.Of, len(rb.Perturbations), rb.Seed, rb.Broke, rb.Mended)
}

// printRobustness prints the flip rates per perturbation (with what each
// does), per class, per slice, and the most frequent changes.
func printRobustness(w io.Writer, rb *evaluation.Robustness) {
	if rb == nil {
		return
	}
	fmt.Fprintf(w, "\nrobustness: how often the %s changes under noise (seed %d)\n", rb.JudgedOn, rb.Seed)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "perturbation\tflip rate\tflips\tn\tright→wrong\twrong→right\twhat it does")
	for _, p := range rb.Perturbations {
		fmt.Fprintf(tw, "%s\t%.4f\t%d\t%d\t%d\t%d\t%s\n", p.Name, p.Rate, p.Flips.Flips, p.N, p.Broke, p.Mended, p.Does)
	}
	fmt.Fprintf(tw, "all\t%.4f\t%d\t%d\t%d\t%d\t\n", rb.Rate, rb.Flips.Flips, rb.N, rb.Broke, rb.Mended)
	tw.Flush()
	printGroupFlips(w, "class", rb.PerClass, rb.Perturbations)
	if rb.By != "" {
		printGroupFlips(w, rb.By, rb.Slices, rb.Perturbations)
	}
	if len(rb.Moves) > 0 {
		var parts []string
		for _, m := range rb.Moves[:min(len(rb.Moves), 8)] {
			parts = append(parts, fmt.Sprintf("%s → %s %d", m.From, m.To, m.Count))
		}
		fmt.Fprintln(w, "most frequent changes: "+strings.Join(parts, "; "))
	}
}

// printGroupFlips is a table of flip rates, one row per class or slice
// value, one column per perturbation.
func printGroupFlips(w io.Writer, by string, groups map[string]evaluation.GroupFlips, perts []evaluation.PerturbationFlips) {
	if len(groups) == 0 {
		return
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "\n" + by + "\tn\tflip rate\t"
	for _, p := range perts {
		head += p.Name + "\t"
	}
	fmt.Fprintln(tw, head)
	for _, k := range keys {
		g := groups[k]
		line := fmt.Sprintf("%s\t%d\t%.4f\t", k, g.N, g.Rate)
		for _, p := range perts {
			if f, ok := g.ByPerturbation[p.Name]; ok {
				line += fmt.Sprintf("%.3f\t", f.Rate)
			} else {
				line += "–\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}
