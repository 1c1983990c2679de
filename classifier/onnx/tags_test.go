package onnx

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// TestBuildTags: the runtime is built in exactly when cgo and the ort tag
// are both on (CGO_ENABLED=0 go build -tags ort gets the stub, not a cgo
// error); every build has the same exported API; and exported types are
// declared once, in files every build has, so the stub cannot drift from
// the real package.
func TestBuildTags(t *testing.T) {
	type variant struct{ cgo, ort bool }
	files := map[variant][]string{}
	for _, v := range []variant{{true, true}, {true, false}, {false, true}, {false, false}} {
		ctxt := build.Default
		ctxt.CgoEnabled = v.cgo
		ctxt.BuildTags = nil
		if v.ort {
			ctxt.BuildTags = []string{"ort"}
		}
		p, err := ctxt.ImportDir(".", 0)
		if err != nil {
			t.Fatalf("cgo %v, ort %v: %v", v.cgo, v.ort, err)
		}
		files[v] = p.GoFiles
		runtime := v.cgo && v.ort
		if slices.Contains(p.GoFiles, "ort.go") != runtime || slices.Contains(p.GoFiles, "stub.go") == runtime {
			t.Errorf("cgo %v, ort %v: files %v, want ort.go only with both (else stub.go)", v.cgo, v.ort, p.GoFiles)
		}
	}

	fset := token.NewFileSet()
	parsed := map[string]*ast.File{}
	for _, fs := range files {
		for _, name := range fs {
			if parsed[name] == nil {
				f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
				if err != nil {
					t.Fatal(err)
				}
				parsed[name] = f
			}
		}
	}
	common := map[string]int{}
	for _, fs := range files {
		for _, name := range fs {
			common[name]++
		}
	}
	api := func(fs []string) []string {
		var names []string
		for _, name := range fs {
			for _, d := range parsed[name].Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					recv := ""
					if d.Recv != nil {
						typ := d.Recv.List[0].Type
						if s, ok := typ.(*ast.StarExpr); ok {
							typ = s.X
						}
						recv = typ.(*ast.Ident).Name + "."
					}
					names = append(names, recv+d.Name.Name)
				case *ast.GenDecl:
					for _, s := range d.Specs {
						ts, ok := s.(*ast.TypeSpec)
						if !ok || !ts.Name.IsExported() {
							continue
						}
						names = append(names, "type "+ts.Name.Name)
						if common[name] != len(files) {
							t.Errorf("type %s is declared in %s, which not every build has", ts.Name.Name, name)
						}
					}
				}
			}
		}
		slices.Sort(names)
		return names
	}
	rt, stub := api(files[variant{true, true}]), api(files[variant{false, true}])
	if !slices.Equal(rt, stub) {
		t.Errorf("exported API differs:\nwith the runtime %v\nstub             %v", rt, stub)
	}
	if !slices.Contains(rt, "type Encoder") || !slices.Contains(rt, "Encoder.Embed") {
		t.Errorf("API %v lacks Encoder and Encoder.Embed", rt)
	}
}
