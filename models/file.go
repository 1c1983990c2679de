package models

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"runtime"
	"unsafe"

	"github.com/triagegw/triage/internal/atomicfile"
)

// Table file format, version 1. All integers and floats little-endian.
//
//	offset      size        what
//	0           8           magic "TRIAGETB"
//	8           4           uint32 format version (1)
//	12          4           uint32 M, length of the manifest JSON (1..1 MiB)
//	16          M           manifest JSON (the Manifest struct, UTF-8); its
//	                        dims, vocab_size, extra_words, buckets (absent
//	                        = 0) and quant give the sizes below:
//	                        R = vocab_size+extra_words+buckets rows,
//	                        D = dims, E = extra_words
//	16+M        4R          weights, float32[R]
//	            ...         vectors, row-major (row r is values r*D..r*D+D-1):
//	                          f32: float32[R*D]
//	                          f16: uint16[R*D], IEEE 754 binary16
//	                          i8:  int8[R*D], then float32 scales[R]
//	                               (value = scale[r]*q)
//	            4E          extra words' end offsets, uint32[E], into the
//	                        blob below (word i is blob[end[i-1]:end[i]],
//	                        end[-1] = 0), non-decreasing
//	            B           extra words' bytes, B = end[E-1] (0 if E = 0)
//	size-4      4           CRC-32C (Castagnoli) of every byte before it
//
// The reader checks the magic, the version, that the file size is exactly
// what the manifest implies, the checksum, that every weight, scale and
// vector value is finite (scales also >= 0), and that extra words are
// non-empty and distinct. Nothing is allocated before the sizes are checked
// against the file's size, so a corrupt header cannot ask for more memory
// than the file has bytes.
const (
	fileMagic   = "TRIAGETB"
	fileVersion = 1
	maxManifest = 1 << 20
	headerSize  = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteFile writes t to path atomically (a temporary file in the same
// directory, synced, then renamed over path) and returns the file's sha256
// in hex.
func (t *Table) WriteFile(path string) (sha256hex string, err error) {
	h := sha256.New()
	err = atomicfile.Write(path, func(w io.Writer) error {
		bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<16)
		if err := t.encode(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return "", fmt.Errorf("models: write %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// manifestForWrite is t.Manifest with the structural fields taken from the
// data, so that a file always describes itself truly.
func (t *Table) manifestForWrite() Manifest {
	m := t.Manifest
	m.Dims, m.VocabSize, m.ExtraWords, m.Buckets, m.Quant = t.dims, t.vocab, t.words.Len(), t.buckets, t.quant
	return m
}

// encode writes the table file format to w.
func (t *Table) encode(w io.Writer) error {
	mj, err := json.Marshal(t.manifestForWrite())
	if err != nil {
		return err
	}
	if len(mj) > maxManifest {
		return fmt.Errorf("manifest is %d bytes, more than %d", len(mj), maxManifest)
	}
	e := &leWriter{w: w, buf: make([]byte, 0, 1<<16)}
	e.bytes([]byte(fileMagic))
	e.u32s([]uint32{fileVersion, uint32(len(mj))})
	e.bytes(mj)
	e.f32s(t.weightSlice())
	switch t.quant {
	case QuantF32:
		e.f32s(t.f32)
	case QuantF16:
		e.u16s(t.f16)
	case QuantI8:
		for i := 0; i < len(t.i8); {
			n := min(len(t.i8)-i, 1<<16)
			e.room(n)
			for _, q := range t.i8[i : i+n] {
				e.buf = append(e.buf, byte(q))
			}
			i += n
		}
		e.f32s(t.scales)
	}
	e.u32s(t.words.Ends)
	e.bytes(t.words.Blob)
	e.flush()
	runtime.KeepAlive(t)
	var c [4]byte
	binary.LittleEndian.PutUint32(c[:], e.crc)
	if e.err == nil {
		_, e.err = w.Write(c[:])
	}
	return e.err
}

// leWriter writes little-endian values through a buffer, keeping the
// CRC-32C of what it wrote.
type leWriter struct {
	w   io.Writer
	buf []byte
	crc uint32
	err error
}

func (e *leWriter) flush() {
	if e.err == nil && len(e.buf) > 0 {
		e.crc = crc32.Update(e.crc, castagnoli, e.buf)
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

// room makes room for n more bytes (n <= cap(buf)).
func (e *leWriter) room(n int) {
	if len(e.buf)+n > cap(e.buf) {
		e.flush()
	}
}

func (e *leWriter) bytes(b []byte) {
	for len(b) > 0 {
		e.room(1)
		n := min(len(b), cap(e.buf)-len(e.buf))
		e.buf = append(e.buf, b[:n]...)
		b = b[n:]
	}
}

func (e *leWriter) f32s(v []float32) {
	for _, x := range v {
		e.room(4)
		e.buf = binary.LittleEndian.AppendUint32(e.buf, math.Float32bits(x))
	}
}

func (e *leWriter) u32s(v []uint32) {
	for _, x := range v {
		e.room(4)
		e.buf = binary.LittleEndian.AppendUint32(e.buf, x)
	}
}

func (e *leWriter) u16s(v []uint16) {
	for _, x := range v {
		e.room(2)
		e.buf = binary.LittleEndian.AppendUint16(e.buf, x)
	}
}

// ReadTable loads a table file written by WriteFile, checking it whole (see
// the format above). Errors name the file and the problem.
//
// Where it can (see mapTable), the table's vectors, scales and weights are
// a read-only view of the file mapped into memory, not a copy on the heap:
// they take no heap, and only the pages that lookups touch are resident,
// file-backed and shared with the page cache (where the page cache holds
// large folios, as ext4 on Linux 6.18 does, a fault maps a whole folio of
// up to 2 MiB: a few dozen lookups make a 7 MiB array resident; see
// ReleasePages). The file must then not be
// changed in place while the table is in use (replace it by renaming a new
// file over it, as WriteFile does): a mapped table would see the change
// unchecked, or fault if the file were truncated. Writing methods (SetVector,
// SetWeight) first give the table heap copies; Clone and Quantize return
// heap tables.
func ReadTable(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("models: %s: not a regular file", path)
	}
	t, mapped, err := mapTable(f, st.Size())
	if !mapped {
		t, err = decodeTable(f, st.Size())
	}
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", path, err)
	}
	return t, nil
}

// mapTable maps f, a file of size bytes, and decodes the table from the
// mapping (decodeImage): the arrays the host can use in place alias it.
// mapped is false when the file could not be mapped (a platform without
// mmap, a file system that refuses it, a size beyond the address space):
// the caller reads it instead. The pages checking the table touched are
// then released from the process (they stay in the page cache), so that
// only rows in use count in its resident memory; the mapping is unmapped
// once no table refers to it.
func mapTable(f *os.File, size int64) (t *Table, mapped bool, err error) {
	if size < headerSize+4 || size > math.MaxInt {
		return nil, false, nil // decodeTable reports a short file
	}
	b, err := mapFile(f, int(size))
	if err != nil {
		return nil, false, nil
	}
	t, err = decodeImage(b)
	if err != nil || t.mapped == nil {
		unmapFile(b)
		return t, true, err
	}
	releasePages(b)
	runtime.AddCleanup(t.mapped, unmapFile, b)
	return t, true, nil
}

// errTruncated is wrapped by errors for a file shorter than its header says.
var errTruncated = errors.New("truncated")

// layout is where the sections of a table file of a given size are, from
// its header and manifest.
type layout struct {
	m                                             Manifest
	rows, dims, extra                             int64
	weights, vectors, scales, ends, blob, blobLen int64 // offsets and the blob's length
}

// checkHeader checks the fixed header of a file of size bytes (size >=
// headerSize+4) and returns the manifest's length.
func checkHeader(hdr []byte, size int64) (mlen int64, err error) {
	if string(hdr[:8]) != fileMagic {
		return 0, fmt.Errorf("not a table file: bad magic %q (want %q)", hdr[:8], fileMagic)
	}
	if v := binary.LittleEndian.Uint32(hdr[8:]); v != fileVersion {
		return 0, fmt.Errorf("unsupported table format version %d (this build reads %d)", v, fileVersion)
	}
	mlen = int64(binary.LittleEndian.Uint32(hdr[12:]))
	if mlen == 0 || mlen > maxManifest {
		return 0, fmt.Errorf("manifest length %d out of range 1..%d", mlen, maxManifest)
	}
	if headerSize+mlen+4 > size {
		return 0, fmt.Errorf("file is %d bytes, too short for its %d-byte manifest (%w)", size, mlen, errTruncated)
	}
	return mlen, nil
}

// newLayout parses the manifest mj and lays out the rest of a file of size
// bytes, checking that the sizes it gives fit the file.
func newLayout(mj []byte, size int64) (layout, error) {
	var m Manifest
	if err := json.Unmarshal(mj, &m); err != nil {
		return layout{}, fmt.Errorf("manifest: %v", err)
	}
	if !m.Quant.Valid() {
		return layout{}, fmt.Errorf("manifest: unknown quant %q", m.Quant)
	}
	if m.Dims <= 0 || m.Dims > MaxDims || m.VocabSize < 0 || m.ExtraWords < 0 || m.Buckets < 0 ||
		m.VocabSize > maxRows || m.ExtraWords > maxRows || m.Buckets > maxRows ||
		m.VocabSize+m.ExtraWords+m.Buckets == 0 || m.VocabSize+m.ExtraWords+m.Buckets > maxRows {
		return layout{}, fmt.Errorf("manifest: bad sizes: dims %d, vocab_size %d, extra_words %d, buckets %d", m.Dims, m.VocabSize, m.ExtraWords, m.Buckets)
	}
	l := layout{m: m, rows: int64(m.VocabSize + m.ExtraWords + m.Buckets), dims: int64(m.Dims), extra: int64(m.ExtraWords)}
	mlen := int64(len(mj))
	l.weights = headerSize + mlen
	l.vectors = l.weights + 4*l.rows
	l.scales = l.vectors + l.rows*l.dims*int64(m.Quant.bytesPerValue())
	l.ends = l.scales
	if m.Quant == QuantI8 {
		l.ends += 4 * l.rows
	}
	l.blob = l.ends + 4*l.extra
	if l.blob > size-4 {
		return layout{}, fmt.Errorf("file is %d bytes, its manifest (%d rows of %d %s values) needs at least %d (%w)",
			size, l.rows, l.dims, m.Quant, l.blob+4, errTruncated)
	}
	l.blobLen = size - 4 - l.blob
	if l.blobLen > math.MaxUint32 {
		return layout{}, fmt.Errorf("extra-word blob of %d bytes is too large", l.blobLen)
	}
	return l, nil
}

// table is an empty table of l's shape.
func (l *layout) table() *Table {
	return &Table{Manifest: l.m, rows: int(l.rows), dims: int(l.dims), vocab: l.m.VocabSize, buckets: l.m.Buckets, quant: l.m.Quant}
}

// decodeTable reads a table of exactly size bytes from r, into the heap.
func decodeTable(r io.Reader, size int64) (*Table, error) {
	d := &leReader{r: r, buf: make([]byte, 1<<16)}
	if size < headerSize+4 {
		return nil, fmt.Errorf("not a table file: %d bytes, shorter than any table (%w)", size, errTruncated)
	}
	hdr, err := d.next(headerSize)
	if err != nil {
		return nil, err
	}
	mlen, err := checkHeader(hdr, size)
	if err != nil {
		return nil, err
	}
	mj, err := d.next(int(mlen))
	if err != nil {
		return nil, err
	}
	l, err := newLayout(mj, size)
	if err != nil {
		return nil, err
	}
	rows, dims := l.rows, l.dims
	t := l.table()
	t.weights = make([]float32, rows)
	if err := d.f32s(t.weights); err != nil {
		return nil, err
	}
	switch t.quant {
	case QuantF32:
		t.f32 = make([]float32, rows*dims)
		err = d.f32s(t.f32)
	case QuantF16:
		t.f16 = make([]uint16, rows*dims)
		err = d.u16s(t.f16)
	case QuantI8:
		t.i8 = make([]int8, rows*dims)
		if err = d.i8s(t.i8); err == nil {
			t.scales = make([]float32, rows)
			err = d.f32s(t.scales)
		}
	}
	if err != nil {
		return nil, err
	}
	t.words.Ends = make([]uint32, l.extra)
	if err := d.u32s(t.words.Ends); err != nil {
		return nil, err
	}
	t.words.Blob = make([]byte, l.blobLen)
	if err := d.fill(t.words.Blob); err != nil {
		return nil, err
	}
	sum := d.crc
	c, err := d.next(4)
	if err != nil {
		return nil, err
	}
	if err := checkSum(c, sum); err != nil {
		return nil, err
	}
	if n, _ := io.ReadFull(r, make([]byte, 1)); n != 0 {
		return nil, errors.New("file is longer than its size (changed while reading?)")
	}
	if err := t.check(l.blobLen); err != nil {
		return nil, err
	}
	return t, nil
}

// decodeImage decodes the table file image b (a whole file, usually
// mapped). The weights, vectors and scales alias b wherever the host can
// use them in place: a little-endian host, and each array aligned for its
// type in memory (b is page-aligned when mapped, so that is the array's
// offset in the file; i8 vectors always qualify). Misaligned arrays are
// copied to the heap, and so are the extra words (small, and shared by
// Words beyond the table's life). t.mapped is set, to a mapping of b, when
// any array aliases b: b must then stay valid and unchanged while t (or a
// table sharing its arrays) is in use.
func decodeImage(b []byte) (*Table, error) {
	size := int64(len(b))
	if size < headerSize+4 {
		return nil, fmt.Errorf("not a table file: %d bytes, shorter than any table (%w)", size, errTruncated)
	}
	mlen, err := checkHeader(b[:headerSize], size)
	if err != nil {
		return nil, err
	}
	l, err := newLayout(b[headerSize:headerSize+mlen], size)
	if err != nil {
		return nil, err
	}
	if err := checkSum(b[size-4:], crc32.Checksum(b[:size-4], castagnoli)); err != nil {
		return nil, err
	}
	rows, dims := l.rows, l.dims
	t := l.table()
	shared := false
	section := func(off, n int64) []byte { return b[off : off+n : off+n] }
	t.weights = f32sAt(section(l.weights, 4*rows), &shared)
	switch t.quant {
	case QuantF32:
		t.f32 = f32sAt(section(l.vectors, 4*rows*dims), &shared)
	case QuantF16:
		t.f16 = u16sAt(section(l.vectors, 2*rows*dims), &shared)
	case QuantI8:
		t.i8 = unsafe.Slice((*int8)(unsafe.Pointer(&b[l.vectors])), rows*dims)
		shared = true
		t.scales = f32sAt(section(l.scales, 4*rows), &shared)
	}
	ends := section(l.ends, 4*l.extra)
	t.words.Ends = make([]uint32, l.extra)
	for i := range t.words.Ends {
		t.words.Ends[i] = binary.LittleEndian.Uint32(ends[4*i:])
	}
	t.words.Blob = bytes.Clone(section(l.blob, l.blobLen))
	if shared {
		t.mapped = &mapping{data: b}
	}
	if err := t.check(l.blobLen); err != nil {
		return nil, err
	}
	return t, nil
}

// hostLittleEndian: the file's arrays are little-endian, so only a
// little-endian host can use them in place.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// f32sAt is the little-endian float32s in b: b itself when the host can
// use it in place (setting *shared), else a heap copy.
func f32sAt(b []byte, shared *bool) []float32 {
	if v := view[float32](b); v != nil {
		*shared = true
		return v
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// u16sAt is f32sAt for uint16s.
func u16sAt(b []byte, shared *bool) []uint16 {
	if v := view[uint16](b); v != nil {
		*shared = true
		return v
	}
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v
}

// view is b as a []T, or nil unless the host is little-endian and b is
// aligned for T and not empty.
func view[T float32 | uint16](b []byte) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if !hostLittleEndian || len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%unsafe.Alignof(zero) != 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/size)
}

// checkSum compares the stored CRC-32C (the file's last 4 bytes) with the
// one computed.
func checkSum(stored []byte, sum uint32) error {
	if want := binary.LittleEndian.Uint32(stored); want != sum {
		return fmt.Errorf("checksum mismatch (stored %08x, computed %08x): the file is corrupt", want, sum)
	}
	return nil
}

// check is the reader's check of a table's values once the checksum
// matched: finite weights, vectors and scales (scales also >= 0), extra
// words ending in order at the end of the blob of blobLen bytes, non-empty
// and distinct. It then drops weights that are all 1 and builds the word
// index.
func (t *Table) check(blobLen int64) error {
	dims := int64(t.dims)
	if i := FirstNonFinite(t.weights); i >= 0 {
		return fmt.Errorf("weight of row %d is %v", i, t.weights[i])
	}
	t.compactWeights()
	switch t.quant {
	case QuantF32:
		if i := FirstNonFinite(t.f32); i >= 0 {
			return fmt.Errorf("row %d has a non-finite value %v", int64(i)/dims, t.f32[i])
		}
	case QuantF16:
		t.lut = halfTable()
		for i, h := range t.f16 {
			if h&0x7c00 == 0x7c00 {
				return fmt.Errorf("row %d has a non-finite value %v", int64(i)/dims, HalfToFloat32(h))
			}
		}
	case QuantI8:
		for i, s := range t.scales {
			if !(s >= 0) || math.IsInf(float64(s), 0) {
				return fmt.Errorf("scale of row %d is %v", i, s)
			}
		}
	}
	prev := uint32(0)
	for i, e := range t.words.Ends {
		if e < prev {
			return fmt.Errorf("extra word %d: end offset %d before the previous word's end %d", i, e, prev)
		}
		prev = e
	}
	if int64(prev) != blobLen {
		return fmt.Errorf("extra words end at byte %d of a %d-byte blob", prev, blobLen)
	}
	return buildWordIndex(&t.words)
}

// leReader reads little-endian values through a buffer, keeping the
// CRC-32C of what it read.
type leReader struct {
	r   io.Reader
	buf []byte
	crc uint32
	off int64
}

// next reads exactly n bytes (n <= len(buf)), valid until the next call.
func (d *leReader) next(n int) ([]byte, error) {
	b := d.buf[:n]
	if err := d.fill(b); err != nil {
		return nil, err
	}
	return b, nil
}

// fill reads exactly len(b) bytes into b.
func (d *leReader) fill(b []byte) error {
	n, err := io.ReadFull(d.r, b)
	d.off += int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("unexpected end of file at byte %d (%w)", d.off, errTruncated)
		}
		return err
	}
	d.crc = crc32.Update(d.crc, castagnoli, b)
	return nil
}

func (d *leReader) f32s(v []float32) error {
	for len(v) > 0 {
		n := min(len(v), len(d.buf)/4)
		b, err := d.next(4 * n)
		if err != nil {
			return err
		}
		for i := range v[:n] {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		v = v[n:]
	}
	return nil
}

func (d *leReader) u32s(v []uint32) error {
	for len(v) > 0 {
		n := min(len(v), len(d.buf)/4)
		b, err := d.next(4 * n)
		if err != nil {
			return err
		}
		for i := range v[:n] {
			v[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
		v = v[n:]
	}
	return nil
}

func (d *leReader) u16s(v []uint16) error {
	for len(v) > 0 {
		n := min(len(v), len(d.buf)/2)
		b, err := d.next(2 * n)
		if err != nil {
			return err
		}
		for i := range v[:n] {
			v[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		v = v[n:]
	}
	return nil
}

func (d *leReader) i8s(v []int8) error {
	for len(v) > 0 {
		n := min(len(v), len(d.buf))
		b, err := d.next(n)
		if err != nil {
			return err
		}
		for i, x := range b {
			v[i] = int8(x)
		}
		v = v[n:]
	}
	return nil
}

// FileSHA256 is the sha256 of the file at path, in hex.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
