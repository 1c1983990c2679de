// Package distill builds a static table (tier 1) from a sentence encoder
// (tier 2), the model2vec way: every token of a vocabulary embedded on its
// own by the teacher, reduced by PCA, weighted by SIF over Zipf ranks. It
// is part of the offline toolchain ("triage distill"): the teacher is any
// embed function, so the package does not depend on the ONNX runtime.
//
// Table calls the embed function from Options.Workers goroutines at once
// (it must be safe for that) and returns when they have all stopped; PCA
// computes the covariance on GOMAXPROCS goroutines the same way. The
// functions are safe for concurrent use.
package distill
