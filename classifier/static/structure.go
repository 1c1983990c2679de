package static

import (
	"strings"
)

// Markers are the structural features tier 1 can learn: words no text can
// tokenise to (the tokenizer splits "<" and ">" off), each with a row of
// its own in a table trained with them, added to a text's rows once per
// occurrence of what it marks. They carry what tokens lose: the layout of
// lines, and a few shapes of technical text. The head learns what they
// mean for each class like any other row; nothing here decides a class.
var Markers = []string{
	"<code>",   // a line inside a ``` or ~~~ fence, or indented by a tab or four spaces
	"<fence>",  // a fence line
	"<trace>",  // a stack-trace line: Traceback, File "...", line N; at pkg.f(...); XyzError: / Exception:
	"<step>",   // a line numbered "1." / "2)" / "(a)" / "Step 3": steps of a proof, a procedure, a list of parts
	"<bullet>", // a line starting "- ", "* " or "• "
	"<shell>",  // a line starting "$ " or "> " followed by a command, or sudo/pip/npm/git/cd/ls ...
	"<latex>",  // a LaTeX command (\frac, \int, ...) or math delimiter ($$, \(, \[)
	"<file>",   // a file name with a code or data extension (main.py, config.yaml, ...)
}

const (
	mCode = iota
	mFence
	mTrace
	mStep
	mBullet
	mShell
	mLatex
	mFile
	numMarkers
)

// maxMarkers caps each marker's rows in one text: enough to tell a line of
// code from a page of it, while the text's own tokens keep most weight.
const maxMarkers = 32

// AppendMarkers appends to dst, for each structural feature of text, its
// marker's row from rows (one per marker, in Markers' order) once per
// occurrence, at most maxMarkers times each. It allocates nothing when dst
// has room: a few passes of strings.IndexByte over the text.
func AppendMarkers(dst []int32, text string, rows *[numMarkers]int32) []int32 {
	var n [numMarkers]int
	if strings.IndexByte(text, '\n') >= 0 || startsIndented(text) {
		lines(text, &n)
	}
	for i := 0; ; {
		j := strings.IndexByte(text[i:], '\\')
		if j < 0 {
			break
		}
		i += j + 1
		if i < len(text) && (isLetter(text[i]) || text[i] == '(' || text[i] == '[') {
			n[mLatex]++
		}
	}
	for i := 0; ; {
		j := strings.Index(text[i:], "$$")
		if j < 0 {
			break
		}
		n[mLatex]++
		i += j + 2
	}
	for i := 0; ; {
		j := strings.IndexByte(text[i:], '.')
		if j < 0 {
			break
		}
		i += j + 1
		if i >= 2 && isWordByte(text[i-2]) && i < len(text) && isLetter(text[i]) && fileExt(text[i:]) {
			n[mFile]++
		}
	}
	for m, c := range n {
		for range min(c, maxMarkers) {
			dst = append(dst, rows[m])
		}
	}
	return dst
}

func startsIndented(text string) bool {
	return strings.HasPrefix(text, "    ") || strings.HasPrefix(text, "\t")
}

// lines counts the line-level markers of text into n.
func lines(text string, n *[numMarkers]int) {
	fenced := false
	for len(text) > 0 {
		line := text
		if j := strings.IndexByte(text, '\n'); j >= 0 {
			line, text = text[:j], text[j+1:]
		} else {
			text = ""
		}
		trimmed := strings.TrimLeft(line, " \t")
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			n[mFence]++
			fenced = !fenced
			continue
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		indent := len(line) - len(trimmed)
		if fenced || strings.HasPrefix(line, "\t") || indent >= 4 {
			n[mCode]++
		}
		switch {
		case strings.HasPrefix(trimmed, "Traceback (most recent call last)"),
			strings.HasPrefix(trimmed, `File "`) && strings.Contains(trimmed, ", line "),
			strings.HasPrefix(trimmed, "at ") && strings.HasSuffix(trimmed, ")") && strings.IndexByte(trimmed, '(') > 3,
			errorLine(trimmed):
			n[mTrace]++
		case numbered(trimmed):
			n[mStep]++
		case strings.HasPrefix(trimmed, "- ") || strings.HasPrefix(trimmed, "* ") || strings.HasPrefix(trimmed, "• "):
			n[mBullet]++
		case shellLine(trimmed):
			n[mShell]++
		}
	}
}

// errorLine: "ValueError: ...", "java.lang.NullPointerException", "panic: ...".
func errorLine(s string) bool {
	if strings.HasPrefix(s, "panic: ") {
		return true
	}
	end := strings.IndexAny(s, ": ")
	if end < 0 {
		end = len(s)
	}
	w := s[:end]
	return len(w) > 5 && (strings.HasSuffix(w, "Error") || strings.HasSuffix(w, "Exception")) && (end == len(s) || s[end] == ':')
}

// numbered: "1. ", "12) ", "(a) ", "a) ", "Step 3".
func numbered(s string) bool {
	i := 0
	if strings.HasPrefix(s, "Step ") || strings.HasPrefix(s, "step ") {
		return len(s) > 5 && isDigit(s[5])
	}
	if len(s) > 0 && s[0] == '(' {
		i = 1
	}
	j := i
	for j < len(s) && j-i < 3 && isDigit(s[j]) {
		j++
	}
	if j == i && j < len(s) && s[j] >= 'a' && s[j] <= 'h' {
		j++ // one letter: (a), b)
	}
	if j == i || j+1 >= len(s) {
		return false
	}
	return (s[j] == '.' || s[j] == ')') && s[j+1] == ' '
}

var commands = []string{"sudo ", "pip ", "pip3 ", "npm ", "yarn ", "git ", "cd ", "ls ", "docker ", "kubectl ", "curl ", "wget ",
	"apt ", "apt-get ", "brew ", "make ", "go ", "cargo ", "python ", "python3 ", "node ", "chmod ", "mkdir ", "export "}

func shellLine(s string) bool {
	if strings.HasPrefix(s, "$ ") || strings.HasPrefix(s, "> ") && len(s) > 2 && isLetter(s[2]) && strings.IndexByte(s[2:], ' ') > 0 && isCommand(s[2:]) {
		return true
	}
	return isCommand(s)
}

func isCommand(s string) bool {
	for _, c := range commands {
		if strings.HasPrefix(s, c) {
			return true
		}
	}
	return false
}

var exts = []string{"py", "js", "ts", "tsx", "jsx", "go", "java", "c", "h", "cpp", "hpp", "cc", "cs", "rs", "rb", "php", "swift", "kt",
	"scala", "sh", "bash", "sql", "r", "m", "jl", "json", "yaml", "yml", "toml", "xml", "html", "css", "md", "csv", "tex", "ipynb",
	"txt", "log", "conf", "ini", "lock", "mod", "dockerfile", "gradle", "vue", "dart", "lua", "pl", "exe", "dll", "so"}

// fileExt: s starts with a known extension followed by the end of a word.
func fileExt(s string) bool {
	end := 0
	for end < len(s) && end < 11 && isWordByte(s[end]) {
		end++
	}
	if end == 0 || end < len(s) && isWordByte(s[end]) {
		return false
	}
	e := s[:end]
	for _, x := range exts {
		if len(x) == len(e) && strings.EqualFold(x, e) {
			return true
		}
	}
	return false
}

func isLetter(b byte) bool   { return b|0x20 >= 'a' && b|0x20 <= 'z' }
func isDigit(b byte) bool    { return b >= '0' && b <= '9' }
func isWordByte(b byte) bool { return isLetter(b) || isDigit(b) || b == '_' }
