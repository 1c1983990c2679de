package pool

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// conversation is a chat's messages array after turns user turns, as a
// client serialises it: each turn's array extends the previous one's,
// but for its closing bracket.
func conversation(system string, id, turns int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `[{"role":"system","content":%q}`, system+strings.Repeat(" Answer briefly and cite sources.", 20))
	for t := range turns {
		fmt.Fprintf(&b, `,{"role":"user","content":"conversation %d asks question %d, which is long enough to fill a block or two of the prompt on its own: %s"}`, id, t, strings.Repeat("words ", 40))
		if t < turns-1 {
			fmt.Fprintf(&b, `,{"role":"assistant","content":"the answer to question %d of conversation %d, %s"}`, t, id, strings.Repeat("more words ", 30))
		}
	}
	b.WriteString("]")
	return []byte(b.String())
}

// firstUser is where the first user message of a conversation ends.
func firstUser(msgs []byte) int {
	i := strings.Index(string(msgs), `"role":"user"`)
	return i + strings.Index(string(msgs[i:]), `"}`) + 2
}

func prefixPool(t *testing.T, replicas int, mut func(*Config)) *Pool {
	t.Helper()
	w := make([]int, replicas)
	for i := range w {
		w[i] = 1
	}
	return newPool(t, w, func(c *Config) {
		c.Balance = BalancePrefix
		if mut != nil {
			mut(c)
		}
	})
}

func keyOf(p *Pool, msgs []byte) *Key {
	k := new(Key)
	p.Key(k, msgs, firstUser(msgs))
	return k
}

func TestKeyExtends(t *testing.T) {
	p := prefixPool(t, 2, nil)
	const sys = "You are a careful assistant."
	k1, k3 := keyOf(p, conversation(sys, 7, 1)), keyOf(p, conversation(sys, 7, 3))
	if k1.N == 0 || k3.N <= k1.N || k1.N == MaxKeyBlocks {
		t.Fatalf("blocks: turn 1 %d, turn 3 %d; want turn 3 to have more", k1.N, k3.N)
	}
	for i := range k1.N {
		if k1.Blocks[i] != k3.Blocks[i] {
			t.Fatalf("block %d of turn 1 differs from turn 3's: a later turn must extend the key", i)
		}
	}
	if k1.Conv != k3.Conv {
		t.Fatal("the conversation's identity changed between turns")
	}
	other := keyOf(p, conversation(sys, 8, 1))
	if other.Conv == k1.Conv {
		t.Fatal("two conversations with the same system prompt have the same identity: keyed on the system prompt alone")
	}
	if other.Blocks[0] != k1.Blocks[0] {
		t.Fatal("a shared system prompt's first block differs")
	}
	var empty Key
	p2c := newPool(t, []int{1, 1}, nil)
	p2c.Key(&empty, conversation(sys, 7, 3), 0)
	if empty.N != 0 {
		t.Fatal("a p2c pool keyed a request")
	}
}

func TestPrefixAffinity(t *testing.T) {
	p := prefixPool(t, 4, nil)
	const convs = 64
	home := map[int]*Backend{}
	for turn := 1; turn <= 4; turn++ {
		for id := range convs {
			b, c, err := p.PickKey(keyOf(p, conversation("sys", id, turn)), nil)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case turn == 1 && c != ChoiceMiss && c != ChoiceHit:
				t.Fatalf("conversation %d turn 1: choice %v, want prefix_miss or a hit on the shared system prompt", id, c)
			case turn > 1 && (c != ChoiceHit || b != home[id]):
				t.Fatalf("conversation %d turn %d went to %s (%v), want its earlier replica %s (prefix_hit)", id, turn, b.Name, c, home[id].Name)
			}
			home[id] = b
			b.Release() // one at a time: load never binds
		}
	}
	per := map[*Backend]int{}
	for _, b := range home {
		per[b]++
	}
	if len(per) != 4 {
		t.Fatalf("64 conversations landed on %d of 4 replicas", len(per))
	}
}

func TestPrefixLoadOverride(t *testing.T) {
	p := prefixPool(t, 4, nil)
	k := keyOf(p, conversation("sys", 1, 1))
	b, _, _ := p.PickKey(k, nil)
	b.Release()
	for _, o := range p.Backends() {
		o.inflight.Store(4)
	}
	b.inflight.Store(9) // mean 5.25 with this request; bound ceil(1.25*(21+1)/4) = 7
	k2 := keyOf(p, conversation("sys", 1, 2))
	got, c, _ := p.PickKey(k2, nil)
	if got == b || c != ChoiceLoad {
		t.Fatalf("over the bound: got %s (%v), want another replica (prefix_load)", got.Name, c)
	}
	got.Release()
	b.inflight.Store(4)
	moved := got
	got, c, _ = p.PickKey(keyOf(p, conversation("sys", 1, 3)), nil)
	if got != moved || c != ChoiceHit {
		t.Fatalf("turn 3: got %s (%v), want %s, which holds turn 2 (prefix_hit)", got.Name, c, moved.Name)
	}
}

// Two gateways with the same config send a new conversation to the same
// replica, without sharing anything.
func TestPrefixAgreesAcrossGateways(t *testing.T) {
	a, b := prefixPool(t, 5, nil), prefixPool(t, 5, nil)
	for id := range 200 {
		msgs := conversation(fmt.Sprintf("system %d", id%3), id, 1+id%4)
		x, _, _ := a.PickKey(keyOf(a, msgs), nil)
		y, _, _ := b.PickKey(keyOf(b, msgs), nil)
		x.Release()
		y.Release()
		if x.Name != y.Name {
			t.Fatalf("conversation %d: gateway a chose %s, gateway b %s", id, x.Name, y.Name)
		}
	}
}

