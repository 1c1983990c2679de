package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/lifecycle"
)

// modelsDir is where setup puts model files, for the commands that take
// no config: $TRIAGE_MODELS, or var/models under the working directory.
func modelsDir() string { return lifecycle.DefaultPlace().Dir }

// classifyFlags are the flags and arguments of "triage classify".
type classifyFlags struct {
	place placeFlags
	enc   encoderFlags
	tier  int
	text  string // the arguments, joined
	stdin bool   // "-": JSONL on stdin
}

const classifyUsage = `usage: triage classify [--config FILE | --heads DIR] [--tier 1|2] TEXT...
       triage classify [--config FILE | --heads DIR] [--tier 1|2] -

Classifies one text and prints the result as JSON. The arguments are joined
with spaces into that one text, so quoting is optional:
  triage classify how do I rebase onto main
With -, reads JSONL on stdin ({"text":...} or a JSON string per line) and
prints one result per line.
`

func parseClassifyFlags(args []string, stderr io.Writer) (*classifyFlags, error) {
	var f classifyFlags
	fs := newFlagSet("triage classify", stderr)
	f.place.register(fs, "heads artifact directory")
	fs.IntVar(&f.tier, "tier", 1, "tier to run: 1 or 2 (the heads' tier-2 head on the ONNX encoder)")
	f.enc.register(fs)
	if err := parseWithArgs(fs, args, stderr, classifyUsage); err != nil {
		return nil, err
	}
	f.place.parsed(fs)
	f.stdin = fs.NArg() == 1 && fs.Arg(0) == "-"
	f.text = strings.Join(fs.Args(), " ")
	return &f, nil
}

func runClassify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseClassifyFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := f.place.loadConfig()
	if err != nil {
		return err
	}
	dir, err := f.place.headsDir(cfg)
	if err != nil {
		return err
	}
	h, err := classifier.LoadHeads(dir)
	if err != nil {
		return err
	}
	var rc *onnx.RemoteConfig
	if f.tier == 2 {
		// The rules' engine serves the rules' heads: with --heads, only
		// --encoder-url names one.
		if rc, err = f.enc.remote(cfg, f.place.heads == ""); err != nil {
			return err
		}
	}
	m, closeTier, err := loadTier(h, f.place.place(cfg), f.tier, rc)
	if err != nil {
		return err
	}
	defer closeTier()
	enc := json.NewEncoder(stdout)
	if f.stdin {
		return classifyLines(ctx, m, os.Stdin, enc)
	}
	var r classifier.Result
	if err := m.Classify(ctx, f.text, &r); err != nil {
		return err
	}
	return enc.Encode(r)
}

// classifyLines classifies each JSONL input line of in and writes one
// result per line.
func classifyLines(ctx context.Context, m classifier.Classifier, in io.Reader, enc *json.Encoder) error {
	var r classifier.Result
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		text, err := inputLine(sc.Bytes())
		if err != nil {
			return fmt.Errorf("stdin:%d: %w", line, err)
		}
		if err := m.Classify(ctx, text, &r); err != nil {
			return fmt.Errorf("stdin:%d: %w", line, err)
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return sc.Err()
}

// inputLine reads one JSONL input: an object with "text", or a JSON string.
func inputLine(b []byte) (string, error) {
	var s string
	if json.Unmarshal(b, &s) == nil {
		return s, nil
	}
	var o struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(b, &o); err != nil || o.Text == nil {
		return "", fmt.Errorf(`want {"text": ...} or a JSON string`)
	}
	return *o.Text, nil
}

// loadTier loads tier 1 (static) or tier 2 (ONNX) of h, with the model
// files of m, and what releases it. With rc, tier 2's encoder is that
// remote engine (the model directory gives its manifest only).
func loadTier(h *classifier.Heads, m modelsPlace, tier int, rc *onnx.RemoteConfig) (classifier.Classifier, func(), error) {
	if err := lifecycle.NeedFiles(h, tier, m); err != nil {
		return nil, nil, err
	}
	mdir := m.Dir
	switch tier {
	case 1:
		m, err := static.Load(h, mdir)
		if err != nil {
			return nil, nil, err
		}
		return m, func() {}, nil
	case 2:
		c, err := loadTier2(h, mdir, rc)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}
	return nil, nil, fmt.Errorf("--tier %d: want 1 or 2", tier)
}

// loadTier2 loads tier 2 of h for offline work: in process, or with rc on
// that remote engine.
func loadTier2(h *classifier.Heads, modelsDir string, rc *onnx.RemoteConfig) (*onnx.Classifier, error) {
	if rc != nil {
		return onnx.LoadRemote(h, modelsDir, *rc, onnx.Options{})
	}
	return onnx.Load(h, modelsDir, onnx.Options{})
}
