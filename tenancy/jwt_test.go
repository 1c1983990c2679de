package tenancy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/triagegw/triage/internal/testenv"
)

// jwtTestNow is the clock of every test: tokens are minted relative to it.
var jwtTestNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

const jwtTestSecret = "0123456789abcdef0123456789abcdef" // 32 bytes

// jwtTestKeyPair is a signing key with its kid and algorithm.
type jwtTestKeyPair struct {
	kid    string
	method jwt.SigningMethod
	priv   crypto.Signer
}

// jwtTestKeys are generated once per test binary: RSA-2048 is slow.
var jwtTestKeys = sync.OnceValue(func() map[string]jwtTestKeyPair {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	rsaKey2, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return map[string]jwtTestKeyPair{
		"rsa":  {"rsa-1", jwt.SigningMethodRS256, rsaKey},
		"rsa2": {"rsa-2", jwt.SigningMethodRS256, rsaKey2},
		"ec":   {"ec-1", jwt.SigningMethodES256, ecKey},
		"ed":   {"ed-1", jwt.SigningMethodEdDSA, edKey},
	}
})

func jwtB64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jwkOf renders the public half of k as a JWK, with kid (omitted when "").
func jwkOf(k jwtTestKeyPair, kid string) map[string]any {
	m := map[string]any{}
	if kid != "" {
		m["kid"] = kid
	}
	switch pub := k.priv.Public().(type) {
	case *rsa.PublicKey:
		m["kty"], m["n"], m["e"] = "RSA", jwtB64(pub.N.Bytes()), jwtB64(big.NewInt(int64(pub.E)).Bytes())
	case *ecdsa.PublicKey:
		point, err := pub.Bytes() // 0x04 || x || y
		if err != nil {
			panic(err)
		}
		m["kty"], m["crv"], m["x"], m["y"] = "EC", "P-256", jwtB64(point[1:33]), jwtB64(point[33:])
	case ed25519.PublicKey:
		m["kty"], m["crv"], m["x"] = "OKP", "Ed25519", jwtB64(pub)
	}
	return m
}

// jwksJSON renders a JWK Set of the named test keys, each under its kid.
func jwksJSON(names ...string) []byte {
	var keys []map[string]any
	for _, n := range names {
		k := jwtTestKeys()[n]
		keys = append(keys, jwkOf(k, k.kid))
	}
	return jwtMustJSON(map[string]any{"keys": keys})
}

func jwtMustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func writeJWKS(t testing.TB, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// jwtClaims are the claims of a good token at jwtTestNow; tests edit them.
func jwtClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"sub":    "alice",
		"iss":    "https://idp.example",
		"aud":    "triage",
		"exp":    jwtTestNow.Add(time.Hour).Unix(),
		"iat":    jwtTestNow.Add(-time.Minute).Unix(),
		"groups": []string{"eng", "ml"},
	}
}

// signJWT signs claims with the named test key, its kid in the header.
func signJWT(t testing.TB, name string, claims jwt.MapClaims) string {
	t.Helper()
	k := jwtTestKeys()[name]
	return signJWTWith(t, k.method, k.priv, map[string]any{"kid": k.kid}, claims)
}

