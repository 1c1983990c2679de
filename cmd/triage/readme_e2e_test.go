package main

// The README is the front door, and docs/ the rest of the house: every
// `bin/triage` command the README and the pages of docs/ show runs, from
// the repository root, with the built binary, and says what the page says
// it says. Output a page quotes in full is compared line for line; output
// it abbreviates ("...") or quotes in a JSON comment is checked field by
// field ("key": value pairs, numbers to the digits shown). The
// quickstart's curl requests (the README's and docs/getting-started.md's)
// run against `serve --sim` on the shipped triage.yaml, and the X-*
// headers shown are the headers the gateway sends. Every relative link of
// those pages leads to a file that exists, and to a heading of it when it
// names one.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/triagegw/triage/internal/testenv"
)

// readmeCmd is one `bin/triage` command shown in the README or a page of
// docs/.
type readmeCmd struct {
	file     string   // the page, relative to the repository root
	line     int      // where it starts
	raw      string   // as shown
	args     []string // after bin/triage
	redirect bool     // it uses <, > or |
	output   []string // the lines shown after it (its output)
	comments []string // "# ..." lines shown after it
}

// readmeCurl is one curl request of the quickstart, and the response
// headers shown after it (one line per request sent).
type readmeCurl struct {
	file   string
	line   int
	path   string
	body   string // -d; empty: GET
	expect []string
}

// readmeSkips are the commands of the README and docs/ this test does not
// run, by their first words, and why.
var readmeSkips = []struct{ prefix, why string }{
	{"serve", "runs until stopped; the quickstart test runs it"},
	{"train", "trains for minutes; train_test.go and train_ort_test.go train on samples"},
	{"models pull", "needs the Hugging Face hub (models_pull_test.go uses a local server)"},
	{"models import", "needs a TF.js model directory; setup runs it, models_tfjs_test.go tests it"},
	{"models quantize", "minutes on the 2-core machine; models_quantize_test.go quantizes a small model"},
	{"models gen-bert", "writes bge-small's 130 MB of weights; tier2_e2e_test.go generates a smaller one"},
	{"keys create", "adds a key to the example's keys file; access_e2e_test.go creates and revokes keys in a copy"},
	{"distill", "runs every vocabulary token through tier 2; distill_ort_test.go distills a small one"},
	{"label", "serves a page until stopped; label/browser_test.go drives it in Chromium (label --status runs)"},
	{"calibrate --rules examples/subjects/rules.yaml", "minutes on the 2-core machine (each candidate fitted without each source, and the whole fit without each); TestCalibrateRulesHeldOutCLI runs it on 200 items of each source"},
}

// docPages are the pages whose commands and links are checked: the README
// and every page of docs/, relative to root.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{"README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		pages = append(pages, filepath.ToSlash(rel))
	}
	if len(pages) < 10 {
		t.Fatalf("found %d pages (README.md and docs/*.md): is docs/ there?", len(pages))
	}
	return pages
}

// quickstartPages are the pages whose curl requests run against the
// default configuration.
var quickstartPages = []string{"README.md", "docs/getting-started.md"}

// parseREADME finds a page's triage commands (in code blocks and in
// inline code) and curl requests; page is relative to root.
func parseREADME(t *testing.T, root, page string) ([]readmeCmd, []readmeCurl) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var cmds []readmeCmd
	var curls []readmeCurl
	var para []string // prose lines, for inline code spanning lines
	paraLine := 0
	inline := regexp.MustCompile("`(bin/triage [^`]+)`")
	flush := func() {
		text := strings.Join(para, " ")
		for _, m := range inline.FindAllStringSubmatch(text, -1) {
			c := readmeCmd{file: page, line: paraLine, raw: m[1]}
			c.args, c.redirect = shellWords(strings.TrimPrefix(m[1], "bin/triage "))
			cmds = append(cmds, c)
		}
		para = para[:0]
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "```") {
			if strings.TrimSpace(l) == "" {
				flush()
			} else {
				if len(para) == 0 {
					paraLine = i + 1
				}
				para = append(para, l)
			}
			continue
		}
		flush()
		lang := strings.TrimPrefix(l, "```")
		i++
		var last *readmeCmd // the command the lines that follow belong to
		var lastCurl *readmeCurl
		for ; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			if lang != "" {
				continue // yaml, json: not commands
			}
			start := i
			logical := lines[i]
			for strings.HasSuffix(logical, "\\") && i+1 < len(lines) {
				i++
				logical = strings.TrimSuffix(logical, "\\") + " " + strings.TrimSpace(lines[i])
			}
			text := strings.TrimPrefix(logical, "$ ")
			switch {
			case strings.HasPrefix(text, "bin/triage "):
				c := readmeCmd{file: page, line: start + 1, raw: text}
				c.args, c.redirect = shellWords(strings.TrimPrefix(text, "bin/triage "))
				cmds = append(cmds, c)
				last, lastCurl = &cmds[len(cmds)-1], nil
			case strings.HasPrefix(text, "curl "):
				cu := readmeCurl{file: page, line: start + 1, path: "/v1/chat/completions"}
				if m := regexp.MustCompile(`localhost:\d+(/\S*)`).FindStringSubmatch(text); m != nil {
					cu.path = m[1]
				}
				if m := regexp.MustCompile(`-d '([^']*)'`).FindStringSubmatch(text); m != nil {
					cu.body = m[1]
				}
				curls = append(curls, cu)
				last, lastCurl = nil, &curls[len(curls)-1]
			case strings.HasPrefix(logical, "$ ") || strings.HasPrefix(text, "make ") || strings.HasPrefix(text, "docker "):
				last, lastCurl = nil, nil // another program's command
			case lastCurl != nil:
				lastCurl.expect = append(lastCurl.expect, text)
			case last != nil && strings.HasPrefix(strings.TrimSpace(text), "#"):
				last.comments = append(last.comments, strings.TrimSpace(text))
			case last != nil:
				last.output = append(last.output, text)
			}
		}
	}
	flush()
	return cmds, curls
}

