// Package bert writes BERT encoders as ONNX graphs (models/onnxpb): the
// architecture of bert-base and bge-small, with seeded random weights or
// given ones. It is part of the offline toolchain ("triage models
// gen-bert"): a generated encoder tests tier 2's runtime path and measures
// its cost without the real weights; its embeddings mean nothing.
//
// Build is deterministic (the same Config gives the same bytes) and, like
// every function here, safe for concurrent use; nothing starts a goroutine.
package bert
