//go:build !cgo || !ort

package onnx

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
)

// TestWithoutTag checks that a build without the `ort` tag says, on every
// path into the runtime, that tier 2 is unavailable and how to get it.
func TestWithoutTag(t *testing.T) {
	if Available() {
		t.Fatal("Available in a build without the ort tag")
	}
	h := &classifier.Heads{Dir: t.TempDir(), Tier2: &classifier.Tier{Encoder: classifier.Encoder{Kind: "onnx", Model: "m"}}}
	var e *Encoder
	_, embedErr := e.Embed(context.Background(), []int32{1}, nil)
	_, hsErr := e.HiddenStates(context.Background(), []int32{1}, nil)
	_, encErr := NewEncoder("model.onnx", Manifest{}, Options{}, "")
	_, openErr := Open(t.TempDir(), "", Options{})
	_, loadErr := Load(h, "", Options{})
	for name, err := range map[string]error{"Init": Init("lib.so"), "NewEncoder": encErr, "Open": openErr, "Load": loadErr,
		"Embed": embedErr, "HiddenStates": hsErr} {
		if !errors.Is(err, classifier.ErrUnavailable) || !strings.Contains(err.Error(), "-tags ort") {
			t.Errorf("%s: %v, want classifier.ErrUnavailable naming the build tag", name, err)
		}
	}
}