// shellWords splits a command line as sh would (quotes, backslashes),
// stopping at a comment; redirect reports an unquoted <, > or |.
func shellWords(s string) (words []string, redirect bool) {
	var w strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			end()
		case c == '#' && !inWord:
			return words, redirect
		case c == '<' || c == '>' || c == '|':
			end()
			redirect = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			w.WriteString(s[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				w.WriteByte(s[i])
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	end()
	return words, redirect
}

// placeholder names an input the README stands in for the user's own
// (my-labelled.jsonl, heldout.jsonl, DIR, [optional flags]): the command
// cannot run as shown.
func placeholder(root string, args []string) string {
	for i, a := range args {
		if strings.HasPrefix(a, "[") {
			return a
		}
		if i > 0 && (args[i-1] == "--out" || args[i-1] == "--html") {
			continue // written, not read
		}
		if a == "-" {
			return "standard input"
		}
		if upperWord.MatchString(a) {
			return a // FILE, DIR
		}
		if !strings.HasPrefix(a, "-") && pathLike(a) {
			if _, err := os.Stat(filepath.Join(root, a)); err != nil {
				return a
			}
		}
	}
	return ""
}

var upperWord = regexp.MustCompile(`^[A-Z]{2,}(\.[a-z]+)?$`) // FILE, DIR; not the word "I"

func pathLike(a string) bool {
	if strings.ContainsAny(a, " ?") {
		return false // a prompt
	}
	for _, ext := range []string{".jsonl", ".json", ".csv", ".yaml", ".tbl", ".html"} {
		if strings.Contains(a, ext) {
			return true
		}
	}
	return strings.HasPrefix(a, "var/") || strings.HasPrefix(a, "models/") || strings.HasPrefix(a, "../")
}

// TestREADMECommands runs every triage command the README and the pages of
// docs/ show.
func TestREADMECommands(t *testing.T) {
	root, _ := readmeRoot(t)
	ran := 0
	for _, page := range docPages(t, root) {
		ran += runShownCommands(t, root, page)
	}
	if ran < 12 {
		t.Fatalf("ran %d commands of the README and docs/; they show more (is the parser broken?)", ran)
	}
}

// runShownCommands runs the triage commands the page doc (relative to
// root) shows, and returns how many ran. A page's `encode serve` (which
// runs until stopped) is started, and the commands after it run against
// it; it is stopped when the test ends.
func runShownCommands(t *testing.T, root, doc string) int {
	t.Helper()
	cmds, _ := parseREADME(t, root, doc)
	ran := 0
	for _, c := range cmds {
		if len(c.args) > 2 && c.args[0] == "encode" && c.args[1] == "serve" && slices.Contains(c.args, "--listen") {
			p := startIn(t, root, "encoder ("+doc+")", c.args...)
			p.addr = c.args[slices.Index(c.args, "--listen")+1]
			if err := p.waitReady("/ready", 20*time.Second); err != nil {
				t.Fatalf("%s:%d: bin/triage %s: %v", c.file, c.line, strings.Join(c.args, " "), err)
			}
			t.Logf("%s:%d: started bin/triage %s", c.file, c.line, strings.Join(c.args, " "))
			continue
		}
		name := fmt.Sprintf("%s:%d", strings.ReplaceAll(c.file, "/", "-"), c.line)
		skip := ""
		if p := placeholder(root, c.args); p != "" {
			skip = "its input " + strconv.Quote(p) + " stands for the user's own"
		}
		for _, s := range readmeSkips {
			if skip != "" || slices.Contains(c.args, "--check") || slices.Contains(c.args, "--status") {
				break // serve --check and label --status check and exit
			}
			if strings.HasPrefix(strings.Join(c.args, " ")+" ", s.prefix+" ") {
				skip = s.why
			}
		}
		if skip == "" && c.redirect {
			skip = "it uses the shell's redirection"
		}
		if skip != "" {
			t.Logf("%s:%d: not run (%s): bin/triage %s", c.file, c.line, skip, strings.Join(c.args, " "))
			continue
		}
		ran++
		t.Run(name, func(t *testing.T) {
			args := make([]string, len(c.args))
			copy(args, c.args)
			written := map[string]string{} // where an output file went → the path shown
			for i := 1; i < len(args); i++ {
				if args[i-1] == "--out" || args[i-1] == "--html" {
					args[i] = filepath.Join(t.TempDir(), filepath.Base(args[i])) // not into the repository
					written[args[i]] = c.args[i]
				}
			}
			t0 := time.Now()
			code, stdout, stderr := runIn(t, root, nil, args...)
			t.Logf("%s:%d: bin/triage %s: exit %d in %v", c.file, c.line, strings.Join(args, " "), code, time.Since(t0).Round(time.Millisecond))
			if code != 0 {
				t.Fatalf("%s:%d: bin/triage %s: exit %d\nstdout:\n%s\nstderr:\n%s", c.file, c.line, strings.Join(args, " "), code, stdout, stderr)
			}
			for got, shown := range written {
				stdout = strings.ReplaceAll(stdout, got, shown) // as if run as shown
			}
			// Comments after a command are its output too: "# {...}" lines
			// are checked field by field; other "# ..." lines, when no line
			// is JSON, line for line.
			var claims, commented []string
			for _, cm := range c.comments {
				text := strings.TrimSpace(strings.TrimPrefix(cm, "#"))
				if strings.HasPrefix(text, "{") {
					claims = append(claims, cm)
				} else {
					commented = append(commented, text)
				}
			}
			output := c.output
			if len(claims) == 0 && len(c.output) == 0 {
				output = commented
			}
			shown := strings.Join(output, "\n")
			switch {
			case len(output) == 0:
			case strings.Contains(shown, "..."):
				claims = append(claims, shown)
			default:
				if got := trimLines(stdout); got != trimLines(shown) {
					t.Errorf("%s:%d: bin/triage %s prints\n%s\nthe page shows\n%s", c.file, c.line, strings.Join(args, " "), got, trimLines(shown))
				}
			}
			for _, cl := range claims {
				checkClaims(t, fmt.Sprintf("%s:%d", c.file, c.line), cl, stdout)
			}
		})
	}
	return ran
}

// readmeRoot is the repository root, skipping when the model files are not
// where the shipped configs look for them or under the race detector (the
// commands classify thousands of prompts; -race makes that minutes).
func readmeRoot(t *testing.T) (root, models string) {
	t.Helper()
	if raceEnabled() {
		t.Skip("under -race; make test runs it without")
	}
	if !strings.Contains(buildSetting("-tags"), "ort") {
		t.Skip("the README's figures include tier 2: run with -tags ort, as make test does")
	}
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	models = testenv.Models(t, "tables/subjects-tier1.tbl", "tokenizer/bert-base-uncased.json")
	if models != filepath.Join(root, "var", "models") {
		t.Skipf("the model files are in %s, not %s, where the README's commands look for them", models, filepath.Join(root, "var", "models"))
	}
	return root, models
}

func trimLines(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n")
}

var claimRE = regexp.MustCompile(`"([A-Za-z_0-9]+)":\s*("(?:[^"\\]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?)`)

// checkClaims checks each "key": value the README shows against the JSON
// the command printed: some occurrence of the key has that value (a number
// to the digits shown).
func checkClaims(t *testing.T, where string, shown, stdout string) {
	t.Helper()
	vals := map[string][]any{}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.UseNumber()
	for {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			break
		} else if err != nil {
			t.Errorf("%s: output is not JSON: %v\n%s", where, err, stdout)
			return
		}
		collect(v, vals)
	}
	pairs := claimRE.FindAllStringSubmatch(shown, -1)
	if len(pairs) == 0 {
		t.Errorf("%s: no \"key\": value in %q", where, shown)
	}
	for _, p := range pairs {
		key, want := p[1], p[2]
		ok := false
		for _, got := range vals[key] {
			ok = ok || claimHolds(want, got)
		}
		if !ok {
			t.Errorf("%s: the page shows \"%s\": %s; the output has %v", where, key, want, vals[key])
		}
	}
}

func collect(v any, vals map[string][]any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			vals[k] = append(vals[k], e)
			collect(e, vals)
		}
	case []any:
		for _, e := range x {
			collect(e, vals)
		}
	}
}

