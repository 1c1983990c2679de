package models

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

var quants = []Quant{QuantF32, QuantF16, QuantI8}

// randomTable is an f32 table of vocab rows and extra words "w0", "w1", ...
// with N(0,1) vectors (a few rows zero) and weights in [0, 1).
func randomTable(t testing.TB, seed uint64, vocab, extra, dims int) *Table {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	rows := vocab + extra
	vecs := make([][]float32, rows)
	w := make([]float32, rows)
	for r := range vecs {
		vecs[r] = make([]float32, dims)
		if r%17 == 3 {
			continue // zero row, weight 0
		}
		for j := range vecs[r] {
			vecs[r][j] = float32(rng.NormFloat64())
		}
		w[r] = rng.Float32()
	}
	words := make([]string, extra)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	tb, err := NewTable(Manifest{Name: "test", Version: "1", Method: "glove", Source: "random", Weighting: "random",
		Created: "2025-01-01T00:00:00Z"}, vocab, words, vecs, w)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func (t *Table) encodeBytes() []byte {
	var b bytes.Buffer
	if err := t.encode(&b); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func TestNewTable(t *testing.T) {
	tb := randomTable(t, 1, 10, 5, 8)
	if tb.Rows() != 15 || tb.Dims() != 8 || tb.VocabSize() != 10 || tb.Quant() != QuantF32 {
		t.Fatalf("rows %d dims %d vocab %d quant %s", tb.Rows(), tb.Dims(), tb.VocabSize(), tb.Quant())
	}
	m := tb.Manifest
	if m.Dims != 8 || m.VocabSize != 10 || m.ExtraWords != 5 || m.Quant != QuantF32 {
		t.Fatalf("manifest not filled in: %+v", m)
	}
	if got := tb.ExtraWords(); len(got) != 5 || got[4] != "w4" {
		t.Fatalf("ExtraWords = %q", got)
	}
	v := [][]float32{{1, 2}, {3, 4}}
	cases := []struct {
		name    string
		m       Manifest
		vocab   int
		words   []string
		vecs    [][]float32
		weights []float32
		want    string
	}{
		{"no rows", Manifest{}, 0, nil, nil, nil, "no rows"},
		{"ragged", Manifest{}, 2, nil, [][]float32{{1, 2}, {3}}, []float32{1, 1}, "row 1 has 1 values"},
		{"weights", Manifest{}, 2, nil, v, []float32{1}, "1 weights for 2 rows"},
		{"rows", Manifest{}, 1, nil, v, []float32{1, 1}, "4 values for 1 rows"},
		{"dup word", Manifest{}, 0, []string{"a", "a"}, v, []float32{1, 1}, `"a" repeats word 0`},
		{"empty word", Manifest{}, 1, []string{""}, v, []float32{1, 1}, "extra word 0 is empty"},
		{"nan weight", Manifest{}, 2, nil, v, []float32{1, float32(math.NaN())}, "weight of row 1"},
		{"inf value", Manifest{}, 2, nil, [][]float32{{1, 2}, {float32(math.Inf(1)), 0}}, []float32{1, 1}, "row 1 has a non-finite"},
		{"manifest dims", Manifest{Dims: 3}, 2, nil, v, []float32{1, 1}, "manifest says dims 3"},
		{"manifest quant", Manifest{Quant: QuantI8}, 2, nil, v, []float32{1, 1}, `manifest says quant "i8"`},
	}
	for _, c := range cases {
		_, err := NewTable(c.m, c.vocab, c.words, c.vecs, c.weights)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// Bucket rows come after the extra words, have no word, and survive
// quantizing, writing and reading.
func TestBuckets(t *testing.T) {
	vecs := make([][]float32, 2+2+3)
	w := make([]float32, len(vecs))
	for i := range vecs {
		vecs[i] = []float32{float32(i), -float32(i)}
		w[i] = 1
	}
	tb, err := NewTable(Manifest{Buckets: 3}, 2, []string{"ab", "cd"}, vecs, w)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Rows() != 7 || tb.Buckets() != 3 || tb.Manifest.Buckets != 3 || tb.Manifest.ExtraWords != 2 {
		t.Fatalf("rows %d buckets %d manifest %+v", tb.Rows(), tb.Buckets(), tb.Manifest)
	}
	if row, ok := tb.Word([]byte("cd")); !ok || row != 3 {
		t.Fatalf("Word(cd) = %d %v", row, ok)
	}
	path := filepath.Join(t.TempDir(), "b.tbl")
	for _, q := range quants {
		if _, err := tb.Quantize(q).WriteFile(path); err != nil {
			t.Fatal(err)
		}
		got, err := ReadTable(path)
		if err != nil {
			t.Fatal(err)
		}
		if got.Rows() != 7 || got.Buckets() != 3 || got.Manifest.Buckets != 3 {
			t.Fatalf("%s: rows %d buckets %d", q, got.Rows(), got.Buckets())
		}
		if v := got.Vector(6, nil); math.Abs(float64(v[0])-6) > 0.03 {
			t.Fatalf("%s: last bucket row %v", q, v)
		}
	}
	if _, err := NewTable(Manifest{Buckets: 2}, 2, []string{"ab", "cd"}, vecs, w); err == nil {
		t.Error("wrong bucket count accepted")
	}
	if _, err := NewTable(Manifest{Buckets: -1}, 2, nil, vecs[:1], w[:1]); err == nil {
		t.Error("negative bucket count accepted")
	}
}

func TestRoundTripEveryQuant(t *testing.T) {
	base := randomTable(t, 2, 300, 120, 37)
	dir := t.TempDir()
	for _, q := range quants {
		t.Run(string(q), func(t *testing.T) {
			tb := base.Quantize(q)
			if tb.Quant() != q || tb.Manifest.Quant != q {
				t.Fatalf("quant %s / manifest %s", tb.Quant(), tb.Manifest.Quant)
			}
			path := filepath.Join(dir, string(q)+".tbl")
			sum, err := tb.WriteFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if fs, err := FileSHA256(path); err != nil || fs != sum {
				t.Fatalf("FileSHA256 = %s, %v; WriteFile said %s", fs, err, sum)
			}
			got, err := ReadTable(path)
			if err != nil {
				t.Fatal(err)
			}
			if got.Manifest != tb.Manifest {
				t.Fatalf("manifest\n got %+v\nwant %+v", got.Manifest, tb.Manifest)
			}
			if got.Rows() != tb.Rows() || got.Dims() != tb.Dims() || got.VocabSize() != tb.VocabSize() {
				t.Fatal("shape differs")
			}
			var a, b []float32
			for r := range int32(tb.Rows()) {
				a, b = tb.Vector(r, a), got.Vector(r, b)
				for j := range a {
					if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
						t.Fatalf("row %d value %d: %v after reading, %v before", r, j, b[j], a[j])
					}
				}
				if tb.Weight(r) != got.Weight(r) {
					t.Fatalf("row %d weight %v, want %v", r, got.Weight(r), tb.Weight(r))
				}
			}
			for i, w := range tb.ExtraWords() {
				row, ok := got.Word([]byte(w))
				if !ok || int(row) != tb.VocabSize()+i {
					t.Fatalf("Word(%q) = %d, %v", w, row, ok)
				}
			}
			if !bytes.Equal(got.encodeBytes(), tb.encodeBytes()) {
				t.Fatal("re-encoding a read table gives other bytes")
			}
			if got.MemoryBytes() < tb.Rows()*tb.Dims()*q.bytesPerValue() {
				t.Fatalf("MemoryBytes %d too small", got.MemoryBytes())
			}
			// No temporary files left behind.
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.Contains(e.Name(), ".tmp") {
					t.Fatalf("temporary file %s left", e.Name())
				}
			}
		})
	}
}

func TestQuantizeErrorBounds(t *testing.T) {
	base := randomTable(t, 3, 200, 0, 64)
	// A row with a wide dynamic range and tiny values.
	wide := make([]float32, 64)
	for j := range wide {
		wide[j] = float32(math.Pow(10, float64(j%12)-8)) * float32(1-2*(j%2))
	}
	base.SetVector(5, wide)
	i8, f16 := base.Quantize(QuantI8), base.Quantize(QuantF16)
	var v, q, h []float32
	for r := range int32(base.Rows()) {
		v, q, h = base.Vector(r, v), i8.Vector(r, q), f16.Vector(r, h)
		var maxabs float64
		for _, x := range v {
			maxabs = max(maxabs, math.Abs(float64(x)))
		}
		scale := maxabs / 127
		for j, x := range v {
			if d := math.Abs(float64(x) - float64(q[j])); d > scale/2*(1+1e-5)+1e-30 {
				t.Fatalf("i8 row %d value %d: %v became %v (error %g > scale/2 %g)", r, j, x, q[j], d, scale/2)
			}
			ax := math.Abs(float64(x))
			d := math.Abs(float64(x) - float64(h[j]))
			switch {
			case ax >= 0x1p-14: // normal half: relative error <= 2^-11
				if d > ax*0x1p-11 {
					t.Fatalf("f16 row %d value %d: %v became %v (relative error %g)", r, j, x, h[j], d/ax)
				}
			default: // subnormal half: absolute error <= 2^-25
				if d > 0x1p-25 {
					t.Fatalf("f16 row %d value %d: %v became %v (error %g)", r, j, x, h[j], d)
				}
			}
		}
	}
	// f16 saturates instead of overflowing.
	big, err := NewTable(Manifest{}, 1, nil, [][]float32{{1e6, -1e6, 65519, 65520}}, []float32{1})
	if err != nil {
		t.Fatal(err)
	}
	if got := big.Quantize(QuantF16).Vector(0, nil); got[0] != 65504 || got[1] != -65504 || got[2] != 65504 || got[3] != 65504 {
		t.Fatalf("saturation: %v", got)
	}
	// Quantizing again from a quantized table is stable.
	again := i8.Quantize(QuantF32).Quantize(QuantI8)
	if !bytes.Equal(again.encodeBytes(), i8.encodeBytes()) {
		t.Fatal("i8 -> f32 -> i8 changed the table")
	}
}

func TestAccumulateMatchesVector(t *testing.T) {
	base := randomTable(t, 4, 100, 10, 23) // 23: not a multiple of the unroll
	for _, q := range quants {
		tb := base.Quantize(q)
		acc := make([]float32, tb.Dims())
		want := make([]float64, tb.Dims())
		var v []float32
		rng := rand.New(rand.NewPCG(9, 9))
		for range 500 {
			r := int32(rng.IntN(tb.Rows()))
			w := float32(rng.Float64()*2 - 0.5)
			tb.Accumulate(acc, r, w)
			v = tb.Vector(r, v)
			for j, x := range v {
				want[j] += float64(w) * float64(tb.Weight(r)) * float64(x)
			}
		}
		for j := range acc {
			if d := math.Abs(float64(acc[j]) - want[j]); d > 1e-4*(1+math.Abs(want[j])) {
				t.Fatalf("%s: acc[%d] = %v, want %v", q, j, acc[j], want[j])
			}
		}
	}
}

func TestAccumulateAllocs(t *testing.T) {
	base := randomTable(t, 4, 100, 10, 23)
	for _, q := range quants {
		tb := base.Quantize(q)
		acc := make([]float32, tb.Dims())
		if n := testing.AllocsPerRun(100, func() { tb.Accumulate(acc, 7, 0.5) }); n != 0 {
			t.Fatalf("%s: Accumulate allocates %v times", q, n)
		}
		rows := []int32{7, 3, 99, 7}
		if n := testing.AllocsPerRun(100, func() { tb.AccumulateRows(acc, rows) }); n != 0 {
			t.Fatalf("%s: AccumulateRows allocates %v times", q, n)
		}
	}
}

func TestWord(t *testing.T) {
	words := []string{"law", "court", "judge", "a", "lawyer", "ab", "ba", "é"}
	vecs := make([][]float32, 3+len(words))
	for i := range vecs {
		vecs[i] = []float32{float32(i)}
	}
	tb, err := NewTable(Manifest{}, 3, words, vecs, make([]float32, len(vecs)))
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range words {
		row, ok := tb.Word([]byte(w))
		if !ok || row != int32(3+i) {
			t.Errorf("Word(%q) = %d, %v; want %d", w, row, ok, 3+i)
		}
		if v := tb.Vector(row, nil); v[0] != float32(3+i) {
			t.Errorf("row of %q holds %v", w, v)
		}
	}
	for _, w := range []string{"", "la", "laws", "Law", "b", "e", "lawyers", "court "} {
		if row, ok := tb.Word([]byte(w)); ok {
			t.Errorf("Word(%q) = %d, want absent", w, row)
		}
	}
	empty := randomTable(t, 5, 10, 0, 2)
	if _, ok := empty.Word([]byte("x")); ok {
		t.Fatal("word found in a table without extra words")
	}
}

func TestWordAllocs(t *testing.T) {
	big := randomTable(t, 5, 10, 5000, 2)
	present, absent := []byte("w4321"), []byte("w99999")
	if _, ok := big.Word(present); !ok {
		t.Fatalf("Word(%s): absent", present)
	}
	if n := testing.AllocsPerRun(1000, func() {
		big.Word(present)
		big.Word(absent)
	}); n != 0 {
		t.Fatalf("Word allocates %v times", n)
	}
}

func TestSetVectorCloneWeight(t *testing.T) {
	tb := randomTable(t, 6, 5, 2, 4)
	c := tb.Clone()
	tb.SetVector(1, []float32{1, 2, 3, 4})
	tb.SetWeight(1, 0.25)
	if v := tb.Vector(1, nil); v[3] != 4 || tb.Weight(1) != 0.25 {
		t.Fatalf("SetVector/SetWeight: %v %v", v, tb.Weight(1))
	}
	if v := c.Vector(1, nil); v[3] == 4 || c.Weight(1) == 0.25 {
		t.Fatal("Clone shares data with the original")
	}
	if row, ok := c.Word([]byte("w1")); !ok || row != 6 {
		t.Fatal("Clone lost the words")
	}
	u := tb.Clone()
	u.SetUniformWeights()
	for r := range int32(u.Rows()) {
		if u.Weight(r) != 1 {
			t.Fatalf("SetUniformWeights: row %d weight %v", r, u.Weight(r))
		}
	}
	if u.Manifest.Weighting == tb.Manifest.Weighting {
		t.Error("SetUniformWeights left the manifest's weighting")
	}
	mustPanic(t, "SetVector on i8", func() { tb.Quantize(QuantI8).SetVector(0, []float32{1, 2, 3, 4}) })
	mustPanic(t, "SetVector wrong length", func() { tb.SetVector(0, []float32{1}) })
	mustPanic(t, "SetVector NaN", func() { tb.SetVector(0, []float32{1, 2, 3, float32(math.NaN())}) })
	mustPanic(t, "SetWeight Inf", func() { tb.SetWeight(0, float32(math.Inf(-1))) })
}

func mustPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", name)
		}
	}()
	f()
}

