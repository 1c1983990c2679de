package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/internal/progress"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/training"
)

// DefaultTier2Model is the tier-2 model directory setup builds, under the
// models directory, that the default heads run: Universal Sentence Encoder
// lite, converted to ONNX and quantized to int8. A head trained on another
// encoder's embeddings would not fit the encoder the gateway runs.
const DefaultTier2Model = "use-int8"

// trainFlags are the flags of "triage train".
type trainFlags struct {
	data, out, evalData, models, name string
	modelsSet                         bool
	tier                              int
	seed                              uint64
	balance                           bool
	holdout                           float64
	// tier 1
	method, table, tokenizer, quant            string
	epochs, bigrams, ensemble, minCount, maxTk int
	lr, dropout                                float64
	prune, sif, fold, confidence, structure    bool
	firstLines, addCentroids                   bool
	centroidRows                               string
	// tier 1 from a teacher
	teacher, unlabeled   string
	hardWeight, teacherT float64
	// tier 2
	encoder, head               string
	threads, hidden, headEpochs int
	headDropout, headLR, headL2 float64
	enc                         encoderFlags
}

func parseTrainFlags(args []string, stderr io.Writer) (*trainFlags, error) {
	var f trainFlags
	fs := newFlagSet("triage train", stderr)
	fs.StringVar(&f.data, "data", "", "labelled JSONL ({\"text\",\"label\"}) to train on (required)")
	fs.StringVar(&f.out, "out", "", "heads artifact directory to write (required)")
	fs.IntVar(&f.tier, "tier", 1, "tier to train: 1 (static table and head) or 2 (a head on the tier-2 encoder's embeddings, added to --out)")
	fs.StringVar(&f.encoder, "encoder", "", "tier 2: the encoder's model directory (default MODELS/use-int8, as the default heads run)")
	f.enc.register(fs)
	fs.IntVar(&f.threads, "threads", 0, "tier 2 and --teacher: encoder runs in parallel (default: one per core)")
	fs.StringVar(&f.head, "head", "mlp", "tier 2: the head on the embeddings: mlp (one hidden layer) or softmax (regression)")
	fs.IntVar(&f.hidden, "hidden", 256, "tier 2, mlp: hidden units")
	fs.Float64Var(&f.headDropout, "head-dropout", 0, "tier 2, mlp: dropout on the hidden layer (default 0.1; negative: none)")
	fs.IntVar(&f.headEpochs, "head-epochs", 0, "tier 2: passes over the embeddings (default mlp 20, softmax 60)")
	fs.Float64Var(&f.headLR, "head-lr", 0, "tier 2: the initial learning rate (default mlp 1e-3 (Adam), softmax 0.5)")
	fs.Float64Var(&f.headL2, "head-l2", 0, "tier 2: weight decay (default mlp 1e-4, softmax 1e-5)")
	fs.StringVar(&f.method, "method", "tuned", "tuned: token vectors and head trained together (fastText-style); softmax: softmax regression on the frozen table; centroid: nearest centroid")
	fs.StringVar(&f.evalData, "eval", "", "labelled JSONL to report on (accuracy, macro F1, calibration, by realism)")
	fs.StringVar(&f.models, "models", modelsDir(), "directory of model files built by setup (default $TRIAGE_MODELS, else var/models)")
	fs.StringVar(&f.table, "table", "", "base table (default: MODELS/tables/glove-100d-i8.tbl)")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "tokenizer.json (default: MODELS/tokenizer/bert-base-uncased.json)")
	fs.StringVar(&f.name, "name", "", "artifact name (default: the output directory's name)")
	fs.IntVar(&f.epochs, "epochs", 25, "tuned: passes over the data")
	fs.Float64Var(&f.lr, "lr", 0.2, "tuned: initial learning rate, decayed linearly to 0")
	fs.IntVar(&f.bigrams, "bigrams", 500000, "tuned: hashed token-bigram buckets (0: unigrams only)")
	fs.Float64Var(&f.dropout, "dropout", 0.2, "tuned: token dropout per step")
	fs.BoolVar(&f.prune, "prune", true, "tuned: drop the base table's extra words no training text uses")
	fs.BoolVar(&f.sif, "sif", false, "tuned: weight the mean by SIF row weights")
	fs.IntVar(&f.ensemble, "ensemble", 3, "tuned: train this many models (seeds seed, seed+1, ...) and average their logits")
	fs.BoolVar(&f.fold, "fold", false, "tuned: store each row's class contributions instead of its vectors (smaller; implied by --ensemble > 1)")
	fs.BoolVar(&f.confidence, "confidence", false, "tuned: fit a per-text temperature on each source of --data (its source column) held out in turn, so text unlike the training data's scores lower (one more model trained per source)")
	fs.BoolVar(&f.firstLines, "first-lines", false, "also train on the first line of each multi-line text (a post's title) with its label, when it has three words or more")
	fs.BoolVar(&f.structure, "structure", false, "tuned: learn rows for the structural markers of a text (code lines, stack traces, numbered steps, LaTeX, file names, shell commands) besides its tokens")
	fs.StringVar(&f.centroidRows, "centroid-rows", training.DefaultCentroidRows, "the rows of --data tier 1's class centroids are made of (the distance rules' tier2.unfamiliar_at reads): user (those whose realism is not exam or exam_wordproblem) or all")
	fs.BoolVar(&f.addCentroids, "add-centroids", false, "tier 1: add class centroids to the heads artifact in --out, trained without them, from --data (the data it was trained on); its weights and floors are kept")
	fs.IntVar(&f.minCount, "min-count", 0, "tuned: give a word split into pieces a row of its own when it appears this often (0: never)")
	fs.StringVar(&f.teacher, "teacher", "", "tuned: learn the tier-2 probabilities of this heads artifact (its encoder and head) on --data's texts and --unlabeled's, instead of the labels alone (distillation); the artifact keeps the teacher's tier 2. Needs the ort build")
	fs.StringVar(&f.unlabeled, "unlabeled", "", "with --teacher: comma-separated JSONL or CSV files of more texts (a text column; labels ignored) for the teacher to label")
	fs.Float64Var(&f.hardWeight, "hard-weight", 0, "with --teacher: the labels' share of each --data row's target, the teacher's the rest (0: the teacher alone, 1: the labels alone)")
	fs.Float64Var(&f.teacherT, "teacher-temperature", 1, "with --teacher: soften the teacher's probabilities by this factor on its own temperature")
	fs.BoolVar(&f.balance, "balance", false, "weight examples by inverse class frequency")
	fs.StringVar(&f.quant, "quant", "i8", "tuned: storage of the trained table: i8, f16 or f32")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed (training is deterministic for a seed)")
	fs.IntVar(&f.maxTk, "max-tokens", static.DefaultMaxTokens, "tokens a text contributes at most")
	fs.Float64Var(&f.holdout, "holdout", 0.1, "share of --data held out to fit the temperature (calibration)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	fs.Visit(func(fl *flag.Flag) { f.modelsSet = f.modelsSet || fl.Name == "models" })
	if f.data == "" || f.out == "" {
		fmt.Fprintln(stderr, "triage train: --data and --out are required")
		return nil, errUsage
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.teacher == "" && (set["unlabeled"] || set["hard-weight"] || set["teacher-temperature"]) {
		fmt.Fprintln(stderr, "triage train: --unlabeled, --hard-weight and --teacher-temperature need --teacher")
		return nil, errUsage
	}
	if f.centroidRows != classifier.CentroidRowsUser && f.centroidRows != classifier.CentroidRowsAll {
		fmt.Fprintf(stderr, "triage train: --centroid-rows %q: want %s or %s\n", f.centroidRows, classifier.CentroidRowsUser, classifier.CentroidRowsAll)
		return nil, errUsage
	}
	if f.addCentroids && (f.tier != 1 || f.teacher != "") {
		fmt.Fprintln(stderr, "triage train: --add-centroids adds to tier 1 of an artifact, without training")
		return nil, errUsage
	}
	if f.teacher != "" && (f.tier != 1 || f.method != "tuned") {
		fmt.Fprintln(stderr, "triage train: --teacher trains tier 1's tuned method")
		return nil, errUsage
	}
	return &f, nil
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseTrainFlags(args, stderr)
	if err != nil {
		return err
	}
	switch {
	case f.addCentroids:
		return addCentroids(f, stdout)
	case f.tier == 1:
		err = trainTier1(ctx, f, stdout, stderr)
	case f.tier == 2:
		err = trainTier2(ctx, f, stdout, stderr)
	default:
		return fmt.Errorf("--tier %d: want 1 or 2", f.tier)
	}
	if errors.Is(err, training.ErrEmptyHoldout) {
		return fmt.Errorf("--holdout %v %w", f.holdout, training.ErrEmptyHoldout)
	}
	return err
}

// tier1Options checks the tier-1 flags and turns them into options.
func (f *trainFlags) tier1Options(stderr io.Writer) (training.Tier1Options, error) {
	switch f.method {
	case "tuned", "softmax", "centroid":
	default:
		fmt.Fprintf(stderr, "triage train: --method %q: want tuned, softmax or centroid\n", f.method)
		return training.Tier1Options{}, errUsage
	}
	if !models.Quant(f.quant).Valid() {
		fmt.Fprintf(stderr, "triage train: --quant %q: want i8, f16 or f32\n", f.quant)
		return training.Tier1Options{}, errUsage
	}
	if f.method == "tuned" && f.ensemble < 1 {
		return training.Tier1Options{}, fmt.Errorf("--ensemble %d: want at least 1", f.ensemble)
	}
	o := training.Tier1Options{Data: f.data, Out: f.out, Name: f.name, Eval: f.evalData, Table: f.table, Tokenizer: f.tokenizer,
		Method: f.method, Epochs: f.epochs, LearningRate: f.lr, Bigrams: f.bigrams, Dropout: f.dropout, Prune: f.prune, SIF: f.sif,
		Ensemble: f.ensemble, Fold: f.fold, MinCount: f.minCount, Confidence: f.confidence, Structure: f.structure, FirstLines: f.firstLines, Quant: models.Quant(f.quant),
		Balance: f.balance, Seed: f.seed, MaxTokens: f.maxTk, Holdout: f.holdout, CentroidRows: f.centroidRows, Tool: "triage " + versionString(), Log: stderr}
	if o.Table == "" {
		o.Table = filepath.Join(f.models, "tables", "glove-100d-i8.tbl")
	}
	if o.Tokenizer == "" {
		o.Tokenizer = filepath.Join(f.models, "tokenizer", "bert-base-uncased.json")
	}
	var err error
	o.At, err = buildTime()
	return o, err
}

// trainTier1 is "triage train --tier 1".
func trainTier1(ctx context.Context, f *trainFlags, stdout, stderr io.Writer) error {
	o, err := f.tier1Options(stderr)
	if err != nil {
		return err
	}
	if f.teacher != "" {
		var closeTeacher func()
		if o.Distill, closeTeacher, err = f.distillation(stderr); err != nil {
			return err
		}
		defer closeTeacher()
	}
	if err := needBaseFiles(o, f); err != nil {
		return err
	}
	total := 0
	if o.Method == "tuned" {
		total = o.Ensemble * o.Epochs
	}
	log := newTrainLog(stderr, total, progress.Options{})
	o.Log = log
	res, err := training.Tier1(ctx, o)
	log.finish()
	if err != nil {
		return err
	}
	printTrained(stdout, stderr, res, "train: wrote "+describeFiles(f.out))
	return nil
}

// addCentroids is "triage train --add-centroids".
func addCentroids(f *trainFlags, stdout io.Writer) error {
	h, err := training.AddCentroids(training.AddCentroidsOptions{Dir: f.out, ModelsDir: f.models, Data: f.data, Rows: f.centroidRows})
	if err != nil {
		return err
	}
	c := h.Tier1.Centroids
	fmt.Fprintf(stdout, "train: wrote %s (version %s): tier 1's class centroids, of %s rows of %s (%s)\n",
		filepath.Join(f.out, classifier.HeadsFile), h.Version, c.Fit["rows"], c.Fit["data"], c.Rows)
	return nil
}

// needBaseFiles checks that the base table and tokenizer tier-1 training
// starts from are there, and says where they were looked for when not.
func needBaseFiles(o training.Tier1Options, f *trainFlags) error {
	for _, file := range []struct{ path, flag string }{{o.Table, "--table"}, {o.Tokenizer, "--tokenizer"}} {
		if _, err := os.Stat(file.path); err == nil {
			continue
		}
		if f.table != "" && file.flag == "--table" || f.tokenizer != "" && file.flag == "--tokenizer" {
			return fmt.Errorf("%s %s: no such file", file.flag, file.path)
		}
		why := "--models " + f.models
		if !f.modelsSet {
			why = lifecycle.DefaultPlace().Why
		}
		return fmt.Errorf("%s is not there\n  it is looked for in the models directory %s, from %s\n  setup writes model files to var/models in the checkout it runs in (or to $TRIAGE_MODELS): name that directory with --models or TRIAGE_MODELS, or the file with %s",
			file.path, f.models, why, file.flag)
	}
	return nil
}

// trainLog passes training's log lines to w and follows its epoch lines
// ("train: model 2/3 epoch 7/25 ...") with a bar of the epochs: on a
// terminal the bar stands below the other lines; elsewhere the epoch lines
// are printed as they come, with the time left every 15 s.
type trainLog struct {
	mu    sync.Mutex
	w     io.Writer
	bar   *progress.Bar // nil: no epochs to count
	tty   bool
	total int
	part  []byte
}

var epochLine = regexp.MustCompile(`model (\d+)/(\d+) epoch (\d+)/(\d+)`)

func newTrainLog(w io.Writer, epochs int, o progress.Options) *trainLog {
	l := &trainLog{w: w, total: epochs, tty: progress.IsTerminal(w)}
	if o.Terminal != nil {
		l.tty = *o.Terminal
	}
	if epochs > 0 {
		o.Unit = "epochs"
		if o.Every == 0 {
			o.Every = 15 * time.Second
		}
		l.bar = progress.New(w, "train: tier 1", int64(epochs), o)
	}
	return l
}

func (l *trainLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.part[:i])
		l.part = l.part[i+1:]
		l.line(line)
	}
}

