package glove

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkParse reads a wink-shaped file of 5,000 words of 100
// dimensions (about 5 MB) against a vocabulary holding every fourth
// word: the importer's JSON reading, parsed vectors and skipped ones.
func BenchmarkParse(b *testing.B) {
	const n, dims = 5000, 100
	var js bytes.Buffer
	fmt.Fprintf(&js, `{"precision":8,"l2NormIndex":%d,"wordIndex":%d,"size":%d,"dimensions":%d,"words":[`, dims, dims+1, n, dims)
	vocab := make([]string, 0, n/4)
	word := func(i int) string { return fmt.Sprintf("w%c%c%c", 'a'+i%26, 'a'+i/26%26, 'a'+i/676) }
	for i := range n {
		if i > 0 {
			js.WriteByte(',')
		}
		fmt.Fprintf(&js, "%q", word(i))
		if i%4 == 0 {
			vocab = append(vocab, word(i))
		}
	}
	js.WriteString(`],"vectors":{`)
	for i := range n {
		if i > 0 {
			js.WriteByte(',')
		}
		fmt.Fprintf(&js, "%q:[", word(i))
		for d := range dims {
			fmt.Fprintf(&js, "%.8f,", float64((i*31+d*17)%1000)/1000-0.5)
		}
		fmt.Fprintf(&js, "1.0,%d]", i)
	}
	js.WriteString(`},"unkVector":[0,0,0]}`)
	doc := js.Bytes()
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := newGloveImport(vocab, lowerASCII, 5).parse(bytes.NewReader(doc)); err != nil {
			b.Fatal(err)
		}
	}
}
