package wire

import (
	"net/textproto"
	"strings"
)

// CanonicalKey is textproto.CanonicalMIMEHeaderKey(string(name)), without
// allocating for the header names requests and responses commonly carry,
// in any mix of upper and lower case.
func CanonicalKey[T string | []byte](name T) string {
	if k, ok := known(name); ok {
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

// FieldName reports whether name is a header field name (a token, RFC
// 9110 5.1) and gives its canonical form, as CanonicalKey does. A known
// name, in any case, is one table probe and one comparison: no byte-by-byte
// token check, no hashing and no allocation.
func FieldName[T string | []byte](name T) (string, bool) {
	if k, ok := known(name); ok {
		return k, true
	}
	if !Token(name) {
		return "", false
	}
	return textproto.CanonicalMIMEHeaderKey(string(name)), true
}

// knownNames are common header names, canonical: the request headers of
// OpenAI clients and browsers, and the response headers of
// OpenAI-compatible servers and proxies.
var knownNames = [...]string{
	// Framing and connection management.
	"Host", "Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding",
	"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Expect", "Upgrade",
	// Requests.
	"Authorization", "Accept", "Accept-Encoding", "Accept-Language", "User-Agent",
	"Cookie", "Origin", "Referer", "Cache-Control", "Pragma",
	"X-Request-Id", "X-Session-Id", "X-Forwarded-For", "X-Forwarded-Proto", "X-Real-Ip",
	"Openai-Organization", "Openai-Project", "Anthropic-Version", "Anthropic-Beta", "X-Api-Key",
	"Traceparent", "Tracestate",
	"X-Stainless-Lang", "X-Stainless-Package-Version", "X-Stainless-Os", "X-Stainless-Arch",
	"X-Stainless-Runtime", "X-Stainless-Runtime-Version", "X-Stainless-Retry-Count", "X-Stainless-Timeout",
	"X-Stainless-Async", "X-Stainless-Read-Timeout",
	// Responses.
	"Date", "Server", "Vary", "Proxy-Authenticate", "X-Accel-Buffering",
}

// maxKnownKey is the length of the longest known name (X-Stainless-Runtime-Version).
const maxKnownKey = 27

// knownEntry is a known name in the table: its canonical form, and its
// lower-case bytes as known compares them. A name of eight bytes or more
// is held as little-endian words at 0, 8, 16 while a whole word fits
// before the last eight bytes, then the last eight bytes (overlapping).
type knownEntry struct {
	canon string
	lower string
	words [4]uint64
}

// knownTable is a perfect hash table of knownNames: knownSlot's
// multiplier is the first that gives every name a slot of its own.
var (
	knownTable [256]knownEntry
	knownMul   uint32
)

func init() {
	if len(knownNames) > len(knownTable)/4 {
		panic("wire: too many known header names for the table")
	}
	var lower [len(knownNames)]string
	for i, k := range knownNames {
		if len(k) > maxKnownKey || !Token(k) || textproto.CanonicalMIMEHeaderKey(k) != k {
			panic("wire: known header " + k + " is not a canonical token of at most maxKnownKey bytes")
		}
		lower[i] = strings.ToLower(k) // a token: ASCII, so only 'A' to 'Z' change
	}
search:
	for m := uint32(0x9E3779B1); ; m += 2 {
		if m < 0x9E3779B1 {
			panic("wire: no perfect hash for the known header names")
		}
		var used [len(knownTable)]bool
		for _, k := range lower {
			s := slot(m, len(k), k[0], k[len(k)/2], k[len(k)-1])
			if used[s] {
				continue search
			}
			used[s] = true
		}
		knownMul = m
		break
	}
	for i, k := range lower {
		e := &knownTable[slot(knownMul, len(k), k[0], k[len(k)/2], k[len(k)-1])]
		e.canon, e.lower = knownNames[i], k
		if len(k) >= 8 {
			w := 0
			for off := 0; off+8 < len(k); off += 8 {
				e.words[w] = Word(k, off)
				w++
			}
			e.words[w] = Word(k, len(k)-8)
		}
	}
}

// slot hashes a name's length and its first, middle and last bytes,
// folded to lower case by setting bit 5 (which only picks the slot: known
// compares the whole name exactly).
func slot(mul uint32, n int, first, mid, last byte) uint8 {
	h := uint32(n) | uint32(first|0x20)<<8 | uint32(mid|0x20)<<16 | uint32(last|0x20)<<24
	return uint8((h * mul) >> 24)
}

// known gives the canonical form of name when it is a known name in any
// case.
func known[T string | []byte](name T) (string, bool) {
	n := len(name)
	if n == 0 || n > maxKnownKey {
		return "", false
	}
	e := &knownTable[slot(knownMul, n, name[0], name[n/2], name[n-1])]
	if len(e.lower) != n {
		return "", false
	}
	if n < 8 {
		for i := 0; i < n; i++ {
			c := name[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != e.lower[i] {
				return "", false
			}
		}
		return e.canon, true
	}
	w := 0
	for off := 0; off+8 < n; off += 8 {
		if lower8(Word(name, off)) != e.words[w] {
			return "", false
		}
		w++
	}
	if lower8(Word(name, n-8)) != e.words[w] {
		return "", false
	}
	return e.canon, true
}

// lower8 maps the bytes 'A' to 'Z' of x to lower case and leaves the
// others as they are, bytes from 0x80 up included.
func lower8(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	h := x &^ hi                // each byte's low seven bits: no carry between bytes below
	ge := h + lo*(0x80-'A')     // top bit: h >= 'A'
	gt := h + lo*(0x80-'Z'-1)   // top bit: h > 'Z'
	upper := ge &^ gt &^ x & hi // top bit: 'A' <= byte <= 'Z'
	return x | upper>>2         // 0x80 >> 2 is the case bit
}
