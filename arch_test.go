package triage_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const mod = "github.com/triagegw/triage"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// listPackages lists the module's packages as a build with the given tags
// sees them.
func listPackages(t *testing.T, tags ...string) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "-tags", strings.Join(tags, ","), "./...").Output()
	if err != nil {
		t.Fatalf("go list -tags %q: %v", strings.Join(tags, ","), err)
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
	leaf := []string{"rules", "classifier", "models", "datasets", "evaluation", "training", "sim", "internal", "openai", "anthropic", "shadow", "sample", "label",
		"router/pool", "tenancy", "router/metrics", "router/proxy", "router/config", "router/h1", "router/tlsconf", "router/tracing"}
	// Wire formats: the API shapes clients speak. Routing decides on
	// rules.Signals, which each wire format extracts; nothing below the
	// edge reads a wire format.
	wire := []string{"openai", "anthropic"}
	wireFree := []string{"rules", "classifier", "models", "datasets", "evaluation", "training", "shadow", "sample", "label"}
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
			case strings.HasPrefix(d, "github.com/knadh/koanf") && rel != "router/config" && rel != "router" && rel != "lifecycle" && !strings.HasPrefix(rel, "cmd/"):
				// lifecycle loads the rules a gateway config names.
				t.Errorf("%s depends on koanf: only router/config may", rel)
			case d == mod+"/classifier/onnx" && !strings.HasPrefix(rel, "cmd/") && rel != "lifecycle":
				t.Errorf("%s depends on classifier/onnx: only lifecycle (the models' owner) and cmd wire tier 2", rel)
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
		// Tracing is the edge's: the decision and the tiers report what
		// they did (rules.Timing), and router builds the spans from it.
		for _, free := range wireFree {
			if rel != free && !strings.HasPrefix(rel, free+"/") {
				continue
			}
			for _, d := range p.Deps {
				if strings.HasPrefix(d, "go.opentelemetry.io/") {
					t.Errorf("%s depends on %s: tracing stays in router, which builds the spans from what rules reports", rel, d)
					break
				}
			}
		}
		for _, free := range wireFree {
			if rel != free && !strings.HasPrefix(rel, free+"/") {
				continue
			}
			for _, w := range wire {
				if slices.Contains(p.Deps, mod+"/"+w) {
					t.Errorf("%s depends on the wire format %s: it must decide on rules.Signals, not on a request body", rel, w)
				}
			}
		}
		// tenancy is below the edge: the edge asks it who is calling and
		// what they may do, never the other way.
		if rel == "tenancy" || strings.HasPrefix(rel, "tenancy/") {
			for _, d := range p.Deps {
				if d == mod+"/router" || (strings.HasPrefix(d, mod+"/router/") && d != mod+"/router/tlsconf") {
					t.Errorf("%s depends on %s: tenancy imports no router package (but tlsconf's TLS material)", rel, strings.TrimPrefix(d, mod+"/"))
				}
			}
		}
		// evaluation must not reach the gateway's edge or its forwarding.
		if rel == "evaluation" || strings.HasPrefix(rel, "evaluation/") {
			for _, edge := range []string{"/router", "/router/proxy", "/router/pool", "/router/config", "/router/metrics"} {
				if slices.Contains(p.Deps, mod+edge) {
					t.Errorf("%s depends on %s: evaluation stays beside the gateway", rel, strings.TrimPrefix(edge, "/"))
				}
			}
		}
	}
}

// toolchain are the packages of the offline toolchain: they import, convert,
// distill, quantize, generate and pull model files, and train and calibrate
// heads. The gateway serves with none of them.
var toolchain = []string{
	"models/bert", "models/distill", "models/glove", "models/model2vec", "models/onnxpb",
	"models/quantize", "models/sif", "models/tfjs", "models/vocab", "training", "internal/hub",
}

