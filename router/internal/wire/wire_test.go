package wire

import "testing"

func TestParseLength(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "007": 7, "123456789012345678": 123456789012345678} {
		if n, ok := ParseLength(in); !ok || n != want {
			t.Errorf("ParseLength(%q) = %d, %v", in, n, ok)
		}
		if n, ok := ParseLength([]byte(in)); !ok || n != want {
			t.Errorf("ParseLength([]byte %q) = %d, %v", in, n, ok)
		}
	}
	for _, in := range []string{"", "-1", "+1", " 1", "1 ", "0x10", "1234567890123456789"} {
		if _, ok := ParseLength(in); ok {
			t.Errorf("ParseLength(%q) accepted", in)
		}
	}
}

func TestTrimOWS(t *testing.T) {
	for in, want := range map[string]string{"": "", " \t a b\t ": "a b", "x": "x", "\t\t": ""} {
		if got := TrimOWS(in); got != want {
			t.Errorf("TrimOWS(%q) = %q, want %q", in, got, want)
		}
	}
}
