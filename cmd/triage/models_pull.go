package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
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

// runModelsPull is "triage models pull".
func runModelsPull(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage models pull", flag.ContinueOnError)
	revision := fs.String("revision", hub.DefaultRevision, "branch, tag or commit sha")
	out := fs.String("out", "", "the model directory to lay out (default <models>/NAME)")
	cache := fs.String("cache", "", "hub cache directory (default $TRIAGE_HUB_CACHE, $XDG_CACHE_HOME/triage/hub or ~/.cache/triage/hub)")
	offline := fs.Bool("offline", false, "serve from the cache only, with no request (like HF_HUB_OFFLINE=1)")
	mdir := fs.String("models", modelsDir(), "directory of model files ($TRIAGE_MODELS)")
	pos, err := parseDatasetsArgs(fs, args, stderr, modelsPullUsage, 1)
	if err != nil {
		return err
	}
	repo := pos[0]
	c := &hub.Client{CacheDir: *cache, Offline: *offline}
	if *out == "" {
		*out = filepath.Join(*mdir, path.Base(repo))
	}

	// One commit for every file: list at the revision (which resolves it),
	// then download at that commit. Offline, the cache answers for the
	// revision and the usual file names.
	rev := *revision
	files := []string{"onnx/model.onnx", "model.onnx", "tokenizer.json", "config.json", "1_Pooling/config.json"}
	commit, listed, err := c.ListFiles(ctx, hub.Model, repo, rev)
	switch {
	case err == nil:
		rev, files = commit, listed
	case errors.Is(err, hub.ErrOffline) || hub.Unavailable(err):
		fmt.Fprintf(stderr, "models: cannot list %s (%v); trying the cache\n", repo, err)
	default:
		return err
	}
	modelFile := ""
	for _, f := range []string{"onnx/model.onnx", "model.onnx"} {
		if slices.Contains(files, f) {
			modelFile = f
			break
		}
	}
	if modelFile == "" {
		var onnxFiles []string
		for _, f := range files {
			if strings.HasSuffix(f, ".onnx") {
				onnxFiles = append(onnxFiles, f)
			}
		}
		if len(onnxFiles) == 0 {
			return fmt.Errorf("models: %s has no ONNX export (no onnx/model.onnx or model.onnx); export one with optimum (optimum-cli export onnx) or pick a repo that ships it", repo)
		}
		return fmt.Errorf("models: %s has no onnx/model.onnx or model.onnx, only %s; quantised or optimised variants are not pulled by name yet", repo, strings.Join(onnxFiles, ", "))
	}
	get := func(f string, required bool) (string, error) {
		if !required && !slices.Contains(files, f) {
			return "", nil
		}
		p, err := c.Download(ctx, hub.Model, repo, rev, f)
		if err != nil && !required && errors.Is(err, hub.ErrFileNotFound) {
			return "", nil
		}
		if err == nil {
			fmt.Fprintf(stderr, "models: %s %s\n", repo, f)
		}
		return p, err
	}
	modelPath, err := get(modelFile, true)
	if err != nil {
		return err
	}
	tokPath, err := get("tokenizer.json", true)
	if err != nil {
		return err
	}
	cfgPath, err := get("config.json", true)
	if err != nil {
		return err
	}
	poolPath, err := get("1_Pooling/config.json", false)
	if err != nil {
		return err
	}

	var mc struct {
		ModelType   string `json:"model_type"`
		HiddenSize  int    `json:"hidden_size"`
		MaxPosition int    `json:"max_position_embeddings"`
		TypeVocab   int    `json:"type_vocab_size"`
	}
	if err := readJSONFile(cfgPath, &mc); err != nil {
		return fmt.Errorf("models: %s config.json: %w", repo, err)
	}
	switch mc.ModelType {
	case "bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra":
	default:
		return fmt.Errorf("models: %s is a %q model; tier 2 runs BERT-family encoders (bert, roberta, distilbert, mpnet, electra)", repo, mc.ModelType)
	}
	if mc.HiddenSize < 1 {
		return fmt.Errorf("models: %s config.json has no hidden_size", repo)
	}
	pooling, how := onnx.PoolMean, "no 1_Pooling/config.json: mean pooling, the sentence-transformers default"
	if poolPath != "" {
		var pc struct {
			CLS  bool `json:"pooling_mode_cls_token"`
			Mean bool `json:"pooling_mode_mean_tokens"`
		}
		if err := readJSONFile(poolPath, &pc); err != nil {
			return fmt.Errorf("models: %s 1_Pooling/config.json: %w", repo, err)
		}
		switch {
		case pc.CLS:
			pooling, how = onnx.PoolCLS, "1_Pooling/config.json: CLS pooling"
		case pc.Mean:
			pooling, how = onnx.PoolMean, "1_Pooling/config.json: mean pooling"
		default:
			return fmt.Errorf("models: %s pools neither by CLS nor by mean (1_Pooling/config.json); tier 2 supports those two", repo)
		}
	}
	maxTok := 512
	if mc.MaxPosition > 0 && mc.MaxPosition < maxTok {
		maxTok = mc.MaxPosition
	}

	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	m := &onnx.Manifest{Format: onnx.ManifestFormat, Name: path.Base(repo), Source: "huggingface.co/" + repo + "@" + rev,
		Input: onnx.InputBERT, Pooling: pooling, Dims: mc.HiddenSize, MaxTokens: maxTok,
		Model: onnx.DefaultModelFile, Tokenizer: "tokenizer.json"}
	if mc.TypeVocab == 0 || mc.ModelType == "distilbert" || strings.Contains(mc.ModelType, "roberta") {
		m.Inputs = []string{"input_ids", "attention_mask"} // no token_type_ids input
	}
	if m.ModelSHA256, err = placeFile(modelPath, filepath.Join(*out, m.Model)); err != nil {
		return err
	}
	if m.TokenizerSHA256, err = placeFile(tokPath, filepath.Join(*out, m.Tokenizer)); err != nil {
		return err
	}
	if err := onnx.WriteManifest(*out, m); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "models: %s at %s: %d dims, %s, up to %d tokens\n", repo, rev, m.Dims, how, m.MaxTokens)
	fmt.Fprintln(stdout, *out)
	return nil
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
