package jsonscan_test

import (
	"fmt"

	"github.com/triagegw/triage/internal/jsonscan"
)

// A caller walks the structure it expects and skips the rest; every value
// is checked, skipped or not.
func ExampleScanner() {
	s := jsonscan.New([]byte(`{"model":"m","messages":[{"role":"user","content":"caf\u00e9"}],"n":[1,{"x":null}]}`))
	s.Object(func(key []byte) bool {
		if string(key) != "messages" {
			return s.Skip()
		}
		return s.Array(func() bool {
			return s.Object(func(key []byte) bool {
				k := string(key) // the value may overwrite a decoded key
				v, ok := s.String()
				fmt.Printf("%s=%s\n", k, v)
				return ok
			})
		})
	})
	fmt.Println(s.End(), s.Err())

	s = jsonscan.New([]byte(`{"a":[1,2,]}`))
	fmt.Println(s.Skip(), s.Err())
	// Output:
	// role=user
	// content=café
	// true <nil>
	// false invalid character ']'
}
