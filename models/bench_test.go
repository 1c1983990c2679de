package models

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// BenchmarkAccumulate is the tier-1 hot loop: one row of 100 dimensions
// from a 100k-row table, rows drawn at random (as a prompt's tokens are).
func BenchmarkAccumulate(b *testing.B) {
	base := randomTable(b, 21, 30522, 70000, 100)
	rng := rand.New(rand.NewPCG(1, 1))
	rows := make([]int32, 4096)
	for i := range rows {
		rows[i] = int32(rng.IntN(base.Rows()))
		if base.Weight(rows[i]) == 0 {
			base.SetWeight(rows[i], 0.5)
		}
	}
	for _, q := range quants {
		tb := base.Quantize(q)
		acc := make([]float32, tb.Dims())
		b.Run(string(q), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				tb.Accumulate(acc, rows[i&4095], 0.7)
				i++
			}
		})
	}
}

func BenchmarkWord(b *testing.B) {
	tb := randomTable(b, 22, 10, 50000, 2)
	words := make([][]byte, 1024)
	for i := range words {
		if i%2 == 0 {
			words[i] = fmt.Appendf(nil, "w%d", i*37)
		} else {
			words[i] = fmt.Appendf(nil, "absent%d", i)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tb.Word(words[i&1023])
		i++
	}
}

// BenchmarkReadTable loads a 100k×100 table from disk.
func BenchmarkReadTable(b *testing.B) {
	base := randomTable(b, 23, 30522, 70000, 100)
	for _, q := range quants {
		path := filepath.Join(b.TempDir(), "t.tbl")
		if _, err := base.Quantize(q).WriteFile(path); err != nil {
			b.Fatal(err)
		}
		b.Run(string(q), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ReadTable(path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
