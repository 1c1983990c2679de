package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzSeeds are configs that exercise the YAML layer: anchors and aliases,
// merge keys, nesting, numbers and durations at their limits, odd bytes.
var fuzzSeeds = []string{
	good,
	"",
	"---\n",
	"[]",
	"pools: {}\n",
	"pools:\n- &p {name: a, model: m, replicas: [{url: 'http://a:1'}]}\n- {<<: *p, name: b, model: n}\n",
	"t: &t {connect: 1s, total: 5s}\npools: [{name: a, model: m, replicas: [{url: 'http://a:1'}], timeouts: *t}]\n",
	"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
	"a: &a {b: *a}\n",
	"x: " + strings.Repeat("{a: ", 40) + "1" + strings.Repeat("}", 40) + "\n",
	strings.Repeat("k: 1\n", 50),
	"limits: {max_body_bytes: 99999999999GiB}\npools: [{name: a, model: m, replicas: [{url: 'http://a:1'}]}]\n",
	"limits: {max_body_bytes: 9223372036854775807}\npools: [{name: a, model: m, replicas: [{url: 'http://a:1'}]}]\n",
	"limits: {max_body_bytes: 1e400}\n",
	"limits: {max_body_bytes: -1}\n",
	"limits.max_body_bytes: 5\nlimits: {max_body_bytes: 6}\npools: [{name: a, model: m, replicas: [{url: 'http://a:1'}]}]\n",
	"server: {read_timeout: -1s, idle_timeout: 9999999h, shutdown_timeout: 1e30}\n",
	"pools: [{name: a, model: m, replicas: [{url: 'http://a:1', weight: 1e19}], retry: {attempts: 2.9}, timeouts: {connect: 5}}]\n",
	"pools:\n\t- name: a\n",
	"listen: \"a\x00b\"\npools: [{name: \"\\0\", model: \"\\t\", replicas: [{url: 'http://a:1'}]}]\n",
	"log: {access: yes, level: ~}\n",
	"? [a, b]\n: c\n",
	"1: a\n1.0: b\n\"1\": c\n",
	"x: {1: a, 1.0: b, true: c, ~: d}\n",
	"x: !!binary aGVsbG8=\ny: !!timestamp 2001-12-14\nz: !!str 1\n",
	"%YAML 1.1\n---\nlisten: a\n...\n---\nlisten: b\n",
	"\xef\xbb\xbflisten: a\n",
	"\xff\xfe",
}

func FuzzLoad(f *testing.F) {
	for _, pat := range []string{"../../triage.yaml", "../../bench/*.yaml", "../../examples/*/triage.yaml"} {
		files, _ := filepath.Glob(pat)
		for _, name := range files {
			b, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	// Overrides from the environment would change every answer.
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, EnvPrefix) {
			os.Unsetenv(k)
			f.Cleanup(func() { os.Setenv(k, v) })
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "triage.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c, err := Load(path)
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("Load took %s on %d bytes", d, len(data))
		}
		c2, err2 := Load(path)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("Load is not deterministic:\n%v\n%v", err, err2)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("Load is not deterministic:\n%+v\n%+v", c, c2)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load accepted a config that fails Validate: %v", err)
		}
		// Defaults are filled: filling them again changes nothing.
		c2.SetDefaults()
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("Load left defaults unfilled:\n%+v\n%+v", c, c2)
		}
		if c.Listen == "" || c.Limits.MaxBodyBytes < 1 || c.Server.ReadTimeout <= 0 || c.Server.IdleTimeout <= 0 ||
			c.Server.ShutdownTimeout <= 0 || c.Log.Level == "" {
			t.Fatalf("Load left a default unfilled: %+v", c)
		}
		for i, p := range c.Pools {
			ok := p.Timeouts.Connect > 0 && p.Timeouts.FirstByte > 0 && p.Timeouts.Idle > 0 && p.Timeouts.Total > 0 &&
				p.Retry.Attempts > 0 && p.Retry.Budget > 0 && p.Health.Enabled != nil && p.Health.Path != "" &&
				p.Health.Interval > 0 && p.Health.Timeout > 0 && p.Health.HealthyThreshold > 0 &&
				p.Health.UnhealthyThreshold > 0 && p.Breaker.Failures > 0 && p.Breaker.Cooldown > 0 &&
				p.Breaker.MaxCooldown > 0 && p.MaxIdleConns > 0 && len(p.Replicas) > 0
			for _, r := range p.Replicas {
				ok = ok && r.Weight > 0
			}
			if !ok {
				t.Fatalf("pools[%d] has a default unfilled: %+v", i, p)
			}
		}
	})
}

