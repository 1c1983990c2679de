package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/internal/progress"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/training"
)

// calibrateFlags are the flags of "triage calibrate".
type calibrateFlags struct {
	place                                 placeFlags // --config, --heads, --models
	heads                                 string     // the heads calibrated, resolved
	data, groupBy, classes, labelMap, out string
	rules                                 string // --rules: fit a rule set's route floors instead
	prior                                 string // --prior: public labelled data the own labels of --data lean on
	agreement                             string // --agreement: a person's labels a model's in --data are measured against
	tier, folds, minRouted                int
	target, maxEsc, quantile, priorWeight float64
	unfamiliar                            []float32 // --unfamiliar-shares; nil: the default
	temperature, diff, asJSON             bool
	enc                                   encoderFlags
}

func parseCalibrateFlags(args []string, stderr io.Writer) (*calibrateFlags, error) {
	var f calibrateFlags
	fs := newFlagSet("triage calibrate", stderr)
	f.place.register(fs, "heads artifact to calibrate")
	fs.StringVar(&f.data, "data", "", "labelled calibration set, .jsonl or .csv (required); not the training data")
	fs.StringVar(&f.rules, "rules", "", "a rules file: fit its routes' floors per tier, escalate_at, mix, fallback_floor and (with centroids in the heads) unfamiliar_at at the level the rules decide (route precision), instead of per-class floors")
	fs.IntVar(&f.tier, "tier", 1, "tier to calibrate")
	fs.Float64Var(&f.target, "target-precision", 0.9, "precision each class's floor must reach")
	fs.Float64Var(&f.maxEsc, "max-escalation", 0, "cap on the share of items below their floor (0: no cap); the target gives way (with --rules and --group-by: in every held-out source)")
	fs.StringVar(&f.groupBy, "group-by", "", "column naming each item's source: floors must hold in every source, and are judged leaving each source out (with --rules: the settings are chosen leaving each source out)")
	fs.Float64Var(&f.quantile, "source-quantile", 0, "with --rules and --group-by: the quantile of the held-out sources that must keep the target precision and --max-escalation (0: the worst source)")
	fs.IntVar(&f.minRouted, "min-routed", 100, "with --rules and --group-by: the fewest items a held-out source must have routed (or hold, for escalation) to bind the choice")
	fs.StringVar(&f.prior, "prior", "", "with --rules: public labelled data for --data (your own labels) to lean on: the floors are fitted on both, the prior weighing --prior-weight times as much as your labels in all, and the setting is chosen and judged on your labels, cross-validated")
	fs.Float64Var(&f.priorWeight, "prior-weight", 1, "with --prior: the prior's total weight in the floors, as a multiple of your labels' count (each prior row weighs at most 1)")
	fs.Func("unfamiliar-shares", "with --rules, heads with tier-1 centroids: the shares of tier 1's confident answers tried for tier2.unfamiliar_at, the least familiar escalated, comma-separated (0: off; default 0,0.05,0.1,0.2,0.3)", func(v string) error {
		f.unfamiliar = nil
		for _, part := range strings.Split(v, ",") {
			x, err := strconv.ParseFloat(strings.TrimSpace(part), 32)
			if err != nil || x < 0 || x >= 1 {
				return fmt.Errorf("%q: want shares from 0 to below 1", part)
			}
			f.unfamiliar = append(f.unfamiliar, float32(x))
		}
		return nil
	})
	fs.StringVar(&f.agreement, "agreement", "", agreementFlagHelp)
	fs.IntVar(&f.folds, "folds", 5, "cross-validation folds over rows")
	fs.StringVar(&f.classes, "classes", "", "comma-separated classes to floor (default: every class but other)")
	fs.BoolVar(&f.temperature, "temperature", true, "refit the tier's temperature on the calibration set first")
	fs.StringVar(&f.labelMap, "label-map", "", "JSON/YAML mapping of dataset labels to the heads' classes")
	fs.StringVar(&f.out, "out", "", "write a calibrated copy of the heads artifact here")
	fs.BoolVar(&f.diff, "diff", false, "print the floors as a rules-file snippet to review instead")
	fs.BoolVar(&f.asJSON, "json", false, "print the fit as JSON")
	f.enc.register(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	f.place.parsed(fs)
	if f.data == "" {
		fmt.Fprintln(stderr, "triage calibrate: --data is required")
		return nil, errUsage
	}
	if f.quantile < 0 || f.quantile > 1 || f.minRouted < 1 {
		fmt.Fprintln(stderr, "triage calibrate: --source-quantile is between 0 and 1, --min-routed at least 1")
		return nil, errUsage
	}
	switch {
	case f.prior != "" && f.rules == "":
		fmt.Fprintln(stderr, "triage calibrate: --prior fits a rule set's floors: add --rules FILE")
		return nil, errUsage
	case f.prior != "" && f.groupBy != "":
		fmt.Fprintln(stderr, "triage calibrate: --prior chooses the setting on your labels (--data), cross-validated; --group-by chooses it on held-out sources: use one")
		return nil, errUsage
	case f.priorWeight <= 0 || math.IsNaN(f.priorWeight) || math.IsInf(f.priorWeight, 0):
		fmt.Fprintln(stderr, "triage calibrate: --prior-weight is above 0")
		return nil, errUsage
	case f.folds < 2:
		fmt.Fprintln(stderr, "triage calibrate: --folds is at least 2")
		return nil, errUsage
	}
	return &f, nil
}

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseCalibrateFlags(args, stderr)
	if err != nil {
		return err
	}
	if f.rules != "" {
		return runCalibrateRules(ctx, f, stdout, stderr)
	}
	cfg, err := f.place.loadConfig()
	if err != nil {
		return err
	}
	if f.heads, err = f.place.headsDir(cfg); err != nil {
		return err
	}
	h, err := classifier.LoadHeads(f.heads)
	if err != nil {
		return err
	}
	o := training.CalibrateOptions{Classes: h.Classes, Refit: f.temperature, GroupBy: f.groupBy,
		Floors: evaluation.FloorOptions{TargetPrecision: f.target, Folds: f.folds, MaxEscalation: f.maxEsc}}
	if f.classes != "" {
		o.Floors.Classes = strings.Split(f.classes, ",")
	}
	var rc *onnx.RemoteConfig
	if f.tier == 2 {
		if rc, err = f.enc.remote(cfg, f.place.heads == ""); err != nil {
			return err
		}
	}
	closeTier, err := tierLogits(h, f.place.place(cfg), f.tier, rc, &o, stderr)
	if err != nil {
		return err
	}
	defer closeTier()
	set, err := readLabelled(f.data, f.labelMap, h.Classes, f.agreement, stderr)
	if err != nil {
		return err
	}
	cal, err := training.Calibrate(ctx, set.Rows, o)
	if errors.Is(err, training.ErrTooFewRows) {
		return badInput(fmt.Errorf("%s: %w", f.data, err))
	} else if err != nil {
		return err
	}
	if err := printCalibrationResult(stdout, f, cal); err != nil {
		return err
	}
	if f.out == "" {
		return nil
	}
	c, err := h.Calibrated(f.tier, cal.Temperature, cal.FloorsByClass())
	if err != nil {
		return err
	}
	name := filepath.Base(f.data)
	kept := cal.RefreshEval(c, f.tier, name)
	if err := c.CopyTo(f.out); err != nil {
		return err
	}
	refreshed := ""
	if _, ok := c.Tier(f.tier).Eval[name]; ok {
		refreshed = fmt.Sprintf("; tier %d's report on %s measured again with it", f.tier, name)
	}
	fmt.Fprintf(stderr, "calibrate: wrote %s; temperature %.3f, %d floors%s\n", describeFiles(f.out), cal.Temperature, len(cal.Floors.Classes), refreshed)
	if cal.Temperature != cal.OldTemperature {
		for _, k := range kept {
			if !strings.Contains(k, "/") { // a set, not one of its slices
				fmt.Fprintf(stderr, "calibrate: tier %d's report on %s was measured at temperature %.3f: its ECE and NLL do not hold at %.3f (`triage eval --heads %s --tier %d --data %s` measures them again)\n",
					f.tier, k, cal.OldTemperature, cal.Temperature, f.out, f.tier, k)
			}
		}
	}
	return nil
}