func (l *trainLog) line(line string) {
	if l.bar == nil {
		fmt.Fprintln(l.w, line)
		return
	}
	m := epochLine.FindStringSubmatch(line)
	if m != nil {
		model, _ := strconv.Atoi(m[1])
		epoch, _ := strconv.Atoi(m[3])
		epochs, _ := strconv.Atoi(m[4])
		if !l.tty {
			l.bar.Log(line)
		}
		l.bar.Set(int64((model-1)*epochs + epoch))
		return
	}
	l.bar.Log(line)
}

func (l *trainLog) finish() {
	if l.bar != nil {
		l.bar.Finish()
	}
}

// distillation loads the --teacher artifact and returns what training
// needs of it: its tier-2 encoder is opened only if some text's scores are
// not cached (under MODELS/cache/teacher). The returned func closes it.
func (f *trainFlags) distillation(stderr io.Writer) (*training.Distillation, func(), error) {
	h, err := classifier.LoadHeads(f.teacher)
	if err != nil {
		return nil, nil, err
	}
	if h.Tier2 == nil {
		return nil, nil, fmt.Errorf("--teacher %s: the artifact has no tier 2 to learn from", f.teacher)
	}
	threads := f.threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	var opened *onnx.Classifier
	open := func() (training.Embedder, error) {
		c, err := onnx.Load(h, f.models, onnx.Options{Threads: 1, MaxConcurrent: threads})
		if err != nil {
			return nil, fmt.Errorf("--teacher %s: %w", f.teacher, err)
		}
		opened = c
		return c.Model, nil
	}
	var unlabeled []string
	for _, p := range strings.Split(f.unlabeled, ",") {
		if p = strings.TrimSpace(p); p != "" {
			unlabeled = append(unlabeled, p)
		}
	}
	d := &training.Distillation{Teacher: h, Open: open, Unlabeled: unlabeled, HardWeight: f.hardWeight, Temperature: f.teacherT,
		CacheDir: filepath.Join(f.models, "cache", "teacher"), Workers: threads, Progress: progressBar(stderr)}
	return d, func() {
		if opened != nil {
			opened.Close()
		}
	}, nil
}

