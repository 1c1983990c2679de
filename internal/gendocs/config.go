package gendocs

import (
	"bytes"
	_ "embed"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// Config writes the configuration reference of the struct type root (the
// gateway's config.Config): one section per struct it reaches through
// koanf-tagged fields, with the struct's doc comment and a table of its
// keys, each with its type, its default and its doc comment. Doc comments
// are read from the Go source under dir, the module's root directory
// (module is its path), where each struct's package lives. The page opens
// with intro/configuration.md.
func Config(dir, module string, root reflect.Type) ([]byte, error) {
	g := &configGen{dir: dir, module: module, docs: map[string]*pkgDocs{}}
	var b bytes.Buffer
	b.WriteString(generatedNote("go test ./cmd/triage -run TestReferenceDocs -update", "the config structs' doc comments"))
	b.WriteString(strings.TrimSpace(configIntro) + "\n")
	if err := g.section(&b, root, "", 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

//go:embed intro/configuration.md
var configIntro string

//go:embed intro/cli.md
var cliIntro string

func generatedNote(cmd, from string) string {
	return fmt.Sprintf("<!-- Generated from %s by `%s`. Do not edit. -->\n\n", from, cmd)
}

type configGen struct {
	dir, module string
	docs        map[string]*pkgDocs // by package path
}

// pkgDocs are the doc comments of a package's struct types and their fields.
type pkgDocs struct {
	types  map[string]string            // type name → doc
	fields map[string]map[string]string // type name → field name → doc
}

func (g *configGen) pkg(path string) (*pkgDocs, error) {
	if d, ok := g.docs[path]; ok {
		return d, nil
	}
	rel, ok := strings.CutPrefix(path, g.module)
	if !ok {
		return nil, fmt.Errorf("gendocs: %s is not in module %s", path, g.module)
	}
	dir := filepath.Join(g.dir, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gendocs: %w", err)
	}
	d := &pkgDocs{types: map[string]string{}, fields: map[string]map[string]string{}}
	fset := token.NewFileSet()
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("gendocs: %w", err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				doc := ts.Doc.Text()
				if doc == "" && len(gd.Specs) == 1 {
					doc = gd.Doc.Text()
				}
				d.types[ts.Name.Name] = doc
				fields := map[string]string{}
				for _, fl := range st.Fields.List {
					for _, n := range fl.Names {
						fields[n.Name] = fl.Doc.Text()
					}
				}
				d.fields[ts.Name.Name] = fields
			}
		}
	}
	g.docs[path] = d
	return d, nil
}

// row is one key of a section's table.
type row struct{ key, typ, def, doc string }

// nested is a struct reached from a section, documented after it.
type nested struct {
	t    reflect.Type
	path string
}

// section writes t's section (path is its key, "" for the root) and then
// the sections of the structs it holds.
func (g *configGen) section(b *bytes.Buffer, t reflect.Type, path string, depth int) error {
	d, err := g.pkg(t.PkgPath())
	if err != nil {
		return err
	}
	fieldDocs, ok := d.fields[t.Name()]
	if !ok {
		return fmt.Errorf("gendocs: no struct %s in the source of %s", t.Name(), t.PkgPath())
	}
	keys := map[string]string{} // field name → key, for the docs' references
	for i := range t.NumField() {
		f := t.Field(i)
		if k := koanfKey(f); k != "" {
			keys[f.Name] = k
		}
	}
	var rows []row
	var subs []nested
	var prevKey, prevDoc string // the last field with a comment, for one comment on several fields
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		key := koanfKey(f)
		if key == "" {
			if tag, ok := f.Tag.Lookup("koanf"); ok && tag == "-" {
				continue // not a config key
			}
			return fmt.Errorf("gendocs: %s.%s has no koanf tag", t, f.Name)
		}
		full := join(path, key)
		doc := clean(lead(fieldDocs[f.Name], f.Name, key), keys)
		if doc == "" && prevKey != "" && strings.Contains(prevDoc, "`"+key+"`") {
			doc = "See `" + prevKey + "`." // "CertFile and KeyFile are..."
		} else if doc != "" {
			prevKey, prevDoc = key, doc
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case isStruct(ft):
			subs = append(subs, nested{ft, full})
			rows = append(rows, row{key: full, typ: "section", doc: firstSentenceOr(doc, "see below") + fmt.Sprintf(" ([`%s`](#%s))", full, anchor(full))})
			continue
		case ft.Kind() == reflect.Slice && isStruct(ft.Elem()):
			subs = append(subs, nested{ft.Elem(), full + "[]"})
			rows = append(rows, row{key: full, typ: "list", doc: firstSentenceOr(doc, "see below") + fmt.Sprintf(" ([`%s[]`](#%s))", full, anchor(full+"[]"))})
			continue
		case ft.Kind() == reflect.Map && isStruct(ft.Elem()):
			subs = append(subs, nested{ft.Elem(), full + ".NAME"})
			rows = append(rows, row{key: full, typ: "map", doc: firstSentenceOr(doc, "see below") + fmt.Sprintf(" ([`%s.NAME`](#%s))", full, anchor(full+".NAME"))})
			continue
		}
		def, rest := splitDefault(doc)
		rows = append(rows, row{key: full, typ: typeName(ft), def: def, doc: rest})
	}
	if path != "" {
		level := "##"
		if depth > 1 {
			level = "###"
		}
		fmt.Fprintf(b, "\n%s `%s`\n", level, path)
	}
	if td := clean(lead(d.types[t.Name()], t.Name(), path), keys); td != "" && path != "" {
		b.WriteString("\n" + td + "\n")
	}
	b.WriteString("\n| key | type | default | meaning |\n|---|---|---|---|\n")
	for _, r := range rows {
		def := r.def
		if def == "" {
			def = "—"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, cell(def), cell(r.doc))
	}
	for _, s := range subs {
		if err := g.section(b, s.t, s.path, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func koanfKey(f reflect.StructField) string {
	k, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
	if k == "-" {
		return ""
	}
	return k
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	textUnmarsh  = reflect.TypeFor[interface{ UnmarshalText([]byte) error }]()
)

// isStruct reports whether t is a section of keys rather than a value
// written as one (a size, a duration).
func isStruct(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(textUnmarsh)
}

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t.Name() == "ByteSize":
		return "size"
	case reflect.PointerTo(t).Implements(textUnmarsh):
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + typeName(t.Elem())
	case reflect.Map:
		return "map of " + typeName(t.Elem())
	}
	return t.Kind().String()
}

// clean turns a doc comment into one markdown paragraph: lines joined, a
// list's items kept apart with "; ", and the Go names of sibling fields
// written as their keys.
func clean(doc string, keys map[string]string) string {
	doc = strings.TrimSpace(doc)
	if doc == "" {
		return ""
	}
	var parts []string
	for _, l := range strings.Split(doc, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "- ") {
			l = "• " + strings.TrimPrefix(l, "- ")
		}
		parts = append(parts, l)
	}
	s := strings.Join(parts, " ")
	// References for Go readers (the function that does it, the file)
	// say nothing to someone writing YAML.
	for _, re := range goRefs {
		s = re.ReplaceAllString(s, "")
	}
	// Go names of sibling fields become their keys; all-capital words
	// (URL, TLS) are words, not field names.
	return strings.TrimSpace(goNames.ReplaceAllStringFunc(s, func(w string) string {
		if k, ok := keys[w]; ok && strings.ToUpper(w) != w {
			return "`" + k + "`"
		}
		return w
	}))
}

