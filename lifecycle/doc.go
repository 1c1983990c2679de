// Package lifecycle owns the classifier's models across reloads: it loads
// the tier-1 tables, the tier-2 encoders (local ONNX Runtime or a remote
// engine) and the heads the rules name, compiles the rules with them, and
// hands each new rule set the models, and tier 2's load state and result
// cache, the last one had while they are unchanged. The gateway (serve)
// and the offline commands (eval, ab, route, calibrate) load rules through
// it alike.
//
// It is where tier 2 is wired: with classifier/onnx, the one package
// besides cmd that imports it.
package lifecycle
