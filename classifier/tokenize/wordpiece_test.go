package tokenize

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestVocab(t *testing.T) {
	wp := loadWordPiece(t)
	if got := wp.VocabSize(); got != 30522 {
		t.Errorf("VocabSize() = %d, want 30522", got)
	}
	if got := wp.UnkID(); got != 100 {
		t.Errorf("UnkID() = %d, want 100", got)
	}
	for tok, want := range map[string]int32{"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103, "the": 1996, "##s": 2015, "hello": 7592} {
		if id, ok := wp.ID(tok); !ok || id != want {
			t.Errorf("ID(%q) = %d, %v, want %d, true", tok, id, ok, want)
		}
		if got := wp.Token(want); got != tok {
			t.Errorf("Token(%d) = %q, want %q", want, got, tok)
		}
	}
	if id, ok := wp.ID("no such token"); ok {
		t.Errorf("ID(no such token) = %d, true", id)
	}
	for _, id := range []int32{-1, 30522, 1 << 30} {
		if got := wp.Token(id); got != "" {
			t.Errorf("Token(%d) = %q, want \"\"", id, got)
		}
	}
	for id := int32(0); id < int32(wp.VocabSize()); id++ {
		if got, ok := wp.ID(wp.Token(id)); !ok || got != id {
			t.Fatalf("ID(Token(%d)) = %d, %v", id, got, ok)
		}
	}
}

