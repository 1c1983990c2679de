package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// The sample: section: off by default, its path relative to the config,
// its sizes parsed, and every problem reported under its key.
func TestSampleSection(t *testing.T) {
	dir := t.TempDir()
	c, err := Load(write(t, dir, "triage.yaml", good))
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Sample; s.Enabled() || s.Rate != 0.01 || s.MaxPerHour != 1000 || s.MaxBytes != 64<<20 || s.Keep != 3 || s.Principal {
		t.Fatalf("sample defaults: %+v", s)
	}

	c, err = Load(write(t, dir, "triage.yaml", good+`
sample: {path: var/samples.jsonl, rate: 0.05, max_per_hour: 200, max_bytes: 8MiB, keep: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Sample; !s.Enabled() || s.Path != filepath.Join(dir, "var", "samples.jsonl") || s.Rate != 0.05 || s.MaxPerHour != 200 || s.MaxBytes != 8<<20 || s.Keep != 2 {
		t.Fatalf("sample = %+v", s)
	}

	_, err = Load(write(t, dir, "triage.yaml", good+`
sample: {path: s.jsonl, rate: 1.5, max_per_hour: -1, max_bytes: 12XB, keep: -2, principle: true}
`))
	for _, want := range []string{
		"sample.rate: must be above 0 and at most 1, got 1.5 (to turn sampling off, remove sample.path)",
		"sample.max_per_hour: must not be negative, got -1",
		`sample.max_bytes: invalid size "12XB"`,
		"sample.keep: must be at least 1, got -2",
		`sample.principle: unknown field (did you mean "principal"?)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load: %v\nwant a problem %q", err, want)
		}
	}
}
