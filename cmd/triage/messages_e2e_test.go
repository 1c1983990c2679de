package main

// What the commands say when a new user gets something wrong, with the
// built binary: each message is asserted, with its exit status.

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// Every command that reads a dataset refuses an empty one, with exit
// status 2, and a CSV file without the label column names the column it
// looked for.
func TestEmptyDatasetsAreRefused(t *testing.T) {
	root, _ := filepath.Abs(repoRoot())
	models := testenv.Models(t, "tables/subjects-tier1.tbl", "tables/glove-100d-i8.tbl", "tokenizer/bert-base-uncased.json")
	env := []string{"TRIAGE_MODELS=" + models}
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.jsonl")
	writeFile(t, empty, "\n")
	cfg := filepath.Join(root, "triage.yaml")
	for _, args := range [][]string{
		{"eval", "--heads", filepath.Join(root, "models", "heads", "subjects"), "--data", empty},
		{"eval", "--rules", filepath.Join(root, "rules.yaml"), "--config", cfg, "--data", empty},
		{"rules", "check", "--config", cfg, "--data", empty},
		{"ab", "--a", "tier1", "--b", "rules", "--config", cfg, "--data", empty},
		{"calibrate", "--config", cfg, "--data", empty},
		{"train", "--data", empty, "--out", filepath.Join(dir, "heads")},
	} {
		code, stdout, stderr := runIn(t, dir, env, args...)
		if want := empty + ": no rows: the dataset is empty"; code != 2 || !strings.Contains(stderr, want) || strings.Contains(stdout, "NaN") {
			t.Errorf("triage %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, stderr, want)
		}
	}
	// A label map that drops every row leaves nothing to judge.
	data := labelledSample(t, 5)
	lm := filepath.Join(dir, "map.yaml")
	writeFile(t, lm, "law: \"\"\nother: \"\"\ncomputer science: \"\"\n")
	code, _, stderr := runIn(t, dir, env, "eval", "--heads", filepath.Join(root, "models", "heads", "subjects"), "--data", data, "--label-map", lm)
	if want := "the label map " + lm + " drops every row: no rows: the dataset is empty"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("eval with a label map that drops everything: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
	// A CSV file without the label column.
	csv := filepath.Join(dir, "posts.csv")
	writeFile(t, csv, "question,topic\n\"Why does my list comprehension fail?\",computer science\n")
	code, _, stderr = runIn(t, dir, env, "eval", "--heads", filepath.Join(root, "models", "heads", "subjects"), "--data", csv, "--text-col", "question")
	if want := csv + `: no "label" column to take the labels from (its columns: question, topic); name the label column with --label-col`; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("eval of a CSV without the label column: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
	code, stdout, stderr := runIn(t, dir, env, "eval", "--heads", filepath.Join(root, "models", "heads", "subjects"), "--data", csv, "--text-col", "question", "--label-col", "topic")
	if code != 0 || !strings.Contains(stdout, "1 items") {
		t.Errorf("eval --label-col topic: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// eval names the heads-only cascade for what it is (heads-cascade), and
// asks which cascade "--tier cascade" means. ab compares like with like,
// and says what it judged.
func TestEvalAndABNameWhatTheyJudge(t *testing.T) {
	root, _ := filepath.Abs(repoRoot())
	models := testenv.Models(t, "tables/subjects-tier1.tbl")
	env := []string{"TRIAGE_MODELS=" + models}
	heads := filepath.Join(root, "models", "heads", "subjects")
	data := labelledSample(t, 10)
	code, _, stderr := runIn(t, root, env, "eval", "--heads", heads, "--tier", "cascade", "--data", data)
	if want := "--tier cascade: which cascade? --tier heads-cascade is the gateway's decision over one route per class of the heads, at their floors, without your rules;\n  your rules' decision is --rules FILE"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("eval --tier cascade: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
	code, _, stderr = runIn(t, root, env, "eval", "--rules", "rules.yaml", "--tier", "2", "--data", data)
	if want := "--tier 2 with --rules: a rule set decides as the gateway does"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("eval --rules --tier 2: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
	code, _, stderr = runIn(t, root, env, "ab", "--a", "tier2", "--b", "cascade", "--data", data)
	if want := `--a and --b are not alike: "tier2" is tier 2 of heads, judged on classes, and "cascade" a rule set, judged on routes`; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("ab tier2 against rules: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
	code, stdout, stderr := runIn(t, root, env, "ab", "--a", "tier1", "--b", "cascade", "--data", data, "--bootstrap", "20")
	for _, want := range []string{
		"A: tier 1 of models/heads/subjects, judged through rules rules.yaml (their routes and floors, without tier 2)\n",
		"B: rules rules.yaml (version ",
		"judged on routes: an item is right when the route taken covers its label, or the default pool takes a label no route covers\n",
		"10 items; the same pool for ",
	} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("ab tier1 against cascade: exit %d, stdout lacks %q:\n%s\n%s", code, want, stdout, stderr)
		}
	}
	code, stdout, stderr = runIn(t, root, env, "ab", "--a", "tier1", "--b", "heads:"+heads, "--data", data, "--bootstrap", "20")
	for _, want := range []string{"A: tier 1 of models/heads/subjects\n", "judged on classes: an item is right when the top class is its label\n", "10 items; the same top class for 100.0% (0 differ)"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("ab tier1 against heads: exit %d, stdout lacks %q:\n%s\n%s", code, want, stdout, stderr)
		}
	}
}

// An environment variable that looks like an override but sets nothing is
// named, with what it probably meant, at --check and at start.
func TestServeWarnsAboutUnusedEnvironment(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "triage.yaml")
	writeFile(t, cfg, "pools: [{name: a, model: m, replicas: [{url: 'http://127.0.0.1:9'}]}]\n")
	code, _, stderr := runIn(t, filepath.Dir(cfg), []string{"TRIAGE_LISTN=0.0.0.0:9999", "TRIAGE_SHARED=/x", "TRIAGE_REQUIRE_ORT=1"}, "serve", "--config", cfg, "--check")
	if want := "triage serve: warning: TRIAGE_LISTN is set but sets no config key, so it is ignored (did you mean TRIAGE_LISTEN?)"; code != 0 || !strings.Contains(stderr, want) {
		t.Errorf("serve --check: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
	if strings.Contains(stderr, "TRIAGE_SHARED") || strings.Contains(stderr, "TRIAGE_REQUIRE_ORT") {
		t.Errorf("serve --check warns about the project's own variables:\n%s", stderr)
	}
	// At start, in the log (here a start that then fails: the address is
	// taken).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr = runIn(t, filepath.Dir(cfg), []string{"TRIAGE_LISTN=0.0.0.0:9999"}, "serve", "--config", cfg, "--listen", ln.Addr().String())
	if want := `"level":"WARN","msg":"TRIAGE_LISTN is set but sets no config key, so it is ignored (did you mean TRIAGE_LISTEN?)"`; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("serve: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
}

// A taken address says which, and how to pick another; serve --sim says
// where it listens once it does.
func TestServeListenMessages(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	_, port, _ := net.SplitHostPort(taken)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "triage.yaml")
	replica := freeAddr(t)
	writeFile(t, cfg, "pools: [{name: a, model: m, replicas: [{url: 'http://"+replica+"'}]}]\n")
	code, _, stderr := runIn(t, dir, nil, "serve", "--config", cfg, "--listen", taken)
	next := "127.0.0.1:" + portPlus(t, port)
	for _, want := range []string{
		"listen on " + taken + " (set by --listen): the address is already in use: another triage, or another server, listens there.",
		"pick another address: --listen " + next + ", TRIAGE_LISTEN=" + next + ", or listen: in the config (with make run: PORT=" + portPlus(t, port) + " make run)",
	} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("serve on a taken address: exit %d, stderr lacks %q:\n%s", code, want, stderr)
		}
	}
	code, _, stderr = runIn(t, dir, []string{"TRIAGE_LISTEN=" + taken}, "serve", "--config", cfg)
	if want := "listen on " + taken + " (set by $TRIAGE_LISTEN)"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("serve on a taken TRIAGE_LISTEN: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}

	// serve --sim, with a replica URL whose address is taken.
	simCfg := filepath.Join(dir, "sim.yaml")
	writeFile(t, simCfg, "pools: [{name: a, model: m, replicas: [{url: 'http://"+taken+"'}]}]\n")
	code, _, stderr = runIn(t, dir, nil, "serve", "--config", simCfg, "--sim", "--listen", freeAddr(t))
	if want := "--sim: the simulated replica of pool a cannot listen on " + taken + ", its URL in the config: the address is already in use (another triage serve --sim or make run?)"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("serve --sim on a taken replica address: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}

	addr := freeAddr(t)
	_, gwPort, _ := net.SplitHostPort(addr)
	gw := start(t, "gateway", "serve", "--config", cfg, "--sim", "--listen", addr)
	gw.addr = addr
	if err := gw.waitReady("/healthz", 20*time.Second); err != nil {
		t.Fatalf("gateway not ready: %v\n%s", err, gw.stderr.String())
	}
	testenv.WaitWithin(t, 5*time.Second, "the banner", func() (bool, string) {
		s := gw.stderr.String()
		return strings.Contains(s, "triage: gateway on http://localhost:"+gwPort+" (config "+cfg+", replicas simulated); try:\n  curl -si http://localhost:"+gwPort+"/v1/chat/completions") &&
			strings.Contains(s, `-d '{"model":"m","messages"`), s
	})
}

func portPlus(t *testing.T, port string) string {
	t.Helper()
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(n + 1)
}

// make run's PORT moves the gateway, and a PORT that is not a port is
// refused (scripts/run.sh).
func TestRunScriptPort(t *testing.T) {
	root, _ := filepath.Abs(repoRoot())
	dir := t.TempDir()
	fake := filepath.Join(dir, "triage")
	writeFile(t, fake, "#!/bin/sh\necho \"$@\"\n")
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(env ...string) (string, error) {
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "run.sh"))
		cmd.Env = append(childEnv(), append(env, "BIN="+fake)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("PORT=8181"); err != nil || out != "serve --config triage.yaml --sim --listen 127.0.0.1:8181\n" {
		t.Errorf("run.sh with PORT=8181: %v %q", err, out)
	}
	if out, err := run("CONFIG=examples/subjects/triage.yaml"); err != nil || out != "serve --config examples/subjects/triage.yaml --sim\n" {
		t.Errorf("run.sh with CONFIG: %v %q", err, out)
	}
	if out, err := run("PORT=eighty"); err == nil || !strings.Contains(out, "run: PORT=eighty is not a port number (PORT=8081 make run)") {
		t.Errorf("run.sh with PORT=eighty: %v %q", err, out)
	}
}

func TestSmallCLIMessages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	enc := filepath.Join(dir, "enc")
	if err := os.MkdirAll(enc, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(enc, "model.onnx"), "not really a model")
	writeFile(t, filepath.Join(enc, "encoder.json"), `{"format": 1, "name": "tiny", "input": "use", "dims": 4, "max_tokens": 8, "model": "model.onnx",
"model_sha256": "0000000000000000000000000000000000000000000000000000000000000000", "tokenizer": "vocab.json"}`)
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"--version"}, 0, "\n", ""},
		{[]string{"-v"}, 0, "\n", ""},
		{[]string{"models", "info", filepath.Join(dir, "nope.tbl")}, 1, "", "triage models: stat " + filepath.Join(dir, "nope.tbl") + ": no such file or directory\n"},
		{[]string{"models", "info", enc}, 0, `"kind": "tier-2 encoder (ONNX)"`, ""},
		{[]string{"models", "info", enc}, 0, `"dims": 4`, ""},
		{[]string{"models", "info", enc}, 0, `"bytes": 18,`, ""},
		{[]string{"models", "info", enc}, 0, `"verifies": false`, ""},
		{[]string{"models", "info", enc}, 0, `"missing": true`, ""},
		{[]string{"models", "info", dir}, 1, "", "a directory without encoder.json, so not a tier-2 model directory"},
		{[]string{"rules", "check", "--help"}, 0, "", "usage: triage rules check [--config FILE] [--data FILE.jsonl] [RULES.yaml]"},
		{[]string{"rules", "check", "a.yaml", "b.yaml"}, 2, "", "one rules file at most, got 2"},
		{[]string{"classify", "--help"}, 0, "", "The arguments are joined\nwith spaces into that one text"},
	} {
		code, stdout, stderr := runIn(t, dir, nil, tc.args...)
		if code != tc.code || !strings.Contains(stdout, tc.out) || !strings.Contains(stderr, tc.err) || strings.Contains(stderr, "models: models:") {
			t.Errorf("triage %s: exit %d, stdout %q, stderr %q; want exit %d, %q and %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.out, tc.err)
		}
	}
}

// Setup without the labelled data the default heads are built from fails,
// saying what is missing and where it was expected, unless the built table
// is there and verifies (scripts/build-heads.sh).
func TestBuildHeadsWithoutSharedData(t *testing.T) {
	root, _ := filepath.Abs(repoRoot())
	nowhere := filepath.Join(t.TempDir(), "no-shared")
	run := func(env ...string) (string, error) {
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "build-heads.sh"))
		cmd.Env = append(childEnv(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	empty := t.TempDir()
	out, err := run("TRIAGE_SHARED="+nowhere, "TRIAGE_MODELS="+empty)
	for _, want := range []string{
		"build-heads: " + filepath.Join(empty, "tables", "subjects-tier1.tbl") + " is missing, and it cannot be built:",
		"the labelled data it is trained on is not there: no train.jsonl dev.jsonl in " + filepath.Join(nowhere, "datasets", "subjects"),
		"(TRIAGE_SHARED is " + nowhere + ")",
		"set TRIAGE_SHARED to the directory that holds datasets/subjects/train.jsonl and dev.jsonl, and run setup again",
	} {
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("build-heads without the data: %v, output lacks %q:\n%s", err, want, out)
		}
	}
	models := testenv.Models(t, "tables/subjects-tier1.tbl")
	out, err = run("TRIAGE_SHARED="+nowhere, "TRIAGE_MODELS="+models)
	if err != nil || !strings.Contains(out, "subjects-tier1.tbl is there and verifies") {
		t.Errorf("build-heads without the data, the table built: %v\n%s", err, out)
	}
}
