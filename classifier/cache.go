package classifier

import (
	"container/list"
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// DefaultCacheSize is how many tier results a Lazy keeps by default: a
// result is about 200 bytes (the class probabilities, the top classes),
// so under a megabyte, and enough to cover a burst's retries and
// regenerations, which send the same conversation again within seconds.
const DefaultCacheSize = 4096

// resultCache keeps the results of recent classifications by a hash of
// their text (and tenant: ClassifyFor), least recently used out first. A tier's answer depends on
// its text alone, so a text seen again (a retry, a regenerated answer, the
// same question from many clients) costs a lookup, not a model run. The
// hash is 64 bits with a seed chosen at start: colliding texts cannot be
// crafted from outside, and chance collisions among a few thousand entries
// are about one in 10^12.
type resultCache struct {
	seed         maphash.Seed
	mu           sync.Mutex
	size         int
	ll           *list.List // front: most recently used
	m            map[uint64]*list.Element
	hits, misses atomic.Uint64
}

type cachedResult struct {
	key uint64
	r   Result
}

func newResultCache(size int) *resultCache {
	return &resultCache{seed: maphash.MakeSeed(), size: size, ll: list.New(), m: make(map[uint64]*list.Element)}
}

// key is the cache's key for text classified for tenant: the text's hash
// alone without one, else the hash of the tenant's name, its length
// first so that no two (tenant, text) pairs write the same bytes, and the
// text. It does not allocate.
func (c *resultCache) key(tenant, text string) uint64 {
	if tenant == "" {
		return maphash.String(c.seed, text)
	}
	var h maphash.Hash
	h.SetSeed(c.seed)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(tenant)))
	h.Write(n[:])
	h.WriteString(tenant)
	h.WriteString(text)
	return h.Sum64()
}

// get fills r with the result kept for key, reusing r's slices.
func (c *resultCache) get(key uint64, r *Result) bool {
	c.mu.Lock()
	e, ok := c.m[key]
	if !ok {
		c.mu.Unlock()
		c.misses.Add(1)
		return false
	}
	c.ll.MoveToFront(e)
	copyResult(r, &e.Value.(*cachedResult).r)
	c.mu.Unlock()
	c.hits.Add(1)
	return true
}

// put keeps a copy of r for key.
func (c *resultCache) put(key uint64, r *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		copyResult(&e.Value.(*cachedResult).r, r)
		c.ll.MoveToFront(e)
		return
	}
	var e *list.Element
	if c.ll.Len() >= c.size {
		e = c.ll.Back() // reuse the oldest entry and its slices
		old := e.Value.(*cachedResult)
		delete(c.m, old.key)
		old.key = key
		copyResult(&old.r, r)
		c.ll.MoveToFront(e)
	} else {
		cr := &cachedResult{key: key}
		copyResult(&cr.r, r)
		e = c.ll.PushFront(cr)
	}
	c.m[key] = e
}

func copyResult(dst, src *Result) {
	dst.Class, dst.Score, dst.Tier, dst.Tokens = src.Class, src.Score, src.Tier, src.Tokens
	dst.Top = append(dst.Top[:0], src.Top...)
	dst.Probs = append(dst.Probs[:0], src.Probs...)
}
