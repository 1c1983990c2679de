package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/static"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/models"
)

// TestTrainAndClassifyCLI trains each method on a small synthetic dataset
// (a real tokenizer, a small random table), then classifies with the
// artifact from the command line, one text and JSONL on stdin.
func TestTrainAndClassifyCLI(t *testing.T) {
	tokPath, err := tokenize.ModuleFile()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.LoadWordPiece(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The models directory the artifacts resolve their tokenizer in.
	raw, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "tokenizer"), 0o755)
	tokPath = filepath.Join(dir, "tokenizer", "bert-base-uncased.json")
	if err := os.WriteFile(tokPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	vecs := make([][]float32, tok.VocabSize()+1)
	w := make([]float32, len(vecs))
	for i := range vecs {
		vecs[i] = make([]float32, 16)
		for j := range vecs[i] {
			vecs[i][j] = float32(rng.NormFloat64())
		}
		w[i] = 1
	}
	tb, err := models.NewTable(models.Manifest{Name: "tiny", Method: "glove"}, tok.VocabSize(), []string{"zzyzx"}, vecs, w)
	if err != nil {
		t.Fatal(err)
	}
	tablePath := filepath.Join(dir, "tiny.tbl")
	if _, err := tb.Quantize(models.QuantI8).WriteFile(tablePath); err != nil {
		t.Fatal(err)
	}
	topics := map[string][]string{"music": {"guitar", "drums", "melody", "chord", "song"}, "sport": {"soccer", "goal", "referee", "stadium", "match"}}
	filler := []string{"the", "a", "is", "and", "what", "about", "my", "how", "do", "i"}
	var data bytes.Buffer
	for i := range 400 {
		label := []string{"music", "sport"}[i%2]
		var ws []string
		for range 5 {
			ws = append(ws, filler[rng.IntN(len(filler))])
		}
		ws = append(ws, topics[label][rng.IntN(5)])
		fmt.Fprintf(&data, `{"text":%q,"label":%q,"realism":"synthetic"}`+"\n", strings.Join(ws, " "), label)
	}
	dataPath := filepath.Join(dir, "train.jsonl")
	if err := os.WriteFile(dataPath, data.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"tuned", "softmax", "centroid"} {
		t.Run(method, func(t *testing.T) {
			out := filepath.Join(dir, "heads-"+method)
			var stdout, stderr bytes.Buffer
			args := []string{"--data", dataPath, "--eval", dataPath, "--out", out, "--method", method,
				"--table", tablePath, "--tokenizer", tokPath, "--epochs", "5", "--lr", "0.5", "--bigrams", "32", "--holdout", "0.2"}
			if err := runTrain(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("train: %v\n%s", err, stderr.String())
			}
			if !strings.Contains(stdout.String(), "realism=synthetic") {
				t.Fatalf("train report lacks the realism slice:\n%s", stdout.String())
			}
			h, err := classifier.LoadHeads(out)
			if err != nil {
				t.Fatal(err)
			}
			if h.Tier1.Training.Method != method || h.Tier1.Training.DataSHA256 == "" || h.Tier1.Head.Temperature <= 0 {
				t.Fatalf("heads provenance: %+v", h.Tier1.Training)
			}
			// Frozen random vectors dilute the one topic word among five
			// fillers; tuning learns it.
			if acc := h.Tier1.Eval["train.jsonl"].Accuracy; acc < map[string]float64{"tuned": 0.95, "softmax": 0.75, "centroid": 0.6}[method] {
				t.Fatalf("%s: accuracy %.3f on its own easy data", method, acc)
			}
			// One text from the command line.
			stdout.Reset()
			t.Setenv("TRIAGE_MODELS", dir)
			if err := runClassify(context.Background(), []string{"--heads", out, "what about the guitar melody"}, &stdout, &stderr); err != nil {
				t.Fatalf("classify: %v", err)
			}
			var r classifier.Result
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.Tier != 1 || len(r.Top) != 2 {
				t.Fatalf("classify printed %q (%v)", stdout.String(), err)
			}
			if method != "centroid" && r.Class != "music" {
				t.Fatalf("classify = %+v, want music", r)
			}
		})
	}
	// Folding is exact: one tuned model stored as vectors or as class
	// contributions gives the same probabilities (float32 storage, so only
	// rounding differs).
	probs := map[bool][]float32{}
	for _, fold := range []bool{false, true} {
		out := filepath.Join(dir, fmt.Sprintf("fold-%v", fold))
		args := []string{"--data", dataPath, "--out", out, "--table", tablePath, "--tokenizer", tokPath, "--epochs", "3",
			"--ensemble", "1", "--quant", "f32", "--bigrams", "64", fmt.Sprintf("--fold=%v", fold)}
		var so, se bytes.Buffer
		if err := runTrain(context.Background(), args, &so, &se); err != nil {
			t.Fatalf("train --fold=%v: %v\n%s", fold, err, se.String())
		}
		h, err := classifier.LoadHeads(out)
		if err != nil {
			t.Fatal(err)
		}
		m, err := static.Load(h, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{"the guitar and the goal", "my referee", "zzyzx what about it"} {
			p := make([]float32, 2)
			m.Probs(text, p)
			probs[fold] = append(probs[fold], p...)
		}
	}
	for i := range probs[false] {
		if d := probs[false][i] - probs[true][i]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("folded probabilities %v differ from the unfolded %v", probs[true], probs[false])
		}
	}

	// --structure, --confidence and --first-lines: an artifact whose
	// encoder record says so, which classify loads; without a source
	// column, --confidence says what it needs.
	var sourced bytes.Buffer
	for i := range 300 {
		label := []string{"music", "sport"}[i%2]
		title := fmt.Sprintf("about the %s and more", topics[label][i%5])
		fmt.Fprintf(&sourced, `{"text":%q,"label":%q,"source":"s%d"}`+"\n", title+"\n\n    "+filler[i%10]+" "+topics[label][(i+1)%5], label, i%3)
	}
	sourcedPath := filepath.Join(dir, "sourced.jsonl")
	if err := os.WriteFile(sourcedPath, sourced.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ data, wantErr string }{{sourcedPath, ""}, {dataPath, "source column"}} {
		out := filepath.Join(dir, "heads-options-"+filepath.Base(tc.data))
		args := []string{"--data", tc.data, "--out", out, "--table", tablePath, "--tokenizer", tokPath, "--epochs", "3",
			"--ensemble", "1", "--bigrams", "16", "--structure", "--confidence", "--first-lines"}
		var so, se bytes.Buffer
		err := runTrain(context.Background(), args, &so, &se)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("train --confidence on %s = %v, want an error naming the %s", tc.data, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("train --structure --confidence --first-lines: %v\n%s", err, se.String())
		}
		h, err := classifier.LoadHeads(out)
		if err != nil {
			t.Fatal(err)
		}
		enc := h.Tier1.Encoder
		if !enc.Structure || enc.Confidence == nil || h.Tier1.Training.Params["first_lines"] != true {
			t.Fatalf("encoder %+v, params %v", enc, h.Tier1.Training.Params)
		}
		if _, err := static.Load(h, dir); err != nil {
			t.Fatal(err)
		}
	}

	// JSONL on stdin, one result per line; a bad line names itself.
	stdin := filepath.Join(dir, "in.jsonl")
	os.WriteFile(stdin, []byte(`{"text":"the referee and the goal"}`+"\n"+`"guitar chord"`+"\n"), 0o644)
	f, _ := os.Open(stdin)
	defer f.Close()
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	var stdout, stderr bytes.Buffer
	t.Setenv("TRIAGE_MODELS", dir)
	if err := runClassify(context.Background(), []string{"--heads", filepath.Join(dir, "heads-tuned"), "-"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"class":"sport"`) || !strings.Contains(lines[1], `"class":"music"`) {
		t.Fatalf("classify - printed:\n%s", stdout.String())
	}
	if _, err := inputLine([]byte(`{"txt":1}`)); err == nil {
		t.Fatal("inputLine accepted a line without text")
	}
	// Usage errors.
	if err := runTrain(context.Background(), []string{"--out", dir}, &stdout, &stderr); err != errUsage {
		t.Fatalf("train without --data = %v, want a usage error", err)
	}
}

// TestTrainTeacherFlags: the distillation flags need --teacher, and a
// teacher trains tier 1's tuned method only.
func TestTrainTeacherFlags(t *testing.T) {
	base := []string{"--data", "d.jsonl", "--out", "o"}
	for _, c := range []struct {
		args []string
		want string // in stderr; "" parses
	}{
		{[]string{"--unlabeled", "u.jsonl"}, "need --teacher"},
		{[]string{"--hard-weight", "0.5"}, "need --teacher"},
		{[]string{"--teacher-temperature", "2"}, "need --teacher"},
		{[]string{"--teacher", "h", "--method", "softmax"}, "tuned method"},
		{[]string{"--teacher", "h", "--tier", "2"}, "tuned method"},
		{[]string{"--teacher", "h", "--unlabeled", "a.jsonl, b.csv", "--hard-weight", "0.3"}, ""},
	} {
		var stderr bytes.Buffer
		f, err := parseTrainFlags(append(append([]string{}, base...), c.args...), &stderr)
		if c.want == "" {
			if err != nil || f.teacher != "h" || f.hardWeight != 0.3 || f.teacherT != 1 {
				t.Errorf("parseTrainFlags(%q) = %+v, %v (%s)", c.args, f, err, stderr.String())
			}
			continue
		}
		if err != errUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("parseTrainFlags(%q) = %v, stderr %q, want a usage error saying %q", c.args, err, stderr.String(), c.want)
		}
	}
	var stderr bytes.Buffer
	err := runTrain(context.Background(), append(base, "--teacher", filepath.Join(t.TempDir(), "absent")), io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("train --teacher absent: %v", err)
	}
}