// readLabelled reads a labelled set to fit on (label map applied) and
// refuses it, naming every line at fault, when a row has no label or one
// that is not among classes, a blank text, or a text an earlier line has.
func readLabelled(path, labelMap string, classes []string, agreement string, stderr io.Writer) (*datasets.Set, error) {
	set, err := readDataset(path, datasets.Columns{}, labelMap, stderr)
	if err != nil {
		return nil, err
	}
	if err := needLabels(set, "", "calibrate"); err != nil {
		return nil, err
	}
	if err := checkModelLabels(set, agreement, "calibrate", stderr); err != nil {
		return nil, err
	}
	if err := set.CheckLabelled(classes, 20); err != nil {
		return nil, badInput(fmt.Errorf("%s cannot be fitted on:\n%w", path, err))
	}
	return set, nil
}

const agreementFlagHelp = "when the labels file holds a model's labels (triage label --by): a person's labels file to measure them against first (the report is printed on stderr); without it such labels are refused"

// checkModelLabels refuses a labels file holding labels a model proposed
// ("labeller": "model:POOL", triage label --by) unless agreement names a
// person's labels file: then it prints how far the two agree (on stderr)
// before they are used as the truth.
func checkModelLabels(set *datasets.Set, agreement, what string, stderr io.Writer) error {
	models := map[string]int{}
	for _, r := range set.Rows {
		if l := r.Cols["labeller"]; strings.HasPrefix(l, "model:") {
			models[l]++
		}
	}
	if len(models) == 0 {
		return nil
	}
	var names []string
	n := 0
	for l, k := range models {
		names = append(names, l)
		n += k
	}
	sort.Strings(names)
	if agreement == "" {
		return badInput(fmt.Errorf("%s: %d of its %d labels were proposed by a model (%s): %s takes them as the truth only once measured against a person's labels: add --agreement HUMAN.jsonl (labels of some of the same prompts, from triage label)",
			set.Path, n, len(set.Rows), strings.Join(names, ", "), what))
	}
	fmt.Fprintf(stderr, "%s: %d of %d labels were proposed by %s; their agreement with a person's:\n", what, n, len(set.Rows), strings.Join(names, ", "))
	return printAgreement(stderr, agreement, set.Path)
}

