package tenancy

import (
	"fmt"
	"testing"
)

// benchJWT is a verifier of all the test keys; fresh ones have no cache,
// so that every Verify is a full parse and signature check.
func benchJWT(b *testing.B, fresh bool) *JWT {
	j := newTestJWT(b, jwtTestConfig(b))
	if fresh {
		j.cache = nil
	}
	return j
}

// benchVerify verifies tok b.N times, failing on the first error.
func benchVerify(b *testing.B, j *JWT, tok string) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := j.Verify(tok, jwtTestNow); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJWTCached is the usual request: a client's RS256 token seen
// before, answered from the cache.
func BenchmarkJWTCached(b *testing.B) {
	j := benchJWT(b, false)
	tok := signJWT(b, "rsa", jwtClaims())
	if _, err := j.Verify(tok, jwtTestNow); err != nil {
		b.Fatal(err)
	}
	benchVerify(b, j, tok)
}

// BenchmarkJWTCachedParallel is the cached path under concurrency, with
// 64 tokens spread over the shards.
func BenchmarkJWTCachedParallel(b *testing.B) {
	j := benchJWT(b, false)
	tokens := make([]string, 64)
	for i := range tokens {
		c := jwtClaims()
		c["jti"] = fmt.Sprint("t-", i)
		tokens[i] = signJWT(b, "rsa", c)
		if _, err := j.Verify(tokens[i], jwtTestNow); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := j.Verify(tokens[i%len(tokens)], jwtTestNow); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkJWTFreshRS256 is a full verification: parse, RSA-2048
// signature, claims.
func BenchmarkJWTFreshRS256(b *testing.B) {
	benchVerify(b, benchJWT(b, true), signJWT(b, "rsa", jwtClaims()))
}

// BenchmarkJWTFreshES256 is a full verification with a P-256 signature.
func BenchmarkJWTFreshES256(b *testing.B) {
	benchVerify(b, benchJWT(b, true), signJWT(b, "ec", jwtClaims()))
}

// BenchmarkJWTFreshEdDSA is a full verification with an Ed25519 signature.
func BenchmarkJWTFreshEdDSA(b *testing.B) {
	benchVerify(b, benchJWT(b, true), signJWT(b, "ed", jwtClaims()))
}
