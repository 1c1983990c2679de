package tenancy

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTConfig says which JSON Web Tokens name a Principal.
type JWTConfig struct {
	// JWKSFile is the path of a JWK Set (RFC 7517) holding the public keys
	// for RS256 (kty RSA), ES256 (kty EC, crv P-256) and EdDSA (kty OKP,
	// crv Ed25519). It is read once; a reload builds a new JWT.
	JWKSFile string `koanf:"jwks_file"`
	// JWKSURL is an https (or http) URL serving a JWK Set. It is fetched
	// when the config is loaded (NewJWT) and then every Refresh in the
	// background (Run). Give JWKSFile or JWKSURL, not both.
	JWKSURL string `koanf:"jwks_url"`
	// Secret is the shared key for HS256 tokens, at least 32 bytes
	// (RFC 7518 §3.2). It may be given instead of a JWKS or besides one.
	Secret string `koanf:"secret"`
	// Issuer, when set, is the required "iss".
	Issuer string `koanf:"issuer"`
	// Audience, when set, lists the accepted audiences: the token's "aud"
	// must contain one of them.
	Audience []string `koanf:"audience"`
	// PrincipalClaim names the claim that gives the principal's name, a
	// non-empty string. Default "sub".
	PrincipalClaim string `koanf:"principal_claim"`
	// PrincipalPrefix is put before every token principal's name (for
	// example "idp:"), so that tokens and API keys never name the same
	// principal: a policy for a token principal names it with the prefix.
	// With none (the default), a token whose principal is also an API key
	// principal's is refused, since it would share that principal's
	// stored responses, sessions and limits; and with one, a key whose
	// principal starts with it is refused at load.
	PrincipalPrefix string `koanf:"principal_prefix"`
	// GroupsClaim names the claim that gives the principal's groups: an array of
	// strings, or one string of space-separated names. Default "groups".
	GroupsClaim string `koanf:"groups_claim"`
	// Skew is the clock skew allowed on "exp", "nbf" and "iat". Default
	// 30s; at most 5m.
	Skew time.Duration `koanf:"skew"`
	// Refresh is how often JWKSURL is fetched again (by Run). Default 5m; at least 1s.
	Refresh time.Duration `koanf:"refresh"`
	// Revoked lists token ids ("jti") that are refused.
	Revoked []string `koanf:"revoked"`
}

// Enabled reports whether tokens are accepted: a key source is given.
func (c *JWTConfig) Enabled() bool { return c.JWKSFile != "" || c.JWKSURL != "" || c.Secret != "" }

const (
	jwtDefaultSkew    = 30 * time.Second
	jwtMaxSkew        = 5 * time.Minute
	jwtDefaultRefresh = 5 * time.Minute
	jwtMinRefresh     = time.Second
	jwtMinSecret      = 32
	// jwtMaxToken bounds the tokens Verify parses: real ones are well
	// under 4 KiB, and parsing is the cost an unauthenticated caller can
	// impose.
	jwtMaxToken = 16 << 10
	// jwtCacheSize bounds the verified-token cache.
	jwtCacheSize = 10_000
)

// ErrInvalidToken is wrapped by every error Verify returns: whatever the
// reason, the caller should answer 401. The error text says the reason
// ("token expired 3m0s ago", "signature invalid") and never contains the
// token or key material; it may quote short claim values such as an
// issuer or key id.
var ErrInvalidToken = errors.New("invalid token")

// jwtError is a verification failure with its reason.
type jwtError struct{ reason string }

func (e *jwtError) Error() string { return "invalid token: " + e.reason }
func (e *jwtError) Unwrap() error { return ErrInvalidToken }

// jwtInvalid makes a verification failure; args are formatted into reason.
func jwtInvalid(format string, args ...any) error {
	return &jwtError{reason: fmt.Sprintf(format, args...)}
}

// JWT verifies tokens against one configuration. It is safe for concurrent
// use. A configuration reload builds a new JWT (and so a new cache); only
// the JWKS URL keys change in place, through Run.
type JWT struct {
	cfg       JWTConfig // defaults applied
	skew      time.Duration
	refresh   time.Duration
	secret    []byte // nil: HS256 not accepted
	revoked   map[string]struct{}
	allowed   []string // signature algorithms, for the parser and errors
	parser    *jwt.Parser
	log       *slog.Logger
	keys      atomic.Pointer[jwkSet] // nil when only a Secret is configured
	cache     *jwtCache              // nil: no caching
	url       *url.URL               // nil without JWKSURL
	client    *http.Client
	lastBody  []byte     // the JWKS URL body behind keys; guarded by refreshMu
	refreshMu sync.Mutex // one refresh at a time
}

