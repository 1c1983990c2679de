package main

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/triagegw/triage/internal/progress"
)

// progressBar is a progress callback of the (done, total) shape that
// evaluation and training report through, drawing on w (internal/progress:
// a bar on a terminal, plain lines otherwise). Each run it follows is a
// step of its own, named by labels in turn.
func progressBar(w io.Writer, labels ...string) func(done, total int) {
	if len(labels) == 0 {
		labels = []string{"working"}
	}
	report, _ := progress.Func(w, progress.Options{}, labels...)
	return report
}

// describeFiles is dir and the files in it with their sizes:
// "models/heads/mine (heads.json 3.1 MB, mine-tier1.tbl 12 MB)".
func describeFiles(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return dir
	}
	var parts []string
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			parts = append(parts, e.Name()+" "+progress.Size(info.Size()))
		}
	}
	if len(parts) == 0 {
		return dir
	}
	return dir + " (" + strings.Join(parts, ", ") + ")"
}

// describeFile is path and its size: "report.html (412 kB)".
func describeFile(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return path
	}
	return path + " (" + progress.Size(st.Size()) + ")"
}

// dirSize is the size of the files under dir, and their number.
func dirSize(dir string) (size int64, files int) {
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				size += info.Size()
				files++
			}
		}
		return nil
	})
	return size, files
}
