// Package classifier holds what the classifier tiers share: result types,
// linear class heads (softmax regression and nearest centroid) and how they
// are trained, temperature calibration, the metrics that judge them, and the
// heads artifact — one versioned directory holding the classes, each tier's
// head, how and on what it was trained, and per-class floors per tier.
//
// Tiers live in subpackages: classifier/static (tier 1, pure Go) and
// classifier/onnx (tier 2, cgo behind the "ort" build tag). Everything here
// is pure Go; loaded heads are immutable and safe for concurrent use.
package classifier