// NewJWT checks cfg and loads its keys: it reads JWKSFile, or fetches
// JWKSURL (within 5s; a failure is an error, as the gateway should not
// start unable to verify anyone). A nil log discards.
func NewJWT(cfg JWTConfig, log *slog.Logger) (*JWT, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	j := &JWT{log: log, cache: newJWTCache(jwtCacheSize)}
	if err := j.configure(cfg); err != nil {
		return nil, fmt.Errorf("jwt: %w", err)
	}
	if err := j.loadKeys(); err != nil {
		return nil, fmt.Errorf("jwt: %w", err)
	}
	return j, nil
}

// configure validates cfg, applies defaults and builds the parser.
func (j *JWT) configure(cfg JWTConfig) error {
	if cfg.JWKSFile == "" && cfg.JWKSURL == "" && cfg.Secret == "" {
		return errors.New("no key source: give a JWKS file, a JWKS URL or a secret")
	}
	if cfg.JWKSFile != "" && cfg.JWKSURL != "" {
		return errors.New("give a JWKS file or a JWKS URL, not both")
	}
	if cfg.Secret != "" && len(cfg.Secret) < jwtMinSecret {
		return fmt.Errorf("secret is %d bytes; HS256 needs at least %d", len(cfg.Secret), jwtMinSecret)
	}
	switch {
	case cfg.Skew < 0:
		return fmt.Errorf("skew %v is negative", cfg.Skew)
	case cfg.Skew > jwtMaxSkew:
		return fmt.Errorf("skew %v is more than the maximum %v", cfg.Skew, jwtMaxSkew)
	case cfg.Skew == 0:
		cfg.Skew = jwtDefaultSkew
	}
	switch {
	case cfg.Refresh == 0:
		cfg.Refresh = jwtDefaultRefresh
	case cfg.Refresh < jwtMinRefresh:
		return fmt.Errorf("refresh %v is less than the minimum %v", cfg.Refresh, jwtMinRefresh)
	}
	if cfg.PrincipalClaim == "" {
		cfg.PrincipalClaim = "sub"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.JWKSURL != "" {
		u, err := checkJWKSURL(cfg.JWKSURL)
		if err != nil {
			return fmt.Errorf("JWKS URL: %w", err)
		}
		j.url, j.client = u, jwksClient()
	}
	j.cfg, j.skew, j.refresh = cfg, cfg.Skew, cfg.Refresh
	if cfg.Secret != "" {
		j.secret = []byte(cfg.Secret)
		j.allowed = append(j.allowed, jwtAlgHS256)
	}
	if cfg.JWKSFile != "" || cfg.JWKSURL != "" {
		j.allowed = append(j.allowed, jwtAlgRS256, jwtAlgES256, jwtAlgEdDSA)
	}
	j.revoked = make(map[string]struct{}, len(cfg.Revoked))
	for _, id := range cfg.Revoked {
		j.revoked[id] = struct{}{}
	}
	// The parser checks the signature only: the claims are checked here,
	// against the caller's clock and with our own error messages. Strict
	// base64 makes each token have one spelling, so that a re-encoded
	// copy of a signed token is not also valid.
	j.parser = jwt.NewParser(
		jwt.WithValidMethods(j.allowed),
		jwt.WithoutClaimsValidation(),
		jwt.WithStrictDecoding(),
	)
	return nil
}

// loadKeys reads the JWKS file or fetches the JWKS URL.
func (j *JWT) loadKeys() error {
	switch {
	case j.cfg.JWKSFile != "":
		data, err := os.ReadFile(j.cfg.JWKSFile)
		if err != nil {
			return fmt.Errorf("JWKS file: %w", err)
		}
		set, skipped, err := parseJWKS(data)
		if err != nil {
			return fmt.Errorf("JWKS file %s: %w", j.cfg.JWKSFile, err)
		}
		j.keys.Store(set)
		j.logKeys(set, skipped)
	case j.url != nil:
		if j.url.Scheme == "http" {
			j.log.Warn("jwt: JWKS URL is plain http; anyone on the path can substitute the keys",
				"url", j.url.Redacted())
		}
		if err := j.refreshJWKS(context.Background()); err != nil {
			return fmt.Errorf("JWKS URL %s: %w", j.url.Redacted(), err)
		}
	}
	return nil
}

// Verify checks token at time now and returns the Principal it names.
// Every failure wraps ErrInvalidToken.
//
// A verified token is cached until it expires, so verifying it again costs
// a hash and a map lookup, not a signature check. The returned
// Principal.Groups may share its array with the cache: treat it as
// read-only.
func (j *JWT) Verify(token string, now time.Time) (Principal, error) {
	keys := j.keys.Load()
	// A cached entry counts only for the key set it was verified with, so
	// that a key dropped from the JWKS URL also drops its tokens; and only
	// from its nbf/iat on (an earlier now goes the full way, which says
	// why it fails).
	if e := j.cache.get(token); e != nil && e.keys == keys && !now.Before(e.from) {
		if now.After(e.until) {
			return Principal{}, jwtExpired(e.p.Expires, now)
		}
		return e.p, nil
	}
	return j.verify(token, now, keys)
}

// verify is Verify without the cache: parse, check the signature, check the
// claims, and cache the result.
func (j *JWT) verify(token string, now time.Time, keys *jwkSet) (Principal, error) {
	if token == "" {
		return Principal{}, jwtInvalid("malformed token: empty")
	}
	if len(token) > jwtMaxToken {
		return Principal{}, jwtInvalid("malformed token: longer than %d bytes", jwtMaxToken)
	}
	if strings.Count(token, ".") != 2 {
		return Principal{}, jwtInvalid("malformed token: want 3 dot-separated parts")
	}
	claims := jwt.MapClaims{}
	tok, err := j.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		return j.keyFor(t, keys)
	})
	if err != nil {
		return Principal{}, j.parseError(tok, err)
	}
	e, err := j.checkClaims(claims, now)
	if err != nil {
		return Principal{}, err
	}
	e.keys = keys
	j.cache.put(token, e, now)
	return e.p, nil
}