// signJWTWith signs with any method and key, setting the given headers
// (a nil value deletes one).
func signJWTWith(t testing.TB, m jwt.SigningMethod, key any, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	for h, v := range header {
		if v == nil {
			delete(tok.Header, h)
		} else {
			tok.Header[h] = v
		}
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jwtTestConfig accepts all the test keys (from a file) and the secret.
func jwtTestConfig(t testing.TB) JWTConfig {
	return JWTConfig{
		JWKSFile: writeJWKS(t, jwksJSON("rsa", "ec", "ed")),
		Secret:   jwtTestSecret,
		Issuer:   "https://idp.example",
		Audience: []string{"other", "triage"},
	}
}

func newTestJWT(t testing.TB, cfg JWTConfig) *JWT {
	t.Helper()
	j, err := NewJWT(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// checkJWTError checks err is a verification failure whose text has want
// and holds no part of the token.
func checkJWTError(t *testing.T, err error, token, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("verified; want error %q", want)
	}
	if !errors.Is(err, ErrInvalidToken) {
		t.Errorf("error %q does not wrap ErrInvalidToken", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q; want it to contain %q", err, want)
	}
	for _, part := range strings.Split(token, ".") {
		if len(part) >= 8 && strings.Contains(err.Error(), part) {
			t.Errorf("error %q contains a part of the token", err)
		}
	}
}

func TestJWTVerifyAlgorithms(t *testing.T) {
	j := newTestJWT(t, jwtTestConfig(t))
	if n := j.KeysLoaded(); n != 3 {
		t.Fatalf("KeysLoaded = %d, want 3", n)
	}
	tokens := map[string]string{
		"RS256": signJWT(t, "rsa", jwtClaims()),
		"ES256": signJWT(t, "ec", jwtClaims()),
		"EdDSA": signJWT(t, "ed", jwtClaims()),
		"HS256": signJWTWith(t, jwt.SigningMethodHS256, []byte(jwtTestSecret), nil, jwtClaims()),
	}
	for alg, tok := range tokens {
		t.Run(alg, func(t *testing.T) {
			p, err := j.Verify(tok, jwtTestNow)
			if err != nil {
				t.Fatal(err)
			}
			want := Principal{Name: "alice", Groups: []string{"eng", "ml"}, Expires: jwtTestNow.Add(time.Hour)}
			if p.Name != want.Name || !slices.Equal(p.Groups, want.Groups) || !p.Expires.Equal(want.Expires) || p.Key != "" {
				t.Errorf("Verify = %+v, want %+v", p, want)
			}
		})
	}
}

func TestJWTVerifyRejects(t *testing.T) {
	cfg := jwtTestConfig(t)
	cfg.Revoked = []string{"stolen-1"}
	j := newTestJWT(t, cfg)
	keys := jwtTestKeys()
	with := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwtClaims()
		edit(c)
		return c
	}
	rsaKid := map[string]any{"kid": "rsa-1"}
	cases := []struct {
		name, token, want string
	}{
		{"wrong signature", signJWTWith(t, jwt.SigningMethodRS256, keys["rsa2"].priv, rsaKid, jwtClaims()), "signature invalid"},
		{"wrong secret", signJWTWith(t, jwt.SigningMethodHS256, []byte(strings.Repeat("x", 32)), nil, jwtClaims()), "signature invalid"},
		{"tampered payload", jwtTamper(signJWT(t, "ec", jwtClaims())), "signature invalid"},
		{"expired", signJWT(t, "rsa", with(func(c jwt.MapClaims) { c["exp"] = jwtTestNow.Add(-3 * time.Minute).Unix() })), "token expired 3m0s ago"},
		{"not yet valid", signJWT(t, "rsa", with(func(c jwt.MapClaims) { c["nbf"] = jwtTestNow.Add(2 * time.Minute).Unix() })), "not valid for another 2m0s (nbf)"},
		{"issued in the future", signJWT(t, "ed", with(func(c jwt.MapClaims) { c["iat"] = jwtTestNow.Add(time.Hour).Unix() })), "token issued 1h0m0s in the future (iat)"},
		{"missing exp", signJWT(t, "rsa", with(func(c jwt.MapClaims) { delete(c, "exp") })), "no expiry (exp)"},
		{"exp not a number", signJWT(t, "rsa", with(func(c jwt.MapClaims) { c["exp"] = "tomorrow" })), `"exp" is not a valid date`},
		{"exp huge", signJWT(t, "rsa", with(func(c jwt.MapClaims) { c["exp"] = 1e300 })), `"exp" is not a valid date`},
		{"wrong issuer", signJWT(t, "rsa", with(func(c jwt.MapClaims) { c["iss"] = "x" })), `issuer "x" not accepted`},
		{"missing issuer", signJWT(t, "rsa", with(func(c jwt.MapClaims) { delete(c, "iss") })), "no issuer (iss)"},
		{"wrong audience", signJWT(t, "ec", with(func(c jwt.MapClaims) { c["aud"] = []string{"a", "b"} })), `audience "a b" not accepted`},
		{"missing audience", signJWT(t, "ec", with(func(c jwt.MapClaims) { delete(c, "aud") })), "no audience (aud)"},
		{"missing subject", signJWT(t, "ec", with(func(c jwt.MapClaims) { delete(c, "sub") })), `claim "sub" (the principal) is missing`},
		{"empty subject", signJWT(t, "ec", with(func(c jwt.MapClaims) { c["sub"] = "" })), `claim "sub" (the principal) is missing, empty`},
		{"numeric subject", signJWT(t, "ec", with(func(c jwt.MapClaims) { c["sub"] = 42 })), `not a string`},
		{"bad groups", signJWT(t, "ec", with(func(c jwt.MapClaims) { c["groups"] = []any{"a", 1} })), `claim "groups" is not an array of strings`},
		{"revoked", signJWT(t, "rsa", with(func(c jwt.MapClaims) { c["jti"] = "stolen-1" })), `token revoked (jti "stolen-1")`},
		{"alg none", signJWTWith(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, nil, jwtClaims()), `algorithm "none" not allowed`},
		{"alg HS512", signJWTWith(t, jwt.SigningMethodHS512, []byte(jwtTestSecret), nil, jwtClaims()), `algorithm "HS512" not allowed`},
		{"alg RS384", signJWTWith(t, jwt.SigningMethodRS384, keys["rsa"].priv, rsaKid, jwtClaims()), `algorithm "RS384" not allowed`},
		{"alg unknown", jwtWithHeader(`{"alg":"XY99"}`, signJWT(t, "rsa", jwtClaims())), `algorithm "XY99" not allowed`},
		{"alg missing", jwtWithHeader(`{"typ":"JWT"}`, signJWT(t, "rsa", jwtClaims())), "no algorithm (alg)"},
		{"alg does not match key", signJWTWith(t, jwt.SigningMethodES256, keys["ec"].priv, rsaKid, jwtClaims()), `algorithm "ES256" does not match key "rsa-1" (RS256)`},
		{"RSA key as HMAC secret", jwtRSAAsHMAC(t), "signature invalid"},
		{"unknown kid", signJWTWith(t, jwt.SigningMethodRS256, keys["rsa"].priv, map[string]any{"kid": "abc"}, jwtClaims()), `unknown key id "abc"`},
		{"no kid, several keys", signJWTWith(t, jwt.SigningMethodRS256, keys["rsa"].priv, map[string]any{"kid": nil}, jwtClaims()), "no key id (kid) and there are 3 keys"},
		{"kid not a string", signJWTWith(t, jwt.SigningMethodRS256, keys["rsa"].priv, map[string]any{"kid": 7}, jwtClaims()), "kid) is not a string"},
		{"crit header", signJWTWith(t, jwt.SigningMethodRS256, keys["rsa"].priv, map[string]any{"kid": "rsa-1", "crit": []string{"exp"}}, jwtClaims()), "crit"},
		{"empty", "", "malformed token"},
		{"two parts", "a.b", "malformed token: want 3 dot-separated parts"},
		{"four parts", "a.b.c.d", "malformed token: want 3 dot-separated parts"},
		{"garbage base64", "!!!.@@@.###", "malformed token"},
		{"garbage json", jwtB64([]byte("{nope")) + "." + jwtB64([]byte("{}")) + ".c2ln", "malformed token"},
		{"padded base64", jwtPadded(signJWT(t, "rsa", jwtClaims())), "malformed token"},
		{"huge", strings.Repeat("a", 20000) + ".b.c", "longer than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := j.Verify(c.token, jwtTestNow)
			checkJWTError(t, err, c.token, c.want)
		})
	}
}

// jwtTamper changes the payload of a signed token (the subject becomes
// "mallory"), keeping its signature.
func jwtTamper(tok string) string {
	parts := strings.Split(tok, ".")
	c := jwtClaims()
	c["sub"] = "mallory"
	parts[1] = jwtB64(jwtMustJSON(c))
	return strings.Join(parts, ".")
}

// jwtWithHeader replaces the header of a signed token.
func jwtWithHeader(header, tok string) string {
	_, rest, _ := strings.Cut(tok, ".")
	return jwtB64([]byte(header)) + "." + rest
}

// jwtPadded adds base64 padding to the header segment, which strict
// decoding refuses.
func jwtPadded(tok string) string {
	h, rest, _ := strings.Cut(tok, ".")
	for len(h)%4 != 0 {
		h += "="
	}
	return h + "." + rest
}

// jwtRSAAsHMAC is the classic algorithm-confusion attack: an HS256 token
// whose HMAC key is the RSA public key's encoding, which a naive verifier
// would use as the secret.
func jwtRSAAsHMAC(t *testing.T) string {
	pub := jwtTestKeys()["rsa"].priv.Public().(*rsa.PublicKey)
	return signJWTWith(t, jwt.SigningMethodHS256, pub.N.Bytes(), map[string]any{"kid": "rsa-1"}, jwtClaims())
}

func TestJWTNoSecretRefusesHS256(t *testing.T) {
	cfg := jwtTestConfig(t)
	cfg.Secret = ""
	j := newTestJWT(t, cfg)
	tok := signJWTWith(t, jwt.SigningMethodHS256, []byte(jwtTestSecret), nil, jwtClaims())
	_, err := j.Verify(tok, jwtTestNow)
	checkJWTError(t, err, tok, `algorithm "HS256" not allowed`)
}

func TestJWTSecretOnlyRefusesRS256(t *testing.T) {
	j := newTestJWT(t, JWTConfig{Secret: jwtTestSecret})
	if n := j.KeysLoaded(); n != 0 {
		t.Errorf("KeysLoaded = %d, want 0", n)
	}
	tok := signJWT(t, "rsa", jwtClaims())
	_, err := j.Verify(tok, jwtTestNow)
	checkJWTError(t, err, tok, `algorithm "RS256" not allowed`)
	// No issuer or audience configured: neither is checked.
	c := jwtClaims()
	delete(c, "iss")
	delete(c, "aud")
	if _, err := j.Verify(signJWTWith(t, jwt.SigningMethodHS256, []byte(jwtTestSecret), nil, c), jwtTestNow); err != nil {
		t.Error(err)
	}
}

func TestJWTSkew(t *testing.T) {
	j := newTestJWT(t, jwtTestConfig(t)) // default skew 30s
	for _, c := range []struct {
		name string
		edit func(jwt.MapClaims)
		ok   bool
	}{
		{"expired 10s ago", func(c jwt.MapClaims) { c["exp"] = jwtTestNow.Add(-10 * time.Second).Unix() }, true},
		{"expired 60s ago", func(c jwt.MapClaims) { c["exp"] = jwtTestNow.Add(-60 * time.Second).Unix() }, false},
		{"nbf in 10s", func(c jwt.MapClaims) { c["nbf"] = jwtTestNow.Add(10 * time.Second).Unix() }, true},
		{"nbf in 60s", func(c jwt.MapClaims) { c["nbf"] = jwtTestNow.Add(60 * time.Second).Unix() }, false},
		{"iat in 10s", func(c jwt.MapClaims) { c["iat"] = jwtTestNow.Add(10 * time.Second).Unix() }, true},
		{"iat in 60s", func(c jwt.MapClaims) { c["iat"] = jwtTestNow.Add(60 * time.Second).Unix() }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			claims := jwtClaims()
			c.edit(claims)
			_, err := j.Verify(signJWT(t, "ed", claims), jwtTestNow)
			if (err == nil) != c.ok {
				t.Errorf("err = %v, want ok=%v", err, c.ok)
			}
		})
	}

	// A skew of its own: 2m lets the token expired 60s ago through.
	cfg := jwtTestConfig(t)
	cfg.Skew = 2 * time.Minute
	j2 := newTestJWT(t, cfg)
	claims := jwtClaims()
	claims["exp"] = jwtTestNow.Add(-60 * time.Second).Unix()
	if _, err := j2.Verify(signJWT(t, "ed", claims), jwtTestNow); err != nil {
		t.Errorf("2m skew: %v", err)
	}
}

func TestJWTGroups(t *testing.T) {
	cases := []struct {
		name  string
		value any
		want  []string
	}{
		{"array", []string{"eng", "ml"}, []string{"eng", "ml"}},
		{"array with empty names", []string{"", "eng"}, []string{"eng"}},
		{"single string", "eng", []string{"eng"}},
		{"space-separated", " eng  ml ops", []string{"eng", "ml", "ops"}},
		{"absent", nil, nil},
	}
	j := newTestJWT(t, jwtTestConfig(t))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			claims := jwtClaims()
			delete(claims, "groups")
			if c.value != nil {
				claims["groups"] = c.value
			}
			p, err := j.Verify(signJWT(t, "ec", claims), jwtTestNow)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Groups, c.want) {
				t.Errorf("Groups = %q, want %q", p.Groups, c.want)
			}
		})
	}

	t.Run("custom claims", func(t *testing.T) {
		cfg := jwtTestConfig(t)
		cfg.PrincipalClaim, cfg.GroupsClaim = "email", "roles"
		j := newTestJWT(t, cfg)
		claims := jwtClaims()
		claims["email"], claims["roles"] = "bob@example.com", []string{"admin"}
		p, err := j.Verify(signJWT(t, "rsa", claims), jwtTestNow)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name != "bob@example.com" || !slices.Equal(p.Groups, []string{"admin"}) {
			t.Errorf("Verify = %+v", p)
		}
	})
}