// TestGatewayWithoutToolchain holds the gateway's import graph apart from
// the offline toolchain: no package the gateway serves with (router and
// below, rules, classifier and its tiers, openai, shadow, and models itself,
// the run-time table format) depends on a toolchain package, with or
// without tier 2's build tag; nor does any package cmd/triage's serve path
// imports.
func TestGatewayWithoutToolchain(t *testing.T) {
	servesWith := []string{"router", "rules", "classifier", "openai", "shadow", "sample", "lifecycle", "tenancy"} // with their subpackages
	servePath := []string{"main.go", "serve.go", "debug.go"}                                                      // cmd/triage files
	isToolchain := func(path string) bool {
		rel, ok := strings.CutPrefix(path, mod+"/")
		return ok && slices.Contains(toolchain, rel)
	}
	for _, tags := range [][]string{nil, {"ort"}} {
		byPath := map[string]pkg{}
		for _, p := range listPackages(t, tags...) {
			byPath[p.ImportPath] = p
		}
		for _, tc := range toolchain {
			if _, ok := byPath[mod+"/"+tc]; !ok {
				t.Errorf("toolchain package %s does not exist: keep the list in arch_test.go up to date", tc)
			}
		}
		check := func(who string, p pkg) {
			for _, d := range append([]string{p.ImportPath}, p.Deps...) {
				if isToolchain(d) {
					t.Errorf("tags %q: %s depends on the toolchain package %s: the gateway must not", tags, who, strings.TrimPrefix(d, mod+"/"))
				}
			}
		}
		for path, p := range byPath {
			rel := strings.TrimPrefix(strings.TrimPrefix(path, mod), "/")
			serves := rel == "models"
			for _, s := range servesWith {
				serves = serves || rel == s || strings.HasPrefix(rel, s+"/")
			}
			if serves {
				check(rel, p)
			}
		}
		for _, name := range servePath {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("cmd", "triage", name), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("cmd/triage's serve path: %v (keep the list in arch_test.go up to date)", err)
			}
			for _, spec := range f.Imports {
				imp, _ := strconv.Unquote(spec.Path.Value)
				if p, ok := byPath[imp]; ok {
					check("cmd/triage/"+name+" (through "+strings.TrimPrefix(imp, mod+"/")+")", p)
				}
			}
		}
	}
}

// TestBinaryStaysLean keeps heavyweight dependencies out of the binary
// whatever pulls them in: gRPC (with genproto and x/net/trace) came with
// the OTel project's OTLP exporters and cost 21 MB of binary and 13 MiB of
// resident memory at idle, in every gateway, traced or not. gopkg.in/yaml.v3
// is the YAML parser the config's go.yaml.in/yaml/v3 continues: both in one
// binary were 196 KB of it for nothing.
func TestBinaryStaysLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "ort", "./cmd/triage").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/triage: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		for _, banned := range []string{"google.golang.org/grpc", "golang.org/x/net/trace", "google.golang.org/genproto", "gopkg.in/yaml.v3"} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("the binary depends on %s", d)
			}
		}
	}
}

// requestPath are the packages every request passes through below the
// stages of router/serve.go, held to the same 80 lines a function: the h1
// server that reads the request's head, the proxy that forwards it and
// relays the answer, the wire formats that read it and translate it, and
// the JSON scanner under them. Their functions are the hottest in the
// gateway, and the ones a reader of a wrong answer must follow.
var requestPath = []string{"router/h1", "router/proxy", "openai", "anthropic", "internal/jsonscan"}

// TestRequestAsStages holds the shape of the request path (router/serve.go):
// the stages are functions of a readable length (none over 80 lines in the
// files of the request's front half, in the packages of requestPath, or in
// cmd/), and errors become answers in one place, exchange.fail: no stage
// writes an error itself.
func TestRequestAsStages(t *testing.T) {
	fset := token.NewFileSet()
	long := func(path string) {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > 80 {
				t.Errorf("%s: %s is %d lines: split it into steps of at most 80", fset.Position(fn.Pos()), fn.Name.Name, n)
			}
		}
	}
	long(filepath.Join("router", "serve.go"))
	long(filepath.Join("router", "handlers.go"))
	globs := []string{filepath.Join("cmd", "*", "*.go")}
	for _, dir := range requestPath {
		globs = append(globs, filepath.Join(filepath.FromSlash(dir), "*.go"))
	}
	for _, g := range globs {
		files, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Errorf("no Go files match %s: keep requestPath in arch_test.go up to date", g)
		}
		for _, p := range files {
			if !strings.HasSuffix(p, "_test.go") {
				long(p)
			}
		}
	}

	// Error writers called in serve.go only from fail.
	f, err := parser.ParseFile(fset, filepath.Join("router", "serve.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	writers := map[string]bool{"writeError": true, "WriteError": true, "writeAnthropic": true, "deny": true}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil || fn.Name.Name == "fail" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && writers[sel.Sel.Name] {
				t.Errorf("%s: %s calls %s: return the error, and let exchange.fail answer it", fset.Position(sel.Pos()), fn.Name.Name, sel.Sel.Name)
			}
			return true
		})
	}
}

