package triage_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestAllocationTestsAreNamed: every function that calls
// testing.AllocsPerRun is a test whose name holds "Allocs" (or a
// benchmark), so that make test's pass without the race detector,
// go test -run Allocs, runs every allocation check: under -race, sync.Pool
// drops items at random and those tests skip.
func TestAllocationTestsAreNamed(t *testing.T) {
	fset := token.NewFileSet()
	found := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (name == "var" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !callsAllocsPerRun(fn.Body) {
				continue
			}
			name := fn.Name.Name
			switch {
			case strings.HasPrefix(name, "Benchmark"):
			case strings.HasPrefix(name, "Test") && strings.Contains(name, "Allocs"):
				found++
			default:
				t.Errorf("%s: %s calls testing.AllocsPerRun: move the check into a TestXxxAllocs function", fset.Position(fn.Pos()), name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 5 {
		t.Errorf("found %d allocation tests, want at least 5: is the walk broken?", found)
	}
}

func callsAllocsPerRun(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "AllocsPerRun" {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "testing" {
				found = true
			}
		}
		return !found
	})
	return found
}
