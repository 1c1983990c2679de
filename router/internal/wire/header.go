package wire

import "net/textproto"

// CanonicalKey is textproto.CanonicalMIMEHeaderKey(string(name)), without
// allocating for the header names requests and responses commonly carry,
// in any mix of upper and lower case.
func CanonicalKey[T string | []byte](name T) string {
	if k, ok := knownKeys[string(name)]; ok { // canonical or lower case
		return k
	}
	if len(name) <= maxKnownKey {
		var lower [maxKnownKey]byte
		for i := 0; i < len(name); i++ {
			c := name[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower[i] = c
		}
		if k, ok := knownKeys[string(lower[:len(name)])]; ok {
			return k
		}
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

// maxKnownKey is the length of the longest known name (X-Stainless-Runtime-Version).
const maxKnownKey = 27

// knownKeys maps a common header name, in its canonical and its lower-case
// form, to the canonical form: the request headers of OpenAI clients and
// browsers, and the response headers of OpenAI-compatible servers and
// proxies.
var knownKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		// Framing and connection management.
		"Host", "Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding",
		"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Expect", "Upgrade",
		// Requests.
		"Authorization", "Accept", "Accept-Encoding", "Accept-Language", "User-Agent",
		"Cookie", "Origin", "Referer", "Cache-Control", "Pragma",
		"X-Request-Id", "X-Session-Id", "X-Forwarded-For", "X-Forwarded-Proto", "X-Real-Ip",
		"Openai-Organization", "Openai-Project",
		"X-Stainless-Lang", "X-Stainless-Package-Version", "X-Stainless-Os", "X-Stainless-Arch",
		"X-Stainless-Runtime", "X-Stainless-Runtime-Version", "X-Stainless-Retry-Count", "X-Stainless-Timeout",
		"X-Stainless-Async", "X-Stainless-Read-Timeout",
		// Responses.
		"Date", "Server", "Vary", "Proxy-Authenticate", "X-Accel-Buffering",
	} {
		if len(k) > maxKnownKey || textproto.CanonicalMIMEHeaderKey(k) != k {
			panic("wire: known header " + k + " is not canonical or longer than maxKnownKey")
		}
		lower := []byte(k)
		for i, c := range lower {
			if 'A' <= c && c <= 'Z' {
				lower[i] = c + 'a' - 'A'
			}
		}
		m[k], m[string(lower)] = k, k
	}
	return m
}()
