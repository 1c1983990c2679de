// Command triage is the semantic-routing gateway for OpenAI-compatible LLM
// servers, and its tools.
//
//	triage serve --config FILE [--listen ADDR]              run the gateway
//	triage route --config FILE PROMPT                       explain a routing decision
//	triage rules check [--config FILE] [--data F] [RULES]   check rules, dry-run them
//	triage eval --heads DIR | --rules FILE --data FILE      evaluate (text, JSON, HTML; gates)
//	triage calibrate [--config FILE | --heads DIR] --data F fit floors to a target precision
//	triage ab --a SPEC --b SPEC --data FILE                 compare two heads tiers, or two rule sets
//	triage classify [--config FILE | --heads DIR] TEXT...   classify one text (the arguments joined), or - for JSONL
//	triage train --data FILE --tier 1 --out DIR             train class heads
//	triage models import glove|model2vec ... | info PATH    build and inspect model tables and encoders
//	triage encode serve [--heads DIR | --model DIR] [--listen ADDR] serve tier 2's encoder at /v1/embeddings
//	triage sim --listen ADDR --model NAME [...]             run a simulated vLLM replica
//	triage version (or --version, -v)                       print the version
//
// A path in a config file is relative to that file, a path in a rules file
// to the rules file, and a path on the command line to the working
// directory (see where.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/triagegw/triage/datasets"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the gateway", runServe},
		{"route", "explain how the gateway would route a prompt", runRoute},
		{"rules", "check a rules file, and dry-run it over prompts", runRules},
		{"eval", "measure how well a tier or a rule set routes a labelled dataset", runEval},
		{"ab", "compare two heads tiers (on classes) or two rule sets (on routes) on a labelled dataset", runAB},
		{"calibrate", "fit per-class floors (and the temperature) to a target precision", runCalibrate},
		{"label", "label a sample of live prompts in a local web page, with the keyboard", runLabel},
		{"classify", "classify a text (the arguments joined) with a heads artifact (tier 1 or 2)", runClassify},
		{"train", "train class heads on a labelled JSONL dataset", runTrain},
		{"encode", "serve tier 2's encoder over the OpenAI embeddings API (encode serve), as a deployment of its own", runEncode},
		{"sim", "run a simulated vLLM replica (for trying triage out, tests and benchmarks)", runSim},
		{"models", "build, convert, pull and inspect the classifier's model files (tables, encoders)", runModels},
		{"distill", "build a tier-1 static table from a tier-2 encoder (model2vec)", runDistill},
		{"keys", "create, list and revoke the gateway's API keys", runKeys},
		{"datasets", "fetch and list files of Hugging Face dataset repos (to evaluate on)", runDatasets},
		{"version", "print the version (also triage --version, -v)", func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			fmt.Fprintln(stdout, versionString())
			return nil
		}},
	}
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: triage <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nrun 'triage <command> -h' for a command's flags")
}

// errUsage marks a command-line mistake: exit status 2.
var errUsage = errors.New("usage")

// inputError is a mistake in what a command was given rather than a
// failure of its work (a dataset with no rows, a missing column): its
// message is printed and the exit status is 2, as for a bad flag.
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

// badInput marks err as an inputError.
func badInput(err error) error {
	if err == nil {
		return nil
	}
	return inputError{err}
}

// exitCode is the status err ends command name with, printing the error
// unless the command printed it already.
func exitCode(name string, err error, stderr io.Writer) int {
	var in inputError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	// A package's errors start with its name ("models: ..."); the command's
	// name says it already.
	fmt.Fprintf(stderr, "triage %s: %s\n", name, strings.TrimPrefix(err.Error(), name+": "))
	if errors.As(err, &in) || errors.Is(err, datasets.ErrEmpty) {
		return 2
	}
	return 1
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "--version", "-version", "-v":
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		return exitCode(c.name, c.run(ctx, args[1:], stdout, stderr), stderr)
	}
	fmt.Fprintf(stderr, "triage: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// newFlagSet is the flag set of command name, writing its errors and help
// to stderr. Every command builds its flags with it, so that the CLI
// reference (docs/cli.md) can collect them: when stderr is a flagSink, the
// flag set is handed to it, and the command, run with -h, stops at its
// help as ever.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if s, ok := stderr.(flagSink); ok {
		s.addFlagSet(fs)
	}
	return fs
}

// flagSink collects the flag sets a command builds (see newFlagSet).
type flagSink interface {
	io.Writer
	addFlagSet(*flag.FlagSet)
}

// parseFlags parses args into fs, printing errors to stderr; a bad flag is
// errUsage.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %v\n", fs.Args())
		fs.Usage()
		return errUsage
	}
	return nil
}

// buildTime is the time stamped into artifacts: $SOURCE_DATE_EPOCH (the
// reproducible-builds convention) when set, so the same inputs give the
// same bytes, or now.
func buildTime() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Now().UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %v", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// parseWithArgs is parseFlags for commands that take positional arguments:
// usage heads the help text, and at least one argument is required.
func parseWithArgs(fs *flag.FlagSet, args []string, stderr io.Writer, usage string) error {
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	return nil
}