// keyFor is the jwt/v5 key function: the key for the token's alg and kid.
// The parser has already refused algorithms not in j.allowed.
func (j *JWT) keyFor(t *jwt.Token, keys *jwkSet) (any, error) {
	// RFC 7515 §4.1.11: a verifier must refuse critical extensions it
	// does not understand, and it understands none.
	if _, ok := t.Header["crit"]; ok {
		return nil, jwtInvalid("critical header parameters (crit) not supported")
	}
	alg := t.Method.Alg()
	if alg == jwtAlgHS256 {
		return j.secret, nil
	}
	key, err := keys.lookup(t.Header["kid"])
	if err != nil {
		return nil, err
	}
	// A key verifies only its own algorithm: jwt/v5 would refuse a wrong
	// key type anyway, but this says so clearly.
	if key.alg != alg {
		return nil, jwtInvalid("algorithm %q does not match key %s (%s)", alg, jwkName(0, key.kid), key.alg)
	}
	return key.pub, nil
}

// lookup finds the key a token's kid header names; a token without a kid
// may use the only key of a one-key set.
func (s *jwkSet) lookup(kidHeader any) (*jwtKey, error) {
	if s == nil {
		return nil, jwtInvalid("no public keys loaded")
	}
	kid, ok := kidHeader.(string)
	if kidHeader != nil && !ok {
		return nil, jwtInvalid("key id (kid) is not a string")
	}
	if kid == "" {
		if s.only == nil {
			return nil, jwtInvalid("token has no key id (kid) and there are %d keys", s.len())
		}
		return s.only, nil
	}
	if k := s.byKID[kid]; k != nil {
		return k, nil
	}
	return nil, jwtInvalid("unknown key id %.64q", kid)
}

// parseError turns a jwt/v5 parse error into ours. The library's own text is
// not passed on: ours is shorter, and stays free of token content.
func (j *JWT) parseError(tok *jwt.Token, err error) error {
	var ours *jwtError
	switch {
	case errors.As(err, &ours):
		return ours
	case errors.Is(err, jwt.ErrTokenMalformed), tok == nil, tok.Header == nil:
		return jwtInvalid("malformed token")
	}
	alg, ok := tok.Header["alg"].(string)
	switch {
	case !ok:
		return jwtInvalid("token has no algorithm (alg)")
	case !j.algAllowed(alg):
		return jwtInvalid("algorithm %.16q not allowed", alg)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return jwtInvalid("signature invalid")
	}
	return jwtInvalid("token cannot be verified")
}

