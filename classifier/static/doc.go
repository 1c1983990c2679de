// Package static is tier 1 of the classifier: tokenize (BERT WordPiece,
// with whole-word rows for frequent words the vocabulary would split), look
// up one static vector per token, take the weighted mean of at most
// MaxTokens of them, and score it with a linear head. Pure Go, microseconds,
// no allocation per call in steady state.
//
// A Model is immutable after New and safe for concurrent use; per-call
// scratch space comes from a sync.Pool. Tune trains the token vectors and
// the head together (fastText-style) for a labelled dataset.
package static