// claimHolds reports whether got matches the README's want: a string
// exactly, a number rounded to want's decimals.
func claimHolds(want string, got any) bool {
	if strings.HasPrefix(want, `"`) {
		s, err := strconv.Unquote(want)
		g, ok := got.(string)
		return err == nil && ok && s == g
	}
	n, ok := got.(json.Number)
	if !ok {
		return false
	}
	g, err1 := n.Float64()
	w, err2 := strconv.ParseFloat(want, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	digits := 0
	if i := strings.IndexByte(want, '.'); i >= 0 {
		digits = len(want) - i - 1
	}
	scale := math.Pow(10, float64(digits))
	return math.Round(g*scale) == math.Round(w*scale)
}

// TestREADMEQuickstart runs the quickstart: the shipped triage.yaml under
// `serve --sim` (on free ports), and the curl requests the README and
// docs/getting-started.md show, checking the X-* headers shown after each
// (in a comment after a response body too). A replica is checked by its
// pool (general-0 and general-1 are both the general pool's). A curl on
// another page is not run: it is logged.
func TestREADMEQuickstart(t *testing.T) {
	root, models := readmeRoot(t)
	var curls []readmeCurl
	for _, page := range docPages(t, root) {
		_, c := parseREADME(t, root, page)
		if !slices.Contains(quickstartPages, page) {
			for _, cu := range c {
				t.Logf("%s:%d: not run (the quickstart's requests are those of %v): curl %s", cu.file, cu.line, quickstartPages, cu.path)
			}
			continue
		}
		curls = append(curls, c...)
	}
	if n := len(curls); n < 7 {
		t.Fatalf("found %d curl requests in %v; they show more (is the parser broken?)", n, quickstartPages)
	}
	cfg, err := os.ReadFile(filepath.Join(root, "triage.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The shipped config, with its replicas on free ports and its paths
	// absolute: the same pools, rules and heads.
	text := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).ReplaceAllStringFunc(string(cfg), func(string) string {
		return "http://" + freeAddr(t)
	})
	text = regexp.MustCompile(`(?m)^rules:\s*rules\.yaml`).ReplaceAllString(text, "rules: "+filepath.Join(root, "rules.yaml"))
	text = regexp.MustCompile(`(?m)^listen:.*$`).ReplaceAllString(text, "")
	text = "models_dir: " + models + "\n" + text
	cfgPath := filepath.Join(t.TempDir(), "triage.yaml")
	writeFile(t, cfgPath, text)
	gw := startReady(t, "gateway", "/readyz", "serve", "--config", cfgPath, "--sim")
	c := newClient(t)
	for _, cu := range curls {
		send := func() *http.Response {
			t.Helper()
			method, body := http.MethodGet, io.Reader(nil)
			if cu.body != "" {
				method, body = http.MethodPost, strings.NewReader(cu.body)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, method, gw.url(cu.path), body)
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s:%d: %v", cu.file, cu.line, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b))
			return resp
		}
		// One header a line (the full response shown) is one response;
		// several on a line are one response each.
		var wants [][][2]string
		single := false
		for _, e := range cu.expect {
			w := headerClaims(e)
			switch {
			case len(w) == 0:
			case len(w) == 1 && single:
				wants[len(wants)-1] = append(wants[len(wants)-1], w[0])
			default:
				wants = append(wants, w)
				single = len(w) == 1
			}
		}
		if len(wants) == 0 {
			resp := send()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Errorf("%s:%d: %s: %d %s", cu.file, cu.line, cu.path, resp.StatusCode, b)
			}
			if strings.Contains(cu.body, `"stream":true`) && !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") {
				t.Errorf("%s:%d: the stream does not end with data: [DONE]:\n%s", cu.file, cu.line, b)
			}
			continue
		}
		// The first line shown is the first answer; a later line is what
		// the same request gets once the gateway has settled (tier 2
		// loaded), so it is waited for.
		for i, want := range wants {
			if i == 0 {
				resp := send()
				if bad := headerMismatch(resp, want); bad != "" {
					t.Errorf("%s:%d: %s", cu.file, cu.line, bad)
				}
				continue
			}
			testenv.WaitWithin(t, 60*time.Second, fmt.Sprintf("%s:%d's %v", cu.file, cu.line, want), func() (bool, string) {
				bad := headerMismatch(send(), want)
				return bad == "", bad
			})
		}
	}
}

