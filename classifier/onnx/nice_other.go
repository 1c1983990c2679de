//go:build !linux

package onnx

// setThreadNice does nothing where threads cannot be given their own
// priority portably: Runs share the cores with the gateway as equals.
func setThreadNice(n int) error { return nil }
