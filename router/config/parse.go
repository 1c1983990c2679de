package config

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/knadh/koanf/v2"
	yamlv3 "go.yaml.in/yaml/v3"
)

// Bounds on a config document, checked before it is decoded. A triage config
// is a few kilobytes, nests six levels and has a dozen keys per mapping; these
// leave ample room. Without them a small file can make loading take minutes
// and gigabytes: the decoder's duplicate-key check is quadratic in a
// mapping's keys (and builds an error per duplicate pair), flattening the key
// paths is cubic in the nesting, and aliases repeat a subtree wherever they
// point to it.
const (
	maxDocBytes      = 1 << 20 // the file
	maxDocDepth      = 32      // nested mappings and sequences
	maxDocKeys       = 1000    // keys in one mapping
	maxDocValues     = 100_000 // values and keys, aliases expanded
	maxDocExpansion  = 4 << 20 // scalar bytes plus every value's key path, aliases expanded
	saturatedDocSize = 1 << 60
)

// boundedParser is a koanf.Parser that refuses documents past the bounds
// above and otherwise leaves the parsing to p.
type boundedParser struct{ p koanf.Parser }

func bounded(p koanf.Parser) koanf.Parser { return boundedParser{p} }

func (b boundedParser) Unmarshal(data []byte) (map[string]any, error) {
	if err := checkDocument(data); err != nil {
		return nil, err
	}
	return b.p.Unmarshal(data)
}

func (b boundedParser) Marshal(m map[string]any) ([]byte, error) { return b.p.Marshal(m) }

// checkDocument parses data's first YAML document into nodes (linear in its
// size) and measures what decoding it would produce, without decoding it.
func checkDocument(data []byte) error {
	if len(data) > maxDocBytes {
		return fmt.Errorf("yaml: document is %d bytes, more than the limit of %d", len(data), maxDocBytes)
	}
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(data, &doc); err != nil {
		return locateSyntaxError(data, err)
	}
	w := docWalker{done: map[*yamlv3.Node]docSize{}, open: map[*yamlv3.Node]bool{}}
	s, err := w.size(&doc)
	if err != nil {
		return err
	}
	switch {
	case s.height > maxDocDepth:
		return fmt.Errorf("yaml: document nests %d levels deep, more than the limit of %d", s.height, maxDocDepth)
	case s.values > maxDocValues:
		return fmt.Errorf("yaml: document expands to more than %d values (aliases included)", maxDocValues)
	case s.bytes > maxDocExpansion:
		return fmt.Errorf("yaml: document expands to more than %d bytes of keys and values (aliases included)", maxDocExpansion)
	}
	return nil
}

// docSize measures a subtree as decoding sees it, each alias replaced by the
// subtree it names. Counts saturate at saturatedDocSize.
type docSize struct {
	values int64 // nodes, keys included
	height int   // nesting of mappings and sequences
	bytes  int64 // scalar bytes, plus each node's key path from the subtree's root
}

// docWalker sizes nodes once each: an alias reuses its anchor's size, so
// the walk is linear in the document even when expanding it is exponential.
type docWalker struct {
	done map[*yamlv3.Node]docSize
	open map[*yamlv3.Node]bool // on the walk's path: an alias to one is a cycle
}

func (w *docWalker) size(n *yamlv3.Node) (docSize, error) {
	if s, ok := w.done[n]; ok {
		return s, nil
	}
	if w.open[n] {
		return docSize{}, fmt.Errorf("yaml: line %d: anchor contains an alias to itself", n.Line)
	}
	w.open[n] = true
	defer delete(w.open, n)
	var s docSize
	switch n.Kind {
	case yamlv3.AliasNode:
		if n.Alias == nil {
			return docSize{}, fmt.Errorf("yaml: line %d: unknown anchor %q", n.Line, n.Value)
		}
		return w.size(n.Alias) // memoized under the anchor, not the alias
	case yamlv3.ScalarNode:
		s = docSize{values: 1, bytes: int64(len(n.Value))}
	case yamlv3.DocumentNode:
		for _, c := range n.Content {
			cs, err := w.size(c)
			if err != nil {
				return docSize{}, err
			}
			s = cs
		}
	case yamlv3.SequenceNode:
		s.values = 1
		for _, c := range n.Content {
			cs, err := w.size(c)
			if err != nil {
				return docSize{}, err
			}
			// An element's path is its parent's plus an index.
			s.add(cs, 4)
		}
		s.height++
	case yamlv3.MappingNode:
		if len(n.Content)/2 > maxDocKeys {
			return docSize{}, fmt.Errorf("yaml: line %d: mapping has %d keys, more than the limit of %d", n.Line, len(n.Content)/2, maxDocKeys)
		}
		// Report the first duplicate key as the decoder would, before the
		// decoder's pairwise check reports every duplicate pair.
		type keyID struct {
			kind  yamlv3.Kind
			value string
		}
		seen := make(map[keyID]int, len(n.Content)/2)
		s.values = 1
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			id := keyID{k.Kind, k.Value}
			if line, dup := seen[id]; dup {
				return docSize{}, fmt.Errorf("yaml: unmarshal errors:\n  line %d: mapping key %#v already defined at line %d", k.Line, k.Value, line)
			}
			seen[id] = k.Line
			ks, err := w.size(k)
			if err != nil {
				return docSize{}, err
			}
			vs, err := w.size(v)
			if err != nil {
				return docSize{}, err
			}
			s.add(ks, 1)
			s.add(vs, ks.bytes+1)
		}
		s.height++
	}
	w.done[n] = s
	return s, nil
}