// A replica that goes down takes its index with it, and only its
// conversations move.
func TestPrefixReplicaDown(t *testing.T) {
	p := prefixPool(t, 4, nil)
	home := map[int]*Backend{}
	for id := range 400 {
		b, _, _ := p.PickKey(keyOf(p, conversation("s", id, 1)), nil)
		b.Release()
		home[id] = b
	}
	gone := p.Backends()[2]
	gone.health.Store(healthDown)
	moved := 0
	for id := range 400 {
		b, _, _ := p.PickKey(keyOf(p, conversation("s", id, 2)), nil)
		b.Release()
		if b == gone {
			t.Fatal("a down replica was chosen")
		}
		if b != home[id] {
			moved++
			if home[id] != gone {
				t.Fatalf("conversation %d moved from %s, which is up", id, home[id].Name)
			}
		}
	}
	if gone.idx.live.Load() {
		t.Fatal("the down replica's index was kept")
	}
	if moved == 0 {
		t.Fatal("no conversation lived on the replica that went down")
	}
}

func TestRoundRobin(t *testing.T) {
	p := newPool(t, []int{1, 5, 1}, func(c *Config) { c.Balance = BalanceRoundRobin })
	counts := map[string]int{}
	for range 300 {
		b, c, err := p.PickKey(nil, nil)
		if err != nil || c != ChoiceRoundRobin {
			t.Fatalf("PickKey = %v, %v", c, err)
		}
		counts[b.Name]++
		b.Release()
	}
	for name, n := range counts {
		if n != 100 {
			t.Fatalf("%s got %d of 300, want 100 each: %v", name, n, counts)
		}
	}
}

func TestBalanceConfig(t *testing.T) {
	c := Config{Name: "p", Model: "m", Balance: "least_conn", Replicas: []Replica{{URL: "http://a:1"}}}
	c.SetDefaults()
	errs := c.Validate("pools[0]")
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "pools[0].balance: must be one of p2c, round_robin, prefix") {
		t.Fatalf("Validate = %v, want the valid policies named", errs)
	}
	c = Config{Name: "p", Model: "m", Balance: BalancePrefix, Replicas: []Replica{{URL: "http://a:1"}}}
	c.SetDefaults()
	if errs := c.Validate("pools[0]"); len(errs) != 0 {
		t.Fatalf("prefix on one replica: %v, want accepted", errs)
	}
	if n := c.Notes("pools[0]"); len(n) != 1 || !strings.Contains(n[0], "single replica") {
		t.Fatalf("Notes = %q, want one about the single replica", n)
	}
	if !c.ScrapesMetrics() {
		t.Fatal("a vllm pool balancing by prefix does not scrape its replicas' metrics by default")
	}
	c.Replicas = append(c.Replicas, Replica{URL: "http://b:1", Weight: 1})
	if n := c.Notes("pools[0]"); len(n) != 0 {
		t.Fatalf("Notes = %q with two replicas", n)
	}
}

// The balancing decision on the hit path: a four-replica pool, a
// conversation of its fourth turn (about 6 KB of messages) whose replica
// holds it.
func BenchmarkPickPrefixHit(b *testing.B) {
	for _, turns := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("turns=%d", turns), func(b *testing.B) {
			p := prefixPool(&testing.T{}, 4, nil)
			for id := range 256 {
				k := keyOf(p, conversation("sys", id, turns))
				be, _, _ := p.PickKey(k, nil)
				be.Release()
			}
			k := keyOf(p, conversation("sys", 3, turns))
			b.ReportAllocs()
			for b.Loop() {
				be, c, _ := p.PickKey(k, nil)
				if c != ChoiceHit {
					b.Fatalf("choice %v, want a hit", c)
				}
				be.Release()
			}
			b.ReportMetric(float64(k.N), "blocks")
		})
	}
}

// Keying a request: hashing its messages in blocks.
func BenchmarkKey(b *testing.B) {
	for _, turns := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("turns=%d", turns), func(b *testing.B) {
			p := prefixPool(&testing.T{}, 4, nil)
			msgs := conversation("sys", 3, turns)
			conv := firstUser(msgs)
			var k Key
			b.SetBytes(int64(len(msgs)))
			b.ReportAllocs()
			for b.Loop() {
				p.Key(&k, msgs, conv)
			}
			b.ReportMetric(float64(len(msgs)), "bytes")
		})
	}
}

func BenchmarkPickP2C(b *testing.B) {
	p := newPool(&testing.T{}, []int{1, 1, 1, 1}, nil)
	b.ReportAllocs()
	for b.Loop() {
		be, _ := p.Pick(nil)
		be.Release()
	}
}

// Health changes under a pick: p2c's two draws come from one reading of
// which replicas are available. It used to count them, then draw twice
// reading again, and a replica going down in between left the second
// draw nothing: a nil replica, and a panic in the request (seen as a 500
// under TestFlappingHealth). Two goroutines flip a replica's health while
// two pick; every pick must give a replica.
func TestPickWhileHealthFlips(t *testing.T) {
	p := newPool(t, []int{1, 1}, nil)
	flappy := p.Backends()[0]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for up := false; ; up = !up {
			select {
			case <-stop:
				return
			default:
			}
			if up {
				flappy.health.Store(healthUp)
			} else {
				flappy.health.Store(healthDown)
			}
		}
	})
	var picks sync.WaitGroup
	for range 2 {
		picks.Go(func() {
			for range 200_000 {
				b, err := p.Pick(nil)
				if err != nil || b == nil {
					t.Errorf("Pick = %v, %v with a replica up throughout", b, err)
					return
				}
				b.Release()
			}
		})
	}
	picks.Wait()
	close(stop)
	wg.Wait()
}
