package suggest

import "testing"

func TestClosest(t *testing.T) {
	names := []string{"default_pool", "pools", "listen", "weight"}
	for in, want := range map[string]string{"defualt_pool": "default_pool", "wieght": "weight", "pool": "pools", "zzz": "", "listen": "listen"} {
		if got := Closest(in, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "abc", 3}, {"kitten", "sitting", 3}, {"same", "same", 0}, {"ab", "ba", 2}} {
		if got := Distance(c.a, c.b); got != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}
