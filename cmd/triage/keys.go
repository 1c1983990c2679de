package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/tenancy"
)

const keysUsage = `usage:
  triage keys create (--file FILE | --config FILE) --principal NAME [--groups A,B] [--expires 720h|2027-01-31] [--note TEXT]
  triage keys list   (--file FILE | --config FILE)
  triage keys revoke (--file FILE | --config FILE) ID

create makes an API key for a principal, prints it once (stdout) and keeps
only its sha256 in the keys file (created, mode 0600, when missing); list
shows the keys (id, principal, groups, state), never a secret; revoke marks
one revoked. --config finds the file as access.keys_file of that config. A
running gateway reloads the file when it changes.

Clients send the key as "Authorization: Bearer sk-triage-…" (or x-api-key).`

// runKeys is "triage keys": manage the API keys file.
func runKeys(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, keysUsage)
		return errUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(stderr, keysUsage)
		return flag.ErrHelp
	case "create":
		return runKeysCreate(args[1:], stdout, stderr)
	case "list", "ls":
		return runKeysList(args[1:], stdout, stderr)
	case "revoke":
		return runKeysRevoke(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "triage keys: unknown subcommand %q\n", args[0])
	fmt.Fprintln(stderr, keysUsage)
	return errUsage
}

// keysFlags are the flags every keys subcommand takes: where the file is.
type keysFlags struct{ file, config *string }

func newKeysFlags(name string, stderr io.Writer) (*flag.FlagSet, keysFlags) {
	fs := newFlagSet("triage keys "+name, stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, keysUsage)
		fs.PrintDefaults()
	}
	return fs, keysFlags{
		file:   fs.String("file", "", "the keys file"),
		config: fs.String("config", "", "a gateway config: its access.keys_file"),
	}
}

func (k keysFlags) path() (string, error) {
	switch {
	case *k.file != "" && *k.config != "":
		return "", usageError("give --file or --config, not both")
	case *k.file != "":
		return *k.file, nil
	case *k.config != "":
		p, err := config.KeysFile(*k.config)
		if err != nil {
			return "", err
		}
		if p == "" {
			return "", usageError("%s has no access.keys_file: add one (keys_file: keys.jsonl under access:) or use --file", *k.config)
		}
		return p, nil
	}
	return "", usageError("name the keys file: --file FILE, or --config FILE for its access.keys_file")
}

func runKeysCreate(args []string, stdout, stderr io.Writer) error {
	fs, kf := newKeysFlags("create", stderr)
	principal := fs.String("principal", "", "who the key acts for (required)")
	groups := fs.String("groups", "", "comma-separated groups the key belongs to")
	expires := fs.String("expires", "", "when it stops working: a duration from now (720h) or a date (2027-01-31, RFC 3339)")
	note := fs.String("note", "", "free text kept with the key (whom it was issued to)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
	}
	path, err := kf.path()
	if err != nil {
		return err
	}
	now := time.Now()
	exp, err := parseExpiry(*expires, now)
	if err != nil {
		return usageError("--expires: %v", err)
	}
	var gs []string
	for g := range strings.SplitSeq(*groups, ",") {
		if g = strings.TrimSpace(g); g != "" {
			gs = append(gs, g)
		}
	}
	secret, k, err := tenancy.NewKey(*principal, gs, exp, now)
	if err != nil {
		return usageError("%v", err)
	}
	k.Note = *note
	if err := tenancy.AppendKey(path, k); err != nil {
		return err
	}
	fmt.Fprintln(stdout, secret)
	fmt.Fprintf(stderr, "keys: created key %s for %s in %s; the line above is the only copy of the key\n", k.ID, k.Principal, path)
	return nil
}

func parseExpiry(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%q is not in the future", s)
		}
		return now.Add(d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			if !t.After(now) {
				return time.Time{}, fmt.Errorf("%s is not in the future", s)
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (720h) nor a date (2027-01-31 or RFC 3339)", s)
}

func runKeysList(args []string, stdout, stderr io.Writer) error {
	fs, kf := newKeysFlags("list", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	path, err := kf.path()
	if err != nil {
		return err
	}
	keys, err := tenancy.LoadKeys(path)
	if err != nil {
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPRINCIPAL\tGROUPS\tCREATED\tEXPIRES\tSTATE\tNOTE")
	day := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, k := range keys {
		g := strings.Join(k.Groups, ",")
		if g == "" {
			g = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Principal, g, day(k.Created), day(k.Expires), k.Status(now), k.Note)
	}
	return tw.Flush()
}

func runKeysRevoke(args []string, stdout, stderr io.Writer) error {
	fs, kf := newKeysFlags("revoke", stderr)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != 1 {
		return usageError("name one key id to revoke (triage keys list shows them)")
	}
	path, err := kf.path()
	if err != nil {
		return err
	}
	k, err := tenancy.RevokeKey(path, pos[0], time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "revoked key %s of %s\n", k.ID, k.Principal)
	return nil
}

// usageError is a mistake in the command line: printed, exit status 2.
func usageError(format string, a ...any) error { return badInput(fmt.Errorf(format, a...)) }
