// Package tokenize holds the tokenizers the classifier tiers use.
//
// WordPiece is BERT's uncased WordPiece (the bert-base-uncased vocabulary
// that bge-small and MiniLM share), read from a Hugging Face tokenizer.json
// and reimplemented for the hot path: Hugging Face's BertNormalizer,
// BertPreTokenizer, added-token matching and WordPiece model in one pass
// over the text, with byte tables for ASCII and a per-rune table for the
// rest of the BMP, without allocating. It yields the ids of Hugging Face's
// tokenizers (encode without special tokens, truncation or padding), checked
// by tests against:
//
//   - golden ids in testdata/golden.jsonl, written by
//     scripts/golden-tokenizer.mjs with Hugging Face's Rust library through
//     its Node binding (npm "tokenizers"; the pure-JS port
//     @huggingface/tokenizers is run alongside and its few known
//     differences recorded);
//   - how that library normalizes and classes every Unicode code point
//     (testdata/codepoints.txt.gz): its tables are older than Go's (Unicode
//     8 categories, pre-13 NFD) and its lowercase newer (Unicode 17), and
//     unicode_tables.go, generated from that data, bridges the difference;
//   - Reference, over the shared datasets and a fuzz corpus.
//
// Reference is github.com/sugarme/tokenizer's pipeline, loaded offline from
// the same file, with the fixes Hugging Face parity needs (its
// BertNormalizer strips accents without NFD, reads strip_accents: null as
// false, misses Co and Unicode whitespace; its pre-tokenizer's classes, and
// its added-token matching; see Reference). It is slow and used by tests
// and tools.
//
// ModuleFile locates the all-MiniLM-L6-v2 tokenizer.json in the Go module
// cache (github.com/clems4ever/all-minilm-l6-v2-go), checking its sha256.
//
// Tokenizers are immutable after loading and safe for concurrent use. The
// package starts no goroutines.
package tokenize
