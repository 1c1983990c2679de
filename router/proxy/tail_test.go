package proxy

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/triagegw/triage/openai"
)

// The tail holds exactly the last openai.TailSize bytes written, however
// the writes were cut.
func TestTailKeepsTheLastBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var all []byte
		tl := new(tail)
		for range rng.IntN(40) {
			p := make([]byte, rng.IntN(3*openai.TailSize))
			if rng.IntN(3) == 0 {
				p = p[:min(len(p), rng.IntN(64))]
			}
			for i := range p {
				p[i] = byte(rng.IntN(256))
			}
			tl.add(p)
			all = append(all, p...)
		}
		want := all[max(0, len(all)-openai.TailSize):]
		if got := tl.bytes(); !bytes.Equal(got, want) {
			t.Fatalf("trial %d: %d bytes kept, want the last %d of %d", trial, len(got), len(want), len(all))
		}
	}
}
