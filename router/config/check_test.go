package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A config whose values decode but mean something else than written is
// refused, every problem at once, each with its path: an address that is
// not host:port, a duration without a unit (YAML reads "connect: 5" as 5
// nanoseconds), a fraction where a whole number is wanted (decoding would
// truncate 2.9 to 2).
func TestLoadRefusesValuesThatDecodeWrong(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(write(t, dir, "triage.yaml", `
listen: garbage
server: {debug_listen: "127.0.0.1:http", read_timeout: 30}
limits: {max_body_bytes: 1.5, max_headers: 100.5}
pools:
  - name: a
    model: m
    replicas: [{url: "http://127.0.0.1:9", weight: 2.5}]
    timeouts: {connect: 5, first_byte: "300"}
    retry: {attempts: 2.9, budget: 0}
`))
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Load = %v, want *Error", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`listen: "garbage" is not an address to listen on: want host:port, such as 127.0.0.1:8080`,
		`server.debug_listen: "127.0.0.1:http": the port "http" is not a number from 0 to 65535`,
		`server.read_timeout: 30 has no unit: write 30s for 30 seconds (or 30ms, 30m)`,
		`limits.max_body_bytes: 1.5 is not a whole number of bytes, or a size with a unit such as 8MiB`,
		`limits.max_headers: 100.5 is not a whole number`,
		`pools[0].replicas[0].weight: 2.5 is not a whole number`,
		`pools[0].timeouts.connect: 5 has no unit: write 5s for 5 seconds (or 5ms, 5m)`,
		`pools[0].timeouts.first_byte: 300 has no unit: write 300s`,
		`pools[0].retry.attempts: 2.9 is not a whole number`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "retry.budget") {
		t.Errorf("budget: 0 (the default) was refused:\n%s", msg)
	}
	if len(ce.Problems) != 9 {
		t.Errorf("%d problems, want 9:\n%s", len(ce.Problems), msg)
	}

	// The same from the environment.
	t.Setenv("TRIAGE_SERVER__IDLE_TIMEOUT", "90")
	t.Setenv("TRIAGE_LISTEN", "localhost")
	_, err = Load(write(t, dir, "ok.yaml", good))
	for _, want := range []string{"server.idle_timeout: 90 has no unit", `listen: "localhost" is not an address to listen on`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("environment overrides: error %v lacks %q", err, want)
		}
	}
}

func TestListenAddresses(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, "0.0.0.0:8080": true, ":8080": true, "[::1]:8080": true, "localhost:0": true,
		"gateway.internal:443": true, "garbage": false, "127.0.0.1": false, "127.0.0.1:99999": false,
		"127.0.0.1:-1": false, "bad host!:80": false, "": false,
	} {
		if err := checkAddr(addr); (err == nil) != ok {
			t.Errorf("checkAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

// A YAML syntax error is reported at the line that breaks the document,
// quoted, not at the line of the block it breaks (often a comment above).
func TestSyntaxErrorLine(t *testing.T) {
	const pools = `# triage
#
# a comment
listen: 127.0.0.1:8080
default_pool: general

pools:
  - name: general
    model: m
    replicas:
      - url: http://127.0.0.1:9001

- name: legal
    model: l
    replicas:
      - url: http://127.0.0.1:9004
`
	for _, tc := range []struct{ name, body, want string }{
		{"an entry not indented", pools, "line 13, column 1: did not find expected key (check this line's indentation: it must line up with the other entries of the block it belongs to)\n    13 | - name: legal\n       | ^"},
		{"a key indented too far", "pools:\n  - name: a\n     model: b\n", "line 3, column 6: mapping values are not allowed in this context"},
		{"a tab", "listen: a:1\npools:\n\t- name: a\n", "line 3, column 1: found character that cannot start any token (YAML indents with spaces; this line has a tab)"},
		{"an unclosed list", "pools:\n  - name: a\n    model: m\n    replicas: [{url: http://a:1}\n  - name: b\n", "line 4, column 5: did not find expected ',' or ']'\n    4 |     replicas: [{url: http://a:1}\n      |     ^"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, t.TempDir(), "triage.yaml", tc.body)
			_, err := Load(path)
			var se *SyntaxError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), "config "+path+": "+tc.want) {
				t.Fatalf("Load = %v\nwant a SyntaxError containing %q", err, tc.want)
			}
		})
	}
}