func TestJWTSingleKeyWithoutKid(t *testing.T) {
	jwks := jwtMustJSON(map[string]any{"keys": []any{jwkOf(jwtTestKeys()["ed"], "")}})
	j := newTestJWT(t, JWTConfig{JWKSFile: writeJWKS(t, jwks)})
	k := jwtTestKeys()["ed"]
	noKid := signJWTWith(t, k.method, k.priv, nil, jwtClaims())
	if _, err := j.Verify(noKid, jwtTestNow); err != nil {
		t.Errorf("token without kid: %v", err)
	}
	withKid := signJWTWith(t, k.method, k.priv, map[string]any{"kid": "ed-1"}, jwtClaims())
	_, err := j.Verify(withKid, jwtTestNow)
	checkJWTError(t, err, withKid, `unknown key id "ed-1"`)
}

// A cache hit parses nothing: no allocation at all. (Allocation checks
// are TestXxxAllocs: make test runs them without the race detector.)
func TestJWTCacheAllocs(t *testing.T) {
	j := newTestJWT(t, jwtTestConfig(t))
	tok := signJWT(t, "rsa", jwtClaims())
	if _, err := j.Verify(tok, jwtTestNow); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = j.Verify(tok, jwtTestNow) }); allocs != 0 {
		t.Errorf("cached Verify allocates %v times", allocs)
	}
}

