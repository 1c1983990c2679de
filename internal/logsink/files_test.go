package logsink

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A rotated log keeps whole lines, at most maxBytes a file (unless one
// flush is larger), and keep old files.
func TestFilesRotateBySize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "usage.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	fs := NewFiles(ctx)
	w, err := fs.OpenRotating(path, 1000, 2)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := fs.OpenRotating(path, 5, 9); again != w {
		t.Fatal("a second open made a second writer")
	}
	for i := range 100 {
		fmt.Fprintf(w, "{\"n\":%d,\"pad\":\"%s\"}\n", i, strings.Repeat("x", 20))
		if i%10 == 9 {
			if err := w.(*Writer).Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, name := range []string{"usage.jsonl", "usage.jsonl.1", "usage.jsonl.2"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 1000 || !strings.HasSuffix(string(b), "}\n") || !strings.HasPrefix(string(b), "{\"n\":") {
			t.Fatalf("%s: %d bytes, not whole lines under 1000", name, len(b))
		}
		lines += strings.Count(string(b), "\n")
	}
	if _, err := os.Stat(filepath.Join(dir, "usage.jsonl.3")); err == nil {
		t.Fatal("more than keep=2 old files")
	}
	if lines == 0 || lines >= 100 {
		t.Fatalf("%d lines in the three files: rotation kept everything or nothing", lines)
	}
}