// trainTier2 is "triage train --tier 2": a head on the tier-2 encoder's
// embeddings, put with the encoder's identity in the heads artifact at
// --out (created when absent; its tier 1 and floors are kept when present,
// and its classes must match the data's).
func trainTier2(ctx context.Context, f *trainFlags, stdout, stderr io.Writer) error {
	if f.head != "mlp" && f.head != "softmax" {
		return fmt.Errorf("--head %q: want mlp or softmax", f.head)
	}
	encoderDir := f.encoder
	if encoderDir == "" {
		encoderDir = filepath.Join(f.models, DefaultTier2Model)
	}
	threads := f.threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	at, err := buildTime()
	if err != nil {
		return err
	}
	rc, err := f.enc.remote(nil, false)
	if err != nil {
		return err
	}
	var opened *onnx.Model
	defer func() {
		if opened != nil {
			opened.Close()
		}
	}()
	open := func() (*training.Encoder, error) {
		m, enc, err := openTier2Encoder(encoderDir, f.models, threads, rc)
		opened = m
		return enc, err
	}
	cacheDir := filepath.Join(f.models, "cache", "embeddings")
	before, _ := dirSize(cacheDir)
	if rc != nil {
		fmt.Fprintf(stderr, "train: embedding with the encoder at %s; what a remote engine serves has no sha256 here, so its embeddings are not cached\n", strings.SplitN(rc.URL, "?", 2)[0])
	} else {
		fmt.Fprintf(stderr, "train: embeddings are cached in %s (%s now): a later run on the same data and encoder reads them instead of embedding again\n", cacheDir, progress.Size(before))
	}
	labels := []string{"train: embedding " + filepath.Base(f.data) + " with the tier-2 encoder"}
	if f.evalData != "" {
		labels = append(labels, "train: embedding "+filepath.Base(f.evalData)+" to evaluate")
	}
	report, finish := progress.Func(stderr, progress.Options{Unit: "texts"}, labels...)
	res, err := training.Tier2(ctx, training.Tier2Options{Data: f.data, Eval: f.evalData, Out: f.out, Name: f.name, Open: open,
		CacheDir: cacheDir, Workers: threads,
		Head: f.head, Hidden: f.hidden, Epochs: f.headEpochs, LearningRate: f.headLR, WeightDecay: f.headL2, Dropout: f.headDropout,
		Balance: f.balance, Seed: f.seed, Holdout: f.holdout,
		At: at, Tool: "triage " + versionString(), Log: stderr, Progress: report})
	finish()
	if err != nil {
		return err
	}
	if after, files := dirSize(cacheDir); after != before {
		fmt.Fprintf(stderr, "train: the embedding cache %s holds %d files, %s (delete it to reclaim the space)\n", cacheDir, files, progress.Size(after))
	}
	printTrained(stdout, stderr, res, "train: wrote tier 2 to "+describeFiles(f.out))
	return nil
}