func TestJWTCache(t *testing.T) {
	j := newTestJWT(t, jwtTestConfig(t))
	tok := signJWT(t, "rsa", jwtClaims())
	first, err := j.Verify(tok, jwtTestNow)
	if err != nil {
		t.Fatal(err)
	}
	if n := j.cache.len(); n != 1 {
		t.Fatalf("cache has %d entries, want 1", n)
	}
	again, err := j.Verify(tok, jwtTestNow.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if again.Name != first.Name || !slices.Equal(again.Groups, first.Groups) || !again.Expires.Equal(first.Expires) {
		t.Errorf("cached Verify = %+v, want %+v", again, first)
	}
	// Past exp plus the skew, the cached token is refused.
	_, err = j.Verify(tok, jwtTestNow.Add(time.Hour+31*time.Second))
	checkJWTError(t, err, tok, "token expired 31s ago")
	// Within the skew it still passes.
	if _, err := j.Verify(tok, jwtTestNow.Add(time.Hour+29*time.Second)); err != nil {
		t.Errorf("within skew: %v", err)
	}
	// Before its nbf, a cached token goes the full way and fails.
	nbf := jwtClaims()
	nbf["nbf"] = jwtTestNow.Unix()
	nbfTok := signJWT(t, "rsa", nbf)
	if _, err := j.Verify(nbfTok, jwtTestNow); err != nil {
		t.Fatal(err)
	}
	_, err = j.Verify(nbfTok, jwtTestNow.Add(-time.Minute))
	checkJWTError(t, err, nbfTok, "not valid for another 1m0s (nbf)")
	// Failures are not cached.
	bad := jwtTamper(tok)
	for range 2 {
		_, err := j.Verify(bad, jwtTestNow)
		checkJWTError(t, err, bad, "signature invalid")
	}
}

func TestJWTCacheRevokedByReload(t *testing.T) {
	cfg := jwtTestConfig(t)
	claims := jwtClaims()
	claims["jti"] = "t-1"
	tok := signJWT(t, "ec", claims)
	if _, err := newTestJWT(t, cfg).Verify(tok, jwtTestNow); err != nil {
		t.Fatal(err)
	}
	cfg.Revoked = []string{"t-1"}
	_, err := newTestJWT(t, cfg).Verify(tok, jwtTestNow)
	checkJWTError(t, err, tok, "revoked")
}

func TestJWTCacheBounded(t *testing.T) {
	c := newJWTCache(jwtCacheShards * 2) // 2 entries per shard
	if c.perShard != 2 {
		t.Fatalf("perShard = %d", c.perShard)
	}
	// Fill far beyond the bound with entries already expired at "later",
	// then with live ones: the size never passes the bound, and the live
	// ones push out the expired ones first.
	for i := range 1000 {
		c.put(fmt.Sprint("old", i), &jwtCacheEntry{until: jwtTestNow}, jwtTestNow)
		if n := c.len(); n > 2*jwtCacheShards {
			t.Fatalf("%d entries after %d puts", n, i+1)
		}
	}
	later := jwtTestNow.Add(time.Hour)
	live := 0
	for i := range 1000 {
		tok := fmt.Sprint("new", i)
		c.put(tok, &jwtCacheEntry{until: later.Add(time.Hour)}, later)
		if n := c.len(); n > 2*jwtCacheShards {
			t.Fatalf("%d entries after %d puts", n, i+1)
		}
		if c.get(tok) == nil {
			t.Fatalf("entry %q not found right after put", tok)
		}
		live = i + 1
	}
	for i := range 1000 {
		if e := c.get(fmt.Sprint("old", i)); e != nil && later.After(e.until) {
			t.Fatalf("expired entry old%d kept beside %d live ones", i, live)
		}
	}
	// get compares the token itself: another token with the entry's hash
	// slot is a miss.
	c.put("a", &jwtCacheEntry{}, jwtTestNow)
	h := maphash.String(c.seed, "a")
	s := c.shard(h)
	s.m[h] = &jwtCacheEntry{token: "b"}
	if c.get("a") != nil {
		t.Error("get returned an entry for another token")
	}
}

func TestJWTConfigErrors(t *testing.T) {
	good := writeJWKS(t, jwksJSON("rsa"))
	rsaJWK := jwkOf(jwtTestKeys()["rsa"], "k1")
	badKey := func(edit func(m map[string]any)) string {
		m := map[string]any{}
		for k, v := range rsaJWK {
			m[k] = v
		}
		edit(m)
		return writeJWKS(t, jwtMustJSON(map[string]any{"keys": []any{m}}))
	}
	ecJWK := jwkOf(jwtTestKeys()["ec"], "e1")
	ecJWK["y"] = ecJWK["x"] // almost surely off the curve
	short, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	notJSON := writeJWKS(t, []byte("keys: [oops]"))
	cases := []struct {
		name string
		cfg  JWTConfig
		want []string
	}{
		{"no key source", JWTConfig{Issuer: "x"}, []string{"no key source"}},
		{"file and URL", JWTConfig{JWKSFile: good, JWKSURL: "https://idp.example/jwks"}, []string{"not both"}},
		{"short secret", JWTConfig{Secret: "hunter2"}, []string{"secret is 7 bytes", "at least 32"}},
		{"skew too big", JWTConfig{Secret: jwtTestSecret, Skew: 6 * time.Minute}, []string{"skew 6m0s is more than the maximum 5m0s"}},
		{"skew negative", JWTConfig{Secret: jwtTestSecret, Skew: -time.Second}, []string{"negative"}},
		{"refresh too short", JWTConfig{Secret: jwtTestSecret, Refresh: time.Millisecond}, []string{"refresh 1ms"}},
		{"missing file", JWTConfig{JWKSFile: "/nonexistent/jwks.json"}, []string{"/nonexistent/jwks.json", "no such file"}},
		{"file not JSON", JWTConfig{JWKSFile: notJSON}, []string{notJSON, "not a JWK Set", "invalid character"}},
		{"no keys array", JWTConfig{JWKSFile: writeJWKS(t, []byte(`{"kid":"x"}`))}, []string{`no "keys" array`}},
		{"empty set", JWTConfig{JWKSFile: writeJWKS(t, []byte(`{"keys":[]}`))}, []string{"no usable signing key"}},
		{"only unusable keys", JWTConfig{JWKSFile: writeJWKS(t, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"s"},{"kty":"RSA","use":"enc","kid":"e","n":"AQAB","e":"AQAB"}]}`))}, []string{"no usable signing key"}},
		{"bad n", JWTConfig{JWKSFile: badKey(func(m map[string]any) { m["n"] = "not base64!" })}, []string{`key "k1"`, `"n" is not base64url`}},
		{"no e", JWTConfig{JWKSFile: badKey(func(m map[string]any) { delete(m, "e") })}, []string{`key "k1"`, `no "e"`}},
		{"even e", JWTConfig{JWKSFile: badKey(func(m map[string]any) { m["e"] = jwtB64([]byte{2}) })}, []string{`key "k1"`, "odd"}},
		{"short RSA", JWTConfig{JWKSFile: badKey(func(m map[string]any) { m["n"] = jwtB64(short.N.Bytes()) })}, []string{`key "k1"`, "1024 bits"}},
		{"n not a string", JWTConfig{JWKSFile: badKey(func(m map[string]any) { m["n"] = 5 })}, []string{`key "k1"`}},
		{"no kty", JWTConfig{JWKSFile: badKey(func(m map[string]any) { delete(m, "kty") })}, []string{`key "k1"`, `no "kty"`}},
		{"EC off curve", JWTConfig{JWKSFile: writeJWKS(t, jwtMustJSON(map[string]any{"keys": []any{ecJWK}}))}, []string{`key "e1"`, "not on curve"}},
		{"EC short x", JWTConfig{JWKSFile: writeJWKS(t, []byte(`{"keys":[{"kty":"EC","crv":"P-256","kid":"e2","x":"AQAB","y":"AQAB"}]}`))}, []string{`key "e2"`, `"x" is 3 bytes, want 32`}},
		{"OKP short x", JWTConfig{JWKSFile: writeJWKS(t, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AQAB"}]}`))}, []string{`key #0 (no kid)`, `"x" is 3 bytes`}},
		{"duplicate kid", JWTConfig{JWKSFile: writeJWKS(t, jwtMustJSON(map[string]any{"keys": []any{rsaJWK, rsaJWK}}))}, []string{`kid "k1" appears twice`}},
		{"missing kid among several", JWTConfig{JWKSFile: writeJWKS(t, jwtMustJSON(map[string]any{"keys": []any{rsaJWK, jwkOf(jwtTestKeys()["ed"], "")}}))}, []string{"#1 has no kid"}},
		{"URL scheme", JWTConfig{JWKSURL: "ftp://idp.example/jwks"}, []string{`scheme "ftp"`}},
		{"URL no host", JWTConfig{JWKSURL: "https:///jwks"}, []string{"no host"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j, err := NewJWT(c.cfg, nil)
			if err == nil {
				t.Fatalf("NewJWT succeeded with %d keys", j.KeysLoaded())
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to contain %q", err, w)
				}
			}
			for _, secret := range []string{rsaJWK["n"].(string)[:16], "c2VjcmV0", "hunter2"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains key material", err)
				}
			}
		})
	}
}

