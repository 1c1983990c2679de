package tenancy

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Caches that tenants share answer a prompt seen before faster than a new
// one, so a tenant could confirm a guess at what another sent by timing
// its own request. What tells one tenant's requests apart from another's
// in those caches is derived here, once per principal when its entry is
// built (Compile for keys, the first request for a token principal), so a
// request reads it without hashing or allocating:
//
//   - the cache salt (Caller.CacheSalt) that a replica's prefix cache
//     (vLLM's cache_salt) is keyed by: HMAC-SHA256 under the salt secret
//     (Config.CacheSaltSecret), so neither a replica's logs nor anyone
//     without the secret learns a principal's name from it or can compute
//     another's;
//   - the partition (Caller.Partition) the gateway's own prefix affinity
//     is keyed by: a hash of the name without a secret, so that every
//     gateway replica agrees on a conversation's replica even when they
//     were given no common secret. It never leaves the gateway.

// SaltLen is the length of a cache salt: 32 lowercase hexadecimal digits
// (128 bits), within what every server taking a cache_salt accepts (vLLM:
// a non-empty string of at most 128 characters without '@', '/', '\' or
// NUL).
const SaltLen = 32

// minSaltSecret is the least length of Config.CacheSaltSecret, as for an
// HS256 key (RFC 7518 §3.2).
const minSaltSecret = 32

// isolation is what a principal's requests are kept apart by.
type isolation struct {
	key  [sha256.Size]byte // HMAC(secret, "tenant\x00" name): keys the salts
	salt [SaltLen]byte     // hex(HMAC(key, "cache_salt")[:16])
	part uint64            // the partition: never 0
}

// saltSecret is the secret cache salts are derived from: the configured
// one, else one derived from the HS256 secret, else fallback (random,
// the Limiter's, so that reloads keep the salts).
func saltSecret(cfg *Config, fallback []byte) []byte {
	switch {
	case cfg.CacheSaltSecret != "":
		return []byte(cfg.CacheSaltSecret)
	case cfg.JWT.Secret != "":
		// Its own key, not the token key itself: an HMAC of a label
		// under it (a one-step HKDF-Expand).
		m := hmac.New(sha256.New, []byte(cfg.JWT.Secret))
		m.Write([]byte("triage cache_salt secret"))
		return m.Sum(nil)
	}
	return fallback
}

// randomSecret returns 32 random bytes.
func randomSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand, go1.24)
	return b
}

// newIsolation derives name's salt and partition under secret.
func newIsolation(secret []byte, name string) isolation {
	var is isolation
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tenant\x00"))
	m.Write([]byte(name))
	m.Sum(is.key[:0])
	m = hmac.New(sha256.New, is.key[:])
	m.Write([]byte("cache_salt"))
	var sum [sha256.Size]byte
	hex.Encode(is.salt[:], m.Sum(sum[:0])[:SaltLen/2])
	p := sha256.Sum256([]byte("triage partition\x00" + name))
	is.part = binary.LittleEndian.Uint64(p[:]) | 1
	return is
}

// CacheSalt is the principal's cache salt: SaltLen lowercase hexadecimal
// digits, the same for every request of the principal (and on every
// gateway given the same Config.CacheSaltSecret), different for every
// other principal, and derived from its name under a secret, so it does
// not reveal the name. The bytes belong to the caller's entry: do not
// modify them.
func (c Caller) CacheSalt() []byte { return c.e.iso.salt[:] }

// CacheSaltWith is the cache salt for a request that brought its own,
// client (its JSON token as sent): derived from the principal's salt key
// and client together, so that a principal may keep its own requests
// apart from each other, but no value it sends reaches the salt of
// another principal, nor its own plain CacheSalt. It allocates.
func (c Caller) CacheSaltWith(client []byte) []byte {
	// HMAC-SHA256 (RFC 2104) written out: crypto/hmac would allocate
	// its two hashes and pads (8 allocations per request); this takes
	// one hash and the result.
	var pad [sha256.BlockSize]byte
	key := &c.e.iso.key
	for i := range pad {
		pad[i] = 0x36
		if i < len(key) {
			pad[i] ^= key[i]
		}
	}
	h := sha256.New()
	h.Write(pad[:])
	h.Write([]byte("cache_salt\x00"))
	h.Write(client)
	var sum [sha256.Size]byte
	inner := h.Sum(sum[:0])
	for i := range pad {
		pad[i] ^= 0x36 ^ 0x5c
	}
	h.Reset()
	h.Write(pad[:])
	h.Write(inner)
	out := make([]byte, SaltLen)
	hex.Encode(out, h.Sum(sum[:0])[:SaltLen/2])
	return out
}

// Partition is a number, never 0, that differs from principal to
// principal (but for chance, one in 2^63 for two): what the gateway's own
// caches (prefix affinity) are keyed by along with a request's text. It
// depends on the principal's name alone, not on any secret.
func (c Caller) Partition() uint64 { return c.e.iso.part }

// SaltSecretRandom reports whether the cache salts are derived from this
// process's random secret (Config.CacheSaltSecret and jwt.secret unset):
// no other gateway replica, nor this one after a restart, derives the same.
func (s *Snapshot) SaltSecretRandom() bool {
	return len(s.saltSecret) > 0 && &s.saltSecret[0] == &s.limiter.saltFallback[0]
}