var (
	goNames = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)
	goRefs  = []*regexp.Regexp{
		regexp.MustCompile(`\s*\((?:see )?(?:[a-z]+\.)?[A-Z][a-z]+[A-Z][A-Za-z]*(?: resolves them)?\)`), // (ResolveSecrets), (see ParseKeys)
		regexp.MustCompile(`\s*\((?:see )?[a-z]+\.(?:go|Load)(?: resolves them)?\)`),                    // (see shared.go), (config.Load resolves them)
		regexp.MustCompile(`,? see [A-Z][a-z]+[A-Z][A-Za-z]*`),                                          // ", see ParseKeys"
		regexp.MustCompile(`\s*See [A-Z][a-z]+[A-Z][A-Za-z]*\.`),                                        // See ModelsPath.
		regexp.MustCompile(`;? [A-Z][a-z]+[A-Z][A-Za-z]* fills them in`),                                // SetDefaults fills them in
	}
)

// lead writes a doc comment that starts with its Go name for a reader of
// the key: "Listen is the address..." becomes "The address...", and
// "Retry says..." becomes "`pools[].retry` says...".
func lead(doc, goName, key string) string {
	for _, v := range []struct{ prefix, article string }{
		{" is the ", "The "}, {" are the ", "The "}, {" is a ", "A "}, {" is an ", "An "},
	} {
		if rest, ok := strings.CutPrefix(doc, goName+v.prefix); ok {
			return v.article + rest
		}
	}
	if rest, ok := strings.CutPrefix(doc, goName+" "); ok {
		return "`" + key + "` " + rest
	}
	return doc
}

// splitDefault takes the default out of doc: its "Default ..." sentence
// (what follows a semicolon in it stays in the text), or the choice a list
// marks "(the default)". The default is in backticks when it is one word.
func splitDefault(doc string) (def, rest string) {
	m := defaultRE.FindStringSubmatchIndex(doc)
	switch {
	case m != nil:
		def = doc[m[2]:m[3]]
		start := m[0]
		if start > 0 {
			start++ // keep the sentence before's period
		}
		more := ""
		if d, after, ok := strings.Cut(def, "; "); ok {
			def, more = d, upperFirst(after)+"."
		}
		rest = strings.Join(strings.Fields(doc[:start]+" "+more+" "+doc[m[1]:]), " ")
	case theDefaultRE.MatchString(doc):
		def, rest = theDefaultRE.FindStringSubmatch(doc)[1], doc
	case lowerDefaultRE.MatchString(doc):
		def, rest = strings.TrimRight(lowerDefaultRE.FindStringSubmatch(doc)[1], ".,;:"), doc
	case strings.Contains(doc, "Required."):
		return "required", strings.Join(strings.Fields(strings.Replace(doc, "Required.", "", 1)), " ")
	default:
		return "", doc
	}
	if !strings.ContainsAny(def, " `") {
		def = "`" + def + "`"
	}
	return def, rest
}

// defaultRE finds a doc comment's default: a sentence that starts with
// "Default" ("Default 30s.", "Default: none, sampling off.").
var defaultRE = regexp.MustCompile(`(?:^|\.\s+|;\s+)Default:?\s+(.+?)\.(?:\s|$)`)

// lowerDefaultRE finds a default given inside a sentence ("...: default
// 50ms, at most 1s"); the sentence stays in the text.
var lowerDefaultRE = regexp.MustCompile(`[:;(]\s*default:? (\S+)`)

var theDefaultRE = regexp.MustCompile(`"([a-z0-9_]+)" \(the default\)`)

func firstSentenceOr(doc, alt string) string {
	if doc == "" {
		return alt
	}
	return doc
}

// anchor is the GitHub heading id of a "## `path`" heading.
func anchor(path string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(path) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// cell makes s safe inside a table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