// TestJWTSkipsUnusableKeys: an identity provider's set mixes signing keys
// with keys this verifier does not use; those are skipped, not fatal.
func TestJWTSkipsUnusableKeys(t *testing.T) {
	keys := []any{
		map[string]any{"kty": "oct", "kid": "sym", "k": "c2VjcmV0"},
		map[string]any{"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
		map[string]any{"kty": "EC", "kid": "p384", "crv": "P-384", "x": "AQAB", "y": "AQAB"},
		map[string]any{"kty": "OKP", "kid": "x", "crv": "X25519", "x": "AQAB"},
		map[string]any{"kty": "RSA", "kid": "ps", "alg": "PS256", "n": "AQAB", "e": "AQAB"},
		jwkOf(jwtTestKeys()["rsa"], "rsa-1"),
	}
	ed := jwkOf(jwtTestKeys()["ed"], "ed-1")
	ed["alg"], ed["use"] = "Ed25519", "sig" // RFC 9864's name
	keys = append(keys, ed)
	j := newTestJWT(t, JWTConfig{JWKSFile: writeJWKS(t, jwtMustJSON(map[string]any{"keys": keys}))})
	if n := j.KeysLoaded(); n != 2 {
		t.Fatalf("KeysLoaded = %d, want 2", n)
	}
	for _, k := range []string{"rsa", "ed"} {
		if _, err := j.Verify(signJWT(t, k, jwtClaims()), jwtTestNow); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

// jwksServer serves a JWK Set that a test can change, or fail.
type jwksServer struct {
	*httptest.Server
	body   atomic.Pointer[[]byte]
	status atomic.Int32
	hits   atomic.Int32
}

func newJWKSServer(t *testing.T, body []byte) *jwksServer {
	s := &jwksServer{}
	s.set(http.StatusOK, body)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(s.status.Load()))
		_, _ = w.Write(*s.body.Load())
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(status int, body []byte) {
	s.status.Store(int32(status))
	s.body.Store(&body)
}

func TestJWTURL(t *testing.T) {
	srv := newJWKSServer(t, jwksJSON("rsa", "ec"))
	j := newTestJWT(t, JWTConfig{JWKSURL: srv.URL + "/jwks"})
	if n := j.KeysLoaded(); n != 2 {
		t.Fatalf("KeysLoaded = %d, want 2", n)
	}
	rsaTok := signJWT(t, "rsa", jwtClaims())
	verifies := func(tok string) {
		t.Helper()
		if _, err := j.Verify(tok, jwtTestNow); err != nil {
			t.Fatal(err)
		}
	}
	verifies(rsaTok)

	// Failures at refresh keep the last good keys.
	for _, c := range []struct {
		name   string
		status int
		body   []byte
		want   string
	}{
		{"500", http.StatusInternalServerError, []byte("oops"), "status 500"},
		{"garbage", http.StatusOK, []byte("<html>"), "not a JWK Set"},
		{"bad key", http.StatusOK, []byte(`{"keys":[{"kty":"RSA","kid":"r","n":"!","e":"AQAB"}]}`), `key "r"`},
		{"empty set", http.StatusOK, []byte(`{"keys":[]}`), "no usable signing key"},
		{"too big", http.StatusOK, make([]byte, jwksMaxBody+1), "larger than"},
	} {
		srv.set(c.status, c.body)
		err := j.refreshJWKS(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: refresh error %v, want %q", c.name, err, c.want)
		}
		if n := j.KeysLoaded(); n != 2 {
			t.Errorf("%s: KeysLoaded = %d after a failed refresh, want 2", c.name, n)
		}
		verifies(rsaTok)
		verifies(signJWT(t, "ec", jwtClaims())) // fresh, not from the cache
	}

	// Rotation: rsa-1 is replaced by rsa-2. Tokens of the new key verify;
	// those of the old one stop, cached or not.
	srv.set(http.StatusOK, jwksJSON("rsa2", "ec"))
	if err := j.refreshJWKS(context.Background()); err != nil {
		t.Fatal(err)
	}
	verifies(signJWT(t, "rsa2", jwtClaims()))
	_, err := j.Verify(rsaTok, jwtTestNow)
	checkJWTError(t, err, rsaTok, `unknown key id "rsa-1"`)

	// An unchanged body keeps the key set, and so the cache.
	before := j.keys.Load()
	if err := j.refreshJWKS(context.Background()); err != nil {
		t.Fatal(err)
	}
	if j.keys.Load() != before {
		t.Error("an unchanged JWKS replaced the key set")
	}
}

func TestJWTURLAtStart(t *testing.T) {
	srv := newJWKSServer(t, []byte("nope"))
	srv.set(http.StatusServiceUnavailable, []byte("down"))
	_, err := NewJWT(JWTConfig{JWKSURL: srv.URL}, nil)
	if err == nil || !strings.Contains(err.Error(), "status 503") {
		t.Errorf("NewJWT with the URL down: %v", err)
	}
	srv.set(http.StatusOK, []byte(`{"keys":"x"}`))
	if _, err := NewJWT(JWTConfig{JWKSURL: srv.URL}, nil); err == nil || !strings.Contains(err.Error(), "not a JWK Set") {
		t.Errorf("NewJWT with garbage: %v", err)
	}
	srv.Close()
	if _, err := NewJWT(JWTConfig{JWKSURL: srv.URL}, nil); err == nil {
		t.Error("NewJWT with the server gone succeeded")
	}
}

func TestJWTURLRedirectDowngrade(t *testing.T) {
	plain := newJWKSServer(t, jwksJSON("rsa"))
	tlsSrv := httptest.NewTLSServer(http.RedirectHandler(plain.URL, http.StatusFound))
	defer tlsSrv.Close()
	client := jwksClient()
	client.Transport = tlsSrv.Client().Transport // trust the test certificate
	_, err := fetchJWKS(context.Background(), client, tlsSrv.URL)
	if err == nil || !strings.Contains(err.Error(), "redirect from https to http refused") {
		t.Errorf("fetch through a downgrading redirect: %v", err)
	}
}

func TestJWTRun(t *testing.T) {
	srv := newJWKSServer(t, jwksJSON("rsa"))
	j := newTestJWT(t, JWTConfig{JWKSURL: srv.URL})
	j.refresh = 10 * time.Millisecond // below the configurable minimum, to keep the test short
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		j.Run(ctx)
		close(done)
	}()
	srv.set(http.StatusOK, jwksJSON("rsa2", "ed"))
	tok := signJWT(t, "ed", jwtClaims())
	testenv.WaitWithin(t, 5*time.Second, "Run to pick up the rotated key", func() (bool, string) {
		if _, err := j.Verify(tok, jwtTestNow); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}

	// Without a URL, Run returns at once.
	newTestJWT(t, JWTConfig{Secret: jwtTestSecret}).Run(context.Background())
}

// TestJWTConcurrent runs Verify from many goroutines, hits and misses,
// while the key set is refreshed: for the race detector.
func TestJWTConcurrent(t *testing.T) {
	srv := newJWKSServer(t, jwksJSON("rsa", "ec", "ed"))
	j := newTestJWT(t, JWTConfig{JWKSURL: srv.URL, Secret: jwtTestSecret})
	var tokens []string
	for _, k := range []string{"rsa", "ec", "ed"} {
		for i := range 3 {
			c := jwtClaims()
			c["jti"] = fmt.Sprint(k, i)
			tokens = append(tokens, signJWT(t, k, c))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		bodies := [][]byte{jwksJSON("rsa", "ec", "ed"), jwksJSON("ed", "ec", "rsa")}
		for i := 0; ctx.Err() == nil; i++ {
			srv.set(http.StatusOK, bodies[i%2]) // same keys, new body: a new set
			_ = j.refreshJWKS(ctx)
		}
	})
	var workers sync.WaitGroup
	for g := range 8 {
		workers.Go(func() {
			for i := range 200 {
				tok := tokens[(g+i)%len(tokens)]
				if _, err := j.Verify(tok, jwtTestNow); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	workers.Wait()
	cancel()
	wg.Wait()
}

// FuzzJWTVerify feeds Verify arbitrary strings: it must not panic, must
// fail with ErrInvalidToken without echoing the input, and may succeed only
// for the tokens this test signed.
func FuzzJWTVerify(f *testing.F) {
	cfg := jwtTestConfig(f)
	j := newTestJWT(f, cfg)
	signed := map[string]bool{}
	for _, k := range []string{"rsa", "ec", "ed"} {
		tok := signJWT(f, k, jwtClaims())
		signed[tok] = true
		f.Add(tok)
	}
	hs := signJWTWith(f, jwt.SigningMethodHS256, []byte(jwtTestSecret), nil, jwtClaims())
	signed[hs] = true
	f.Add(hs)
	for _, s := range []string{"", ".", "..", "a.b", "a.b.c", "!!!.@@@.###",
		jwtB64([]byte(`{"alg":"none"}`)) + "." + jwtB64([]byte(`{"sub":"x","exp":9e9}`)) + ".",
		jwtB64([]byte(`{"alg":"HS256","kid":5,"crit":1}`)) + "." + jwtB64([]byte(`{"exp":"x","groups":{}}`)) + ".AA",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := j.Verify(s, jwtTestNow)
		if err == nil {
			if !signed[s] {
				t.Fatalf("verified a token the test did not sign: %+v", p)
			}
			return
		}
		if !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("error %q does not wrap ErrInvalidToken", err)
		}
		if strings.Count(s, ".") == 2 && len(s) >= 24 && strings.Contains(err.Error(), s) {
			t.Fatalf("error %q contains the token", err)
		}
	})
}
