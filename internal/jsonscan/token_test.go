package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// specials flags a word exactly when one of its bytes is not plain, and
// its lowest flag is the first such byte: every byte value at every
// position among plain fillers, and random words (high bytes included;
// and words of mostly special bytes, where borrows chain) against the
// byte-wise check.
func TestSpecials(t *testing.T) {
	check := func(x uint64) {
		t.Helper()
		first := 8
		for i := range 8 {
			if !plain[byte(x>>(8*i))] {
				first = i
				break
			}
		}
		m := specials(x)
		if got := bits.TrailingZeros64(m) >> 3; (m != 0) != (first < 8) || m != 0 && got != first {
			t.Fatalf("%#016x: specials %#016x (first at %d), want first at %d", x, m, got, first)
		}
	}
	for _, fill := range []byte{'a', 0x20, 0xff, 0x80, '#', ']'} {
		for v := range 256 {
			for p := range 8 {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[p] = byte(v)
				check(binary.LittleEndian.Uint64(w[:]))
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := []byte{'"', '\\', 0, 0x1f, 0x20, 0x21, '"' + 1, '\\' - 1, 0x80, 0xff, 'a'}
	for range 1 << 20 {
		check(rng.Uint64())
		var w [8]byte
		for i := range w {
			w[i] = pick[rng.IntN(len(pick))]
		}
		check(binary.LittleEndian.Uint64(w[:]))
	}
}