// tierLogits loads tier n of h and sets o's temperature and logits to the
// tier's head (tier 2: on the encoder's embeddings, computed on every
// core); it returns what releases the tier.
func tierLogits(h *classifier.Heads, place modelsPlace, n int, rc *onnx.RemoteConfig, o *training.CalibrateOptions, stderr io.Writer) (func(), error) {
	if err := lifecycle.NeedFiles(h, n, place); err != nil {
		return nil, err
	}
	mdir := place.Dir
	switch n {
	case 1:
		m, err := static.Load(h, mdir)
		if err != nil {
			return nil, err
		}
		o.Temperature = m.Head().Temperature
		o.Logits = func(_ context.Context, texts []string) ([][]float32, error) {
			out := make([][]float32, len(texts))
			for i, t := range texts {
				out[i] = make([]float32, len(h.Classes))
				m.Logits(t, out[i])
			}
			return out, nil
		}
		return func() {}, nil
	case 2:
		c, err := loadTier2(h, mdir, rc)
		if err != nil {
			return nil, err
		}
		head := c.Head()
		o.Temperature = head.Temperature
		o.Logits = func(ctx context.Context, texts []string) ([][]float32, error) {
			report, finish := progress.Func(stderr, progress.Options{Unit: "texts"}, "calibrate: embedding with the tier-2 encoder")
			x, err := training.Embed(ctx, c.Model, texts, runtime.GOMAXPROCS(0), report)
			finish()
			if err != nil {
				return nil, err
			}
			out := make([][]float32, len(texts))
			for i := range x {
				out[i] = make([]float32, len(h.Classes))
				head.Logits(x[i], out[i])
			}
			return out, nil
		}
		return func() { c.Close() }, nil
	}
	return nil, fmt.Errorf("--tier %d: want 1 or 2", n)
}

