package tokenize

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
)

// config is what this package reads from a Hugging Face tokenizer.json.
type config struct {
	vocab    map[string]int32
	unk      string
	prefix   string
	maxChars int
	norm     normFlags
	added    []addedToken // longest content first
}

// normFlags are BertNormalizer's options, strip_accents resolved (null
// follows lowercase, as in Hugging Face).
type normFlags struct {
	cleanText, handleCJK, stripAccents, lowercase bool
}

type addedToken struct {
	content string
	id      int32
}

type rawConfig struct {
	AddedTokens []struct {
		ID         *int   `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	Normalizer *struct {
		Type               string `json:"type"`
		CleanText          *bool  `json:"clean_text"`
		HandleChineseChars *bool  `json:"handle_chinese_chars"`
		StripAccents       *bool  `json:"strip_accents"`
		Lowercase          *bool  `json:"lowercase"`
	} `json:"normalizer"`
	PreTokenizer *struct {
		Type string `json:"type"`
	} `json:"pre_tokenizer"`
	Model *struct {
		Type                    string           `json:"type"`
		UnkToken                *string          `json:"unk_token"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		MaxInputCharsPerWord    *int             `json:"max_input_chars_per_word"`
		Vocab                   map[string]int64 `json:"vocab"`
	} `json:"model"`
}

// readConfig reads and checks a tokenizer.json holding a BERT WordPiece
// tokenizer: BertNormalizer, BertPreTokenizer, WordPiece model. Errors name
// the file and the problem.
func readConfig(path string) (*config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	fail := func(format string, args ...any) (*config, error) {
		return nil, fmt.Errorf("tokenize: %s: "+format, append([]any{path}, args...)...)
	}
	var raw rawConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return fail("not a tokenizer.json: %v", err)
	}
	m := raw.Model
	switch {
	case m == nil:
		return fail("no model")
	case m.Type != "WordPiece":
		return fail("model type %q, want WordPiece", m.Type)
	case len(m.Vocab) == 0:
		return fail("model.vocab is empty")
	}
	c := &config{
		vocab:    make(map[string]int32, len(m.Vocab)),
		unk:      "[UNK]",
		prefix:   "##",
		maxChars: 100,
	}
	if m.UnkToken != nil {
		c.unk = *m.UnkToken
	}
	if m.ContinuingSubwordPrefix != nil {
		c.prefix = *m.ContinuingSubwordPrefix
	}
	if m.MaxInputCharsPerWord != nil {
		c.maxChars = *m.MaxInputCharsPerWord
	}
	if c.maxChars <= 0 {
		return fail("model.max_input_chars_per_word is %d, want > 0", c.maxChars)
	}
	if len(c.prefix) > 32 {
		return fail("model.continuing_subword_prefix %q is too long", c.prefix)
	}
	seen := make(map[int32]string, len(m.Vocab))
	for tok, id := range m.Vocab {
		if id < 0 || id >= 1<<31-1 {
			return fail("model.vocab: token %q has id %d", tok, id)
		}
		if other, dup := seen[int32(id)]; dup {
			return fail("model.vocab: tokens %q and %q share id %d", other, tok, id)
		}
		seen[int32(id)] = tok
		c.vocab[tok] = int32(id)
	}
	if _, ok := c.vocab[c.unk]; !ok {
		return fail("model.unk_token %q is not in the vocabulary", c.unk)
	}

	n := raw.Normalizer
	switch {
	case n == nil:
		return fail("no normalizer, want BertNormalizer")
	case n.Type != "BertNormalizer":
		return fail("normalizer type %q, want BertNormalizer", n.Type)
	}
	flag := func(p *bool, def bool) bool {
		if p == nil {
			return def
		}
		return *p
	}
	// Missing options take BertNormalizer's defaults: all on, strip_accents
	// following lowercase.
	c.norm = normFlags{
		cleanText: flag(n.CleanText, true),
		handleCJK: flag(n.HandleChineseChars, true),
		lowercase: flag(n.Lowercase, true),
	}
	c.norm.stripAccents = flag(n.StripAccents, c.norm.lowercase)

	if p := raw.PreTokenizer; p == nil || p.Type != "BertPreTokenizer" {
		typ := "none"
		if p != nil {
			typ = fmt.Sprintf("%q", p.Type)
		}
		return fail("pre_tokenizer type %s, want BertPreTokenizer", typ)
	}

	for _, a := range raw.AddedTokens {
		switch {
		case a.ID == nil || *a.ID < 0 || *a.ID >= 1<<31-1:
			return fail("added token %q has no valid id", a.Content)
		case a.Content == "":
			return fail("added token %d has empty content", *a.ID)
		case a.Normalized || a.SingleWord || a.LStrip || a.RStrip:
			return fail("added token %q: normalized, single_word, lstrip and rstrip are not supported", a.Content)
		}
		c.added = append(c.added, addedToken{a.Content, int32(*a.ID)})
	}
	sort.SliceStable(c.added, func(i, j int) bool { return len(c.added[i].content) > len(c.added[j].content) })
	return c, nil
}

// matchAdded returns the added token that s starts with, the longest when
// several do (Hugging Face matches added tokens leftmost-longest on the raw
// text).
func matchAdded(added []addedToken, s string) (addedToken, bool) {
	for _, a := range added {
		if len(s) >= len(a.content) && s[:len(a.content)] == a.content {
			return a, true
		}
	}
	return addedToken{}, false
}
