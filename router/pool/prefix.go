package pool

import (
	"hash/crc32"
	"math"
	"math/bits"
	"sync/atomic"
)

// MaxKeyBlocks is the most prefix blocks a Key holds: a request's prompt
// beyond MaxKeyBlocks*block_bytes is not looked up, and counts as the
// prefix of its first MaxKeyBlocks blocks.
const MaxKeyBlocks = 128

// castagnoli is CRC-32C's table: the hardware instruction on amd64 and
// arm64 (over 10 GB/s), the same on every gateway.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Key is what prefix affinity knows of one request: the chained hashes of
// its prompt's blocks, so that a longer conversation extends its earlier
// key, and the conversation's identity, from which every gateway derives
// the same order of replicas. The zero Key has no blocks. Keys are made by
// Pool.Key and hold no pointers; keep them on the stack or in the request.
type Key struct {
	// Conv identifies the conversation: the hash of the prompt up to the
	// end of its first user message (the whole prompt when there is
	// none). It orders the replicas by rendezvous hashing.
	Conv uint64
	// N is the number of whole blocks in Blocks.
	N int
	// Shared is the number of leading blocks that end before the
	// conversation's identity does: text many conversations may share (a
	// system prompt, tools). A replica holding no more than these is no
	// better a choice than any other that has served the same prompt.
	Shared int
	// Blocks[i] is the hash of the prompt's first (i+1)*block_bytes bytes.
	Blocks [MaxKeyBlocks]uint64
}

// Key fills k from prompt, the serialised conversation in order (a chat
// request's messages array, as the client sent it), of which the first
// conv bytes identify the conversation (0: all of them). The hashes are
// CRC-32C, chained from block to block, so they agree on every gateway and
// need no allocation; a trailing partial block is not keyed, since the
// next turn will extend it. With balance other than prefix it leaves k
// empty.
func (p *Pool) Key(k *Key, prompt []byte, conv int) {
	k.N, k.Conv, k.Shared = 0, 0, 0
	if p.policy != policyPrefix || len(prompt) == 0 {
		return
	}
	if conv <= 0 || conv > len(prompt) {
		conv = len(prompt)
	}
	bs := p.cfg.Prefix.BlockBytes
	k.Shared = min(conv/bs, MaxKeyBlocks)
	var crc uint32
	at := 0
	for k.N < MaxKeyBlocks && at+bs <= len(prompt) {
		end := at + bs
		if conv > at && conv <= end {
			// The conversation's identity ends inside this block.
			c := crc32.Update(crc, castagnoli, prompt[at:conv])
			k.Conv = mix64(uint64(c)<<32 | uint64(conv))
			crc = crc32.Update(c, castagnoli, prompt[conv:end])
		} else {
			crc = crc32.Update(crc, castagnoli, prompt[at:end])
		}
		k.Blocks[k.N] = mix64(uint64(crc)<<32 | uint64(k.N+1))
		k.N++
		at = end
	}
	if k.Conv == 0 {
		c := crc32.Update(crc, castagnoli, prompt[at:conv])
		k.Conv = mix64(uint64(c)<<32 | uint64(conv))
	}
}

// Partition keys k by t too (0: leaves k as it is): two requests with the
// same prompt and different t have keys no more alike than two with
// different prompts, so that neither finds the replica the other's
// blocks went to, nor the same conversation home. Call it on a key Key
// filled; it adds a mix per block.
func (k *Key) Partition(t uint64) {
	if t == 0 || k.N == 0 && k.Conv == 0 {
		return
	}
	k.Conv = mix64(k.Conv ^ t)
	for i := range k.Blocks[:k.N] {
		k.Blocks[i] = mix64(k.Blocks[i] ^ t)
	}
}

// mix64 is SplitMix64's finaliser: every input bit reaches every output
// bit, so a bucket index can be taken from the low bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// rank is b's rendezvous score for conversation conv: the replica with the
// highest score is the conversation's home on every gateway, whatever the
// order of the config or the other replicas' state. Weighted as in
// Schindelhauer and Schomaker's weighted distributed hash tables: -w/ln(u).
func rank(conv uint64, b *Backend) float64 {
	h := mix64(conv ^ b.seed)
	u := (float64(h>>11) + 0.5) / (1 << 53) // (0,1)
	return -float64(b.Weight) / math.Log(u)
}