// printCalibrationResult prints the fit: as JSON, as a table, or (--diff)
// as a rules-file snippet.
func printCalibrationResult(w io.Writer, f *calibrateFlags, cal *training.Calibration) error {
	switch {
	case f.asJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Temperature [2]float32 `json:"temperature_old_new"`
			ECE         [2]float64 `json:"ece_old_new"`
			evaluation.FloorReport
		}{[2]float32{cal.OldTemperature, cal.Temperature}, [2]float64{cal.OldECE, cal.ECE}, cal.Floors}); err != nil {
			return err
		}
	case !f.diff:
		printCalibration(w, f.data, cal, f.groupBy)
	}
	if f.diff {
		printFloorsDiff(w, f, cal)
	}
	return nil
}

// printFloorsDiff prints the floors as a rules-file snippet to review.
func printFloorsDiff(w io.Writer, f *calibrateFlags, cal *training.Calibration) {
	rep := cal.Floors
	fmt.Fprintf(w, "# floors for tier %d of %s, fitted on %s (%d rows) for precision %.2f", f.tier, f.heads, filepath.Base(f.data), cal.Rows, rep.Achieved)
	if f.groupBy != "" {
		fmt.Fprintf(w, " in every %s", f.groupBy)
	}
	fmt.Fprintf(w, "; temperature %.3f -> %.3f\nclasses:\n", cal.OldTemperature, cal.Temperature)
	for _, fl := range rep.Classes {
		note := fmt.Sprintf("precision %.3f (cv %.3f), coverage %.3f (cv %.3f), %d items", fl.Precision, fl.CVPrecision, fl.Coverage, fl.CVCoverage, fl.Support)
		if !fl.Reachable {
			note = fmt.Sprintf("target not reachable: never trusted on tier %d alone", f.tier)
		}
		fmt.Fprintf(w, "  %s: {floors: {tier%d: %.3f}}   # %s\n", yamlKey(fl.Class), f.tier, fl.Floor, note)
	}
}

func yamlKey(s string) string {
	if strings.ContainsAny(s, " :#{}[],&*?|<>=!%@`'\"") {
		b, _ := json.Marshal(s)
		return string(b)
	}
	return s
}

func printCalibration(w io.Writer, data string, cal *training.Calibration, groupBy string) {
	rep := cal.Floors
	fmt.Fprintf(w, "calibration on %s (%d rows): temperature %.3f -> %.3f, ECE %.4f -> %.4f\n", filepath.Base(data), cal.Rows, cal.OldTemperature, cal.Temperature, cal.OldECE, cal.ECE)
	fmt.Fprintf(w, "floors for precision %.2f", rep.Target)
	if rep.Achieved != rep.Target {
		fmt.Fprintf(w, " (lowered to %.2f to keep escalation within budget)", rep.Achieved)
	}
	fmt.Fprintf(w, "; escalation %.3f; cross-validated precision %.3f coverage %.3f\n", rep.Escalation, rep.CV.Precision, rep.CV.Coverage)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nclass\tfloor\tsupport\tprecision\tcoverage\tcv precision\tcv coverage\t")
	for _, f := range rep.Classes {
		floor := fmt.Sprintf("%.3f", f.Floor)
		if !f.Reachable {
			floor = "never"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t\n", f.Class, floor, f.Support, f.Precision, f.Coverage, f.CVPrecision, f.CVCoverage)
	}
	tw.Flush()
	if len(rep.ByGroup) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "\nheld-out %s\titems\trouted\tprecision\tcoverage\t\n", groupBy)
		keys := make([]string, 0, len(rep.ByGroup))
		for k := range rep.ByGroup {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			g := rep.ByGroup[k]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f\t\n", k, g.N, g.Routed, g.Precision, g.Coverage)
		}
		tw.Flush()
	}
}
