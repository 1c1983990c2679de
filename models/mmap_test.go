package models

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/triagegw/triage/internal/testenv"
)

// sameTable fails unless a and b hold the same bits: manifest, every
// vector, weight and word, what Accumulate adds, and the encoding.
func sameTable(t *testing.T, a, b *Table) {
	t.Helper()
	if a.Manifest != b.Manifest || a.Rows() != b.Rows() || a.Dims() != b.Dims() || a.Quant() != b.Quant() {
		t.Fatalf("shape: %+v vs %+v", a.Manifest, b.Manifest)
	}
	va, vb := make([]float32, a.Dims()), make([]float32, a.Dims())
	accA, accB := make([]float32, a.Dims()), make([]float32, a.Dims())
	for r := range int32(a.Rows()) {
		a.Vector(r, va)
		b.Vector(r, vb)
		for j := range va {
			if math.Float32bits(va[j]) != math.Float32bits(vb[j]) {
				t.Fatalf("row %d value %d: %v vs %v", r, j, va[j], vb[j])
			}
		}
		if math.Float32bits(a.Weight(r)) != math.Float32bits(b.Weight(r)) {
			t.Fatalf("row %d weight %v vs %v", r, a.Weight(r), b.Weight(r))
		}
		a.Accumulate(accA, r, 0.3)
		b.Accumulate(accB, r, 0.3)
	}
	for j := range accA {
		if math.Float32bits(accA[j]) != math.Float32bits(accB[j]) {
			t.Fatalf("Accumulate: component %d %v vs %v", j, accA[j], accB[j])
		}
	}
	for i, w := range a.ExtraWords() {
		if row, ok := b.Word([]byte(w)); !ok || int(row) != a.VocabSize()+i {
			t.Fatalf("Word(%q) = %d, %v", w, row, ok)
		}
	}
	if !bytes.Equal(a.encodeBytes(), b.encodeBytes()) {
		t.Fatal("the tables encode differently")
	}
}