func TestEnvWarnings(t *testing.T) {
	c, err := Load(write(t, t.TempDir(), "triage.yaml", good+"    \n"))
	if err != nil {
		t.Fatal(err)
	}
	c.Pools[0].Replicas[0].APIKeyEnv = "TRIAGE_GENERAL_KEY"
	got := c.EnvWarnings([]string{
		"TRIAGE_LISTN=0.0.0.0:8080", "TRIAGE_LOG__LEVL=debug", "TRIAGE_POOLS__0__NAME=x", "TRIAGE_WHATEVER=1",
		"TRIAGE_LISTEN=127.0.0.1:1", "TRIAGE_SHARED=/s", "TRIAGE_MODELS=/m", "TRIAGE_REQUIRE_ORT=1", "TRIAGE_ORT_LIB=/x.so",
		"TRIAGE_GENERAL_KEY=sk", "HOME=/root", "TRIAGE_MODEL=/m",
	})
	want := []string{
		"TRIAGE_LISTN is set but sets no config key, so it is ignored (did you mean TRIAGE_LISTEN?)",
		"TRIAGE_LOG__LEVL is set but sets no config key, so it is ignored (did you mean TRIAGE_LOG__LEVEL?)",
		"TRIAGE_MODEL is set but sets no config key, so it is ignored (did you mean TRIAGE_MODELS?)",
		"TRIAGE_POOLS__0__NAME is set but sets no config key, so it is ignored (keys inside pools, a list, can only be set in the file)",
		"TRIAGE_WHATEVER is set but sets no config key, so it is ignored (an override is TRIAGE_ and the key in capitals, __ between levels: TRIAGE_LISTEN, TRIAGE_LOG__LEVEL)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("EnvWarnings =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// models_dir is relative to the config file; a rules file named on the
// command line (UseRules) is relative to the working directory, and does
// not move the models directory.
func TestPathsRelativeToTheirFile(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "triage.yaml", good+"rules: rules.yaml\nmodels_dir: ../models\n")
	t.Setenv(ModelsEnv, "/elsewhere")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.ModelsPath(), filepath.Join(dir, "..", "models"); got != want {
		t.Errorf("ModelsPath() = %s, want %s", got, want)
	}
	if got := c.ModelsOrigin(); got != "models_dir: ../models in "+path+", relative to that file" {
		t.Errorf("ModelsOrigin() = %q", got)
	}
	if got := c.RulesPath(); got != filepath.Join(dir, "rules.yaml") {
		t.Errorf("RulesPath() = %s", got)
	}
	c.UseRules("examples/x/rules.yaml")
	if got := c.RulesPath(); got != "examples/x/rules.yaml" {
		t.Errorf("after UseRules: RulesPath() = %s, want the path as given", got)
	}
	if got, want := c.ModelsPath(), filepath.Join(dir, "..", "models"); got != want {
		t.Errorf("after UseRules: ModelsPath() = %s, want %s", got, want)
	}
	c2, err := Load(write(t, dir, "plain.yaml", good))
	if err != nil {
		t.Fatal(err)
	}
	if c2.ModelsPath() != "/elsewhere" || !strings.HasPrefix(c2.ModelsOrigin(), "$TRIAGE_MODELS") {
		t.Errorf("without models_dir: %s from %q, want $TRIAGE_MODELS", c2.ModelsPath(), c2.ModelsOrigin())
	}
	t.Setenv(ModelsEnv, "")
	if c2.ModelsPath() != "var/models" || !strings.Contains(c2.ModelsOrigin(), "the default, under the working directory") {
		t.Errorf("default: %s from %q", c2.ModelsPath(), c2.ModelsOrigin())
	}
}
