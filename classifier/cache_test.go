package classifier

import (
	"hash/maphash"
	"testing"
)

// TestResultCacheKeyTenant: a tenant's key is its own (no tenant and
// text split differently write the same bytes), and the key without a
// tenant is the text's as it always was. TestResultCacheKeyAllocs: a
// tenant's key does not allocate.
func TestResultCacheKeyTenant(t *testing.T) {
	c := newResultCache(4)
	if c.key("", "my lease") != maphash.String(c.seed, "my lease") {
		t.Fatal("the key without a tenant changed")
	}
	keys := map[uint64]string{}
	for _, p := range [][2]string{{"", "abc"}, {"a", "bc"}, {"ab", "c"}, {"abc", ""}, {"b", "abc"}, {"\x01", "abc"}} {
		k := c.key(p[0], p[1])
		if prev, dup := keys[k]; dup {
			t.Fatalf("key(%q, %q) is also %s's", p[0], p[1], prev)
		}
		keys[k] = p[0] + "|" + p[1]
	}
}

func TestResultCacheKeyAllocs(t *testing.T) {
	c := newResultCache(4)
	var sink uint64
	if n := testing.AllocsPerRun(100, func() { sink += c.key("acme-legal-team", "a prompt of some length to hash") }); n != 0 {
		t.Fatalf("key: %v allocations, want 0", n)
	}
}