func TestReadTableErrors(t *testing.T) {
	dir := t.TempDir()
	good := randomTable(t, 7, 20, 6, 5)
	for _, q := range quants {
		img := good.Quantize(q).encodeBytes()
		write := func(name string, b []byte) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
		// Every truncation is an error naming the file, never a panic.
		for n := 0; n < len(img); n++ {
			p := write("trunc.tbl", img[:n])
			_, err := ReadTable(p)
			if err == nil || !strings.Contains(err.Error(), p) {
				t.Fatalf("%s truncated to %d bytes: err = %v", q, n, err)
			}
			if n > headerSize+40 && !errors.Is(err, errTruncated) && !strings.Contains(err.Error(), "checksum") {
				t.Fatalf("%s truncated to %d bytes: %v", q, n, err)
			}
		}
		// Every single-byte corruption is caught.
		for i := range img {
			b := bytes.Clone(img)
			b[i] ^= 0x40
			if _, err := decodeTable(bytes.NewReader(b), int64(len(b))); err == nil {
				t.Fatalf("%s: flipping a bit of byte %d went unnoticed", q, i)
			}
			if _, err := decodeImage(b); err == nil {
				t.Fatalf("%s: flipping a bit of byte %d went unnoticed by the mapped reader", q, i)
			}
		}
		p := write("long.tbl", append(bytes.Clone(img), 0))
		if _, err := ReadTable(p); err == nil {
			t.Fatalf("%s: trailing byte accepted", q)
		}
	}
	img := good.encodeBytes()
	cases := []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, "bad magic"},
		{"version", func(b []byte) []byte { b[8] = 9; return b }, "unsupported table format version 9"},
		{"manifest length", func(b []byte) []byte { b[15] = 0x7f; return b }, "manifest length"},
		{"text", func([]byte) []byte { return []byte("hello, this is not a table file at all") }, "bad magic"},
		{"empty", func([]byte) []byte { return nil }, "not a table file"},
		{"huge sizes", func(b []byte) []byte {
			return withManifest(t, b, func(m *Manifest) { m.VocabSize = 1 << 27; m.Dims = 60000 })
		}, "needs at least"},
		{"bad quant", func(b []byte) []byte { return withManifest(t, b, func(m *Manifest) { m.Quant = "q4" }) }, `unknown quant "q4"`},
		{"no dims", func(b []byte) []byte { return withManifest(t, b, func(m *Manifest) { m.Dims = 0 }) }, "bad sizes"},
		{"nan weight", func(b []byte) []byte {
			return withPayload(t, b, func(p []byte) { copy(p[4:8], []byte{0, 0, 0xc0, 0x7f}) })
		}, "weight of row 1 is NaN"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, "bad.tbl")
		if err := os.WriteFile(p, c.edit(bytes.Clone(img)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadTable(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want %q and the file name", c.name, err, c.want)
		}
	}
	if _, err := ReadTable(filepath.Join(dir, "absent.tbl")); err == nil || !strings.Contains(err.Error(), "absent.tbl") {
		t.Errorf("absent file: %v", err)
	}
	if _, err := ReadTable(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

// withManifest rewrites the manifest of a table image (and its checksum).
func withManifest(t *testing.T, img []byte, edit func(*Manifest)) []byte {
	t.Helper()
	tb, err := decodeTable(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	m := tb.manifestForWrite()
	edit(&m)
	mj, _ := jsonMarshal(m)
	mlen := int(uint32(img[12]) | uint32(img[13])<<8 | uint32(img[14])<<16 | uint32(img[15])<<24)
	out := append([]byte(nil), img[:12]...)
	out = append(out, byte(len(mj)), byte(len(mj)>>8), byte(len(mj)>>16), byte(len(mj)>>24))
	out = append(out, mj...)
	out = append(out, img[headerSize+mlen:]...)
	return fixCRC(out)
}

// withPayload edits the bytes after the manifest (and fixes the checksum).
func withPayload(t *testing.T, img []byte, edit func([]byte)) []byte {
	t.Helper()
	mlen := int(uint32(img[12]) | uint32(img[13])<<8 | uint32(img[14])<<16 | uint32(img[15])<<24)
	edit(img[headerSize+mlen : len(img)-4])
	return fixCRC(img)
}

// TestReadTableReal loads the table scripts/fetch-models.sh builds.
func TestReadTableReal(t *testing.T) {
	path := filepath.Join(testenv.Models(t, "tables/glove-100d-i8.tbl"), "tables", "glove-100d-i8.tbl")
	start := time.Now()
	tb, err := ReadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %s in %v: %d rows, %d bytes resident", path, time.Since(start), tb.Rows(), tb.MemoryBytes())
	if tb.Quant() != QuantI8 || tb.Dims() != 100 || tb.VocabSize() != 30522 || tb.Manifest.ExtraWords != 50000 {
		t.Fatalf("manifest %+v", tb.Manifest)
	}
	// "the" is id 1996 in bert-base-uncased; GloVe's vector starts -0.038194.
	if v := tb.Vector(1996, nil); math.Abs(float64(v[0])+0.038194) > 0.02 {
		t.Errorf("row 1996 (the) starts %v", v[0])
	}
	row, ok := tb.Word([]byte("lawmakers"))
	if !ok || tb.Weight(row) <= 0 {
		t.Errorf("extra word lawmakers: %d %v", row, ok)
	}
}

// AccumulateRows gives what Accumulate row by row gives, to the bit, for
// every quantization, for int8 rows of up to 16 values (their own loop,
// which reads 16 bytes a row) and beyond, with rows at the table's very end
// (whose 16 bytes would run past it) and with non-unit weights.
func TestAccumulateRowsMatchesAccumulate(t *testing.T) {
	for _, dims := range []int{1, 7, 8, 14, 16, 17, 23} {
		base := randomTable(t, uint64(dims), 60, 9, dims)
		for _, uniform := range []bool{false, true} {
			b := base.Clone()
			if uniform {
				b.SetUniformWeights()
			}
			for _, q := range quants {
				tb := b.Quantize(q)
				rng := rand.New(rand.NewPCG(uint64(dims), 3))
				rows := []int32{int32(tb.Rows() - 1), int32(tb.Rows() - 2), 0}
				for range 300 {
					rows = append(rows, int32(rng.IntN(tb.Rows())))
				}
				rows = append(rows, int32(tb.Rows()-1))
				want := make([]float32, dims)
				var wsum float32
				for _, r := range rows {
					tb.Accumulate(want, r, 1)
					wsum += tb.Weight(r)
				}
				got := make([]float32, dims)
				gotSum := tb.AccumulateRows(got, rows)
				if gotSum != wsum {
					t.Fatalf("dims %d uniform %v %s: weight sum %v, want %v", dims, uniform, q, gotSum, wsum)
				}
				for j := range want {
					if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
						t.Fatalf("dims %d uniform %v %s: acc[%d] = %v, want %v", dims, uniform, q, j, got[j], want[j])
					}
				}
			}
		}
	}
}