// TestOneJSONScanner holds the rule that JSON text is scanned in one place,
// internal/jsonscan, fuzzed there against encoding/json: a second scanner
// is a second reading of the same bytes, and a body two readers read
// differently is one a fronting proxy can be made to see otherwise than
// the gateway does. Outside it, no hand-written Go file may hold what every
// JSON scanner must have:
//
//   - a string unescaper: a case listing the escapes that stand for
//     themselves ('"', '\\', '/') or the letter escapes (b, f, n, r, t), or a
//     call that pairs \u escapes (utf16.DecodeRune, utf16.IsSurrogate);
//   - a whitespace skipper: a case, or a chain of ==, testing exactly JSON's
//     four whitespace bytes;
//   - a nesting walker: a case listing both opening or both closing
//     brackets.
//
// Reading the first byte of a value the scanner has checked ('{', '"') is
// not scanning, and writing JSON (escaping) is not either.
func TestOneJSONScanner(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (name == "var" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) || path == filepath.Join("internal", "jsonscan") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, what := range jsonScanning(f) {
			t.Errorf("%s: %s: scan JSON with internal/jsonscan", fset.Position(what.pos), what.msg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("looked at %d files: is the walk broken?", files)
	}
}

type finding struct {
	pos token.Pos
	msg string
}

// jsonScanning finds the marks of a JSON scanner in f (TestOneJSONScanner).
func jsonScanning(f *ast.File) []finding {
	var out []finding
	has := func(set map[string]bool, lits ...string) bool {
		for _, l := range lits {
			if !set[l] {
				return false
			}
		}
		return true
	}
	ws := func(set map[string]bool) bool {
		return len(set) == 4 && has(set, `' '`, `'\t'`, `'\n'`, `'\r'`)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CaseClause:
			set := map[string]bool{}
			for _, e := range n.List {
				if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.CHAR {
					set[l.Value] = true
				}
			}
			switch {
			case has(set, `'"'`, `'\\'`, `'/'`), has(set, `'b'`, `'f'`, `'n'`, `'r'`, `'t'`):
				out = append(out, finding{n.Pos(), "a case of JSON string escapes"})
			case ws(set):
				out = append(out, finding{n.Pos(), "a case of JSON whitespace"})
			case has(set, `'{'`, `'['`), has(set, `'}'`, `']'`):
				out = append(out, finding{n.Pos(), "a case of JSON brackets"})
			}
		case *ast.BinaryExpr:
			if n.Op != token.LOR {
				return true
			}
			set := map[string]bool{}
			if orOfEquals(n, set) && ws(set) {
				out = append(out, finding{n.Pos(), "a test for JSON whitespace"})
			}
			return false // the chain's inner ||s are part of it
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "utf16" && (n.Sel.Name == "DecodeRune" || n.Sel.Name == "IsSurrogate") {
				out = append(out, finding{n.Pos(), "utf16." + n.Sel.Name + ", which pairs \\u escapes"})
			}
		}
		return true
	})
	return out
}

// orOfEquals collects into set the char literals of e, a chain of
// x == 'c' joined by ||; it reports false if e is anything else.
func orOfEquals(e ast.Expr, set map[string]bool) bool {
	switch e := e.(type) {
	case *ast.ParenExpr:
		return orOfEquals(e.X, set)
	case *ast.BinaryExpr:
		switch e.Op {
		case token.LOR:
			return orOfEquals(e.X, set) && orOfEquals(e.Y, set)
		case token.EQL:
			for _, side := range []ast.Expr{e.X, e.Y} {
				if l, ok := side.(*ast.BasicLit); ok && l.Kind == token.CHAR {
					set[l.Value] = true
					return true
				}
			}
		}
	}
	return false
}

