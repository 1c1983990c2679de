package tenancy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The signature algorithms a JWT may use. HS256 needs JWTConfig.Secret; the
// others need a key of the matching type in the JWKS.
const (
	jwtAlgHS256 = "HS256"
	jwtAlgRS256 = "RS256"
	jwtAlgES256 = "ES256"
	jwtAlgEdDSA = "EdDSA"
)

const (
	// jwksFetchTimeout bounds one JWKS download, the first one in NewJWT
	// and every refresh.
	jwksFetchTimeout = 5 * time.Second
	// jwksMaxBody caps a JWKS response: real sets are a few KiB, and the
	// gateway should not buffer whatever a misconfigured URL returns.
	jwksMaxBody = 1 << 20
	// jwtMinRSABits refuses RSA keys that are too short to trust (NIST has
	// disallowed 1024-bit RSA signatures since 2013).
	jwtMinRSABits = 2048
)

// jwtKey is one public key of a JWKS, ready for jwt/v5.
type jwtKey struct {
	kid string
	// alg is the one algorithm this key verifies: a key never serves
	// another algorithm than its type implies (or its "alg" names).
	alg string
	// pub is a *rsa.PublicKey, *ecdsa.PublicKey (P-256) or
	// ed25519.PublicKey.
	pub any
}

// jwkSet is an immutable set of verification keys; a refresh builds a new
// one and swaps the pointer.
type jwkSet struct {
	byKID map[string]*jwtKey
	// only is the set's key when it has exactly one: a token without a
	// kid may then use it.
	only *jwtKey
	// kids lists the key ids, sorted, for logs.
	kids []string
}

// len is the number of usable keys in the set; a nil set has none.
func (s *jwkSet) len() int {
	if s == nil {
		return 0
	}
	if s.only != nil {
		return 1
	}
	return len(s.byKID)
}

// jwkJSON is a JSON Web Key (RFC 7517) as far as a verifier reads it:
// RSA (n, e), EC (crv, x, y) and OKP (crv, x). Private members ("d" and
// friends) are never read.
type jwkJSON struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// jwkSkipped says why a well-formed key is not used (an encryption key, an
// algorithm this verifier does not accept); it is not an error, as identity
// providers publish such keys beside their signing keys.
type jwkSkipped struct {
	name, why string
}

// parseJWKS reads a JWK Set. A key that is malformed (bad base64, a point
// off the curve, a short RSA modulus) is an error naming the key; a key of a
// kind this verifier does not use is skipped and reported in skipped. A set
// with no usable key is an error. Errors never quote key material.
func parseJWKS(data []byte) (set *jwkSet, skipped []jwkSkipped, err error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("not a JWK Set: %w", err)
	}
	if doc.Keys == nil {
		return nil, nil, errors.New(`not a JWK Set: no "keys" array`)
	}
	var keys []*jwtKey
	for i, raw := range doc.Keys {
		var k jwkJSON
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, nil, fmt.Errorf("key %s: %w", jwkNameRaw(i, raw), err)
		}
		key, why, err := k.key()
		switch {
		case err != nil:
			return nil, nil, fmt.Errorf("key %s: %w", jwkName(i, k.Kid), err)
		case why != "":
			skipped = append(skipped, jwkSkipped{jwkName(i, k.Kid), why})
		default:
			keys = append(keys, key)
		}
	}
	set, err = newJWKSet(keys)
	return set, skipped, err
}

// newJWKSet indexes keys by kid. Every key needs a distinct kid, except
// that a set of one key may go without.
func newJWKSet(keys []*jwtKey) (*jwkSet, error) {
	if len(keys) == 0 {
		return nil, errors.New("no usable signing key (RS256, ES256 or EdDSA)")
	}
	s := &jwkSet{byKID: make(map[string]*jwtKey, len(keys))}
	if len(keys) == 1 {
		s.only = keys[0]
	}
	for i, k := range keys {
		if k.kid == "" {
			if len(keys) > 1 {
				return nil, fmt.Errorf("usable key #%d has no kid; a set of more than one key needs a kid on every key", i)
			}
			continue
		}
		if _, dup := s.byKID[k.kid]; dup {
			return nil, fmt.Errorf("kid %.64q appears twice", k.kid)
		}
		s.byKID[k.kid] = k
		s.kids = append(s.kids, k.kid)
	}
	slices.Sort(s.kids)
	return s, nil
}

