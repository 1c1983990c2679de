// Golden ids and code point data come from Hugging Face's tokenizers (the
// Rust library, through its official Node binding, the npm package
// "tokenizers"), written by scripts/golden-tokenizer.mjs. To regenerate,
// from the repository root:
//
//	mkdir -p /tmp/hftok && (cd /tmp/hftok && npm init -y >/dev/null &&
//	  npm install tokenizers@0.23.2 @huggingface/tokenizers@0.2.0)
//	TOK=$(go mod download -json github.com/clems4ever/all-minilm-l6-v2-go@v0.0.9 |
//	  sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/all_minilm_l6_v2/tokenizer.json
//	node scripts/golden-tokenizer.mjs golden --tokenizer "$TOK" \
//	  --out classifier/tokenize/testdata/golden.jsonl \
//	  classifier/tokenize/testdata/hard-cases.jsonl \
//	  ../shared/datasets/subjects/dev.jsonl:200
//	go test ./classifier/tokenize -run TestWriteFragments -fragments-out /tmp/fragments.jsonl
//	node scripts/golden-tokenizer.mjs golden --tokenizer "$TOK" --max-chars 100000 \
//	  --out classifier/tokenize/testdata/golden-fragments.jsonl /tmp/fragments.jsonl
//	node scripts/golden-tokenizer.mjs codepoints --tokenizer "$TOK" --out /tmp/codepoints.txt &&
//	  gzip -9 -c /tmp/codepoints.txt > classifier/tokenize/testdata/codepoints.txt.gz
//	go test ./classifier/tokenize -run TestGenerateTables -update-tables
//
// or: go test ./classifier/tokenize -run TestGolden -update (the golden ids
// only; HFTOK_DIR names the npm directory, /tmp/hftok by default).
//
// hard-cases.jsonl holds the hand-written hard cases; dev.jsonl:200 is 200
// rows spread evenly over the shared dev set, each cut to 300 code points.
// golden-fragments.jsonl is 400 strings of random tricky fragments (see
// fragmentStrings), a third of them not valid UTF-8.
// The script also runs the pure-JavaScript port, @huggingface/tokenizers
// 0.2.0, and records its ids as "js_ids" where they differ from the Rust
// library: it lowercases the whole string with final-sigma rules, before
// stripping accents (Rust: strip, then lowercase char by char), does not
// pad CJK ideographs outside the BMP (it walks UTF-16 units), and uses
// Node's Unicode 15 categories (Rust's are Unicode 8). The ids of the Rust
// library are the reference.
package tokenize

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/triagegw/triage/internal/testenv"
)

var update = flag.Bool("update", false, "regenerate testdata/golden.jsonl with scripts/golden-tokenizer.mjs (needs node and the npm packages)")

// TestGolden checks WordPiece and Reference against Hugging Face's ids, on
// golden.jsonl and golden-fragments.jsonl.
func TestGolden(t *testing.T) {
	if *update {
		updateGolden(t)
	}
	wp := loadWordPiece(t)
	ref := loadReference(t)
	rows := readGolden(t)
	var js, b64 int
	for i, row := range rows {
		text := row.text(t)
		if got := wp.Encode(nil, text, 0); !slices.Equal(got, row.IDs) {
			t.Errorf("row %d: WordPiece.Encode(%q) =\n  %v %s\nwant\n  %v %s", i, text, got, tokens(wp, got), row.IDs, tokens(wp, row.IDs))
		}
		got, err := ref.Encode(text)
		if err != nil {
			t.Errorf("row %d: Reference.Encode(%q): %v", i, text, err)
		} else if !slices.Equal(got, row.IDs) {
			t.Errorf("row %d: Reference.Encode(%q) =\n  %v %s\nwant\n  %v %s", i, text, got, tokens(wp, got), row.IDs, tokens(wp, row.IDs))
		}
		if row.JSIDs != nil {
			js++
		}
		if row.TextB64 != nil {
			b64++
		}
	}
	t.Logf("%d golden rows (%d not valid UTF-8; tokenizers.js differs on %d)", len(rows), b64, js)
}

func updateGolden(t *testing.T) {
	script := filepath.Join(testenv.Root(), "scripts", "golden-tokenizer.mjs")
	run := func(args ...string) {
		cmd := exec.Command("node", append([]string{script, "golden", "--tokenizer", tokenizerPath(t)}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	run("--out", "testdata/golden.jsonl", "testdata/hard-cases.jsonl",
		filepath.Join(testenv.SharedDir(), "datasets", "subjects", "dev.jsonl")+":200")
	frags := filepath.Join(t.TempDir(), "fragments.jsonl")
	writeFragments(t, frags)
	run("--max-chars", "100000", "--out", "testdata/golden-fragments.jsonl", frags)
}
