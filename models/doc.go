// Package models owns model artifacts: static embedding tables (tier 1),
// their manifests, loading and verifying them (sha256, checksums), converting
// public vectors into them (GloVe from npm, model2vec/potion safetensors),
// and quantizing them (float16, int8 with per-row scales). Large files are
// built by scripts/fetch-models.sh into the artifacts directory
// (${TRIAGE_MODELS:-var/models}), never committed.
//
// A Table maps rows to vectors and a per-row weight. Rows 0..VocabSize-1 are
// the tokenizer's vocabulary ids; the next ExtraWords rows are extra whole
// words, found with Word by their normalised text; the last Buckets rows
// (if any) are hashed buckets, such as token bigrams, addressed by row. Tier 1 sums Accumulate over a
// prompt's rows (a weighted mean of static vectors) and feeds the result to
// its class heads. Tables are built by NewTable, ImportGloVe and
// ImportModel2Vec (and by "triage distill", with PCA and SIFWeights), stored
// as float32 and then quantized with Quantize; WriteFile and ReadTable
// move them to and from the file format documented in file.go. The package
// takes a vocabulary as token strings in id order and, where it needs one, a
// normalisation function from its caller: it does not depend on a tokenizer.
//
// A Table is safe for concurrent use by readers. SetVector and SetWeight,
// for training on float32 tables, must not run concurrently with anything
// else on the same Table; a loaded table is never modified by the package.
package models