// add counts child c, whose nodes' paths each grow by step bytes, into s.
func (s *docSize) add(c docSize, step int64) {
	s.values = satAdd(s.values, c.values)
	s.bytes = satAdd(s.bytes, satAdd(c.bytes, satMul(c.values, step)))
	s.height = max(s.height, c.height)
}

func satAdd(a, b int64) int64 { return min(a+b, saturatedDocSize) } // both ≤ 1<<60: no overflow

func satMul(a, b int64) int64 {
	if a != 0 && b > saturatedDocSize/a {
		return saturatedDocSize
	}
	return min(a*b, saturatedDocSize)
}

// SyntaxError is a YAML syntax error, at the line where the document stops
// making sense, with that line quoted.
type SyntaxError struct {
	Line, Col int    // 1-based
	Msg       string // the parser's description
	Text      string // the line
	Hint      string // what usually causes it, when known
}

func (e *SyntaxError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "line %d, column %d: %s", e.Line, e.Col, e.Msg)
	if e.Hint != "" {
		b.WriteString(" (" + e.Hint + ")")
	}
	num := strconv.Itoa(e.Line)
	fmt.Fprintf(&b, "\n    %s | %s\n    %s | %s^", num, e.Text, strings.Repeat(" ", len(num)), strings.Repeat(" ", max(e.Col-1, 0)))
	return b.String()
}

// yamlErrorLine matches the line the YAML parser names ("yaml: line 3: ").
var yamlErrorLine = regexp.MustCompile(`^yaml: line (\d+): `)

// maxScanWork bounds the line-by-line search for a syntax error's line, in
// bytes parsed (lines times document bytes: 8 MB is a 1,000-line config of
// 8 KB, four times the largest example); past it the line is found by
// bisection, which assumes that no prefix past the error parses.
const maxScanWork = 8 << 20

// locateSyntaxError finds the line a YAML syntax error is on. The parser
// names the line where the enclosing block began (often a comment above
// it), not the one that broke it: the error is on the first line after
// the longest prefix of the document that still parses, so that line is
// searched for, and quoted.
func locateSyntaxError(data []byte, err error) error {
	msg := err.Error()
	m := yamlErrorLine.FindStringSubmatch(msg)
	if m == nil {
		return err // not a syntax error with a line
	}
	desc := strings.TrimPrefix(msg, m[0])
	lines := bytes.SplitAfter(data, []byte("\n"))
	parses := func(k int) bool { // the first k lines parse
		var n yamlv3.Node
		return yamlv3.Unmarshal(bytes.Join(lines[:k], nil), &n) == nil
	}
	bad := -1 // 0-based index of the breaking line
	if len(lines)*len(data) <= maxScanWork {
		for k := len(lines) - 1; k >= 0; k-- {
			if parses(k) {
				bad = k
				break
			}
		}
	} else {
		lo, hi := 0, len(lines) // parses(lo), !parses(hi)
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; parses(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		bad = hi - 1
	}
	if bad < 0 || bad >= len(lines) {
		return err
	}
	text := strings.TrimRight(string(lines[bad]), "\r\n")
	col := 1 + len(text) - len(strings.TrimLeft(text, " \t"))
	e := &SyntaxError{Line: bad + 1, Col: col, Msg: desc, Text: text}
	switch {
	case strings.Contains(text[:col-1], "\t") || strings.Contains(desc, "cannot start any token") && strings.Contains(text, "\t"):
		e.Col = 1 + strings.Index(text, "\t")
		e.Hint = "YAML indents with spaces; this line has a tab"
	case strings.Contains(desc, "did not find expected key"), strings.Contains(desc, "mapping values are not allowed"):
		e.Hint = "check this line's indentation: it must line up with the other entries of the block it belongs to"
	}
	return e
}
