package models

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"testing"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// fixCRC rewrites the trailing checksum of a table image.
func fixCRC(img []byte) []byte {
	if len(img) >= 4 {
		binary.LittleEndian.PutUint32(img[len(img)-4:], crc32.Checksum(img[:len(img)-4], castagnoli))
	}
	return img
}

// FuzzReadTable feeds arbitrary bytes (with the checksum fixed half the
// time, so that the checks behind it are reached) to the table reader: it
// must return an error or a table that encodes back to the same bytes, and
// never panic or allocate beyond the input's size; the mapped reader must
// agree.
func FuzzReadTable(f *testing.F) {
	base := randomTable(f, 11, 6, 3, 4)
	for _, q := range quants {
		img := base.Quantize(q).encodeBytes()
		f.Add(img, false)
		f.Add(img[:len(img)/2], true)
	}
	words, _ := NewTable(Manifest{}, 0, []string{"a", "bc", "é"}, [][]float32{{1}, {2}, {3}}, []float32{1, 1, 1})
	f.Add(words.encodeBytes(), false)
	buckets, _ := NewTable(Manifest{Buckets: 2}, 1, []string{"a"}, [][]float32{{1}, {2}, {3}, {4}}, []float32{1, 1, 1, 1})
	f.Add(buckets.Quantize(QuantI8).encodeBytes(), false)
	f.Add([]byte("TRIAGETB\x01\x00\x00\x00\x02\x00\x00\x00{}"), true)
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if fix {
			data = fixCRC(bytes.Clone(data))
		}
		tb, err := decodeTable(bytes.NewReader(data), int64(len(data)))
		// The mapped reader (decodeImage, here on heap images at an
		// aligned and an odd address, so that its arrays are aliased and
		// copied) accepts exactly what the streaming reader does, as the
		// same table.
		var mapped [2]*Table
		for i, img := range [][]byte{bytes.Clone(data), append(make([]byte, 1, len(data)+1), data...)[1:]} {
			var merr error
			mapped[i], merr = decodeImage(img)
			if (err == nil) != (merr == nil) {
				t.Fatalf("streaming reader: %v; mapped reader (odd address %v): %v", err, i == 1, merr)
			}
		}
		if err != nil {
			return
		}
		for _, m := range mapped {
			if !bytes.Equal(m.encodeBytes(), tb.encodeBytes()) {
				t.Fatal("the mapped reader read another table")
			}
		}
		if tb.MemoryBytes() > 4*len(data)+(1<<20) {
			t.Fatalf("table of %d bytes from a %d-byte file", tb.MemoryBytes(), len(data))
		}
		// What was read is consistent: usable, and it re-encodes to a
		// readable image of the same table.
		acc := make([]float32, tb.Dims())
		for r := range int32(tb.Rows()) {
			tb.Accumulate(acc, r, 1)
		}
		for _, w := range tb.ExtraWords() {
			if _, ok := tb.Word([]byte(w)); !ok {
				t.Fatalf("extra word %q not found", w)
			}
		}
		img := tb.encodeBytes()
		tb2, err := decodeTable(bytes.NewReader(img), int64(len(img)))
		if err != nil {
			t.Fatalf("re-encoded table does not read: %v", err)
		}
		if !bytes.Equal(tb2.encodeBytes(), img) {
			t.Fatal("re-encoding is not stable")
		}
	})
}