// bucketWays is the number of entries in a bucket of the index: eight
// of them, one 64-byte cache line.
const bucketWays = 8

// An entry of the index packs a block's key (its high 48 bits; the low
// bits chose the bucket) with a 16-bit stamp of when it was last sent:
// one word, so a lookup or a refresh touches one cache line per block.
const stampBits = 16

const stampMask = 1<<stampBits - 1

// refreshAge is how old (in adds to the index) an entry's stamp must be
// before a request that sends its block again rewrites it: a hot
// conversation's blocks are not stored on every request, which keeps the
// hit path to loads.
const refreshAge = 64

// index is an approximate, bounded record of the prefix blocks sent to one
// replica recently: a set-associative table with least-recently-used
// replacement within each bucket. It never allocates after it is made.
// Concurrent use is safe; racing updates may lose an entry or keep a stale
// one, which costs a cache hit, never a wrong answer.
type index struct {
	entries []atomic.Uint64
	mask    uint64 // buckets - 1
	clock   atomic.Uint64
	live    atomic.Bool // some entry may be set
}

// newIndex makes an index of at least blocks entries (rounded up to a
// power of two buckets).
func newIndex(blocks int) *index {
	buckets := uint64(1) << bits.Len(uint(max(blocks/bucketWays, 1)-1))
	return &index{entries: make([]atomic.Uint64, buckets*bucketWays), mask: buckets - 1}
}

// tag is what an entry keeps of key: never 0, which marks an empty entry.
func tag(key uint64) uint64 {
	if t := key &^ stampMask; t != 0 {
		return t
	}
	return 1 << stampBits
}

// has reports whether key is in the index.
func (x *index) has(key uint64) bool {
	t := tag(key)
	base := (key & x.mask) * bucketWays
	for i := base; i < base+bucketWays; i++ {
		if x.entries[i].Load()&^stampMask == t {
			return true
		}
	}
	return false
}

// match is the number of leading blocks of k the index holds: a binary
// search, since a block is only ever recorded with all the blocks before
// it, and refreshed with them.
func (x *index) match(k *Key) int {
	if !x.live.Load() {
		return 0
	}
	lo, hi := 0, k.N // blocks[:lo] are held; blocks[hi:] are not
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1) // in (lo, hi]
		if x.has(k.Blocks[mid-1]) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// convTag is the index entry that records that conversation conv was
// sent to the replica: its blocks up to the end of its first user message
// end in a partial block on its first turn, which no block records.
func convTag(conv uint64) uint64 { return mix64(conv ^ 0x6a09e667f3bcc908) }

// add records k's blocks, and its conversation, as sent now, replacing
// the least recently used entry of a full bucket.
func (x *index) add(k *Key) {
	if k.Conv == 0 {
		return
	}
	now := x.clock.Add(1) & stampMask
	if !x.live.Load() {
		x.live.Store(true)
	}
	x.put(convTag(k.Conv), now)
	for _, key := range k.Blocks[:k.N] {
		x.put(key, now)
	}
}

// put records key as sent at now (a 16-bit stamp; ages are taken modulo
// 2^16, so an entry untouched for 65536 adds may look young: approximate).
func (x *index) put(key, now uint64) {
	t := tag(key)
	base := (key & x.mask) * bucketWays
	victim, oldest := base, uint64(0)
	for i := base; i < base+bucketWays; i++ {
		e := x.entries[i].Load()
		age := (now - e) & stampMask
		if e&^stampMask == t {
			if age >= refreshAge {
				x.entries[i].Store(t | now)
			}
			return
		}
		if e == 0 {
			age = stampMask + 1 // an empty entry is the first to take
		}
		if age > oldest {
			victim, oldest = i, age
		}
	}
	x.entries[victim].Store(t | now)
}

// clear forgets every entry: the replica is gone, and its cache with it.
func (x *index) clear() {
	if !x.live.Swap(false) {
		return
	}
	for i := range x.entries {
		x.entries[i].Store(0)
	}
}