// headerClaims parses a line of headers shown after a curl ("HTTP/1.1 200
// OK", "X-Name: value", or several "X-Name: value" separated by runs of
// spaces, then an optional # comment), or a response body followed by a
// comment naming headers ("{...}   # X-Name: value, X-Other: value").
func headerClaims(line string) [][2]string {
	comment := ""
	if i := strings.Index(line, "#"); i >= 0 {
		line, comment = line[:i], line[i+1:]
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "{") {
		line = strings.ReplaceAll(strings.TrimSpace(comment), ", X-", "  X-")
	}
	if m := regexp.MustCompile(`^HTTP/1\.1 (\d{3})`).FindStringSubmatch(line); m != nil {
		return [][2]string{{":status", m[1]}}
	}
	var out [][2]string
	for _, part := range regexp.MustCompile(`\s{2,}`).Split(line, -1) {
		name, value, ok := strings.Cut(part, ": ")
		if ok && strings.HasPrefix(name, "X-") {
			out = append(out, [2]string{name, strings.TrimSpace(value)})
		}
	}
	return out
}

// headerMismatch says how resp differs from the headers shown ("" if not).
func headerMismatch(resp *http.Response, want [][2]string) string {
	var bad []string
	for _, w := range want {
		got := resp.Header.Get(w[0])
		switch w[0] {
		case ":status":
			got = strconv.Itoa(resp.StatusCode)
		case "X-Sim-Replica": // the pool: its replicas share the load
			got, w[1] = poolOf(got), poolOf(w[1])
		}
		if got != w[1] {
			bad = append(bad, fmt.Sprintf("%s: %q, the README shows %q", w[0], got, w[1]))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return strings.Join(bad, "; ")
}

func poolOf(replica string) string {
	if i := strings.LastIndexByte(replica, '-'); i > 0 {
		return replica[:i]
	}
	return replica
}

var (
	mdLinkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdCodeSpanRE = regexp.MustCompile("`[^`]*`")
	mdHeadingRE  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	mdInlineRE   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// TestREADMELinks checks every relative link of the README and the pages
// of docs/: the file or directory it names exists, and a #fragment names
// a heading of the markdown page it points to.
func TestREADMELinks(t *testing.T) {
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // page → its headings' ids
	headings := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		a := map[string]bool{}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		forEachProseLine(string(b), func(_ int, l string) {
			m := mdHeadingRE.FindStringSubmatch(l)
			if m == nil {
				return
			}
			id := headingID(m[2])
			if n := seen[id]; n > 0 {
				a[fmt.Sprintf("%s-%d", id, n)] = true
			} else {
				a[id] = true
			}
			seen[id]++
		})
		anchors[file] = a
		return a
	}
	checked := 0
	for _, page := range docPages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		forEachProseLine(string(b), func(line int, l string) {
			for _, m := range mdLinkRE.FindAllStringSubmatch(mdCodeSpanRE.ReplaceAllString(l, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				file := filepath.Join(root, page) // a bare #fragment: this page
				if path != "" {
					file = filepath.Join(root, filepath.Dir(page), filepath.FromSlash(path))
				}
				if rel, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s:%d: the link %q leaves the repository", page, line, target)
					continue
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: the link %q names a file that does not exist: %v", page, line, target, err)
					continue
				}
				if frag != "" && strings.HasSuffix(file, ".md") && !headings(file)[frag] {
					t.Errorf("%s:%d: the link %q names #%s, which is no heading of %s", page, line, target, frag, filepath.Base(file))
				}
			}
		})
	}
	if checked < 50 {
		t.Fatalf("checked %d links; the pages have more (is the parser broken?)", checked)
	}
}

// forEachProseLine calls f with each line of a markdown text outside its
// fenced code blocks, numbered from 1.
func forEachProseLine(text string, f func(line int, l string)) {
	fenced := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			f(i+1, l)
		}
	}
}

// headingID is the id GitHub gives a heading: its text lower-cased,
// without punctuation other than hyphens and underscores, spaces as
// hyphens.
func headingID(h string) string {
	h = mdInlineRE.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
