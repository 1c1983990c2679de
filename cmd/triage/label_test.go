package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/label"
)

// TestLabelCommand: triage label's flags and refusals, and --status, in
// process (the page itself is tested in Chromium by package label).
func TestLabelCommand(t *testing.T) {
	dir := t.TempDir()
	sample := filepath.Join(dir, "sample.jsonl")
	// Two records and a third cut short.
	os.WriteFile(sample, []byte(`{"text":"Can my landlord keep my deposit?","decision":{"pool":"legal","route":"legal","class":"law","score":0.9,"tier":1,"reason":"tier1_confident"},"route_classes":["law"]}
{"text":"banana bread","decision":{"pool":"general","class":"other","score":0.8,"tier":1,"reason":"default"}}
{"text":"how do I reb`), 0o600)
	out := filepath.Join(dir, "mine.jsonl")
	cmd := func(args ...string) (int, string, string) {
		var o, e bytes.Buffer
		code := run(context.Background(), append([]string{"label"}, args...), &o, &e)
		return code, o.String(), e.String()
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--out", out}, 2, "--sample is required"},
		{[]string{"--sample", sample}, 2, "--out is required"},
		{[]string{"--sample", sample, "--out", out, "--classes", "law", "--listen", "0.0.0.0:8090"}, 2, "is not a loopback address"},
		{[]string{"--sample", filepath.Join(dir, "none.jsonl"), "--out", out, "--classes", "law"}, 2, "none.jsonl"},
		{[]string{"--sample", sample, "--out", out, "--config", filepath.Join(dir, "none.yaml")}, 2, "none.yaml"},
	} {
		code, _, stderr := cmd(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.says) {
			t.Errorf("triage label %v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.says)
		}
	}

	code, stdout, stderr := cmd("--sample", sample, "--out", out, "--classes", "law,business", "--status")
	for _, want := range []string{"2 prompts to label from " + sample + " (2 records)", "ends in a line cut short", "0 labelled, 0 not sure, 2 left", "the sample is too small"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("label --status: exit %d, stdout:\n%s\nstderr: %s\nwant %q", code, stdout, stderr, want)
		}
	}

	// A second process on the same labels file is refused.
	s, err := label.Open(label.Options{Samples: []string{sample}, Out: out, Classes: []string{"law"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if code, _, stderr := cmd("--sample", sample, "--out", out, "--classes", "law", "--status"); code != 1 || !strings.Contains(stderr, "another triage label is writing this labels file") {
		t.Errorf("label while another labels: exit %d, stderr %q", code, stderr)
	}
}
