package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/triagegw/triage/internal/gendocs"
	"github.com/triagegw/triage/router/config"
)

var updateDocs = flag.Bool("update", false, "write docs/configuration.md and docs/cli.md from the code")

// cliCommands are the commands the CLI reference documents, in its order:
// every command of commands(), and each subcommand of those that have
// some. TestReferenceDocs fails when a flag set in the source is missing.
var cliCommands = [][]string{
	{"serve"}, {"route"}, {"rules", "check"}, {"eval"}, {"ab"}, {"calibrate"}, {"label"},
	{"classify"}, {"train"}, {"encode", "serve"}, {"sim"},
	{"models", "info"}, {"models", "pull"}, {"models", "import", "glove"}, {"models", "import", "model2vec"},
	{"models", "import", "tfjs"}, {"models", "gen-bert"}, {"models", "quantize"},
	{"distill"}, {"keys", "create"}, {"keys", "list"}, {"keys", "revoke"},
	{"datasets", "fetch"}, {"datasets", "ls"}, {"version"},
}

// flagRecorder is the stderr of a command run with -h: it keeps the help
// text and the flag sets the command built (newFlagSet hands them over).
type flagRecorder struct {
	bytes.Buffer
	sets []*flag.FlagSet
}

func (r *flagRecorder) addFlagSet(fs *flag.FlagSet) { r.sets = append(r.sets, fs) }

// cliReference builds each command's flags by running it with -h, which
// stops at the help, and renders them.
func cliReference(t *testing.T) []byte {
	t.Helper()
	// A default read from the environment is documented as the usage
	// says it, not as this machine has it.
	t.Setenv(config.ModelsEnv, "")
	summaries := map[string]string{}
	for _, c := range commands() {
		summaries[c.name] = c.summary
	}
	seen := map[string]bool{}
	var cmds []gendocs.Command
	for _, path := range cliCommands {
		rec := &flagRecorder{}
		if code := run(context.Background(), append(append([]string{}, path...), "-h"), io.Discard, rec); code != 0 {
			t.Fatalf("triage %s -h: exit %d\n%s", strings.Join(path, " "), code, rec.String())
		}
		c := gendocs.Command{Name: "triage " + strings.Join(path, " ")}
		if !seen[path[0]] {
			seen[path[0]] = true
			if len(path) == 1 {
				c.Summary = summaries[path[0]]
			} else { // a command of subcommands: its summary, then theirs
				cmds = append(cmds, gendocs.Command{Name: "triage " + path[0], Summary: summaries[path[0]]})
			}
		}
		help := rec.String()
		switch len(rec.sets) {
		case 0:
		case 1:
			fs := rec.sets[0]
			if fs.Name() != c.Name {
				t.Errorf("%s -h built the flag set %q", c.Name, fs.Name())
			}
			c.Flags = fs
			var defaults bytes.Buffer
			fs.SetOutput(&defaults)
			fs.PrintDefaults()
			help = strings.Replace(help, defaults.String(), "", 1)
		default:
			t.Fatalf("%s -h built %d flag sets", c.Name, len(rec.sets))
		}
		// What is left of the help is the usage above the flags.
		help = strings.TrimSuffix(strings.TrimSpace(help), "flags:")
		help = strings.TrimPrefix(help, "Usage of "+c.Name+":")
		c.Usage = strings.TrimSpace(help)
		cmds = append(cmds, c)
	}
	for name := range summaries {
		if !seen[name] {
			t.Errorf("the CLI reference leaves out triage %s: add it to cliCommands", name)
		}
	}
	// Every flag set the source builds is documented.
	src, _ := filepath.Glob("*.go")
	nameRE := regexp.MustCompile(`newFlagSet\("([^"]+)"`)
	for _, f := range src {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range nameRE.FindAllStringSubmatch(string(b), -1) {
			found := false
			for _, c := range cmds {
				found = found || c.Name == m[1] || (strings.HasSuffix(m[1], " ") && strings.HasPrefix(c.Name, m[1]))
			}
			if !found {
				t.Errorf("%s builds the flags of %q, which the CLI reference leaves out: add it to cliCommands", f, m[1])
			}
		}
	}
	return gendocs.CLI(cmds)
}

// TestReferenceDocs holds docs/configuration.md and docs/cli.md to what
// the code says: the config structs' keys and doc comments, and the
// commands' flags.
func TestReferenceDocs(t *testing.T) {
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gendocs.Config(root, "github.com/triagegw/triage", reflect.TypeFor[config.Config]())
	if err != nil {
		t.Fatal(err)
	}
	pages := []struct {
		path string
		want []byte
	}{
		{"docs/configuration.md", cfg},
		{"docs/cli.md", cliReference(t)},
	}
	for _, p := range pages {
		file := filepath.Join(root, p.path)
		if *updateDocs {
			if err := os.WriteFile(file, p.want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%v: write it with: go test ./cmd/triage -run TestReferenceDocs -update", err)
			continue
		}
		if !bytes.Equal(got, p.want) {
			t.Errorf("%s is not what the code says (%s): write it again with: go test ./cmd/triage -run TestReferenceDocs -update", p.path, firstDiff(got, p.want))
		}
	}
}

// firstDiff says where two texts first differ, by line.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is %q, the code gives %q", i+1, gl, wl)
		}
	}
	return "same lines"
}
