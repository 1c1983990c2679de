package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/classifier/static"
)

// modelsDir is where setup puts model files: $TRIAGE_MODELS, or var/models
// under the working directory.
func modelsDir() string {
	if d := os.Getenv("TRIAGE_MODELS"); d != "" {
		return d
	}
	return filepath.Join("var", "models")
}

func runClassify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage classify", flag.ContinueOnError)
	headsDir := fs.String("heads", "models/heads/subjects", "heads artifact directory")
	tier := fs.Int("tier", 1, "tier to run: 1 or 2 (the heads' tier-2 head on the ONNX encoder)")
	mdir := fs.String("models", modelsDir(), "directory of model files built by setup ($TRIAGE_MODELS)")
	if err := parseWithArgs(fs, args, stderr, "usage: triage classify [--heads DIR] [--tier 1|2] TEXT...\n       triage classify [--heads DIR] -    (JSONL on stdin: {\"text\":...} or a JSON string per line; one result per line)"); err != nil {
		return err
	}
	h, err := classifier.LoadHeads(*headsDir)
	if err != nil {
		return err
	}
	m, closeTier, err := loadTier(h, *mdir, *tier)
	if err != nil {
		return err
	}
	defer closeTier()
	enc := json.NewEncoder(stdout)
	var r classifier.Result
	if fs.NArg() == 1 && fs.Arg(0) == "-" {
		sc := bufio.NewScanner(os.Stdin)
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
	if err := m.Classify(ctx, strings.Join(fs.Args(), " "), &r); err != nil {
		return err
	}
	return enc.Encode(r)
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

// loadTier loads tier 1 (static) or tier 2 (ONNX) of h, and what releases
// it.
func loadTier(h *classifier.Heads, mdir string, tier int) (classifier.Classifier, func(), error) {
	switch tier {
	case 1:
		m, err := static.Load(h, mdir)
		if err != nil {
			return nil, nil, err
		}
		return m, func() {}, nil
	case 2:
		c, err := onnx.Load(h, mdir, onnx.Options{})
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}
	return nil, nil, fmt.Errorf("--tier %d: want 1 or 2", tier)
}