// jwkName names a key in errors and logs: by kid when it has one, by
// position otherwise.
func jwkName(i int, kid string) string {
	if kid == "" {
		return fmt.Sprintf("#%d (no kid)", i)
	}
	return fmt.Sprintf("%.64q", kid)
}

// jwkNameRaw names a key whose JSON did not decode into jwkJSON, reading
// only its kid.
func jwkNameRaw(i int, raw json.RawMessage) string {
	var k struct {
		Kid string `json:"kid"`
	}
	_ = json.Unmarshal(raw, &k) // best effort: the name falls back to the position
	return jwkName(i, k.Kid)
}

// key converts the JWK. It returns the key, or the reason it is skipped, or
// an error when the key claims to be usable but is malformed.
func (k *jwkJSON) key() (key *jwtKey, skip string, err error) {
	if k.Use != "" && k.Use != "sig" {
		return nil, fmt.Sprintf("use %.16q is not sig", k.Use), nil
	}
	switch k.Kty {
	case "RSA":
		return k.rsa()
	case "EC":
		return k.ec()
	case "OKP":
		return k.okp()
	case "oct":
		return nil, "symmetric keys are not read from a JWKS (HS256 uses the configured secret)", nil
	case "":
		return nil, "", errors.New(`no "kty"`)
	default:
		return nil, fmt.Sprintf("kty %.16q is not supported", k.Kty), nil
	}
}

// algFor checks the key's optional "alg" against the one algorithm its type
// gives; any of names is accepted as that algorithm.
func (k *jwkJSON) algFor(alg string, names ...string) (skip string) {
	if k.Alg == "" || slices.Contains(names, k.Alg) {
		return ""
	}
	return fmt.Sprintf("alg %.16q is not supported for kty %s (want %s)", k.Alg, k.Kty, alg)
}

func (k *jwkJSON) rsa() (*jwtKey, string, error) {
	if skip := k.algFor(jwtAlgRS256, jwtAlgRS256); skip != "" {
		return nil, skip, nil
	}
	n, err := jwkBytes("n", k.N, 0)
	if err != nil {
		return nil, "", err
	}
	e, err := jwkBytes("e", k.E, 0)
	if err != nil {
		return nil, "", err
	}
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n)}
	if bits := pub.N.BitLen(); bits < jwtMinRSABits {
		return nil, "", fmt.Errorf("RSA modulus has %d bits, need at least %d", bits, jwtMinRSABits)
	}
	// The exponent must fit an int and be odd and > 1; real keys use 65537.
	if len(e) > 4 {
		return nil, "", errors.New(`RSA exponent "e" is too large`)
	}
	ev := new(big.Int).SetBytes(e).Int64()
	if ev < 3 || ev%2 == 0 {
		return nil, "", errors.New(`RSA exponent "e" is not an odd number > 1`)
	}
	pub.E = int(ev)
	return &jwtKey{kid: k.Kid, alg: jwtAlgRS256, pub: pub}, "", nil
}

func (k *jwkJSON) ec() (*jwtKey, string, error) {
	if k.Crv != "P-256" {
		return nil, fmt.Sprintf("EC curve %.16q is not supported (only P-256, for ES256)", k.Crv), nil
	}
	if skip := k.algFor(jwtAlgES256, jwtAlgES256); skip != "" {
		return nil, skip, nil
	}
	// RFC 7518 §6.2.1.2: x and y are the full 32 bytes, zero-padded.
	x, err := jwkBytes("x", k.X, 32)
	if err != nil {
		return nil, "", err
	}
	y, err := jwkBytes("y", k.Y, 32)
	if err != nil {
		return nil, "", err
	}
	point := append(append([]byte{4}, x...), y...)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		return nil, "", errors.New("EC point is not on curve P-256")
	}
	return &jwtKey{kid: k.Kid, alg: jwtAlgES256, pub: pub}, "", nil
}

func (k *jwkJSON) okp() (*jwtKey, string, error) {
	if k.Crv != "Ed25519" {
		return nil, fmt.Sprintf("OKP curve %.16q is not supported (only Ed25519, for EdDSA)", k.Crv), nil
	}
	// "Ed25519" is the fully specified name of RFC 9864.
	if skip := k.algFor(jwtAlgEdDSA, jwtAlgEdDSA, "Ed25519"); skip != "" {
		return nil, skip, nil
	}
	x, err := jwkBytes("x", k.X, ed25519.PublicKeySize)
	if err != nil {
		return nil, "", err
	}
	return &jwtKey{kid: k.Kid, alg: jwtAlgEdDSA, pub: ed25519.PublicKey(x)}, "", nil
}

