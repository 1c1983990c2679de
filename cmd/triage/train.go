package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/models"
)

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage train", flag.ContinueOnError)
	data := fs.String("data", "", "labelled JSONL ({\"text\",\"label\"}) to train on (required)")
	out := fs.String("out", "", "heads artifact directory to write (required)")
	tier := fs.Int("tier", 1, "tier to train: 1 (static table and head) or 2 (a head on the tier-2 encoder's embeddings, added to --out)")
	encoderDir := fs.String("encoder", "", "tier 2: the encoder's model directory (default MODELS/use)")
	threads := fs.Int("threads", 0, "tier 2: encoder runs in parallel (default: one per core)")
	t2head := fs.String("head", "mlp", "tier 2: the head on the embeddings: mlp (one hidden layer) or softmax (regression)")
	t2hidden := fs.Int("hidden", 256, "tier 2, mlp: hidden units")
	t2dropout := fs.Float64("head-dropout", 0, "tier 2, mlp: dropout on the hidden layer (default 0.1; negative: none)")
	t2epochs := fs.Int("head-epochs", 0, "tier 2: passes over the embeddings (default mlp 20, softmax 60)")
	t2lr := fs.Float64("head-lr", 0, "tier 2: the initial learning rate (default mlp 1e-3 (Adam), softmax 0.5)")
	t2l2 := fs.Float64("head-l2", 0, "tier 2: weight decay (default mlp 1e-4, softmax 1e-5)")
	method := fs.String("method", "tuned", "tuned: token vectors and head trained together (fastText-style); softmax: softmax regression on the frozen table; centroid: nearest centroid")
	evalData := fs.String("eval", "", "labelled JSONL to report on (accuracy, macro F1, calibration, by realism)")
	mdir := fs.String("models", modelsDir(), "directory of model files built by setup ($TRIAGE_MODELS)")
	tablePath := fs.String("table", "", "base table (default: MODELS/tables/glove-100d-i8.tbl)")
	tokPath := fs.String("tokenizer", "", "tokenizer.json (default: MODELS/tokenizer/bert-base-uncased.json)")
	name := fs.String("name", "", "artifact name (default: the output directory's name)")
	epochs := fs.Int("epochs", 25, "tuned: passes over the data")
	lr := fs.Float64("lr", 0.2, "tuned: initial learning rate, decayed linearly to 0")
	bigrams := fs.Int("bigrams", 500000, "tuned: hashed token-bigram buckets (0: unigrams only)")
	dropout := fs.Float64("dropout", 0.2, "tuned: token dropout per step")
	prune := fs.Bool("prune", true, "tuned: drop the base table's extra words no training text uses")
	sif := fs.Bool("sif", false, "tuned: weight the mean by SIF row weights")
	ensemble := fs.Int("ensemble", 3, "tuned: train this many models (seeds seed, seed+1, ...) and average their logits")
	fold := fs.Bool("fold", false, "tuned: store each row's class contributions instead of its vectors (smaller; implied by --ensemble > 1)")
	minCount := fs.Int("min-count", 0, "tuned: give a word split into pieces a row of its own when it appears this often (0: never)")
	balance := fs.Bool("balance", false, "weight examples by inverse class frequency")
	quant := fs.String("quant", "i8", "tuned: storage of the trained table: i8, f16 or f32")
	seed := fs.Uint64("seed", 1, "random seed (training is deterministic for a seed)")
	maxTokens := fs.Int("max-tokens", static.DefaultMaxTokens, "tokens a text contributes at most")
	holdout := fs.Float64("holdout", 0.1, "share of --data held out to fit the temperature (calibration)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *data == "" || *out == "" {
		fmt.Fprintln(stderr, "triage train: --data and --out are required")
		return errUsage
	}
	switch *tier {
	case 1:
	case 2:
		return runTrainTier2(ctx, tier2Train{data: *data, out: *out, encoder: *encoderDir, eval: *evalData, models: *mdir,
			name: *name, seed: *seed, balance: *balance, holdout: *holdout, threads: *threads,
			epochs: *t2epochs, lr: *t2lr, l2: *t2l2, head: *t2head, hidden: *t2hidden, dropout: *t2dropout}, stdout, stderr)
	default:
		return fmt.Errorf("--tier %d: want 1 or 2", *tier)
	}
	switch *method {
	case "tuned", "softmax", "centroid":
	default:
		fmt.Fprintf(stderr, "triage train: --method %q: want tuned, softmax or centroid\n", *method)
		return errUsage
	}
	if !models.Quant(*quant).Valid() {
		fmt.Fprintf(stderr, "triage train: --quant %q: want i8, f16 or f32\n", *quant)
		return errUsage
	}
	if *tablePath == "" {
		*tablePath = filepath.Join(*mdir, "tables", "glove-100d-i8.tbl")
	}
	if *tokPath == "" {
		*tokPath = filepath.Join(*mdir, "tokenizer", "bert-base-uncased.json")
	}
	if *name == "" {
		*name = filepath.Base(filepath.Clean(*out))
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	at, err := buildTime()
	if err != nil {
		return err
	}

	set, err := datasets.ReadJSONL(*data)
	if err != nil {
		return err
	}
	var unlabelled int
	for _, r := range set.Rows {
		if r.Label == "" {
			unlabelled++
		}
	}
	if unlabelled > 0 {
		return fmt.Errorf("%s: %d rows have no label", *data, unlabelled)
	}
	classes := classifier.SortedClasses(set.Labels())
	if len(classes) < 2 {
		return fmt.Errorf("%s: %d classes, need at least 2", *data, len(classes))
	}
	index := classifier.ClassIndex(classes)
	tok, err := tokenize.LoadWordPiece(*tokPath)
	if err != nil {
		return err
	}
	base, err := models.ReadTable(*tablePath)
	if err != nil {
		return err
	}
	tokSum, err := models.FileSHA256(*tokPath)
	if err != nil {
		return err
	}

	// A deterministic hold-out, by a hash of the text, fits the temperature.
	var fitText, calText []string
	var fitY, calY []int
	for _, r := range set.Rows {
		h := fnv.New32a()
		h.Write([]byte(r.Text))
		if float64(h.Sum32()%10000)/10000 < *holdout {
			calText, calY = append(calText, r.Text), append(calY, index[r.Label])
		} else {
			fitText, fitY = append(fitText, r.Text), append(fitY, index[r.Label])
		}
	}
	if len(calText) == 0 {
		return fmt.Errorf("--holdout %v left no rows to calibrate on", *holdout)
	}
	logf("train: %d rows, %d classes; %d to fit, %d held out for calibration", len(set.Rows), len(classes), len(fitText), len(calText))

	tier1 := &classifier.Tier{Training: classifier.Training{
		Data: filepath.Base(*data), DataSHA256: set.SHA256, Rows: len(fitText), Method: *method, Seed: *seed,
		At: at.Format(time.RFC3339), Tool: "triage " + versionString(),
		Params: map[string]any{"holdout": *holdout, "max_tokens": *maxTokens, "balance": *balance},
	}}
	start := time.Now()
	var model *static.Model
	switch *method {
	case "tuned":
		if *ensemble < 1 {
			return fmt.Errorf("--ensemble %d: want at least 1", *ensemble)
		}
		for k, v := range map[string]any{"epochs": *epochs, "lr": *lr, "bigrams": *bigrams, "dropout": *dropout,
			"min_count": *minCount, "prune": *prune, "sif": *sif, "ensemble": *ensemble, "base_table": base.Manifest.Name} {
			tier1.Training.Params[k] = v
		}
		var members []*static.Model
		var tuned *models.Table
		var enc classifier.Encoder
		for i := range *ensemble {
			var head *classifier.Linear
			var err error
			tuned, head, enc, err = static.Tune(tok, base, fitText, fitY, classes, static.TuneOptions{
				Epochs: *epochs, LearningRate: float32(*lr), Balance: *balance, Dropout: float32(*dropout),
				Seed: *seed + uint64(i), MaxTokens: *maxTokens, Bigrams: *bigrams, MinCount: *minCount, SIF: *sif, Prune: *prune,
				Progress: func(e int, loss float64) {
					logf("train: model %d/%d epoch %d/%d loss %.4f (%s)", i+1, *ensemble, e, *epochs, loss, time.Since(start).Round(time.Second))
				},
			})
			if err != nil {
				return err
			}
			if *ensemble == 1 && !*fold {
				tuned = tuned.Quantize(models.Quant(*quant))
				if model, err = static.New(tok, tuned, head, enc); err != nil {
					return err
				}
				break
			}
			m, err := static.New(tok, tuned, head, enc) // f32 vectors: folds
			if err != nil {
				return err
			}
			members = append(members, m)
		}
		if members != nil {
			tuned = foldTable(tuned, members, classes)
			tuned = tuned.Quantize(models.Quant(*quant))
			enc.Weighting += ", folded"
			id := identityHead(classes, members)
			var err error
			if model, err = static.New(tok, tuned, id, enc); err != nil {
				return err
			}
		}
		tuned.Manifest.Name = *name + "-tier1"
		tuned.Manifest.Created = at.Format(time.RFC3339)
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		tableFile := *name + "-tier1.tbl"
		sum, err := tuned.WriteFile(filepath.Join(*out, tableFile))
		if err != nil {
			return err
		}
		enc.Table, enc.TableSHA256 = tableFile, sum
		enc.Tokenizer, enc.TokenizerSHA256 = filepath.Base(*tokPath), tokSum
		tier1.Encoder = enc
	default:
		sum, err := models.FileSHA256(*tablePath)
		if err != nil {
			return err
		}
		enc := classifier.Encoder{Kind: "static", Table: filepath.Base(*tablePath), TableSHA256: sum,
			Tokenizer: filepath.Base(*tokPath), TokenizerSHA256: tokSum, MaxTokens: *maxTokens, Weighting: "table", Normalize: "l2"}
		tier1.Encoder = enc
		// Features from the frozen table; the head is fitted on them.
		probe, err := static.New(tok, base, placeholderHead(classes, base.Dims()), enc)
		if err != nil {
			return err
		}
		x := make([][]float32, len(fitText))
		for i, t := range fitText {
			x[i] = make([]float32, base.Dims())
			probe.Features(t, x[i])
		}
		var head *classifier.Linear
		if *method == "softmax" {
			head = classifier.TrainSoftmax(x, fitY, classes, classifier.SoftmaxOptions{Balance: *balance, Seed: *seed})
		} else {
			head = classifier.TrainCentroid(x, fitY, classes)
		}
		if model, err = static.New(tok, base, head, enc); err != nil {
			return err
		}
	}
	logf("train: fitted in %s", time.Since(start).Round(time.Millisecond))

	// Temperature on the hold-out.
	head := model.Head()
	logits := make([][]float32, len(calText))
	for i, t := range calText {
		logits[i] = make([]float32, len(classes))
		model.Logits(t, logits[i])
	}
	head.Temperature = classifier.FitTemperature(logits, calY)
	logf("train: temperature %.3f (fitted on %d held-out rows)", head.Temperature, len(calText))
	tier1.Head = *head

	h := &classifier.Heads{Name: *name, Version: at.Format("2006-01-02T150405Z"), Classes: classes, Tier1: tier1, Floors: map[string]classifier.Floors{}}
	if *evalData != "" {
		ev, err := datasets.ReadJSONL(*evalData)
		if err != nil {
			return err
		}
		reports := evaluate(model.Probs, ev, classes)
		tier1.Eval = map[string]classifier.Report{}
		for k, r := range reports {
			tier1.Eval[filepath.Base(*evalData)+k] = r
		}
		printReports(stdout, filepath.Base(*evalData), reports)
	}
	if err := h.Save(*out); err != nil {
		return err
	}
	logf("train: wrote %s", *out)
	return nil
}