func TestWords(t *testing.T) {
	wp := loadWordPiece(t)
	collect := func(text string, limit int) []string {
		var words []string
		wp.Words(text, func(w []byte) bool {
			words = append(words, string(w))
			return len(words) < limit
		})
		return words
	}
	tests := []struct {
		text string
		want []string
	}{
		{"", nil},
		{"  \t\n ", nil},
		{"Hello, World!", []string{"hello", ",", "world", "!"}},
		{"Café naïve ÅNGSTRÖM", []string{"cafe", "naive", "angstrom"}},
		{"e\u0301\u0301x", []string{"ex"}},
		{"a\x00b\u200bc\ufeffd", []string{"abcd"}},
		{"a\xffb", []string{"ab"}},
		{"野口里佳 Noguchi", []string{"野", "口", "里", "佳", "noguchi"}},
		{"x\u00a0y\u3000z", []string{"x", "y", "z"}},
		{"...!?", []string{".", ".", ".", "!", "?"}},
		{"«quote»", []string{"«", "quote", "»"}},
		{"a[SEP]b [mask]", []string{"a", "[SEP]", "b", "[", "mask", "]"}},
		{"İI", []string{"ii"}},
		{"ΟΔΟΣ", []string{"οδοσ"}},
		{strings.Repeat("ab", 80), []string{strings.Repeat("ab", 80)}},
	}
	for _, tt := range tests {
		if got := collect(tt.text, 1<<30); !slices.Equal(got, tt.want) {
			t.Errorf("Words(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}
	if got, want := collect("one two three four", 2), []string{"one", "two"}; !slices.Equal(got, want) {
		t.Errorf("Words stopping after 2 = %q, want %q", got, want)
	}
	if got, want := collect("a, [SEP] b", 2), []string{"a", ","}; !slices.Equal(got, want) {
		t.Errorf("Words stopping after 2 = %q, want %q", got, want)
	}
}

// TestWordsPieces checks that Encode is AppendPieces over Words.
func TestWordsPieces(t *testing.T) {
	wp := loadWordPiece(t)
	for _, row := range readGolden(t) {
		text := row.text(t)
		var got []int32
		// Added tokens come out of Words as themselves, which are also in
		// the vocabulary with the same ids.
		wp.Words(text, func(w []byte) bool {
			got = wp.AppendPieces(got, w)
			return true
		})
		if !slices.Equal(got, row.IDs) {
			t.Errorf("AppendPieces over Words(%q) = %v, want %v", text, got, row.IDs)
		}
	}
}

func TestAppendPieces(t *testing.T) {
	wp := loadWordPiece(t)
	tests := []struct {
		word string
		want []string
	}{
		{"", nil},
		{"hello", []string{"hello"}},
		{"unaffable", []string{"una", "##ffa", "##ble"}},
		{"tokenization", []string{"token", "##ization"}},
		{"ǃ", []string{"[UNK]"}}, // not in the vocabulary
		{"ab" + "ǃ", []string{"[UNK]"}},
		{strings.Repeat("x", 100), []string{"xx", "##xx"}}, // prefix only: checked below
		{strings.Repeat("x", 101), []string{"[UNK]"}},
		{strings.Repeat("é", 100), nil},
		{strings.Repeat("é", 101), []string{"[UNK]"}},
		{"[SEP]", []string{"[SEP]"}},
	}
	for _, tt := range tests {
		dst := []int32{7}
		got := wp.AppendPieces(dst, []byte(tt.word))
		if got[0] != 7 {
			t.Errorf("AppendPieces(%q) changed dst[0]", tt.word)
		}
		var toks []string
		for _, id := range got[1:] {
			toks = append(toks, wp.Token(id))
		}
		switch {
		case tt.word == strings.Repeat("x", 100):
			if len(toks) < 2 || toks[0] != "xx" || slices.Contains(toks, "[UNK]") {
				t.Errorf("AppendPieces(x*100) = %q", toks)
			}
		case tt.word == strings.Repeat("é", 100):
			if !slices.Contains(toks, "[UNK]") || len(toks) != 1 {
				// é is not in the vocabulary and there is no ##é: [UNK],
				// but as a word that fails to split, not for its length.
				t.Errorf("AppendPieces(é*100) = %q, want [UNK]", toks)
			}
		default:
			if !slices.Equal(toks, tt.want) {
				t.Errorf("AppendPieces(%q) = %q, want %q", tt.word, toks, tt.want)
			}
		}
	}
	// The word passed in is not modified.
	w := []byte("unaffable")
	wp.AppendPieces(nil, w)
	if string(w) != "unaffable" {
		t.Errorf("AppendPieces modified its word: %q", w)
	}
}

func TestEncodeMax(t *testing.T) {
	wp := loadWordPiece(t)
	for _, row := range readGolden(t) {
		text := row.text(t)
		for m := 1; m <= len(row.IDs)+1; m++ {
			got := wp.Encode(nil, text, m)
			if want := row.IDs[:min(m, len(row.IDs))]; !slices.Equal(got, want) {
				t.Fatalf("Encode(%q, max %d) = %v, want %v", text, m, got, want)
			}
		}
		// max counts what dst already holds.
		pre := []int32{1, 2, 3}
		got := wp.Encode(slices.Clone(pre), text, 3+len(row.IDs)/2)
		if want := append(slices.Clone(pre), row.IDs[:len(row.IDs)/2]...); !slices.Equal(got, want) {
			t.Fatalf("Encode([1 2 3], %q, max %d) = %v, want %v", text, 3+len(row.IDs)/2, got, want)
		}
		if got := wp.Encode(slices.Clone(pre), text, 2); !slices.Equal(got, pre) {
			t.Fatalf("Encode with len(dst) > max = %v, want dst unchanged", got)
		}
	}
}

func TestEncodeConcurrent(t *testing.T) {
	wp := loadWordPiece(t)
	rows := readGolden(t)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]int32, 0, 256)
			for k := range 3 * len(rows) {
				row := rows[(k*7+g)%len(rows)]
				text := row.text(t)
				var got []int32
				if k%2 == 0 {
					got = wp.Encode(dst[:0], text, 0)
				} else {
					got = nil
					wp.Words(text, func(w []byte) bool {
						got = wp.AppendPieces(got, w)
						return true
					})
				}
				if !slices.Equal(got, row.IDs) {
					errs <- fmt.Sprintf("goroutine %d: %q: %v, want %v", g, text, got, row.IDs)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestEncodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	wp := loadWordPiece(t)
	for name, text := range map[string]string{
		"ascii":     benchText(wp, 500),
		"non-ascii": nonASCIIText,
		"added":     "[CLS] hello [MASK] world [SEP]",
		"long word": strings.Repeat("x", 5000) + " " + strings.Repeat("é", 300),
	} {
		dst := make([]int32, 0, 4096)
		if n := testing.AllocsPerRun(100, func() { dst = wp.Encode(dst[:0], text, 0) }); n != 0 {
			t.Errorf("Encode(%s) allocates %.1f times per call", name, n)
		}
		if n := testing.AllocsPerRun(100, func() { dst = wp.Encode(dst[:0], text, 17) }); n != 0 {
			t.Errorf("Encode(%s, max 17) allocates %.1f times per call", name, n)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	data, err := os.ReadFile(tokenizerPath(t))
	if err != nil {
		t.Fatal(err)
	}
	var base map[string]any
	if err := json.Unmarshal(data, &base); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		edit   func(m map[string]any)
		raw    string
		substr string
	}{
		{name: "not json", raw: "{", substr: "not a tokenizer.json"},
		{name: "no model", edit: func(m map[string]any) { delete(m, "model") }, substr: "no model"},
		{name: "bpe", edit: func(m map[string]any) { m["model"].(map[string]any)["type"] = "BPE" }, substr: `model type "BPE"`},
		{name: "unk", edit: func(m map[string]any) { m["model"].(map[string]any)["unk_token"] = "<unk>" }, substr: `unk_token "<unk>" is not in the vocabulary`},
		{name: "max chars", edit: func(m map[string]any) { m["model"].(map[string]any)["max_input_chars_per_word"] = 0 }, substr: "max_input_chars_per_word is 0"},
		{name: "dup id", edit: func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["zzzz"] = 5 }, substr: "share id 5"},
		{name: "normalizer", edit: func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFC"} }, substr: `normalizer type "NFC"`},
		{name: "no normalizer", edit: func(m map[string]any) { m["normalizer"] = nil }, substr: "no normalizer"},
		{name: "pre-tokenizer", edit: func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Whitespace"} }, substr: `pre_tokenizer type "Whitespace"`},
		{name: "added lstrip", edit: func(m map[string]any) {
			m["added_tokens"].([]any)[0].(map[string]any)["lstrip"] = true
		}, substr: `added token "[PAD]": normalized, single_word, lstrip and rstrip are not supported`},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := []byte(tt.raw)
			if tt.edit != nil {
				var m map[string]any
				if err := json.Unmarshal(data, &m); err != nil {
					t.Fatal(err)
				}
				tt.edit(m)
				if raw, err = json.Marshal(m); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, tt.name+".json")
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			for what, load := range map[string]func(string) error{
				"LoadWordPiece": func(p string) error { _, err := LoadWordPiece(p); return err },
				"LoadReference": func(p string) error { _, err := LoadReference(p); return err },
			} {
				err := load(path)
				if err == nil || !strings.Contains(err.Error(), tt.substr) || !strings.Contains(err.Error(), path) {
					t.Errorf("%s: error %v, want one naming %s and containing %q", what, err, path, tt.substr)
				}
			}
		})
	}
	if _, err := LoadWordPiece(filepath.Join(dir, "missing.json")); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("LoadWordPiece(missing) = %v, want a not-exist error", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// TestNormalizerOptions checks the options of BertNormalizer that this
// tokenizer.json does not use, on WordPiece and Reference alike. The
// expected words are those of Hugging Face's Rust library (tokenizers
// 0.23.2 through npm, normalizeString then preTokenizeString, checked by
// hand when this test was written).
func TestNormalizerOptions(t *testing.T) {
	data, err := os.ReadFile(tokenizerPath(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	text := "Café ÅNGSTRÖM 野口 a\x00b x\u00a0y İ"
	tests := []struct {
		opts map[string]any
		want []string
	}{
		{map[string]any{"strip_accents": false}, []string{"café", "ångström", "野", "口", "ab", "x", "y", "i̇"}},
		{map[string]any{"lowercase": false, "strip_accents": nil}, []string{"Café", "ÅNGSTRÖM", "野", "口", "ab", "x", "y", "İ"}},
		{map[string]any{"lowercase": false, "strip_accents": true}, []string{"Cafe", "ANGSTROM", "野", "口", "ab", "x", "y", "I"}},
		{map[string]any{"handle_chinese_chars": false}, []string{"cafe", "angstrom", "野口", "ab", "x", "y", "i"}},
		{map[string]any{"clean_text": false}, []string{"cafe", "angstrom", "野", "口", "a\x00b", "x", "y", "i"}},
	}
	for i, tt := range tests {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range tt.opts {
			m["normalizer"].(map[string]any)[k] = v
		}
		raw, _ := json.Marshal(m)
		path := filepath.Join(dir, fmt.Sprint(i, ".json"))
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		wp, err := LoadWordPiece(path)
		if err != nil {
			t.Fatal(err)
		}
		var words []string
		wp.Words(text, func(w []byte) bool { words = append(words, string(w)); return true })
		if !slices.Equal(words, tt.want) {
			t.Errorf("%v: Words(%q) = %q, want %q", tt.opts, text, words, tt.want)
		}
		ref, err := LoadReference(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ref.Encode(text)
		if err != nil {
			t.Fatal(err)
		}
		if want := wp.Encode(nil, text, 0); !slices.Equal(got, want) {
			t.Errorf("%v: Reference %v, WordPiece %v", tt.opts, got, want)
		}
	}
}

func TestModuleFile(t *testing.T) {
	want := tokenizerPath(t)
	got, err := ModuleFile()
	if err != nil || got != want {
		t.Errorf("ModuleFile() = %q, %v, want %q", got, err, want)
	}
	bad := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(bad, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkSHA256(bad, moduleSHA256); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("checkSHA256(other file) = %v, want a sha256 mismatch", err)
	}
}

func ExampleWordPiece_Encode() {
	path, err := ModuleFile()
	if err != nil {
		fmt.Println(err)
		return
	}
	wp, err := LoadWordPiece(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := wp.Encode(make([]int32, 0, 512), "Résumé tips: tokenization [MASK]!", 512)
	for _, id := range ids {
		fmt.Print(wp.Token(id), " ")
	}
	fmt.Println()
	// Output: resume tips : token ##ization [MASK] !
}

// Dataset-like English prompts (written for these benchmarks).
var benchSentences = []string{
	"Convert a list of integers into a single integer and print the result.",
	"What is the difference between a process and a thread in operating systems?",
	"Explain how photosynthesis converts sunlight into chemical energy in plants.",
	"Write a Python function that returns the n-th Fibonacci number using memoization.",
	"Summarize the causes of the French Revolution in three short paragraphs.",
	"How do I replace NaN values in a pandas DataFrame with the column average?",
	"Why does the moon always show the same face to the Earth?",
	"Give me a recipe for a vegetarian lasagna that serves six people.",
	"Prove that the square root of two is irrational.",
	"Which sorting algorithm is fastest for nearly sorted data, and why?",
}

// benchText returns English text of about n tokens.
func benchText(wp *WordPiece, n int) string {
	var b strings.Builder
	for i := 0; ; i++ {
		s := benchSentences[i%len(benchSentences)]
		if len(wp.Encode(nil, b.String()+" "+s, 0)) > n {
			words := strings.Fields(s)
			for _, w := range words {
				if len(wp.Encode(nil, b.String()+" "+w, 0)) > n {
					return strings.TrimSpace(b.String())
				}
				b.WriteString(" " + w)
			}
		}
		b.WriteString(" " + s)
	}
}

const nonASCIIText = "Café naïve Ångström résumé — Straße, İstanbul; Ελληνικά καλημέρα; Привет, мир! " +
	"我爱北京天安门。日本語のテキスト、カタカナ。안녕하세요 세계 👍🏽 مرحبا بالعالم नमस्ते दुनिया " +
	"Tiếng Việt có dấu: Nguyễn Thị Minh Khai. «Quoted» „text“ … e\u0301 a\u0300\u0301"

func BenchmarkEncode(b *testing.B) {
	wp := loadWordPiece(b)
	long := benchText(wp, 16000)
	cases := []struct {
		name string
		text string
		max  int
	}{
		{"tokens=30", benchText(wp, 30), 0},
		{"tokens=500", benchText(wp, 500), 0},
		{"tokens=512", benchText(wp, 512), 0},
		{"tokens=16000/max=512", long, 512},
		{"tokens=16000", long, 0},
		{"non-ascii", strings.Repeat(nonASCIIText+" ", 3), 0},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			dst := make([]int32, 0, 20000)
			n := len(wp.Encode(dst[:0], c.text, c.max))
			b.ReportAllocs()
			b.SetBytes(int64(len(c.text)))
			for b.Loop() {
				dst = wp.Encode(dst[:0], c.text, c.max)
			}
			b.ReportMetric(float64(n), "tokens/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
		})
	}
}

func BenchmarkReference(b *testing.B) {
	wp := loadWordPiece(b)
	ref := loadReference(b)
	for _, n := range []int{30, 500} {
		text := benchText(wp, n)
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			ids, err := ref.Encode(text)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ref.Encode(text); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(ids)), "tokens/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ids)), "ns/token")
		})
	}
}