// algAllowed reports whether this configuration accepts the algorithm alg.
func (j *JWT) algAllowed(alg string) bool { return slices.Contains(j.allowed, alg) }

// checkClaims checks the time claims with the skew, the issuer, audience
// and jti, and reads the principal; it returns the cache entry to be.
func (j *JWT) checkClaims(c jwt.MapClaims, now time.Time) (*jwtCacheEntry, error) {
	exp, ok, err := jwtDate(c, "exp")
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, jwtInvalid("token has no expiry (exp)")
	case now.After(exp.Add(j.skew)):
		return nil, jwtExpired(exp, now)
	}
	e := &jwtCacheEntry{until: exp.Add(j.skew)}
	for _, name := range [...]string{"nbf", "iat"} {
		t, ok, err := jwtDate(c, name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		from := t.Add(-j.skew)
		switch {
		case now.Before(from) && name == "iat":
			return nil, jwtInvalid("token issued %s in the future (iat)", jwtAgo(t.Sub(now)))
		case now.Before(from):
			return nil, jwtInvalid("token not valid for another %s (nbf)", jwtAgo(t.Sub(now)))
		case from.After(e.from):
			e.from = from
		}
	}
	if err := j.checkIssuer(c); err != nil {
		return nil, err
	}
	if err := j.checkAudience(c); err != nil {
		return nil, err
	}
	if err := j.checkJTI(c); err != nil {
		return nil, err
	}
	name, err := j.principalName(c)
	if err != nil {
		return nil, err
	}
	groups, err := jwtGroups(c, j.cfg.GroupsClaim)
	if err != nil {
		return nil, err
	}
	e.p = Principal{Name: name, Groups: groups, Expires: exp}
	return e, nil
}

