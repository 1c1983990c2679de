// Package quantize rewrites ONNX encoders (models/onnxpb) for int8
// inference, as ONNX Runtime's dynamic quantization does: weight products
// in int8 with activations quantized per run, embedding tables int8 per
// row. It is part of the offline toolchain ("triage models quantize"); the
// gateway runs the graph it writes like any other.
//
// Dynamic does not modify its input and is safe for concurrent use; it
// starts no goroutine.
package quantize
