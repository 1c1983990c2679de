package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/triagegw/triage/internal/hub"
)

const datasetsUsage = `usage:
  triage datasets fetch [--revision REV] [--out FILE] [--cache DIR] [--offline] REPO FILE
  triage datasets ls [--revision REV] REPO

fetch downloads one file of a Hugging Face dataset repo (JSONL or CSV, as
published) into the hub cache, verifies it (size, and sha256 for LFS
files), prints its local path, and with --out also copies it there. A
branch or tag costs one request once cached, a commit sha none; interrupted
downloads resume. ls lists a repo's files at a revision.

REPO is ORG/NAME as on huggingface.co/datasets/ORG/NAME; REV is a branch, a
tag or a commit sha (default main: pin a commit sha for reproducible
evaluations).

environment:
  HF_ENDPOINT       the hub (default https://huggingface.co)
  HF_TOKEN          token for gated or private repos
  HF_HUB_OFFLINE=1  serve from the cache only, like --offline
  TRIAGE_HUB_CACHE  the cache (default $XDG_CACHE_HOME/triage/hub or ~/.cache/triage/hub)

A labelled set can then be evaluated, mapping its columns and labels to
the classes the heads know:
  triage eval --heads DIR --data FILE --text-col COL --label-col COL --label-map MAP.yaml

example:
  triage eval --heads models/heads/subjects \
    --data "$(triage datasets fetch --revision SHA ORG/NAME data/test.jsonl)" \
    --text-col question --label-col subject --label-map subjects-map.yaml`

// runDatasets is "triage datasets": fetch and list files of Hugging Face
// dataset repos.
func runDatasets(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, datasetsUsage)
		return errUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(stderr, datasetsUsage)
		return flag.ErrHelp
	case "fetch":
		return runDatasetsFetch(ctx, args[1:], stdout, stderr)
	case "ls":
		return runDatasetsLs(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "triage datasets: unknown subcommand %q\n", args[0])
	fmt.Fprintln(stderr, datasetsUsage)
	return errUsage
}

func runDatasetsFetch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("triage datasets fetch", stderr)
	revision := fs.String("revision", hub.DefaultRevision, "branch, tag or commit sha")
	out := fs.String("out", "", "also copy the file here")
	cache := fs.String("cache", "", "hub cache directory (default $TRIAGE_HUB_CACHE, $XDG_CACHE_HOME/triage/hub or ~/.cache/triage/hub)")
	offline := fs.Bool("offline", false, "serve from the cache only, with no request (like HF_HUB_OFFLINE=1)")
	pos, err := parseDatasetsArgs(fs, args, stderr, "usage: triage datasets fetch [--revision REV] [--out FILE] [--cache DIR] [--offline] REPO FILE", 2)
	if err != nil {
		return err
	}
	repo, file := pos[0], pos[1]
	c := &hub.Client{CacheDir: *cache, Offline: *offline}
	p, err := c.Download(ctx, hub.Dataset, repo, *revision, file)
	if err != nil {
		if errors.Is(err, hub.ErrOffline) {
			return fmt.Errorf("%w\nto fetch it, with the network: triage datasets fetch --revision %s %s %s", err, *revision, repo, file)
		}
		return err
	}
	if *out != "" {
		if err := copyOut(p, *out); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		fmt.Fprintf(stderr, "datasets: copied to %s\n", *out)
	}
	fmt.Fprintln(stdout, p)
	return nil
}

func runDatasetsLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("triage datasets ls", stderr)
	revision := fs.String("revision", hub.DefaultRevision, "branch, tag or commit sha")
	pos, err := parseDatasetsArgs(fs, args, stderr, "usage: triage datasets ls [--revision REV] REPO", 1)
	if err != nil {
		return err
	}
	c := &hub.Client{}
	commit, files, err := c.ListFiles(ctx, hub.Dataset, pos[0], *revision)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "datasets: %s at %s (commit %s): %d files\n", pos[0], *revision, commit, len(files))
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return nil
}

// parseDatasetsArgs parses flags placed before, between or after exactly
// n positional arguments (everything after "--" is positional).
func parseDatasetsArgs(fs *flag.FlagSet, args []string, stderr io.Writer, usage string, n int) ([]string, error) {
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nrun 'triage datasets -h' for more")
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if len(pos) != n {
		fmt.Fprintf(stderr, "want %d argument(s), got %d: %q\n", n, len(pos), pos)
		fs.Usage()
		return nil, errUsage
	}
	return pos, nil
}
