package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
)

// sampleLines writes every every-th line of src (up to n) to a file in
// dir named name.
func sampleLines(t *testing.T, src, dir, name string, every, n int) string {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b bytes.Buffer
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for i, k := 0, 0; sc.Scan() && k < n; i++ {
		if i%every == 0 {
			b.Write(sc.Bytes())
			b.WriteByte('\n')
			k++
		}
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEncodeServeTrainCLI: a tier-2 head trained with
// --encoder-url against a real "triage encode serve" process is the head
// trained with the encoder in process, weight for weight (the engine's
// vectors are the local encoder's, bit for bit); eval, calibrate and
// classify take the same flag and give what they give in process.
func TestEncodeServeTrainCLI(t *testing.T) {
	skipHeavyUnderRace(t)
	heads, models := defaultHeadsOrSkip(t)
	// --batch 1: a batched Run's vectors may differ from a lone Run's in
	// the last bits (the graph's sums in another order), and training's
	// concurrent calls could form batches; local training runs each text
	// alone.
	enc := startEncoder(t, heads, models, "--batch", "1")
	url := "http://" + enc.addr
	dir := t.TempDir()
	train := sampleLines(t, filepath.Join(filepath.Dir(devSet(t)), "train.jsonl"), dir, "train.jsonl", 60, 1000)
	dev := sampleLines(t, devSet(t), dir, "dev.jsonl", 20, 1000)

	// A models directory of links to the real files, so that nothing is
	// read from or written to a shared embedding cache.
	mdir := filepath.Join(dir, "models")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"use-int8", "ort", "tokenizer", "tables"} {
		if err := os.Symlink(filepath.Join(models, sub), filepath.Join(mdir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1704067200")
	trained := map[string]*classifier.Heads{}
	for _, mode := range []string{"local", "remote"} {
		out := filepath.Join(dir, mode)
		args := []string{"--tier", "2", "--data", train, "--out", out, "--name", "subjects-t2", "--models", mdir,
			"--encoder", filepath.Join(mdir, "use-int8"), "--head", "softmax", "--head-epochs", "20", "--holdout", "0.2", "--threads", "2"}
		if mode == "remote" {
			args = append(args, "--encoder-url", url)
		}
		var stdout, stderr bytes.Buffer
		if err := runTrain(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("train --tier 2 (%s): %v\n%s", mode, err, stderr.String())
		}
		h, err := classifier.LoadHeads(out)
		if err != nil {
			t.Fatal(err)
		}
		trained[mode] = h
	}
	l, r := trained["local"].Tier2, trained["remote"].Tier2
	if !reflect.DeepEqual(l.Head, r.Head) {
		t.Errorf("the head trained on encode serve's vectors differs from the one trained in process (temperature %v vs %v)", r.Head.Temperature, l.Head.Temperature)
	}
	if r.Encoder.Model != "use-int8" || r.Encoder.ModelSHA256 != "" || r.Encoder.MaxTokens != 128 {
		t.Errorf("remote-trained encoder entry = %+v, want model use-int8, no sha256 (only the engine knows it), max_tokens 128", r.Encoder)
	}

	// eval and calibrate of the remote-trained heads, against the
	// engine and in process: the same figures.
	remoteHeads := filepath.Join(dir, "remote")
	var outs [2]string
	for i, extra := range [][]string{nil, {"--encoder-url", url}} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--heads", remoteHeads, "--models", mdir, "--tier", "2", "--data", dev, "--json"}, extra...)
		if err := runEval(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("eval %v: %v\n%s", extra, err, stderr.String())
		}
		var rep struct {
			Accuracy float64 `json:"accuracy"`
			N        int     `json:"n"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Accuracy < 0.5 {
			t.Fatalf("eval %v: accuracy %v (%v), want a head that learnt something", extra, rep.Accuracy, err)
		}
		var cal bytes.Buffer
		args = append([]string{"--heads", remoteHeads, "--models", mdir, "--tier", "2", "--data", dev, "--json", "--folds", "2"}, extra...)
		if err := runCalibrate(context.Background(), args, &cal, &stderr); err != nil {
			t.Fatalf("calibrate %v: %v\n%s", extra, err, stderr.String())
		}
		outs[i] = stripLatency(t, stdout.Bytes()) + cal.String()
	}
	if outs[0] != outs[1] {
		t.Errorf("eval and calibrate differ with --encoder-url from in process:\nlocal:  %.600s\nremote: %.600s", outs[0], outs[1])
	}

	// classify, one text and JSONL on stdin's path alike.
	var cls [2]string
	for i, extra := range [][]string{nil, {"--encoder-url", url}} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--heads", remoteHeads, "--models", mdir, "--tier", "2"}, extra...)
		args = append(args, "WHY does my   Go build fail with an import cycle")
		if err := runClassify(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("classify %v: %v\n%s", extra, err, stderr.String())
		}
		cls[i] = stdout.String()
	}
	// The tokens too: one text a call, the engine's usage counts them.
	if cls[0] != cls[1] || !strings.Contains(cls[0], `"tier":2`) {
		t.Errorf("classify: in process %s, with --encoder-url %s: want the same tier-2 result", cls[0], cls[1])
	}

	// An engine serving another model is refused, naming both.
	var stderr bytes.Buffer
	err := runClassify(context.Background(), []string{"--heads", remoteHeads, "--models", mdir, "--tier", "2", "--encoder-url", url, "--encoder-model", "bge-small-en-v1.5", "x"}, &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "bge-small-en-v1.5") || !strings.Contains(err.Error(), "use-lite-int8") {
		t.Errorf("classify against an engine serving another model: %v, want a refusal naming both models", err)
	}
}

// stripLatency drops an eval JSON report's latency, which is the only
// figure that depends on where the encoder runs.
func stripLatency(t *testing.T, b []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("eval --json: %v\n%s", err, b)
	}
	delete(m, "latency")
	out, _ := json.Marshal(m)
	return string(out)
}

// TestEncodeServeABCLI: ab takes --encoder-url for every side that runs
// tier 2 (heads judged on classes, the rules' decision judged on routes)
// and gives, against a real "triage encode serve" process, the figures it
// gives with tier 2 in process.
func TestEncodeServeABCLI(t *testing.T) {
	skipHeavyUnderRace(t)
	heads, models := defaultHeadsOrSkip(t)
	enc := startEncoder(t, heads, models, "--batch", "1") // one text a Run, as in process
	dev := sampleLines(t, devSet(t), t.TempDir(), "dev.jsonl", 40, 1000)
	cfg := filepath.Join(repoRoot(), "triage.yaml")
	for k, sides := range [][2]string{{"tier2:" + heads, headsCascade + ":" + heads}, {"rules", "rules-tier1"}} {
		var outs [2]string
		for i, extra := range [][]string{nil, {"--encoder-url", "http://" + enc.addr}} {
			args := append([]string{"--a", sides[0], "--b", sides[1], "--config", cfg, "--models", models, "--data", dev, "--bootstrap", "100", "--json"}, extra...)
			var stdout, stderr bytes.Buffer
			if err := runAB(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("ab %v: %v\n%s", args, err, stderr.String())
			}
			var m map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &m); err != nil {
				t.Fatalf("ab --json: %v\n%s", err, stdout.Bytes())
			}
			delete(m, "latency_a") // where the encoder runs shows only here
			delete(m, "latency_b")
			if a, _ := m["a"].(map[string]any); a != nil {
				delete(a, "latency")
			}
			if b, _ := m["b"].(map[string]any); b != nil {
				delete(b, "latency")
			}
			out, _ := json.Marshal(m)
			outs[i] = string(out)
		}
		if outs[0] != outs[1] {
			t.Errorf("ab --a %s --b %s differs with --encoder-url from in process:\nlocal:  %.800s\nremote: %.800s", sides[0], sides[1], outs[0], outs[1])
		}
		if !strings.Contains(outs[0], `"n":112`) {
			t.Errorf("ab --a %s --b %s: want 112 items judged: %.300s", sides[0], sides[1], outs[0])
		}
		// The engine encoded them: tier 2 and the cascade's tier 2 every
		// text (224), the rules those they escalate.
		encoded := encodedTexts(t, enc)
		if k == 0 && encoded != 224 || k == 1 && encoded <= 224 {
			t.Errorf("after ab --a %s --b %s the engine has encoded %d texts, want tier 2's", sides[0], sides[1], encoded)
		}
	}
	// The engine's settings without the engine are a usage error.
	if err := runAB(context.Background(), []string{"--a", "tier2", "--b", "tier1", "--data", dev, "--encoder-ca", "ca.pem"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "need --encoder-url") {
		t.Errorf("ab --encoder-ca without --encoder-url: %v, want a refusal", err)
	}
}

// encodedTexts is how many texts the encode serve process p has encoded,
// from its /metrics.
func encodedTexts(t *testing.T, p *proc) int {
	t.Helper()
	resp, err := http.Get(p.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `triage_encoder_texts_total{outcome="ok"} `); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("/metrics: %q", sc.Text())
			}
			return n
		}
	}
	return 0
}
