// Package models owns what the gateway loads of its model files at run
// time: static embedding tables (tier 1) in the file format documented in
// file.go, their manifests, loading and verifying them (sha256, checksums),
// their storage (float32, float16, int8 with per-row scales) and the index
// of their extra words. Large files are built by scripts/fetch-models.sh
// into the artifacts directory (${TRIAGE_MODELS:-var/models}), never
// committed.
//
// A Table maps rows to vectors and a per-row weight. Rows 0..VocabSize-1 are
// the tokenizer's vocabulary ids; the next ExtraWords rows are extra whole
// words, found with Word by their normalised text; the last Buckets rows
// (if any) are hashed buckets, such as token bigrams, addressed by row.
// Tier 1 sums Accumulate over a prompt's rows (a weighted mean of static
// vectors) and feeds the result to its class heads. Tables are built by
// NewTable, stored as float32 and then quantized with Quantize; WriteFile
// and ReadTable move them to and from the file format. The package takes a
// vocabulary as token strings in id order: it does not depend on a
// tokenizer.
//
// The offline toolchain that makes tables and encoders lives in packages of
// its own, which the gateway's import graph never reaches: models/glove and
// models/model2vec (importers), models/distill (tables from an encoder),
// models/sif (row weights), models/vocab (tokenizer.json vocabularies),
// models/bert (generated BERT encoders), models/quantize (int8 encoders),
// models/onnxpb (ONNX protobuf) and models/tfjs (the TF.js converter).
//
// ReadTable maps a table's file read-only where the platform and the file's
// layout allow it (the vectors, and the scales and weights when aligned),
// instead of copying it to the heap: only the pages lookups touch (see
// ReadTable) are resident, as clean file-backed memory shared with the
// page cache. A
// table file in use must therefore be replaced by renaming a new file over
// it (WriteFile does), never rewritten in place. The mapping is unmapped
// by a cleanup once no Table refers to it.
//
// A Table is safe for concurrent use by readers. SetVector and SetWeight,
// for training on float32 tables, must not run concurrently with anything
// else on the same Table; on a mapped table they first copy its arrays to
// the heap, so a table file is never written through. A loaded table is
// never modified by the package.
package models
