package evaluation

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// templGenerate is doc.go's go:generate command, whose version the test
// reads from there.
var templGenerate = regexp.MustCompile(`(?m)^//go:generate go run github\.com/a-h/templ/cmd/templ@(v[0-9][^ ]*) generate$`)

// TestTemplatesGenerated runs the pinned templ generator over a copy of
// the .templ files and wants the committed _templ.go files byte for byte:
// a page edited in its template but not regenerated fails here. It needs
// the Go module proxy (or a module cache that holds the generator) and
// skips, saying so, only when neither is reachable.
func TestTemplatesGenerated(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	m := templGenerate.FindSubmatch(doc)
	if m == nil {
		t.Fatal("doc.go has no go:generate line running a pinned templ generate")
	}
	version := string(m[1])
	// The runtime the generated code calls must be the generator's.
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	rv := regexp.MustCompile(`(?m)^\s*github\.com/a-h/templ (v\S+)`).FindSubmatch(gomod)
	if rv == nil {
		t.Fatal("go.mod does not require github.com/a-h/templ")
	}
	if string(rv[1]) != version {
		t.Fatalf("go.mod requires github.com/a-h/templ %s, the generator is %s", rv[1], version)
	}

	templs, err := filepath.Glob("*.templ")
	if err != nil || len(templs) == 0 {
		t.Fatalf("no .templ files: %v", err)
	}
	dir := t.TempDir()
	for _, f := range templs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "run", "github.com/a-h/templ/cmd/templ@"+version, "generate", "-path", dir)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if unreachable(string(out)) {
			t.Skipf("the Go module proxy is unreachable and the module cache lacks templ %s, so the generated pages cannot be checked: %v\n%s", version, err, out)
		}
		t.Fatalf("templ generate: %v\n%s", err, out)
	}

	for _, f := range templs {
		gen := strings.TrimSuffix(f, ".templ") + "_templ.go"
		want, err := os.ReadFile(filepath.Join(dir, gen))
		if err != nil {
			t.Fatalf("templ generated no %s: %v", gen, err)
		}
		got, err := os.ReadFile(gen)
		if err != nil {
			t.Errorf("%s is not committed beside %s (go generate ./evaluation): %v", gen, f, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./evaluation", gen)
		}
	}
	gens, _ := filepath.Glob("*_templ.go")
	for _, g := range gens {
		if _, err := os.Stat(strings.TrimSuffix(g, "_templ.go") + ".templ"); err != nil {
			t.Errorf("%s has no template: remove it", g)
		}
	}
}

// unreachable says whether go's output is that of a module download that
// could not reach the network.
func unreachable(out string) bool {
	for _, s := range []string{"dial tcp", "no such host", "connection refused", "network is unreachable", "i/o timeout",
		"TLS handshake timeout", "proxyconnect", "GOPROXY=off", "module lookup disabled"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}
