package models

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestHalfKnownValues(t *testing.T) {
	cases := []struct {
		f float32
		h uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},                 // largest finite
		{65519.996, 0x7bff},             // just below the halfway point to 65536
		{65520, 0x7c00},                 // halfway to 65536: ties to even = inf
		{float32(math.Inf(1)), 0x7c00},  // inf
		{float32(math.Inf(-1)), 0xfc00}, // -inf
		{0x1p-14, 0x0400},               // smallest normal
		{0x1p-24, 0x0001},               // smallest subnormal
		{0x1p-25, 0x0000},               // halfway to the smallest subnormal: ties to even = 0
		{0x1.000002p-25, 0x0001},        // just above halfway
		{0x3p-25, 0x0002},               // 1.5 units: ties to even = 2
		{0x5p-25, 0x0002},               // 2.5 units: ties to even = 2
		{0x3ffp-24, 0x03ff},             // largest subnormal
		{0x7ffp-25, 0x0400},             // rounds up from the largest subnormal into the smallest normal
		{0.1, 0x2e66},                   // 0.0999755859375
		{1.0 / 3, 0x3555},               // 0.333251953125
		{3.14159265, 0x4248},            // pi
		{-1e-3, 0x9419},                 // -0.0010004043579101562
		{1 + 0x1p-11, 0x3c00},           // halfway between 1 and next: ties to even = 1
		{1 + 0x3p-11, 0x3c02},           // halfway between 1+2^-10 and 1+2^-9: ties to even
		{1 + 0x1p-11 + 0x1p-20, 0x3c01}, // just above halfway
		{2047, 0x67ff},                  // exact
		{2049, 0x6800},                  // halfway 2048/2050: ties to even = 2048
		{1e-10, 0x0000},                 // underflow
		{-1e-10, 0x8000},                // underflow keeps the sign
		{1e10, 0x7c00},                  // overflow
	}
	for _, c := range cases {
		if got := Float32ToHalf(c.f); got != c.h {
			t.Errorf("Float32ToHalf(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	back := map[uint16]float32{
		0x3c00: 1, 0xc000: -2, 0x7bff: 65504, 0x0400: 0x1p-14, 0x0001: 0x1p-24, 0x03ff: 0x3ffp-24,
		0x2e66: 0.0999755859375, 0x3555: 0.333251953125, 0x8001: -0x1p-24,
	}
	for h, f := range back {
		if got := HalfToFloat32(h); got != f {
			t.Errorf("HalfToFloat32(%#04x) = %v, want %v", h, got, f)
		}
	}
	if !math.IsInf(float64(HalfToFloat32(0x7c00)), 1) || !math.IsInf(float64(HalfToFloat32(0xfc00)), -1) {
		t.Error("infinities do not convert")
	}
	for _, h := range []uint16{0x7e00, 0x7c01, 0xfe00, 0x7fff} {
		if f := HalfToFloat32(h); !math.IsNaN(float64(f)) {
			t.Errorf("HalfToFloat32(%#04x) = %v, want NaN", h, f)
		}
	}
	for _, f := range []float32{float32(math.NaN()), math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00000)} {
		h := Float32ToHalf(f)
		if h&0x7c00 != 0x7c00 || h&0x3ff == 0 || h>>15 != uint16(math.Float32bits(f)>>31) {
			t.Errorf("Float32ToHalf(NaN %#08x) = %#04x, want a NaN of the same sign", math.Float32bits(f), h)
		}
	}
	if got := HalfToFloat32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Error("-0 does not convert")
	}
	if Float32ToHalfSaturate(1e9) != 0x7bff || Float32ToHalfSaturate(-70000) != 0xfbff ||
		Float32ToHalfSaturate(float32(math.Inf(1))) != 0x7c00 {
		t.Error("saturation")
	}
}

// Every half converts to float32 and back to itself.
func TestHalfRoundTripAll(t *testing.T) {
	lut := halfTable()
	for i := range 1 << 16 {
		h := uint16(i)
		f := HalfToFloat32(h)
		if math.Float32bits(lut[h]) != math.Float32bits(f) {
			t.Fatalf("lookup table differs at %#04x", h)
		}
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			continue // NaN: checked above
		}
		if got := Float32ToHalf(f); got != h {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, got)
		}
	}
}

// Float32ToHalf agrees with a reference that picks the nearest half (ties
// to the even one) by search over all of them, in float64.
func TestHalfRoundingReference(t *testing.T) {
	var halves []float64 // non-negative finite halves, ascending (bit order is value order)
	for h := range uint16(0x7c00) {
		halves = append(halves, float64(HalfToFloat32(h)))
	}
	ref := func(f float32) uint16 {
		x := math.Abs(float64(f))
		sign := uint16(0)
		if math.Signbit(float64(f)) {
			sign = 0x8000
		}
		if x >= 65520 {
			return sign | 0x7c00
		}
		i := sort.SearchFloat64s(halves, x) // halves[i] >= x
		if i == len(halves) {
			return sign | 0x7bff // in (65504, 65520)
		}
		if halves[i] == x {
			return sign | uint16(i)
		}
		lo, hi := halves[i-1], halves[i]
		switch {
		case x-lo < hi-x:
			return sign | uint16(i-1)
		case x-lo > hi-x:
			return sign | uint16(i)
		case (i-1)%2 == 0:
			return sign | uint16(i-1)
		}
		return sign | uint16(i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(f float32) {
		if got, want := Float32ToHalf(f), ref(f); got != want {
			t.Fatalf("Float32ToHalf(%v = %#08x) = %#04x, reference %#04x", f, math.Float32bits(f), got, want)
		}
	}
	for range 300000 {
		// Exponents around the half range, random mantissas and signs.
		bits := rng.Uint32()&0x807fffff | uint32(100+rng.IntN(45))<<23
		check(math.Float32frombits(bits))
	}
	for h := range uint16(0x7bff) { // every halfway point and its neighbours
		mid := float32((halves[h] + halves[h+1]) / 2)
		b := math.Float32bits(mid)
		for _, f := range []uint32{b - 1, b, b + 1} {
			check(math.Float32frombits(f))
			check(-math.Float32frombits(f))
		}
	}
}
