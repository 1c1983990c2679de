package tokenize

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/triagegw/triage/internal/testenv"
)

// tokenizerPath returns the all-MiniLM-L6-v2 tokenizer.json from the Go
// module cache (downloading the module if needed). It skips the test only
// when the go command cannot provide the module (fails it with
// TRIAGE_REQUIRE_MODELS=1, see testenv), and fails it when the file is not
// the expected one.
func tokenizerPath(t testing.TB) string {
	t.Helper()
	pathOnce.Do(func() { pathVal, pathErr = moduleFilePath() })
	if pathErr != nil {
		testenv.Missing(t, fmt.Sprintf("the tokenizer of %s@%s (%v)", modulePath, moduleVersion, pathErr),
			"run make setup with the network once, which puts it in the Go module cache")
	}
	if err := checkSHA256(pathVal, moduleSHA256); err != nil {
		t.Fatal(err)
	}
	return pathVal
}

var (
	pathOnce sync.Once
	pathVal  string
	pathErr  error

	wpOnce  sync.Once
	wpVal   *WordPiece
	wpErr   error
	refOnce sync.Once
	refVal  *Reference
	refErr  error
)

// loadWordPiece and loadReference load the tokenizers once per test binary.
func loadWordPiece(t testing.TB) *WordPiece {
	t.Helper()
	path := tokenizerPath(t)
	wpOnce.Do(func() { wpVal, wpErr = LoadWordPiece(path) })
	if wpErr != nil {
		t.Fatal(wpErr)
	}
	return wpVal
}

func loadReference(t testing.TB) *Reference {
	t.Helper()
	path := tokenizerPath(t)
	refOnce.Do(func() { refVal, refErr = LoadReference(path) })
	if refErr != nil {
		t.Fatal(refErr)
	}
	return refVal
}

// goldenRow is a row of testdata/golden.jsonl.
type goldenRow struct {
	Text    *string `json:"text"`
	TextB64 *string `json:"text_b64"` // raw bytes, for texts that are not valid UTF-8
	IDs     []int32 `json:"ids"`
	JSIDs   []int32 `json:"js_ids"` // tokenizers.js's ids where they differ
}

func (r goldenRow) text(t testing.TB) string {
	if r.TextB64 != nil {
		raw, err := base64.StdEncoding.DecodeString(*r.TextB64)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	if r.Text == nil {
		t.Fatal("golden row without text")
	}
	return *r.Text
}

// readGolden reads testdata/golden.jsonl and testdata/golden-fragments.jsonl.
func readGolden(t testing.TB) []goldenRow {
	t.Helper()
	rows := readGoldenFile(t, "testdata/golden.jsonl")
	if len(rows) < 300 {
		t.Fatalf("golden.jsonl has %d rows, want at least 300", len(rows))
	}
	frags := readGoldenFile(t, "testdata/golden-fragments.jsonl")
	if len(frags) < 300 {
		t.Fatalf("golden-fragments.jsonl has %d rows, want at least 300", len(frags))
	}
	return append(rows, frags...)
}

func readGoldenFile(t testing.TB, name string) []goldenRow {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []goldenRow
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r goldenRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// tokens renders ids as tokens, for failure messages.
func tokens(t *WordPiece, ids []int32) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t.Token(id))
	}
	b.WriteByte(']')
	return b.String()
}
