package triage_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/triagegw/triage"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// TestImportDirections holds the import rules of the architecture by
// machine: which package may depend on which.
func TestImportDirections(t *testing.T) {
	pkgs := listPackages(t)
	leaf := []string{"rules", "classifier", "models", "datasets", "evaluation", "sim", "internal",
		"router/openai", "router/pool", "router/access", "router/metrics", "router/proxy", "router/config", "router/logsink", "router/h1"}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")
		isLeaf := false
		for _, l := range leaf {
			if rel == l || strings.HasPrefix(rel, l+"/") {
				isLeaf = true
			}
		}
		for _, d := range p.Deps {
			switch {
			case d == mod+"/cmd" || strings.HasPrefix(d, mod+"/cmd/"):
				t.Errorf("%s depends on %s: nothing may import cmd", rel, d)
			case isLeaf && d == mod+"/router":
				t.Errorf("%s depends on the router package: it must stay below it", rel)
			case strings.HasPrefix(d, "github.com/gin-gonic/gin") && rel != "router" && !strings.HasPrefix(rel, "cmd/"):
				t.Errorf("%s depends on gin: gin stays inside router", rel)
			case strings.HasPrefix(d, "github.com/knadh/koanf") && rel != "router/config" && rel != "router" && !strings.HasPrefix(rel, "cmd/"):
				t.Errorf("%s depends on koanf: only router/config may", rel)
			case d == mod+"/classifier/onnx" && !strings.HasPrefix(rel, "cmd/"):
				t.Errorf("%s depends on classifier/onnx: only cmd wires tier 2", rel)
			}
		}
		for _, d := range p.Imports {
			switch d {
			case "html/template", "text/template", "net/http/pprof":
				// Executing a template anywhere in the binary makes the
				// linker keep every exported method of every type: 10 MB of
				// binary and 6 MiB of the gateway's resident memory.
				t.Errorf("%s imports %s: the binary must not execute templates", rel, d)
			}
			if strings.HasPrefix(d, "github.com/gin-gonic/gin") && rel != "router" {
				t.Errorf("%s imports gin directly: gin stays inside router", rel)
			}
			if strings.HasPrefix(d, "github.com/knadh/koanf") && rel != "router/config" {
				t.Errorf("%s imports koanf directly: only router/config may", rel)
			}
		}
		// evaluation reaches router/openai through rules (the request's wire
		// form); it must not reach the gateway's edge or its forwarding.
		if rel == "evaluation" || strings.HasPrefix(rel, "evaluation/") {
			for _, edge := range []string{"/router", "/router/proxy", "/router/pool", "/router/config", "/router/metrics"} {
				if slices.Contains(p.Deps, mod+edge) {
					t.Errorf("%s depends on %s: evaluation stays beside the gateway", rel, strings.TrimPrefix(edge, "/"))
				}
			}
		}
	}
}
