package rules

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokenCounter is a tier 1 that can count a text's tokens without
// classifying it (classifier/static's Model can), for token-length
// conditions.
type tokenCounter interface {
	Tokens(text string) int
}

// tokens counts text's tier-1 tokens, or estimates them (a token per four
// bytes, at least one per word) when tier 1 cannot count.
func (s *Set) tokens(text string) int {
	if s.counter != nil {
		return s.counter.Tokens(text)
	}
	words := len(strings.Fields(text))
	return max(words, (len(text)+3)/4)
}

// scriptTable is the Unicode script of that name, whatever its case.
func scriptTable(name string) *unicode.RangeTable {
	for n, t := range unicode.Scripts {
		if strings.EqualFold(n, name) {
			return t
		}
	}
	return nil
}

func scriptNames() []string {
	names := make([]string, 0, len(unicode.Scripts))
	for n := range unicode.Scripts {
		names = append(names, strings.ToLower(n))
	}
	slices.Sort(names)
	return names
}

// inScripts reports whether the text's letters are mostly (more than half)
// in the given scripts: the text's dominant writing system is one of them.
// Text without letters matches none.
func inScripts(text string, scripts []*unicode.RangeTable) bool {
	letters, in := 0, 0
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		i += n
		if !unicode.IsLetter(r) {
			continue
		}
		letters++
		for _, t := range scripts {
			if unicode.Is(t, r) {
				in++
				break
			}
		}
	}
	return letters > 0 && 2*in > letters
}

// matches reports whether r's conditions other than its classes hold for
// sig. tokens caches the text's token count (-1: not counted yet).
func (s *Set) matches(r *route, sig *Signals, tokens *int) bool {
	if r.model != "" && sig.Model != r.model {
		return false
	}
	for _, h := range r.headers {
		if v := sig.Header[h[0]]; len(v) == 0 || v[0] != h[1] {
			return false
		}
	}
	if r.minTokens > 0 || r.maxTokens > 0 {
		if *tokens < 0 {
			*tokens = s.tokens(sig.Text)
		}
		if *tokens < r.minTokens || r.maxTokens > 0 && *tokens > r.maxTokens {
			return false
		}
	}
	if len(r.scripts) > 0 && !inScripts(sig.Text, r.scripts) {
		return false
	}
	if r.keywords != nil && !r.keywords.MatchString(sig.Text) {
		return false
	}
	if r.regex != nil && !r.regex.MatchString(sig.Text) {
		return false
	}
	return true
}