// wantMapped is the MappedBytes a table read from img should have: the
// arrays whose offset in the (page-aligned) file suits their type, on a
// little-endian host; i8 vectors always; weights only if not all 1.
func wantMapped(t *testing.T, tb *Table, img []byte) int {
	t.Helper()
	if !mapsFiles || !hostLittleEndian {
		return 0
	}
	mlen := int64(uint32(img[12]) | uint32(img[13])<<8 | uint32(img[14])<<16 | uint32(img[15])<<24)
	l, err := newLayout(img[headerSize:headerSize+mlen], int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if tb.weights != nil && l.weights%4 == 0 {
		n += 4 * tb.Rows()
	}
	vec := tb.Rows() * tb.Dims() * tb.Quant().bytesPerValue()
	switch tb.Quant() {
	case QuantF32:
		if l.vectors%4 == 0 {
			n += vec
		}
	case QuantF16:
		if l.vectors%2 == 0 {
			n += vec
		}
	case QuantI8:
		n += vec
		if l.scales%4 == 0 {
			n += 4 * tb.Rows()
		}
	}
	return n
}

// A table read through the file mapping is the table read into the heap,
// bit for bit, whatever the alignment of its arrays in the file (the
// manifest's length moves them): aligned arrays are mapped, the others
// copied.
func TestReadTableMappedMatchesHeap(t *testing.T) {
	dir := t.TempDir()
	base := randomTable(t, 31, 40, 9, 7) // 7 dims: i8 scales land on every residue
	uniform := base.Clone()
	uniform.SetUniformWeights()
	mappedSome := false
	for _, src := range []*Table{base, uniform} {
		for _, q := range quants {
			for pad := range 4 {
				tb := src.Quantize(q)
				tb.Manifest.Notes = strings.Repeat("n", pad)
				img := tb.encodeBytes()
				path := filepath.Join(dir, "t.tbl")
				if err := os.WriteFile(path, img, 0o644); err != nil {
					t.Fatal(err)
				}
				heap, err := decodeTable(bytes.NewReader(img), int64(len(img)))
				if err != nil {
					t.Fatal(err)
				}
				got, err := ReadTable(path)
				if err != nil {
					t.Fatal(err)
				}
				sameTable(t, heap, got)
				if want := wantMapped(t, heap, img); got.MappedBytes() != want {
					t.Fatalf("%s, manifest %d bytes: MappedBytes %d, want %d", q, len(img), got.MappedBytes(), want)
				}
				if heap.MappedBytes() != 0 {
					t.Fatal("a table decoded into the heap reports mapped bytes")
				}
				mappedSome = mappedSome || got.MappedBytes() > 0
			}
		}
	}
	if mapsFiles && hostLittleEndian && !mappedSome {
		t.Fatal("no table was mapped")
	}
}

// On a big-endian host nothing but int8 vectors may be used in place; the
// copies are the same table.
func TestDecodeImageBigEndianHost(t *testing.T) {
	defer func(v bool) { hostLittleEndian = v }(hostLittleEndian)
	base := randomTable(t, 32, 30, 4, 8)
	for _, q := range quants {
		tb := base.Quantize(q)
		img := tb.encodeBytes()
		hostLittleEndian = false
		got, err := decodeImage(img)
		hostLittleEndian = true
		if err != nil {
			t.Fatal(err)
		}
		sameTable(t, tb, got)
		if want := map[Quant]int{QuantI8: tb.Rows() * tb.Dims()}[q]; got.MappedBytes() != want {
			t.Fatalf("%s: %d bytes alias the image, want %d", q, got.MappedBytes(), want)
		}
	}
}

// Writing to a mapped table (training does) writes to heap copies: the
// file, and other tables read from it, never change.
func TestMappedTableWritesNotTheFile(t *testing.T) {
	if !mapsFiles || !hostLittleEndian {
		t.Skip("tables are not mapped on this platform")
	}
	base := randomTable(t, 33, 20, 3, 4)
	path := filepath.Join(t.TempDir(), "t.tbl")
	for pad := 0; ; pad++ { // find a manifest length that maps the weights and f32 vectors
		base.Manifest.Notes = strings.Repeat("n", pad)
		if _, err := base.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		if tb, err := ReadTable(path); err == nil && tb.MappedBytes() == 4*tb.Rows()*(1+tb.Dims()) {
			break
		}
		if pad > 4 {
			t.Fatal("no manifest length maps the whole table")
		}
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := func() *Table {
		tb, err := ReadTable(path)
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	other := readOnly()

	tb := readOnly()
	tb.SetVector(2, []float32{9, 8, 7, 6})
	if tb.MappedBytes() != 0 {
		t.Fatalf("after SetVector, %d bytes still mapped", tb.MappedBytes())
	}
	if v := tb.Vector(2, nil); v[0] != 9 || v[3] != 6 {
		t.Fatalf("SetVector on a mapped table: row 2 is %v", v)
	}
	w := readOnly()
	w.SetWeight(1, 0.125)
	if w.Weight(1) != 0.125 || w.MappedBytes() != 0 {
		t.Fatalf("SetWeight on a mapped table: weight %v, %d bytes mapped", w.Weight(1), w.MappedBytes())
	}
	c := readOnly().Clone()
	c.SetVector(0, []float32{1, 1, 1, 1})
	if c.MappedBytes() != 0 || readOnly().Quantize(QuantF32).MappedBytes() != 0 {
		t.Fatal("Clone or Quantize of a mapped table is mapped")
	}

	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("writing to a mapped table changed its file")
	}
	sameTable(t, base, other)
	sameTable(t, base, readOnly())
}

// A mapping goes once its table is unreachable, and not before.
func TestMappedTableUnmapped(t *testing.T) {
	if !mapsFiles || !hostLittleEndian {
		t.Skip("tables are not mapped on this platform")
	}
	path := filepath.Join(t.TempDir(), "unmap.tbl")
	if _, err := randomTable(t, 34, 50, 2, 8).Quantize(QuantI8).WriteFile(path); err != nil {
		t.Fatal(err)
	}
	mapped := func() bool {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Skip("no /proc/self/maps")
		}
		return bytes.Contains(b, []byte(path))
	}
	tb, err := ReadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	if !mapped() {
		t.Fatal("the table's file is not mapped")
	}
	acc := make([]float32, tb.Dims())
	tb.Accumulate(acc, 1, 1) // reachable until here
	testenv.Wait(t, func() bool {
		runtime.GC()
		return !mapped()
	}, "the mapping to go with its table")
}

// The real tier-1 table maps (its int8 vectors) and reads as the heap
// reader reads it.
func TestReadTableMappedReal(t *testing.T) {
	path := filepath.Join(testenv.Models(t, "tables/subjects-tier1.tbl"), "tables", "subjects-tier1.tbl")
	got, err := ReadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	heap, err := decodeTable(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	sameTable(t, heap, got)
	if mapsFiles && hostLittleEndian && got.MappedBytes() < got.Rows()*got.Dims() {
		t.Fatalf("%d of %d bytes mapped", got.MappedBytes(), got.MemoryBytes())
	}
	t.Logf("%s: %d of %d bytes mapped", path, got.MappedBytes(), got.MemoryBytes())
}

// mappingRSS is the resident size of the mappings of path, from
// /proc/self/smaps.
func mappingRSS(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps")
	}
	kb, in := 0, false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = f[len(f)-1] == path
			continue
		}
		if in && len(f) == 3 && f[0] == "Rss:" {
			n, _ := strconv.Atoi(f[1])
			kb += n
		}
	}
	return kb << 10
}

// Loading leaves none of a mapped table resident; lookups make pages
// resident, and ReleasePages drops them, also while other goroutines
// read the table, which still reads the same.
func TestReleasePages(t *testing.T) {
	if !mapsFiles || !hostLittleEndian || runtime.GOOS != "linux" {
		t.Skip("pages are released on Linux only")
	}
	path := filepath.Join(t.TempDir(), "release.tbl")
	base := randomTable(t, 35, 4000, 10, 64).Quantize(QuantI8)
	if _, err := base.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	tb, err := ReadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := mappingRSS(t, path); n != 0 {
		t.Fatalf("%d bytes of the table resident after loading, want 0", n)
	}
	want := make([]float32, tb.Dims())
	for r := range int32(tb.Rows()) {
		base.Accumulate(want, r, 1)
	}
	sum := func() []float32 {
		acc := make([]float32, tb.Dims())
		for r := range int32(tb.Rows()) {
			tb.Accumulate(acc, r, 1)
		}
		return acc
	}
	same := func(got []float32) bool {
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
				return false
			}
		}
		return true
	}
	if !same(sum()) || mappingRSS(t, path) == 0 {
		t.Fatalf("after reading every row: sums differ, or nothing resident (%d bytes)", mappingRSS(t, path))
	}
	tb.ReleasePages()
	if n := mappingRSS(t, path); n != 0 {
		t.Fatalf("%d bytes resident after ReleasePages, want 0", n)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 50 {
				if !same(sum()) {
					t.Error("a reader saw other values while pages were released")
					return
				}
			}
		})
	}
	for range 50 {
		tb.ReleasePages()
		runtime.Gosched()
	}
	wg.Wait()
	base.ReleasePages() // a heap table: nothing to do
}