// foldTable averages the members' folded heads into a table whose rows are
// class contributions (dims = classes): the ensemble's mean logits are then
// the mean of a text's rows, exactly what one member computes, at one
// member's cost. Row weights carry over (the members share them).
func foldTable(layout *models.Table, members []*static.Model, classes []string) *models.Table {
	k := len(classes)
	rows := layout.Rows()
	vecs := make([][]float32, rows)
	weights := make([]float32, rows)
	for r := range rows {
		weights[r] = layout.Weight(int32(r))
		v := make([]float32, k)
		for _, m := range members {
			c, _ := m.Fold()
			for j := range v {
				v[j] += c[r*k+j]
			}
		}
		inv := 1 / float32(len(members))
		if weights[r] > 0 {
			inv /= weights[r] // the fold holds weight x contribution; the table applies the weight
		}
		for j := range v {
			v[j] *= inv
		}
		vecs[r] = v
	}
	m := layout.Manifest
	m.Dims, m.VocabSize, m.ExtraWords, m.Quant = 0, 0, 0, ""
	m.Method = "tuned-folded"
	m.Notes = fmt.Sprintf("rows are the class contributions (logits) of %d tuned model(s), averaged; classes %v", len(members), classes)
	t, err := models.NewTable(m, layout.VocabSize(), layout.ExtraWords(), vecs, weights)
	if err != nil {
		panic(err) // same layout as a table that built: cannot fail
	}
	return t
}

