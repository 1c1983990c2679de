package tokenize

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/triagegw/triage/internal/testenv"
)

// mapWords is the plain WordLookup WholeWords stands in for: extra words
// only, in a Go map.
type mapWords map[string]int32

func (m mapWords) Word(b []byte) (int32, bool) { id, ok := m[string(b)]; return id, ok }

// wholeWordsExtra is a set of extra words as a table holds them: words the
// vocabulary splits, a few it holds whole (which keep the extra id), long
// ones (past the 8 bytes the hash reads at once) and non-ASCII ones.
func wholeWordsExtra() []string {
	return []string{"landlord", "rebase", "the", "law", "kubernetes", "photosynthesis",
		"internationalization", "naïve", "café", "日本", "straße", "supercalifragilistic",
		"a", "zz", "unaffable", "cryptocurrency", "mitochondria", "eigenvalue", "x"}
}

// loadWholeWords is the test tokenizer and the index of its whole words
// and wholeWordsExtra, extra word i with id first+i, first the vocabulary's
// size.
func loadWholeWords(t testing.TB) (wp *WordPiece, whole *WholeWords, extra []string, first int32) {
	t.Helper()
	wp = loadWordPiece(t)
	extra = wholeWordsExtra()
	first = int32(wp.VocabSize())
	whole, err := wp.WholeWords(extra, first)
	if err != nil {
		t.Fatal(err)
	}
	return wp, whole, extra, first
}

// WholeWords gives the ids the extra words alone give, on every text of the
// shared subjects dev set and the golden texts: a vocabulary word is its
// token's one id either way, and an extra word its own id even where the
// vocabulary holds it whole.
func TestWholeWordsMatchesExtraWords(t *testing.T) {
	wp, whole, extra, first := loadWholeWords(t)
	plain := mapWords{}
	for i, x := range extra {
		plain[x] = first + int32(i)
	}
	var texts []string
	for _, r := range readGolden(t) {
		texts = append(texts, r.text(t))
	}
	dir := filepath.Join(testenv.Shared(t, "datasets/subjects/dev.jsonl"), "datasets", "subjects")
	texts = append(texts, readTexts(t, filepath.Join(dir, "dev.jsonl"))...)
	for _, x := range extra {
		texts = append(texts, "My "+x+" and THE "+x+"s, "+x+"!")
	}
	extraHits := 0
	var got, want []int32
	for i, text := range texts {
		for _, max := range []int{0, 7, 512} {
			want = wp.EncodeWords(want[:0], text, max, plain)
			got = wp.EncodeWords(got[:0], text, max, whole)
			if !slices.Equal(got, want) {
				t.Fatalf("text %d %q, max %d:\n got %v\nwant %v", i, text, max, got, want)
			}
		}
		for _, id := range got {
			if id >= first {
				extraHits++
			}
		}
	}
	if extraHits == 0 {
		t.Fatal("no text used an extra word: the test compares nothing but the vocabulary")
	}
	t.Logf("%d texts, %d whole words in the index, %d extra-word ids", len(texts), whole.Len(), extraHits)
}

// Word finds each word however its bytes are held (a slice with no room
// past its end takes the byte-by-byte path of the hash, one inside a larger
// buffer the masked read), and misses prefixes, extensions and the
// continuation pieces ("##s" is a vocabulary token, not a word).
func TestWholeWordsWord(t *testing.T) {
	wp, whole, extra, first := loadWholeWords(t)
	buf := make([]byte, 0, 256)
	check := func(w string, want int32, wantOK bool) {
		t.Helper()
		exact := []byte(w)[:len(w):len(w)]
		roomy := append(buf[:0], w...)
		for _, b := range [][]byte{exact, roomy} {
			id, ok := whole.Word(b)
			if ok != wantOK || ok && id != want {
				t.Fatalf("Word(%q, cap %d) = %d, %v; want %d, %v", w, cap(b), id, ok, want, wantOK)
			}
		}
	}
	for i, x := range extra {
		check(x, first+int32(i), true)
	}
	for _, w := range []string{"court", "judge", "of", "##s", "s"} {
		id, inVocab := wp.ID(w)
		check(w, id, inVocab && w[0] != '#')
	}
	for _, w := range []string{"", "landlor", "landlords", "kubernete", "photosynthesiss", "naive", "Law", "lawz", "日"} {
		if _, ok := wp.ID(w); ok {
			continue
		}
		check(w, 0, false)
	}
	if _, err := wp.WholeWords([]string{"dup", "dup"}, first); err == nil {
		t.Fatal("a repeated extra word was accepted")
	}
	if _, err := wp.WholeWords([]string{""}, first); err == nil {
		t.Fatal("an empty extra word was accepted")
	}
	t.Logf("%d words, %d KiB", whole.Len(), whole.MemoryBytes()>>10)
}

func TestWholeWordsAllocs(t *testing.T) {
	wp, whole, _, _ := loadWholeWords(t)
	present, absent := []byte("photosynthesis"), []byte("photosynthesiz")
	if n := testing.AllocsPerRun(1000, func() {
		whole.Word(present)
		whole.Word(absent)
	}); n != 0 {
		t.Fatalf("Word allocates %v times", n)
	}
	if raceEnabled {
		t.Skip("EncodeWords' scanner comes from a sync.Pool, which drops items at random under the race detector")
	}
	dst := make([]int32, 0, 256)
	text := "The landlord's photosynthesis of kubernetes, naïvely: " + extraText
	if n := testing.AllocsPerRun(100, func() { dst = wp.EncodeWords(dst[:0], text, 0, whole) }); n != 0 {
		t.Fatalf("EncodeWords with WholeWords allocates %v times", n)
	}
}

const extraText = "I moved out of my apartment last month and my landlord is refusing to return the security deposit."

// FuzzWholeWords holds Word to a Go map of the same words, for any bytes
// held in a slice with any room past its end (the hash reads a short word's
// bytes as one masked word when the capacity allows, and its tail bytes one
// by one when it does not).
//
//	go test ./classifier/tokenize -run '^$' -fuzz FuzzWholeWords -fuzztime 1m
func FuzzWholeWords(f *testing.F) {
	wp, whole, extra, first := loadWholeWords(f)
	want := map[string]int32{}
	for id := int32(0); id < int32(wp.VocabSize()); id++ {
		tok := wp.Token(id)
		if v, ok := wp.ID(tok); ok && v == id && tok != "" && !strings.HasPrefix(tok, "##") {
			want[tok] = id
		}
	}
	for i, x := range extra {
		want[x] = first + int32(i)
	}
	for _, s := range []string{"", "a", "the", "landlord", "kubernetes", "internationalization", "naïve", "日本", "##s", "#", "\x00", "landlord\x00"} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(9))
	}
	f.Fuzz(func(t *testing.T, s string, room uint8) {
		buf := make([]byte, len(s)+int(room))
		copy(buf, s)
		for i := len(s); i < len(buf); i++ {
			buf[i] = 'x' // what the masked read must ignore
		}
		b := buf[:len(s)]
		id, ok := whole.Word(b)
		wid, wok := want[s]
		if ok != wok || ok && id != wid {
			t.Fatalf("Word(%q, room %d) = %d, %v; want %d, %v", s, room, id, ok, wid, wok)
		}
	})
}
