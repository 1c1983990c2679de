package models

import (
	"math"
	"sync"
)

// IEEE 754 binary16 ("half"): 1 sign bit, 5 exponent bits (bias 15), 10
// mantissa bits. Subnormals are mantissa*2^-24; exponent 31 is inf or NaN.

// Float32ToHalf converts f to the nearest half, ties to even. Magnitudes
// that round beyond 65504 become ±inf, those below 2^-25 become ±0 (exactly
// 2^-25 ties to 0), NaN stays a (quiet) NaN with its sign.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13) // quiet NaN, top payload bits
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // below 2^-25: rounds to zero
		}
		// Subnormal half: value in units of 2^-24 is m >> (14-e), where m
		// is the 24-bit significand (a float32 subnormal has exp 0 and is
		// far below this range, caught above).
		m := mant | 0x800000
		shift := uint(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++ // may carry into the smallest normal: still right
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, up to inf: still right
	}
	return sign | uint16(h)
}

// Float32ToHalfSaturate is Float32ToHalf but finite inputs never become
// infinite: they saturate at ±65504.
func Float32ToHalfSaturate(f float32) uint16 {
	h := Float32ToHalf(f)
	if h&0x7fff == 0x7c00 && !math.IsInf(float64(f), 0) {
		return h&0x8000 | 0x7bff
	}
	return h
}

// HalfToFloat32 converts a half to float32 exactly.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		e := uint32(127 - 14)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

var (
	halfOnce sync.Once
	halfLUT  *[1 << 16]float32
)

// halfTable is the 256 KiB table of every half's float32 value, built once
// on first use (by f16 tables only).
func halfTable() *[1 << 16]float32 {
	halfOnce.Do(func() {
		t := new([1 << 16]float32)
		for i := range t {
			t[i] = HalfToFloat32(uint16(i))
		}
		halfLUT = t
	})
	return halfLUT
}
