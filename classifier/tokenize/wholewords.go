package tokenize

import (
	"fmt"
	"strings"

	"github.com/triagegw/triage/internal/wordindex"
)

// WholeWords is a WordLookup for EncodeWords that knows every word the
// vocabulary holds whole (its tokens that do not carry the continuing-subword
// prefix) as well as extra words with ids of their own past the vocabulary.
// With it, a word is one hash lookup: a vocabulary word no longer misses the
// extra words first and then finds itself in the vocabulary's map, which is
// where most of a text's tokenizing went. It gives the ids EncodeWords gives
// with the extra words alone, since a word that is a vocabulary token is
// that token's one id either way. Safe for concurrent use.
//
// Word, Len and MemoryBytes are the index's own (wordindex.Index): the
// tokenizer's lookup is one call a word. Read-only once built.
type WholeWords struct {
	wordindex.Index // IDs: the id of each word
}

// WholeWords builds the index of t's whole-word tokens and of extra, whose
// word i has id first+i. An extra word that is also a vocabulary token
// keeps the extra id, as EncodeWords gives it: the lookup comes before the
// vocabulary.
func (t *WordPiece) WholeWords(extra []string, first int32) (*WholeWords, error) {
	words := make([]string, 0, len(t.vocab)+len(extra))
	ids := make([]int32, 0, cap(words))
	seen := make(map[string]bool, len(extra))
	for i, x := range extra {
		seen[x] = true
		words, ids = append(words, x), append(ids, first+int32(i))
	}
	for tok, id := range t.vocab {
		if tok == "" || seen[tok] || t.prefix != "" && strings.HasPrefix(tok, t.prefix) {
			continue
		}
		words, ids = append(words, tok), append(ids, id)
	}
	// The extra words come first, so an error's word index is theirs.
	idx, err := wordindex.New(words)
	if err != nil {
		return nil, fmt.Errorf("tokenize: extra %w", err)
	}
	idx.IDs = ids
	return &WholeWords{idx}, nil
}
