package onnx

import (
	"unicode"
	"unicode/utf8"
)

// capsShare is the share of a text's letters, in tenths, at and above
// which prepare lower-cases it: 7 is 70%.
const capsShare = 7

// prepare returns text as the encoder reads it, appending to buf when it
// must change it (and returning buf's new contents as changed; text
// itself, unchanged, otherwise):
//
//   - every run of whitespace (tabs, line breaks, Unicode spaces) becomes
//     one space, and the text is trimmed;
//   - a text whose letters are at least 70% capitals is lower-cased.
//
// Tier 1 reads lower-cased tokens split at any whitespace, so this noise
// never moves it; USE lite's tokenizer is cased, reads a tab or a line
// break as the unknown piece and a double space as an extra piece, so it
// moved tier 2 (the tokenizer itself keeps the reference's ids). With both
// steps, `triage eval --robustness` on dev with examples/subjects flips
// 2.33% of routes instead of 3.47%, at route accuracy 0.8980 against
// 0.8994. Line breaks are collapsed too: kept as one line break each, they
// route fewer of the prompts written to assistants right
// and leave more flips everywhere (bench/tier2-prepare.md).
//
// A text that needs neither step costs one pass and no allocation.
func prepare(buf []byte, text string) (out []byte, changed bool) {
	if text == "" {
		return buf, false
	}
	var letters, upper int
	space := true // at the start: a leading space is a change
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c == ' ':
				changed = changed || space
				space = true
				continue
			case c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r':
				changed, space = true, true
				continue
			case 'A' <= c && c <= 'Z':
				letters++
				upper++
			case 'a' <= c && c <= 'z':
				letters++
			}
			space = false
			continue
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		i += n
		switch {
		case unicode.IsSpace(r):
			changed, space = true, true
			continue
		case unicode.IsUpper(r):
			letters++
			upper++
		case unicode.IsLetter(r):
			letters++
		}
		space = false
	}
	lower := upper > 0 && upper*10 >= letters*capsShare
	if !changed && !space && !lower { // space: a trailing space
		return buf, false
	}
	out = buf
	gap := false
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			i++
			if asciiSpace(c) {
				gap = len(out) > len(buf)
				continue
			}
			if gap {
				out, gap = append(out, ' '), false
			}
			if lower && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			out = append(out, c)
			continue
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		if unicode.IsSpace(r) {
			i += n
			gap = len(out) > len(buf)
			continue
		}
		if gap {
			out, gap = append(out, ' '), false
		}
		if lower {
			if l := unicode.ToLower(r); l != r {
				out = utf8.AppendRune(out, l)
				i += n
				continue
			}
		}
		out = append(out, text[i:i+n]...) // as it was, invalid bytes included
		i += n
	}
	return out, true
}

func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}
