// Package jsonscan is the one JSON token scanner under triage's request
// and response parsers (package openai's span extraction, package
// anthropic's decoders, the GloVe importer): whitespace, strings with their
// escapes, numbers, literals and the nesting of objects and arrays are read
// here and nowhere else, so a body one parser accepts is a body every other
// one, and encoding/json, accepts (FuzzScanner holds it to that).
//
// It works on a byte slice and allocates nothing: a string is returned as
// a slice of the input when it has no escapes, else decoded into a buffer
// the Scanner reuses. There are two layers:
//
//   - functions over (b, i) that find where one token ends (StringEnd,
//     NumberEnd, LiteralEnd, WS) and decode a validated string token
//     (AppendUnquote), for a reader that holds only a window of its input
//     and must tell "invalid" from "cut short" (Fault End);
//   - Scanner, a pull parser over a whole document: the caller walks the
//     structure it expects (Object, Array, String, Number) and Skips the
//     rest, each value checked as strictly as RFC 8259 asks.
//
// What it accepts is exactly what encoding/json.Valid accepts, nesting
// depth included (MaxDepth). Decoded strings are encoding/json's, with one
// documented difference: bytes that are not UTF-8 are kept as they are,
// where encoding/json replaces each with U+FFFD. Every caller either
// re-encodes the text (which replaces them the same way) or hands it to a
// tokenizer that does; checking each byte here would slow the common,
// valid case for nothing. An escaped half of a surrogate pair without its
// other half decodes to U+FFFD, as in encoding/json.
//
// A Scanner is not safe for concurrent use; the functions are.
package jsonscan
