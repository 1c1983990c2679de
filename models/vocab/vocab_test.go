package vocab

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	v, err := Parse([]byte(`{"model":{"type":"WordPiece","vocab":{"[PAD]":0,"a":2,"##b":1}}}`))
	if err != nil || !slices.Equal(v, []string{"[PAD]", "##b", "a"}) {
		t.Fatalf("WordPiece: %q, %v", v, err)
	}
	v, err = Parse([]byte(`{"model":{"type":"Unigram","vocab":[["<unk>",0],["▁the",-2.5],["s",-3]]}}`))
	if err != nil || !slices.Equal(v, []string{"<unk>", "▁the", "s"}) {
		t.Fatalf("Unigram: %q, %v", v, err)
	}
	v, err = Parse([]byte(`{"model":{"vocab":{"a":0,"c":2}}}`))
	if err != nil || !slices.Equal(v, []string{"a", "", "c"}) {
		t.Fatalf("gap: %q, %v", v, err)
	}
	for _, bad := range []string{`{}`, `{"model":{"vocab":{}}}`, `{"model":{"vocab":{"a":0,"b":0}}}`, `{"model":{"vocab":{"a":-1}}}`,
		`{"model":{"vocab":{"a":99999999}}}`, `not json`, `{"model":{"vocab":[[]]}}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestReadFile(t *testing.T) {
	data := []byte(`{"model":{"type":"WordPiece","vocab":{"[PAD]":0,"law":1}}}`)
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	v, sum, err := ReadFile(path)
	want := sha256.Sum256(data)
	if err != nil || !slices.Equal(v, []string{"[PAD]", "law"}) || sum != hex.EncodeToString(want[:]) {
		t.Fatalf("ReadFile = %q, %s, %v", v, sum, err)
	}
	os.WriteFile(path, []byte(`{}`), 0o644)
	if _, _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadFile of a file without a vocabulary: %v, want an error naming it", err)
	}
	if _, _, err := ReadFile(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Error("ReadFile of an absent file: no error")
	}
}
