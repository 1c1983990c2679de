package testenv

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// RequireEnv is the variable that turns a skip for missing files into a
// failure when it is "1".
const RequireEnv = "TRIAGE_REQUIRE_MODELS"

const module = "module github.com/triagegw/triage\n"

// Root is the repository's root: the directory of the module's go.mod
// above the working directory (a test's is its package's), else above this
// source file.
func Root() string { return root() }

var root = sync.OnceValue(func() string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), module) {
				return dir
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	panic("testenv: the repository's go.mod (" + strings.TrimSpace(module) + ") is above neither the working directory nor this file")
})

// ModelsDir is $TRIAGE_MODELS (relative to Root when relative), else
// var/models under Root.
func ModelsDir() string { return dirFrom("TRIAGE_MODELS", filepath.Join("var", "models")) }

// SharedDir is $TRIAGE_SHARED (relative to Root when relative), else
// ../shared beside Root.
func SharedDir() string { return dirFrom("TRIAGE_SHARED", filepath.Join("..", "shared")) }

func dirFrom(env, def string) string {
	d := os.Getenv(env)
	if d == "" {
		d = def
	}
	if !filepath.IsAbs(d) {
		d = filepath.Join(Root(), d)
	}
	return filepath.Clean(d)
}

// Models returns ModelsDir after checking that each of paths (relative to
// it, slash-separated) exists; if one does not, it skips t, or fails it
// when required (see the package documentation).
func Models(t testing.TB, paths ...string) string {
	t.Helper()
	dir := ModelsDir()
	check(t, dir, paths, func(missing string) (how, require string) {
		switch {
		case strings.HasPrefix(missing, "use/"), strings.HasPrefix(missing, "use-int8/"):
			return "run make setup (scripts/fetch-use.sh), or set TRIAGE_MODELS", "TRIAGE_REQUIRE_USE"
		case strings.HasPrefix(missing, "ort/"):
			return "run make setup (scripts/fetch-ort.sh), or set TRIAGE_MODELS", "TRIAGE_REQUIRE_ORT"
		}
		return "run make setup, or set TRIAGE_MODELS", ""
	})
	return dir
}

// Shared returns SharedDir after checking that each of paths (relative to
// it, slash-separated) exists; if one does not, it skips t, or fails it
// when TRIAGE_REQUIRE_MODELS=1.
func Shared(t testing.TB, paths ...string) string {
	t.Helper()
	dir := SharedDir()
	check(t, dir, paths, func(string) (how, require string) {
		return "set TRIAGE_SHARED to the directory of the shared datasets (default ../shared beside the repository)", ""
	})
	return dir
}

// Missing skips t, or fails it when TRIAGE_REQUIRE_MODELS=1, for a file
// that is not there: what names it (and may give the error that showed it
// missing), how says how to get it.
func Missing(t testing.TB, what, how string) {
	t.Helper()
	verdict(t, what+": "+how, RequireEnv)
}

// check skips or fails t for the first of paths missing under dir; hint
// says how to get one and which variable, besides RequireEnv, requires it.
func check(t testing.TB, dir string, paths []string, hint func(missing string) (how, require string)) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if _, err := os.Stat(full); err != nil {
			what := "missing " + full
			if !errors.Is(err, fs.ErrNotExist) {
				what = err.Error()
			}
			how, require := hint(p)
			verdict(t, what+": "+how, RequireEnv, require)
			return
		}
	}
}

// verdict fails t with msg if one of the variables named is "1", and skips
// it otherwise.
func verdict(t testing.TB, msg string, vars ...string) {
	t.Helper()
	var set []string
	for _, v := range vars {
		if v != "" && os.Getenv(v) == "1" {
			set = append(set, v+"=1")
		}
	}
	if len(set) > 0 {
		t.Fatal(msg + " (" + strings.Join(set, ", ") + ")")
	}
	t.Skip(msg + " (" + RequireEnv + "=1 makes this a failure)")
}
