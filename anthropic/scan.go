package anthropic

import (
	"strconv"

	"github.com/triagegw/triage/internal/jsonscan"
)

// scanner is the JSON scanner (jsonscan.Scanner: a pull parser that
// accepts exactly RFC 8259 JSON, stops at the first fault and never
// panics) with the readers this package adds on top: a stream chunk or a
// request is read field by field in one pass, where encoding/json costs
// several microseconds per chunk (it reflects, and validates the chunk in
// a separate pass) and the fields a chunk carries take a few hundred
// nanoseconds to read directly.
type scanner struct{ jsonscan.Scanner }

// text reads a string as a Go string, or "" for null.
func (s *scanner) text() string {
	if s.Null() {
		return ""
	}
	b, _ := s.String()
	return string(b)
}

// integer reads a whole number (or null, as 0), as an int64 field of
// encoding/json would.
func (s *scanner) integer() int64 {
	if s.Null() {
		return 0
	}
	n, ok := s.Number()
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		s.Fail()
	}
	return v
}
