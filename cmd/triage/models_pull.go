package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/hub"
)

const modelsPullUsage = `usage: triage models pull [--revision REV] [--out DIR] [--cache DIR] [--offline] ORG/NAME

pull downloads a sentence encoder's ONNX export from a Hugging Face model
repo (onnx/model.onnx or model.onnx, with tokenizer.json, config.json and
sentence-transformers' 1_Pooling/config.json) into the hub cache, verified
(size, and sha256 for LFS files), all files from one commit; then it lays
out a tier-2 model directory (DIR, default <models>/NAME): model.onnx and
tokenizer.json, and an encoder.json that pins their sha256 and says how to
feed the graph (BERT inputs) and pool its output (from 1_Pooling: CLS or
mean). Heads trained on that directory (triage train --tier 2) record its
sha256. Pin --revision to a commit sha for reproducible models.

example:
  triage models pull BAAI/bge-small-en-v1.5

environment: HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, TRIAGE_HUB_CACHE (see triage datasets -h)`

// pullFlags are the flags and argument of "triage models pull".
type pullFlags struct {
	repo, revision, out, cache, models string
	offline                            bool
}

func parsePullFlags(args []string, stderr io.Writer) (*pullFlags, error) {
	var f pullFlags
	fs := newFlagSet("triage models pull", stderr)
	fs.StringVar(&f.revision, "revision", hub.DefaultRevision, "branch, tag or commit sha")
	fs.StringVar(&f.out, "out", "", "the model directory to lay out (default <models>/NAME)")
	fs.StringVar(&f.cache, "cache", "", "hub cache directory (default $TRIAGE_HUB_CACHE, $XDG_CACHE_HOME/triage/hub or ~/.cache/triage/hub)")
	fs.BoolVar(&f.offline, "offline", false, "serve from the cache only, with no request (like HF_HUB_OFFLINE=1)")
	fs.StringVar(&f.models, "models", modelsDir(), "directory of model files ($TRIAGE_MODELS)")
	pos, err := parseDatasetsArgs(fs, args, stderr, modelsPullUsage, 1)
	if err != nil {
		return nil, err
	}
	f.repo = pos[0]
	if f.out == "" {
		f.out = filepath.Join(f.models, path.Base(f.repo))
	}
	return &f, nil
}

// runModelsPull is "triage models pull".
func runModelsPull(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parsePullFlags(args, stderr)
	if err != nil {
		return err
	}
	c := &hub.Client{CacheDir: f.cache, Offline: f.offline}
	p, err := pullEncoderFiles(ctx, c, f.repo, f.revision, stderr)
	if err != nil {
		return err
	}
	m, how, err := pulledManifest(f.repo, p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	if m.ModelSHA256, err = placeFile(p.model, filepath.Join(f.out, m.Model)); err != nil {
		return err
	}
	if m.TokenizerSHA256, err = placeFile(p.tokenizer, filepath.Join(f.out, m.Tokenizer)); err != nil {
		return err
	}
	if err := onnx.WriteManifest(f.out, m); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "models: %s at %s: %d dims, %s, up to %d tokens\n", f.repo, p.rev, m.Dims, how, m.MaxTokens)
	fmt.Fprintln(stdout, f.out)
	return nil
}

// pulledFiles are the cached files of an encoder's repo, all from one
// commit; pooling is "" when the repo has no 1_Pooling/config.json.
type pulledFiles struct {
	rev                               string
	model, tokenizer, config, pooling string
}

// pullEncoderFiles downloads an encoder's ONNX export and the files that
// say how to run it from repo at revision, verified, into the hub cache.
func pullEncoderFiles(ctx context.Context, c *hub.Client, repo, revision string, stderr io.Writer) (*pulledFiles, error) {
	// One commit for every file: list at the revision (which resolves it),
	// then download at that commit. Offline, the cache answers for the
	// revision and the usual file names.
	p := &pulledFiles{rev: revision}
	files := []string{"onnx/model.onnx", "model.onnx", "tokenizer.json", "config.json", "1_Pooling/config.json"}
	commit, listed, err := c.ListFiles(ctx, hub.Model, repo, revision)
	switch {
	case err == nil:
		p.rev, files = commit, listed
	case errors.Is(err, hub.ErrOffline) || hub.Unavailable(err):
		fmt.Fprintf(stderr, "models: cannot list %s (%v); trying the cache\n", repo, err)
	default:
		return nil, err
	}
	modelFile, err := onnxExport(repo, files)
	if err != nil {
		return nil, err
	}
	get := func(f string, required bool) (string, error) {
		if !required && !slices.Contains(files, f) {
			return "", nil
		}
		path, err := c.Download(ctx, hub.Model, repo, p.rev, f)
		if err != nil && !required && errors.Is(err, hub.ErrFileNotFound) {
			return "", nil
		}
		if err == nil {
			fmt.Fprintf(stderr, "models: %s %s\n", repo, f)
		}
		return path, err
	}
	if p.model, err = get(modelFile, true); err != nil {
		return nil, err
	}
	if p.tokenizer, err = get("tokenizer.json", true); err != nil {
		return nil, err
	}
	if p.config, err = get("config.json", true); err != nil {
		return nil, err
	}
	if p.pooling, err = get("1_Pooling/config.json", false); err != nil {
		return nil, err
	}
	return p, nil
}

