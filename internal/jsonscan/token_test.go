package jsonscan

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// special8 flags a word exactly when one of its bytes is not plain:
// every byte value at every position among plain fillers, and random words
// (high bytes included) against the byte-wise check.
func TestSpecial8(t *testing.T) {
	for _, fill := range []byte{'a', 0x20, 0xff, 0x80, '#', ']'} {
		for v := range 256 {
			for p := range 8 {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[p] = byte(v)
				if got, want := special8(binary.LittleEndian.Uint64(w[:])), !plain[v]; got != want {
					t.Fatalf("fill %#x, byte %#x at %d: special %v, want %v", fill, v, p, got, want)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		x := rng.Uint64()
		want := false
		for i := range 8 {
			want = want || !plain[byte(x>>(8*i))]
		}
		if got := special8(x); got != want {
			t.Fatalf("%#016x: special %v, want %v", x, got, want)
		}
	}
}