// TestLoadBounded: documents whose decoding would take minutes and gigabytes
// are refused at once, and a document just inside the bounds loads.
func TestLoadBounded(t *testing.T) {
	dir := t.TempDir()
	nest := func(n int) string { return "x: " + strings.Repeat("{a: ", n) + "1" + strings.Repeat("}", n) + "\n" }
	var wide strings.Builder
	for i := range maxDocKeys + 1 {
		wide.WriteString("k" + strconv.Itoa(i) + ": 1\n")
	}
	laughs := "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i <= 8; i++ {
		laughs += "a" + strconv.Itoa(i) + ": &a" + strconv.Itoa(i) + " [" + strings.Repeat("*a"+strconv.Itoa(i-1)+", ", 9) + "*a" + strconv.Itoa(i-1) + "]\n"
	}
	longKey := strings.Repeat("k", 1000)
	chain := "a: &a\n"
	for i := range 20 {
		chain += strings.Repeat("  ", i+1) + "? " + longKey + "\n" + strings.Repeat("  ", i+1) + ":\n"
	}
	chain += strings.Repeat("  ", 21) + "z: 1\nb: [" + strings.Repeat("*a, ", 49) + "*a]\n"
	for _, tc := range []struct{ name, body, want string }{
		// 9000 levels took 8 minutes and 500 GB of allocation.
		{"deep", nest(9000), "nests 9001 levels deep"},
		{"deeper than the bound", nest(maxDocDepth), "nests 33 levels deep"},
		// 10000 repeats of a key took 74 seconds and 23 GB.
		{"duplicate keys", strings.Repeat("a: 1\n", 10000), "mapping has 10000 keys"},
		{"duplicate key", "pools: []\npools: []\n", `mapping key "pools" already defined at line 1`},
		{"wide", wide.String(), "mapping has 1001 keys"},
		{"aliases", laughs, "more than 100000 values"},
		{"long keys", chain, "bytes of keys and values"},
		{"cycle", "a: &a {b: *a}\n", "alias to itself"},
		{"large", "x: '" + strings.Repeat("y", maxDocBytes) + "'\n", "more than the limit of 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := Load(write(t, dir, "c.yaml", tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("Load took %s to refuse it", d)
			}
		})
	}
	// Just inside: the unknown key is the only problem.
	_, err := Load(write(t, dir, "ok.yaml", nest(maxDocDepth-1)+"pools: [{name: a, model: m, replicas: [{url: 'http://a:1'}]}]\n"))
	if err == nil || !strings.Contains(err.Error(), "1 problem(s):\n  x: unknown field") {
		t.Fatalf("Load(32 levels) = %v, want only the unknown key reported", err)
	}
}

func TestByteSizeOverflow(t *testing.T) {
	for in, want := range map[string]int64{
		"9223372036854775807": 1<<63 - 1, "8589934591GiB": 8589934591 << 30, "9223372036854775B": 9223372036854775,
	} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || int64(b) != want {
			t.Errorf("ByteSize(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"99999999999GiB", "8589934592GiB", "9223372036854776KB", "9223372036854775808"} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("ByteSize(%q) accepted as %d", in, b)
		}
	}
}
