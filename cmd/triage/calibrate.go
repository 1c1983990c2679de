package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/evaluation"
)

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage calibrate", flag.ContinueOnError)
	headsDir := fs.String("heads", "", "heads artifact to calibrate (required)")
	data := fs.String("data", "", "labelled calibration set, .jsonl or .csv (required); not the training data")
	tier := fs.Int("tier", 1, "tier to calibrate")
	target := fs.Float64("target-precision", 0.9, "precision each class's floor must reach")
	maxEsc := fs.Float64("max-escalation", 0, "cap on the share of items below their floor (0: no cap); the target gives way")
	groupBy := fs.String("group-by", "", "column naming each item's source: floors must hold in every source, and are judged leaving each source out")
	folds := fs.Int("folds", 5, "cross-validation folds over rows")
	classesFlag := fs.String("classes", "", "comma-separated classes to floor (default: every class but other)")
	temperature := fs.Bool("temperature", true, "refit the tier's temperature on the calibration set first")
	labelMap := fs.String("label-map", "", "JSON/YAML mapping of dataset labels to the heads' classes")
	out := fs.String("out", "", "write a calibrated copy of the heads artifact here")
	diff := fs.Bool("diff", false, "print the floors as a rules-file snippet to review instead")
	asJSON := fs.Bool("json", false, "print the fit as JSON")
	mdir := fs.String("models", modelsDir(), "directory of model files built by setup ($TRIAGE_MODELS)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *headsDir == "" || *data == "" {
		fmt.Fprintln(stderr, "triage calibrate: --heads and --data are required")
		return errUsage
	}
	h, err := classifier.LoadHeads(*headsDir)
	if err != nil {
		return err
	}
	// logitsOf scores the rows with the tier's head (tier 2: on the
	// encoder's embeddings, computed on every core).
	var head *classifier.Linear
	var logitsOf func(ctx context.Context, texts []string) ([][]float32, error)
	switch *tier {
	case 1:
		m, err := static.Load(h, *mdir)
		if err != nil {
			return err
		}
		head = m.Head()
		logitsOf = func(_ context.Context, texts []string) ([][]float32, error) {
			out := make([][]float32, len(texts))
			for i, t := range texts {
				out[i] = make([]float32, len(h.Classes))
				m.Logits(t, out[i])
			}
			return out, nil
		}
	case 2:
		c, err := onnx.Load(h, *mdir, onnx.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		head = c.Head()
		logitsOf = func(ctx context.Context, texts []string) ([][]float32, error) {
			x, err := embedAll(ctx, c.Model, texts, runtime.GOMAXPROCS(0), progressBar(stderr))
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
	default:
		return fmt.Errorf("--tier %d: want 1 or 2", *tier)
	}
	set, err := readDataset(*data, datasets.Columns{}, *labelMap, stderr)
	if err != nil {
		return err
	}
	index := classifier.ClassIndex(h.Classes)
	var rows []datasets.Row
	for _, r := range set.Rows {
		if _, ok := index[r.Label]; ok {
			rows = append(rows, r)
		}
	}
	if len(rows) < 50 {
		return fmt.Errorf("%s: %d rows with a label the heads know; calibration needs more", *data, len(rows))
	}
	// Logits once; the temperature, then calibrated scores.
	texts := make([]string, len(rows))
	y := make([]int, len(rows))
	for i, r := range rows {
		texts[i], y[i] = r.Text, index[r.Label]
	}
	logits, err := logitsOf(ctx, texts)
	if err != nil {
		return err
	}
	oldT := head.Temperature
	newT := oldT
	if *temperature {
		newT = classifier.FitTemperature(logits, y)
	}
	eceOld, eceNew := calibratedECE(logits, y, oldT), calibratedECE(logits, y, newT)
	scored := make([]evaluation.Scored, len(rows))
	p := make([]float32, len(h.Classes))
	for i, r := range rows {
		copy(p, logits[i])
		classifier.Softmax(p, newT)
		best := classifier.Argmax(p)
		scored[i] = evaluation.Scored{Pred: h.Classes[best], Score: p[best], Label: r.Label, Group: r.Cols[*groupBy], Key: r.Text}
	}
	classes := strings.Split(*classesFlag, ",")
	if *classesFlag == "" {
		classes = nil
		for _, c := range h.Classes {
			if c != "other" {
				classes = append(classes, c)
			}
		}
	}
	rep := evaluation.FitFloors(scored, evaluation.FloorOptions{TargetPrecision: *target, Classes: classes,
		Robust: *groupBy != "", Folds: *folds, MaxEscalation: *maxEsc})

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Temperature [2]float32 `json:"temperature_old_new"`
			ECE         [2]float64 `json:"ece_old_new"`
			evaluation.FloorReport
		}{[2]float32{oldT, newT}, [2]float64{eceOld, eceNew}, rep}); err != nil {
			return err
		}
	} else if !*diff {
		printCalibration(stdout, *data, len(rows), oldT, newT, eceOld, eceNew, rep, *groupBy)
	}
	if *diff {
		fmt.Fprintf(stdout, "# floors for tier %d of %s, fitted on %s (%d rows) for precision %.2f", *tier, *headsDir, filepath.Base(*data), len(rows), rep.Achieved)
		if *groupBy != "" {
			fmt.Fprintf(stdout, " in every %s", *groupBy)
		}
		fmt.Fprintf(stdout, "; temperature %.3f -> %.3f\nclasses:\n", oldT, newT)
		for _, f := range rep.Classes {
			note := fmt.Sprintf("precision %.3f (cv %.3f), coverage %.3f (cv %.3f), %d items", f.Precision, f.CVPrecision, f.Coverage, f.CVCoverage, f.Support)
			if !f.Reachable {
				note = fmt.Sprintf("target not reachable: never trusted on tier %d alone", *tier)
			}
			fmt.Fprintf(stdout, "  %s: {floors: {tier%d: %.3f}}   # %s\n", yamlKey(f.Class), *tier, f.Floor, note)
		}
	}
	if *out == "" {
		return nil
	}
	cal := *h
	if *tier == 1 {
		t := *h.Tier1
		t.Head.Temperature = newT
		cal.Tier1 = &t
	} else {
		t := *h.Tier2
		t.Head.Temperature = newT
		cal.Tier2 = &t
	}
	if !strings.HasSuffix(h.Version, "+cal") {
		cal.Version = h.Version + "+cal"
	}
	cal.Floors = map[string]classifier.Floors{}
	for c, f := range h.Floors {
		cal.Floors[c] = f
	}
	for _, f := range rep.Classes {
		v := float32(f.Floor)
		fl := cal.Floors[f.Class]
		if *tier == 1 {
			fl.Tier1 = &v
		} else {
			fl.Tier2 = &v
		}
		cal.Floors[f.Class] = fl
	}
	if err := cal.Save(*out); err != nil {
		return err
	}
	// The table travels with the artifact when it lives in its directory.
	if t := h.Tier1; t != nil && t.Encoder.Table != "" {
		if b, err := os.ReadFile(filepath.Join(h.Dir, t.Encoder.Table)); err == nil {
			if err := os.WriteFile(filepath.Join(*out, t.Encoder.Table), b, 0o644); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(stderr, "calibrate: wrote %s (temperature %.3f, %d floors)\n", *out, newT, len(rep.Classes))
	return nil
}

func yamlKey(s string) string {
	if strings.ContainsAny(s, " :#{}[],&*?|<>=!%@`'\"") {
		b, _ := json.Marshal(s)
		return string(b)
	}
	return s
}

// calibratedECE is the expected calibration error of softmax(logits/t).
func calibratedECE(logits [][]float32, y []int, t float32) float64 {
	probs := make([][]float32, len(logits))
	for i, l := range logits {
		probs[i] = append([]float32(nil), l...)
		classifier.Softmax(probs[i], t)
	}
	classes := make([]string, len(logits[0]))
	for i := range classes {
		classes[i] = fmt.Sprint(i)
	}
	return classifier.Evaluate(classes, probs, y).ECE
}

func printCalibration(w io.Writer, data string, n int, oldT, newT float32, eceOld, eceNew float64, rep evaluation.FloorReport, groupBy string) {
	fmt.Fprintf(w, "calibration on %s (%d rows): temperature %.3f -> %.3f, ECE %.4f -> %.4f\n", filepath.Base(data), n, oldT, newT, eceOld, eceNew)
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
