package gendocs

import (
	"bytes"
	"flag"
	"fmt"
	"strings"
)

// Command is one command of a CLI as its reference shows it.
type Command struct {
	Name    string // "triage models pull"
	Summary string // one line, from the command list; "" for a subcommand
	// Usage is what the command prints above its flags for -h (its usage
	// line and description), if anything.
	Usage string
	Flags *flag.FlagSet // nil: the command takes no flags
}

// CLI writes the CLI reference: intro/cli.md, then a section per command with
// its usage and a table of its flags (name, type, default, meaning), as
// flag.PrintDefaults reads them from the flag set.
func CLI(cmds []Command) []byte {
	var b bytes.Buffer
	b.WriteString(generatedNote("go test ./cmd/triage -run TestReferenceDocs -update", "the commands' flag sets"))
	b.WriteString(strings.TrimSpace(cliIntro) + "\n")
	b.WriteString("\n| command | what it does |\n|---|---|\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", c.Name, anchor(c.Name), cell(c.Summary))
	}
	for _, c := range cmds {
		fmt.Fprintf(&b, "\n## %s\n", c.Name)
		if c.Summary != "" {
			fmt.Fprintf(&b, "\n%s.\n", upperFirst(c.Summary))
		}
		if u := strings.TrimSpace(c.Usage); u != "" {
			fmt.Fprintf(&b, "\n```text\n%s\n```\n", u)
		}
		if c.Flags == nil {
			continue
		}
		n := 0
		c.Flags.VisitAll(func(*flag.Flag) { n++ })
		if n == 0 {
			continue
		}
		b.WriteString("\n| flag | type | default | meaning |\n|---|---|---|---|\n")
		c.Flags.VisitAll(func(f *flag.Flag) {
			typ, usage := flag.UnquoteUsage(f)
			if typ == "" {
				typ = "bool"
				if _, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok {
					typ = "value"
				}
			}
			def := f.DefValue
			if zeroDefault(f) {
				def = "—"
			} else {
				def = "`" + def + "`"
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, typ, cell(def), cell(usage))
		})
	}
	return b.Bytes()
}

// zeroDefault reports whether f's default is its type's zero value, which
// PrintDefaults leaves unsaid too.
func zeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