// identityHead passes folded contributions through, with the members' mean
// bias.
func identityHead(classes []string, members []*static.Model) *classifier.Linear {
	k := len(classes)
	h := &classifier.Linear{Kind: "softmax", Classes: classes, Dims: k, W: make([]float32, k*k), B: make([]float32, k), Temperature: 1}
	for c := range k {
		h.W[c*k+c] = 1
	}
	for _, m := range members {
		_, b := m.Fold()
		for c := range k {
			h.B[c] += b[c] / float32(len(members))
		}
	}
	return h
}

// placeholderHead lets a Model compute features before its head exists.
func placeholderHead(classes []string, dims int) *classifier.Linear {
	return &classifier.Linear{Kind: "softmax", Classes: classes, Dims: dims, W: make([]float32, len(classes)*dims), B: make([]float32, len(classes))}
}

// evaluate reports on a labelled set: overall (key "") and per realism
// (key "/realism=X"). Rows whose label the head does not know count as
// errors.
func evaluate(probs func(text string, out []float32), set *datasets.Set, classes []string) map[string]classifier.Report {
	index := classifier.ClassIndex(classes)
	type slice struct {
		probs [][]float32
		y     []int
	}
	slices := map[string]*slice{}
	add := func(k string, p []float32, y int) {
		s := slices[k]
		if s == nil {
			s = &slice{}
			slices[k] = s
		}
		s.probs, s.y = append(s.probs, p), append(s.y, y)
	}
	var unknown error
	for _, r := range set.Rows {
		y, ok := index[r.Label]
		if !ok {
			unknown = errors.Join(unknown, fmt.Errorf("label %q", r.Label))
			y = -1
		}
		p := make([]float32, len(classes))
		probs(r.Text, p)
		if y < 0 {
			continue
		}
		add("", p, y)
		if r.Realism != "" {
			add("/realism="+r.Realism, p, y)
		}
	}
	out := map[string]classifier.Report{}
	for k, s := range slices {
		out[k] = classifier.Evaluate(classes, s.probs, s.y)
	}
	return out
}

func printReports(w io.Writer, name string, reports map[string]classifier.Report) {
	keys := make([]string, 0, len(reports))
	for k := range reports {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "slice\tn\taccuracy\tmacro F1\tECE\tNLL\t")
	for _, k := range keys {
		r := reports[k]
		label := name + strings.TrimPrefix(k, "/")
		if k != "" {
			label = "  " + strings.TrimPrefix(k, "/")
		}
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.4f\t%.3f\t\n", label, r.N, r.Accuracy, r.MacroF1, r.ECE, r.NLL)
	}
	tw.Flush()
}
