package pool

import "testing"

// TestKeyPartition: keyed by tenant, a conversation still extends its
// key and finds its replica turn after turn, but another tenant sending
// the same conversation finds no replica holding any of it.
func TestKeyPartition(t *testing.T) {
	p := prefixPool(t, 4, nil)
	const acme, globex = 0x9e3779b97f4a7c15, 0xc2b2ae3d27d4eb4f
	keyFor := func(tenant uint64, turns int) *Key {
		k := keyOf(p, conversation("a system prompt of acme's own", 1, turns))
		k.Partition(tenant)
		return k
	}
	plain, none := keyOf(p, conversation("a system prompt of acme's own", 1, 2)), keyFor(0, 2)
	if *plain != *none {
		t.Fatal("Partition(0) changed the key")
	}
	a1, a3, b1 := keyFor(acme, 1), keyFor(acme, 3), keyFor(globex, 1)
	if a1.Conv == plain.Conv || a1.Conv == b1.Conv || a1.N != b1.N {
		t.Fatalf("conversation identities: acme %x, globex %x, unpartitioned %x; want three", a1.Conv, b1.Conv, plain.Conv)
	}
	for i := range a1.N {
		if a1.Blocks[i] != a3.Blocks[i] {
			t.Fatalf("block %d of acme's turn 1 differs from its turn 3's: a partitioned key must still extend", i)
		}
		if a1.Blocks[i] == b1.Blocks[i] || a1.Blocks[i] == plain.Blocks[i] {
			t.Fatalf("block %d is the same for two tenants", i)
		}
	}

	b, c, err := p.PickKey(a1, nil)
	if err != nil || c != ChoiceMiss {
		t.Fatalf("acme's first turn: %v, %v; want prefix_miss", c, err)
	}
	b.Release()
	got, c, _ := p.PickKey(keyFor(acme, 2), nil)
	if got != b || c != ChoiceHit {
		t.Fatalf("acme's second turn went to %s (%v), want %s (prefix_hit)", got.Name, c, b.Name)
	}
	got.Release()
	if got, c, _ = p.PickKey(keyFor(globex, 2), nil); c != ChoiceMiss {
		t.Fatalf("globex sending acme's conversation: %s (%v), want prefix_miss: no replica holds globex's prefix", got.Name, c)
	}
	got.Release()
}