// TestNoHugeFiles keeps every hand-written Go file (tests and generated
// templ code aside) under 1,000 lines: past that a file holds more than
// one concern, and a reader cannot find the one they came for.
func TestNoHugeFiles(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "var" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, "_templ.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := bytes.Count(b, []byte("\n")); n > 1000 {
			t.Errorf("%s is %d lines: split it by concern into files under 1,000", path, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOneDecision holds the rule that routing is decided in one place, the
// policy of package rules, which live routing, calibration and evaluation
// all run: a second implementation beside it drifts from it, and figures
// measured with one are then of a decision the gateway does not make.
// Outside rules, hand-written Go may not:
//
//   - make a decision reason that only comparing a tier's verdict with a
//     floor can give (tier1_confident, below_floor, class_requires_tier2),
//     by its constant or its string: comparing a decision's reason with one
//     (==, !=, a case of a switch) reads it, anything else makes one;
//   - read the heads' per-class floors (Heads.TierFloors) for anything but
//     a tier's own coverage: the Floors of an evaluation.Options literal.
//     The floors a decision uses are resolved by rules.Compile.
func TestOneDecision(t *testing.T) {
	reasons := map[string]string{"ReasonTier1Confident": "tier1_confident", "ReasonBelowFloor": "below_floor", "ReasonClassRequiresTier2": "class_requires_tier2"}
	strs := map[string]bool{}
	for _, s := range reasons {
		strs[strconv.Quote(s)] = true
	}
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (name == "var" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) || path == "rules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		rulesName := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == strconv.Quote(mod+"/rules") {
				rulesName = "rules"
				if imp.Name != nil {
					rulesName = imp.Name.Name
				}
			}
		}
		var stack []ast.Node
		up := func(k int) ast.Node { // the k-th enclosing node of the current one
			if len(stack) > k {
				return stack[len(stack)-1-k]
			}
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			stack = append(stack, n)
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind == token.STRING && strs[n.Value] {
					t.Errorf("%s: the reason %s written out: a decision's reason comes from rules", fset.Position(n.Pos()), n.Value)
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && rulesName != "" && x.Name == rulesName && reasons[n.Sel.Name] != "" && !readsReason(up(1), n) {
					t.Errorf("%s: makes the decision reason %s.%s: only rules decides (compare a decision's reason with it instead)", fset.Position(n.Pos()), rulesName, n.Sel.Name)
				}
				if n.Sel.Name == "TierFloors" && !coverageFloors(up(1), up(2), up(3)) {
					t.Errorf("%s: reads the heads' floors (TierFloors) to decide: only rules decides; a tier's coverage takes them as evaluation.Options{Floors: ...}", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("looked at %d files: is the walk broken?", files)
	}
}

// readsReason reports whether sel, a reason, is read where it stands
// under parent: an operand of == or !=, or a case of a switch.
func readsReason(parent ast.Node, sel ast.Expr) bool {
	switch p := parent.(type) {
	case *ast.BinaryExpr:
		return p.Op == token.EQL || p.Op == token.NEQ
	case *ast.CaseClause:
		return slices.Contains(p.List, sel)
	}
	return false
}

// coverageFloors reports whether a TierFloors selector is called (call)
// as the value of Floors in an Options literal (kv in lit).
func coverageFloors(call, kv, lit ast.Node) bool {
	c, ok := call.(*ast.CallExpr)
	if !ok {
		return false
	}
	e, ok := kv.(*ast.KeyValueExpr)
	if !ok || e.Value != c {
		return false
	}
	if k, ok := e.Key.(*ast.Ident); !ok || k.Name != "Floors" {
		return false
	}
	cl, ok := lit.(*ast.CompositeLit)
	if !ok {
		return false
	}
	switch typ := cl.Type.(type) {
	case *ast.SelectorExpr:
		return typ.Sel.Name == "Options"
	case *ast.Ident:
		return typ.Name == "Options"
	}
	return false
}
