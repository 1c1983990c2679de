package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records a skip or a failure and ends its
// goroutine there, as the real ones do.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func record(f func(t testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestModels(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tables"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tables", "t.tbl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TRIAGE_MODELS", dir)
	for _, tc := range []struct {
		name  string
		env   map[string]string
		paths []string
		want  string // "ok", "skip" or "fail"
		says  []string
	}{
		{"present", nil, []string{"tables/t.tbl"}, "ok", nil},
		{"none asked", map[string]string{RequireEnv: "1"}, nil, "ok", nil},
		{"missing", nil, []string{"tables/t.tbl", "tables/u.tbl"}, "skip",
			[]string{"missing " + filepath.Join(dir, "tables", "u.tbl"), "make setup", RequireEnv + "=1 makes this a failure"}},
		{"missing, required", map[string]string{RequireEnv: "1"}, []string{"tables/u.tbl"}, "fail",
			[]string{"missing " + filepath.Join(dir, "tables", "u.tbl"), "make setup", "(" + RequireEnv + "=1)"}},
		{"USE, required by TRIAGE_REQUIRE_USE", map[string]string{"TRIAGE_REQUIRE_USE": "1"}, []string{"use/model.onnx"}, "fail",
			[]string{"use", "scripts/fetch-use.sh", "(TRIAGE_REQUIRE_USE=1)"}},
		{"USE int8, required by TRIAGE_REQUIRE_USE", map[string]string{"TRIAGE_REQUIRE_USE": "1"}, []string{"use-int8/model.onnx"}, "fail",
			[]string{"use-int8", "scripts/fetch-use.sh", "(TRIAGE_REQUIRE_USE=1)"}},
		{"not USE, TRIAGE_REQUIRE_USE only", map[string]string{"TRIAGE_REQUIRE_USE": "1"}, []string{"tables/u.tbl"}, "skip", nil},
		{"runtime, required by TRIAGE_REQUIRE_ORT", map[string]string{"TRIAGE_REQUIRE_ORT": "1"}, []string{"ort/libonnxruntime.so.1"}, "fail",
			[]string{"scripts/fetch-ort.sh", "(TRIAGE_REQUIRE_ORT=1)"}},
		{"runtime, both", map[string]string{"TRIAGE_REQUIRE_ORT": "1", RequireEnv: "1"}, []string{"ort/libonnxruntime.so.1"}, "fail",
			[]string{"(" + RequireEnv + "=1, TRIAGE_REQUIRE_ORT=1)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{RequireEnv, "TRIAGE_REQUIRE_USE", "TRIAGE_REQUIRE_ORT"} {
				t.Setenv(k, tc.env[k])
			}
			var got string
			r := record(func(tb testing.TB) { got = Models(tb, tc.paths...) })
			verdict, msg := "ok", ""
			switch {
			case r.failed != "":
				verdict, msg = "fail", r.failed
			case r.skipped != "":
				verdict, msg = "skip", r.skipped
			}
			if verdict != tc.want {
				t.Fatalf("Models(%q): %s %q, want %s", tc.paths, verdict, msg, tc.want)
			}
			if verdict == "ok" && got != dir {
				t.Errorf("Models(%q) = %q, want %q", tc.paths, got, dir)
			}
			for _, s := range tc.says {
				if !strings.Contains(msg, s) {
					t.Errorf("Models(%q): %q does not say %q", tc.paths, msg, s)
				}
			}
		})
	}
}

func TestShared(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TRIAGE_SHARED", dir)
	t.Setenv(RequireEnv, "")
	if r := record(func(tb testing.TB) { Shared(tb, "datasets/x.jsonl") }); !strings.Contains(r.skipped, "TRIAGE_SHARED") || r.failed != "" {
		t.Errorf("missing shared file: skipped %q, failed %q, want a skip naming TRIAGE_SHARED", r.skipped, r.failed)
	}
	t.Setenv(RequireEnv, "1")
	if r := record(func(tb testing.TB) { Shared(tb, "datasets/x.jsonl") }); !strings.Contains(r.failed, filepath.Join(dir, "datasets", "x.jsonl")) {
		t.Errorf("missing shared file, required: failed %q, want a failure naming it", r.failed)
	}
	if r := record(func(tb testing.TB) { Missing(tb, "the tokenizer", "run go mod download") }); r.failed != "the tokenizer: run go mod download ("+RequireEnv+"=1)" {
		t.Errorf("Missing, required: failed %q", r.failed)
	}
}

func TestDirs(t *testing.T) {
	if _, err := os.Stat(filepath.Join(Root(), "go.mod")); err != nil {
		t.Fatalf("Root() = %s: %v", Root(), err)
	}
	t.Setenv("TRIAGE_MODELS", "")
	t.Setenv("TRIAGE_SHARED", "")
	if got, want := ModelsDir(), filepath.Join(Root(), "var", "models"); got != want {
		t.Errorf("ModelsDir() = %s, want %s", got, want)
	}
	if got, want := SharedDir(), filepath.Join(filepath.Dir(Root()), "shared"); got != want {
		t.Errorf("SharedDir() = %s, want %s", got, want)
	}
	t.Setenv("TRIAGE_MODELS", "elsewhere/models")
	if got, want := ModelsDir(), filepath.Join(Root(), "elsewhere", "models"); got != want {
		t.Errorf("relative TRIAGE_MODELS: ModelsDir() = %s, want %s", got, want)
	}
}
