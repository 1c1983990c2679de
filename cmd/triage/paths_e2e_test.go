package main

// The commands a new user runs first, with the built binary, from the
// repository root and from an example's folder: every relative path
// resolves against the file that names it (models_dir and rules: against
// the config, heads: against the rules file) or, on the command line,
// against the working directory.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/config"
)

// runIn runs triage in dir with env added to childEnv, and returns its exit
// code and output.
func runIn(t *testing.T, dir string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, triageBin, args...)
	cmd.Dir = dir
	cmd.Env = append(childEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running triage %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("triage %s did not exit within 2 minutes", strings.Join(args, " "))
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// labelledSample writes n labelled prompts (JSONL) to a temporary file.
func labelledSample(t *testing.T, n int) string {
	t.Helper()
	texts := []struct{ text, label string }{
		{"Why does my Python list comprehension raise a TypeError on line %d?", "computer science"},
		{"Can my landlord keep deposit number %d for normal wear and tear?", "law"},
		{"What is a good recipe for banana bread with %d bananas?", "other"},
		{"How do I center div number %d with flexbox in CSS?", "computer science"},
		{"Is it legal for my employer to fire me after %d sick days?", "law"},
	}
	var b strings.Builder
	for i := range n {
		x := texts[i%len(texts)]
		fmt.Fprintf(&b, `{"text":%q,"label":%q,"source":"s%d"}`+"\n", fmt.Sprintf(x.text, i), x.label, i%2)
	}
	path := filepath.Join(t.TempDir(), "sample.jsonl")
	writeFile(t, path, b.String())
	return path
}

// TestEveryCommandFromAnywhere runs the commands of the quickstart and of
// "knowing how well it routes" with every shipped config, from the
// repository root and from the example's own folder.
func TestEveryCommandFromAnywhere(t *testing.T) {
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	models := testenv.Models(t, "tables/subjects-tier1.tbl", "tokenizer/bert-base-uncased.json")
	if models != filepath.Join(root, "var", "models") {
		// The examples name ../../var/models; the root config, the default.
		t.Skipf("the model files are in %s, not %s, where the shipped configs look for them", models, filepath.Join(root, "var", "models"))
	}
	data := labelledSample(t, 60)
	type place struct{ name, dir, config, rules string }
	places := []place{{"root/triage.yaml", root, "triage.yaml", "rules.yaml"}}
	examples, _ := filepath.Glob(filepath.Join(root, "examples", "*", "triage.yaml"))
	if len(examples) < 2 {
		t.Fatalf("found only %v", examples)
	}
	for _, ex := range examples {
		rel, _ := filepath.Rel(root, filepath.Dir(ex))
		c, err := config.Load(ex)
		if err != nil {
			t.Fatal(err)
		}
		rules, _ := filepath.Rel(filepath.Dir(ex), c.RulesPath()) // an example may share the root's rules
		places = append(places,
			place{"root/" + rel, root, filepath.Join(rel, "triage.yaml"), filepath.Clean(filepath.Join(rel, rules))},
			place{rel + "/", filepath.Dir(ex), "triage.yaml", rules})
	}
	const prompt = "Why does my Python list comprehension raise a TypeError?"
	for _, p := range places {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				args []string
				want string // on stdout
			}{
				{[]string{"serve", "--config", p.config, "--check"}, ": ok ("},
				{[]string{"route", "--config", p.config, prompt}, `"decision"`},
				{[]string{"rules", "check", "--config", p.config}, "ok — version"},
				{[]string{"rules", "check", "--config", p.config, p.rules}, p.rules + ": ok — version"},
				{[]string{"rules", "check", "--config", p.config, "--data", data}, "escalation (tier 1 not enough)"},
				{[]string{"eval", "--rules", p.rules, "--config", p.config, "--data", data}, "rules mode"},
				{[]string{"ab", "--a", "tier1", "--b", "rules", "--config", p.config, "--data", data, "--bootstrap", "20"}, "judged on routes"},
				{[]string{"classify", "--config", p.config, prompt}, `"class":"computer science"`},
				{[]string{"calibrate", "--config", p.config, "--data", data, "--diff"}, "classes:\n"},
			} {
				code, stdout, stderr := runIn(t, p.dir, nil, c.args...)
				if code != 0 || !strings.Contains(stdout, c.want) {
					t.Errorf("in %s: triage %s: exit %d, stdout lacks %q\nstdout: %s\nstderr: %s", p.dir, strings.Join(c.args, " "), code, c.want, stdout, stderr)
				}
			}
		})
	}
}

// A model file that is not where the config says: the message names the
// file, where it was looked for, why that directory, and does not send
// the user back to a setup that ran.
func TestMissingModelFileSaysWhereAndWhy(t *testing.T) {
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "triage.yaml")
	body, err := os.ReadFile(filepath.Join(root, "triage.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg, strings.Replace(string(body), "rules: rules.yaml", "rules: "+filepath.Join(root, "rules.yaml")+"\nmodels_dir: no-models-here", 1))
	for _, args := range [][]string{
		{"serve", "--config", cfg, "--check"},
		{"rules", "check", "--config", cfg},
		{"classify", "--config", cfg, "hello"},
	} {
		code, _, stderr := runIn(t, dir, nil, args...)
		for _, want := range []string{
			"needs subjects-tier1.tbl (its static table): it is neither in " + filepath.Join(root, "models", "heads", "subjects") + " nor in the models directory " + filepath.Join(dir, "no-models-here"),
			"from models_dir: no-models-here in " + cfg + ", relative to that file; that is " + filepath.Join(dir, "no-models-here") + ", which does not exist",
			"point models_dir in the config, --models or TRIAGE_MODELS at that directory",
		} {
			if code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("triage %s: exit %d, stderr lacks %q:\n%s", strings.Join(args, " "), code, want, stderr)
			}
		}
		if strings.Contains(stderr, "run scripts/setup.sh") {
			t.Errorf("triage %s sends the user to run setup again:\n%s", strings.Join(args, " "), stderr)
		}
	}
	// Without a config, the default directory is named as such.
	code, _, stderr := runIn(t, dir, nil, "classify", "--heads", filepath.Join(root, "models", "heads", "subjects"), "--config", filepath.Join(dir, "none.yaml"), "hi")
	if code != 1 || !strings.Contains(stderr, "none.yaml") {
		t.Errorf("classify with a config that is not there: exit %d: %s", code, stderr)
	}
	os.Remove(cfg)
	code, _, stderr = runIn(t, dir, nil, "classify", "--heads", filepath.Join(root, "models", "heads", "subjects"), "hi")
	if want := "the models directory is var/models, from the default, under the working directory (no config, and TRIAGE_MODELS is not set); that is " + filepath.Join(dir, "var", "models") + ", which does not exist"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("classify without a config: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
}