// onnxExport picks the repo's ONNX export among its files.
func onnxExport(repo string, files []string) (string, error) {
	for _, f := range []string{"onnx/model.onnx", "model.onnx"} {
		if slices.Contains(files, f) {
			return f, nil
		}
	}
	var onnxFiles []string
	for _, f := range files {
		if strings.HasSuffix(f, ".onnx") {
			onnxFiles = append(onnxFiles, f)
		}
	}
	if len(onnxFiles) == 0 {
		return "", fmt.Errorf("models: %s has no ONNX export (no onnx/model.onnx or model.onnx); export one with optimum (optimum-cli export onnx) or pick a repo that ships it", repo)
	}
	return "", fmt.Errorf("models: %s has no onnx/model.onnx or model.onnx, only %s; quantised or optimised variants are not pulled by name yet", repo, strings.Join(onnxFiles, ", "))
}

// pulledManifest is the encoder.json of a pulled encoder, from its
// config.json and 1_Pooling/config.json, with how it pools (for a person).
func pulledManifest(repo string, p *pulledFiles) (*onnx.Manifest, string, error) {
	var mc struct {
		ModelType   string `json:"model_type"`
		HiddenSize  int    `json:"hidden_size"`
		MaxPosition int    `json:"max_position_embeddings"`
		TypeVocab   int    `json:"type_vocab_size"`
	}
	if err := readJSONFile(p.config, &mc); err != nil {
		return nil, "", fmt.Errorf("models: %s config.json: %w", repo, err)
	}
	switch mc.ModelType {
	case "bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra":
	default:
		return nil, "", fmt.Errorf("models: %s is a %q model; tier 2 runs BERT-family encoders (bert, roberta, distilbert, mpnet, electra)", repo, mc.ModelType)
	}
	if mc.HiddenSize < 1 {
		return nil, "", fmt.Errorf("models: %s config.json has no hidden_size", repo)
	}
	pooling, how := onnx.PoolMean, "no 1_Pooling/config.json: mean pooling, the sentence-transformers default"
	if p.pooling != "" {
		var pc struct {
			CLS  bool `json:"pooling_mode_cls_token"`
			Mean bool `json:"pooling_mode_mean_tokens"`
		}
		if err := readJSONFile(p.pooling, &pc); err != nil {
			return nil, "", fmt.Errorf("models: %s 1_Pooling/config.json: %w", repo, err)
		}
		switch {
		case pc.CLS:
			pooling, how = onnx.PoolCLS, "1_Pooling/config.json: CLS pooling"
		case pc.Mean:
			pooling, how = onnx.PoolMean, "1_Pooling/config.json: mean pooling"
		default:
			return nil, "", fmt.Errorf("models: %s pools neither by CLS nor by mean (1_Pooling/config.json); tier 2 supports those two", repo)
		}
	}
	maxTok := 512
	if mc.MaxPosition > 0 && mc.MaxPosition < maxTok {
		maxTok = mc.MaxPosition
	}
	m := &onnx.Manifest{Format: onnx.ManifestFormat, Name: path.Base(repo), Source: "huggingface.co/" + repo + "@" + p.rev,
		Input: onnx.InputBERT, Pooling: pooling, Dims: mc.HiddenSize, MaxTokens: maxTok,
		Model: onnx.DefaultModelFile, Tokenizer: "tokenizer.json"}
	if mc.TypeVocab == 0 || mc.ModelType == "distilbert" || strings.Contains(mc.ModelType, "roberta") {
		m.Inputs = []string{"input_ids", "attention_mask"} // no token_type_ids input
	}
	return m, how, nil
}

// placeFile puts src at dst (a hard link when they share a file system,
// else a copy) and returns its sha256.
func placeFile(src, dst string) (string, error) {
	src, err := filepath.EvalSymlinks(src)
	if err != nil {
		return "", err
	}
	tmp := dst + ".tmp"
	os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		if err := copyOut(src, tmp); err != nil {
			return "", err
		}
	}
	f, err := os.Open(tmp)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func readJSONFile(p string, v any) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
