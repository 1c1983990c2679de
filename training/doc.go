// Package training fits what a heads artifact (classifier.Heads) holds:
// tier 1 (Tier1: a static table tuned with its head, or a head on a frozen
// table), tier 2 (Tier2: a head on a sentence encoder's embeddings) and the
// calibration of either (Calibrate: the temperature and per-class floors
// for a target precision). It is the offline toolchain behind "triage
// train" and "triage calibrate"; the gateway never imports it.
//
// Training is deterministic: the same options, data and model files give
// the same artifact, byte for byte, when the options' At is fixed (the
// command takes it from SOURCE_DATE_EPOCH). Progress goes to the options'
// Log writer, one line at a time, and to their Progress callback; the
// package prints nothing else: the reports on an evaluation set come back
// in the Result, for the caller to print. Tier 2 sees its encoder only
// through the Embedder interface, so the package does not depend on the
// ONNX runtime: the caller opens the encoder (classifier/onnx) and passes
// it in. So does the teacher of a distilled tier 1 (Tier1Options.Distill:
// tier 1 learns an artifact's tier-2 probabilities on the training texts
// and on unlabelled ones), whose scores are cached like tier 2's
// embeddings.
//
// The functions are safe to call concurrently on different output
// directories; each returns when its work is done and leaves no goroutine
// behind.
package training