// jwkBytes decodes a base64url member; size > 0 requires that many bytes.
// The error names the member, never its value.
func jwkBytes(member, v string, size int) ([]byte, error) {
	if v == "" {
		return nil, fmt.Errorf("no %q", member)
	}
	// RFC 7517 says unpadded; some publishers pad anyway.
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "="))
	if err != nil {
		return nil, fmt.Errorf("%q is not base64url", member)
	}
	if size > 0 && len(b) != size {
		return nil, fmt.Errorf("%q is %d bytes, want %d", member, len(b), size)
	}
	return b, nil
}

// jwksClient is the HTTP client for JWKS URLs. Its timeout backs up the
// per-request context, and it refuses a redirect from https to http, which
// would let anyone on the path substitute the keys.
func jwksClient() *http.Client {
	return &http.Client{
		Timeout: jwksFetchTimeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
				return errors.New("redirect from https to " + req.URL.Scheme + " refused")
			}
			return nil
		},
	}
}

// fetchJWKS downloads the body of a JWKS URL: status 200 and at most
// jwksMaxBody bytes.
func fetchJWKS(ctx context.Context, client *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Drain a little so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, jwksMaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading body: %w", err)
	}
	if len(body) > jwksMaxBody {
		return nil, fmt.Errorf("body larger than %d bytes", jwksMaxBody)
	}
	return body, nil
}

// checkJWKSURL accepts only absolute http and https URLs.
func checkJWKSURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("scheme %q: want https or http", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	return u, nil
}

// refreshJWKS downloads the JWKS URL and swaps in its keys. An unchanged body
// keeps the current set, so that the verified-token cache (which is tied to
// the set a token was verified with) survives. On any failure the current
// set stays and the error says why.
func (j *JWT) refreshJWKS(ctx context.Context) error {
	j.refreshMu.Lock()
	defer j.refreshMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, jwksFetchTimeout)
	defer cancel()
	body, err := fetchJWKS(ctx, j.client, j.url.String())
	if err != nil {
		return err
	}
	if bytes.Equal(body, j.lastBody) {
		return nil
	}
	set, skipped, err := parseJWKS(body)
	if err != nil {
		return err
	}
	j.keys.Store(set)
	j.lastBody = body
	j.logKeys(set, skipped)
	return nil
}

// jwksRetry is how soon Run tries again after a failed refresh, when that
// is sooner than the refresh interval: a rotation should not wait a whole
// interval because of one bad response.
const jwksRetry = 30 * time.Second

// Run refreshes the keys from JWKSURL every Refresh interval until ctx is
// done. A failed refresh (network, status, a body that is not a valid JWKS)
// is logged and the last good key set stays in use; the next attempt comes
// after at most 30s. Without a JWKSURL, Run returns at once.
func (j *JWT) Run(ctx context.Context) {
	if j.url == nil {
		return
	}
	t := time.NewTimer(j.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := j.refresh
		if err := j.refreshJWKS(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			j.log.Warn("jwt: JWKS refresh failed; keeping the last good keys",
				"url", j.url.Redacted(), "keys", j.KeysLoaded(), "err", err)
			next = min(next, jwksRetry)
		}
		t.Reset(next)
	}
}

// KeysLoaded is the number of public keys in the current key set (0 when
// only a Secret is configured).
func (j *JWT) KeysLoaded() int { return j.keys.Load().len() }

// logKeys reports a newly loaded key set: its kids (never key material) and
// the keys it skipped.
func (j *JWT) logKeys(set *jwkSet, skipped []jwkSkipped) {
	j.log.Info("jwt: keys loaded", "source", j.source(), "keys", set.len(), "kids", set.kids)
	for _, s := range skipped {
		j.log.Info("jwt: JWKS key not used", "source", j.source(), "key", s.name, "why", s.why)
	}
}

// source names where the keys come from, for logs.
func (j *JWT) source() string {
	if j.url != nil {
		return j.url.Redacted()
	}
	return j.cfg.JWKSFile
}