// openTier2Encoder opens the tier-2 model in dir for training, with what
// the heads record of it. With rc the vectors come from that remote
// engine, which must serve dir's model: the heads record the model
// directory (its manifest) and the token cap, and neither a graph's nor a
// tokenizer's sha256, which only the engine knows (a gateway pointed at
// that engine checks the model's name).
func openTier2Encoder(dir, modelsDir string, threads int, rc *onnx.RemoteConfig) (*onnx.Model, *training.Encoder, error) {
	if rc != nil {
		m, err := onnx.OpenRemote(dir, *rc, onnx.Options{})
		if err != nil {
			return nil, nil, err
		}
		man := m.Manifest()
		return m, &training.Encoder{Embedder: m, Name: man.Name, Source: man.Source + " (embedded by a remote engine)",
			Info: classifier.Encoder{Kind: "onnx", Model: filepath.Base(filepath.Clean(dir)), MaxTokens: man.MaxTokens}}, nil
	}
	m, err := onnx.Open(dir, modelsDir, onnx.Options{Threads: 1, MaxConcurrent: threads})
	if err != nil {
		return nil, nil, err
	}
	man := m.Encoder().Manifest()
	sum, err := models.FileSHA256(filepath.Join(dir, man.Model))
	if err != nil {
		return m, nil, err
	}
	return m, &training.Encoder{Embedder: m, Name: man.Name, Source: man.Source,
		Info: classifier.Encoder{Kind: "onnx", Model: filepath.Base(filepath.Clean(dir)), ModelSHA256: sum,
			Tokenizer: man.Tokenizer, TokenizerSHA256: man.TokenizerSHA256, MaxTokens: man.MaxTokens}}, nil
}

// printTrained prints a training's reports on its evaluation set, if any,
// and then says where it wrote.
func printTrained(stdout, stderr io.Writer, res *training.Result, wrote string) {
	if res.EvalName != "" {
		printReports(stdout, res.EvalName, res.Reports)
	}
	fmt.Fprintln(stderr, wrote)
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