// jwtDate reads a NumericDate claim (RFC 7519 §2: seconds since the epoch,
// possibly fractional). Values outside [0, 2^40) seconds (year ~36812) are
// refused rather than wrapped around.
func jwtDate(c jwt.MapClaims, name string) (t time.Time, ok bool, err error) {
	v, present := c[name]
	if !present {
		return time.Time{}, false, nil
	}
	f, isNum := v.(float64)
	if !isNum || math.IsNaN(f) || f < 0 || f >= 1<<40 {
		return time.Time{}, false, jwtInvalid("claim %q is not a valid date", name)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true, nil
}

// jwtExpired says how long ago a token expired.
func jwtExpired(exp, now time.Time) error {
	return jwtInvalid("token expired %s ago", jwtAgo(now.Sub(exp)))
}

// jwtAgo rounds a duration for a message: to the second, or the
// millisecond under one second.
func jwtAgo(d time.Duration) string {
	if d < time.Second && d > -time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func (j *JWT) checkIssuer(c jwt.MapClaims) error {
	if j.cfg.Issuer == "" {
		return nil
	}
	iss, ok := c["iss"].(string)
	switch {
	case !ok && c["iss"] != nil:
		return jwtInvalid(`claim "iss" is not a string`)
	case iss == "":
		return jwtInvalid("token has no issuer (iss)")
	case iss != j.cfg.Issuer:
		return jwtInvalid("issuer %.64q not accepted", iss)
	}
	return nil
}

func (j *JWT) checkAudience(c jwt.MapClaims) error {
	if len(j.cfg.Audience) == 0 {
		return nil
	}
	aud, err := c.GetAudience() // a string or an array of strings
	if err != nil {
		return jwtInvalid(`claim "aud" is not a string or an array of strings`)
	}
	if len(aud) == 0 {
		return jwtInvalid("token has no audience (aud)")
	}
	for _, a := range aud {
		for _, want := range j.cfg.Audience {
			if a == want {
				return nil
			}
		}
	}
	return jwtInvalid("audience %.64q not accepted", strings.Join(aud, " "))
}

func (j *JWT) checkJTI(c jwt.MapClaims) error {
	v, present := c["jti"]
	if !present {
		return nil
	}
	jti, ok := v.(string)
	if !ok {
		return jwtInvalid(`claim "jti" is not a string`)
	}
	if _, revoked := j.revoked[jti]; revoked {
		return jwtInvalid("token revoked (jti %.64q)", jti)
	}
	return nil
}

func (j *JWT) principalName(c jwt.MapClaims) (string, error) {
	name, ok := c[j.cfg.PrincipalClaim].(string)
	if !ok || name == "" {
		return "", jwtInvalid("claim %.64q (the principal) is missing, empty or not a string", j.cfg.PrincipalClaim)
	}
	return j.cfg.PrincipalPrefix + name, nil
}

// jwtGroups reads the groups claim: absent, an array of strings, or one
// string of space-separated names (as OAuth's "scope" is written). Empty
// names are dropped.
func jwtGroups(c jwt.MapClaims, claim string) ([]string, error) {
	switch v := c[claim].(type) {
	case nil:
		return nil, nil
	case string:
		return strings.Fields(v), nil
	case []any:
		groups := make([]string, 0, len(v))
		for _, g := range v {
			s, ok := g.(string)
			if !ok {
				return nil, jwtInvalid("claim %.64q is not an array of strings", claim)
			}
			if s != "" {
				groups = append(groups, s)
			}
		}
		return groups, nil
	}
	return nil, jwtInvalid("claim %.64q is not a string or an array of strings", claim)
}

// jwtCache holds verified tokens until they expire, so that the usual
// request (a client sending the same token again and again) costs no
// signature check.
//
// It is sharded, each shard a map under an RWMutex, so that concurrent
// hits only share a read lock. Entries are keyed by a maphash of the token
// (sha256 costs ~1µs for a typical token, maphash ~80ns) with a seed
// random per cache, so callers cannot aim collisions at one shard; the
// entry keeps the token itself, and a hit compares it, so a hash collision
// is a miss, never a wrong principal.
//
// The cache is bounded: each shard holds at most size/shards entries. A full
// shard first drops its expired entries, then, if still full, an arbitrary
// one (Go's map iteration order): under a flood of distinct valid tokens
// some are verified twice, nothing worse.
type jwtCache struct {
	seed     maphash.Seed
	perShard int
	shards   [jwtCacheShards]jwtCacheShard
}

const jwtCacheShards = 64

type jwtCacheShard struct {
	mu sync.RWMutex
	m  map[uint64]*jwtCacheEntry
	// The padding keeps two shards' locks off one cache line, so that
	// readers of different shards do not slow each other down.
	_ [64]byte
}

// jwtCacheEntry is a verified token. It is immutable once in the cache.
type jwtCacheEntry struct {
	token string
	p     Principal
	from  time.Time // the latest of nbf and iat, minus the skew; zero if neither
	until time.Time // exp plus the skew
	keys  *jwkSet   // the key set that verified it
}

// newJWTCache makes a cache of at most size entries (rounded down to a
// multiple of the shard count, at least one per shard).
func newJWTCache(size int) *jwtCache {
	c := &jwtCache{seed: maphash.MakeSeed(), perShard: max(size/jwtCacheShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[uint64]*jwtCacheEntry)
	}
	return c
}

// shard picks the shard from the hash's top bits; the map uses all of it.
func (c *jwtCache) shard(h uint64) *jwtCacheShard {
	return &c.shards[h>>(64-6)] // 6 bits: 64 shards
}

// get returns the entry for token, or nil. A nil cache has no entries.
func (c *jwtCache) get(token string) *jwtCacheEntry {
	if c == nil {
		return nil
	}
	h := maphash.String(c.seed, token)
	s := c.shard(h)
	s.mu.RLock()
	e := s.m[h]
	s.mu.RUnlock()
	if e == nil || e.token != token {
		return nil
	}
	return e
}

// put stores e for token, making room if the shard is full.
func (c *jwtCache) put(token string, e *jwtCacheEntry, now time.Time) {
	if c == nil {
		return
	}
	// The caller's string may point into a reused request buffer: keep a
	// copy of our own.
	e.token = strings.Clone(token)
	h := maphash.String(c.seed, token)
	s := c.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, replace := s.m[h]; !replace && len(s.m) >= c.perShard {
		s.evict(now, c.perShard)
	}
	s.m[h] = e
}

// evict drops the expired entries and then, if the shard still holds
// limit entries, an arbitrary one. Called with s.mu held.
func (s *jwtCacheShard) evict(now time.Time, limit int) {
	for h, e := range s.m {
		if now.After(e.until) {
			delete(s.m, h)
		}
	}
	for h := range s.m {
		if len(s.m) < limit {
			return
		}
		delete(s.m, h)
	}
}

// len counts the cached entries, for tests.
func (c *jwtCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
