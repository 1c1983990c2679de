package glove

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// FuzzJSONScanner holds the streaming reader to encoding/json: a document
// it skips whole is one encoding/json accepts and the other way round,
// read a byte at a time through a small buffer so that tokens cross the
// window it checks them in; only a token longer than the buffer may be
// refused where encoding/json takes it. A string reads as encoding/json
// reads it (bytes that are not UTF-8 aside: they are kept, see jsonscan).
func FuzzJSONScanner(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-2.5e3,true,false,null,{"b":"c"}]}`, `"a\u00e9\ud83d\ude00\ud800x\n"`, `[1,]`, `01`, `"\x"`,
		`{"a" 1}`, `-`, `1e`, `1.5e+3 `, `tru`, `nulll`, `[1 2]`, `{"vectors":{"the":[0.1,0.2,1,0]}}`,
		`"` + strings.Repeat("é", 40) + `"`, `123456789012345678901234567890`, " \t\n[ ] ",
		`[0.1, -2e-3 ,3,1e99]`, `[1,]`, `[null]`, `[true]`, `[1 2]`, `[` + strings.Repeat("0.123456789,", 20) + `1]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const size = 32
		s := newJSONScannerSize(iotest.OneByteReader(bytes.NewReader(data)), size)
		err := s.skip()
		if err == nil {
			var end bool
			end, err = s.atEOF()
			if err == nil && !end {
				err = s.errorf("data after the value")
			}
		}
		if want := json.Valid(data); (err == nil) != want && !(want && strings.Contains(err.Error(), "longer than")) {
			t.Fatalf("skip(%q): %v, encoding/json valid: %v", data, err, want)
		}
		var want string
		if v := bytes.TrimLeft(data, " \t\r\n"); len(v) > 0 && v[0] == '"' && json.Unmarshal(data, &want) == nil {
			s := newJSONScannerSize(iotest.OneByteReader(bytes.NewReader(data)), size)
			got, err := s.string()
			if err != nil && !strings.Contains(err.Error(), "longer than") || err == nil && string([]rune(string(got))) != want {
				t.Fatalf("string(%q) = %q, %v; encoding/json: %q", data, got, err, want)
			}
		}
		// An array of numbers: floats reads what encoding/json reads
		// into a []float32 (the same rounding), or refuses it too.
		if v := bytes.TrimLeft(data, " \t\r\n"); len(v) > 0 && v[0] == '[' {
			var want []float32
			wantErr := json.Unmarshal(data, &want)
			if wantErr == nil && bytes.Contains(data, []byte("null")) {
				return // encoding/json reads a null as 0; a vector holds numbers only
			}
			s := newJSONScannerSize(iotest.OneByteReader(bytes.NewReader(data)), size)
			got, err := s.floats(nil, 1<<20)
			if err == nil {
				var end bool
				if end, err = s.atEOF(); err == nil && !end {
					err = s.errorf("data after the value")
				}
			}
			if (err == nil) != (wantErr == nil) && !(wantErr == nil && strings.Contains(err.Error(), "longer than")) {
				t.Fatalf("floats(%q) = %v, %v; encoding/json: %v, %v", data, got, err, want, wantErr)
			}
			if err == nil && !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("floats(%q) = %v; encoding/json: %v", data, got, want)
			}
		}
	})
}
