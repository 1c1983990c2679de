package tenancy

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
	"time"
)

var saltRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestCacheSalt: each principal's salt is its own, stable across requests
// and reloads, derived under the secret in effect (the same on every
// replica given the same), and shows nothing of the name; a client's own
// salt narrows a principal's, never reaches another's.
func TestCacheSalt(t *testing.T) {
	aSecret, a := mustKey(t, "acme-legal-team")
	a2Secret, a2 := mustKey(t, "acme-legal-team") // a second key of the same principal
	bSecret, b := mustKey(t, "globex")
	keys := []Key{a, a2, b}
	caller := func(s *Snapshot, secret string) Caller {
		t.Helper()
		c, d := s.Authenticate(bearer(secret), time.Now())
		if d != nil {
			t.Fatal(d)
		}
		return c
	}
	snap := func(cfg Config, l *Limiter) *Snapshot {
		t.Helper()
		s, err := Compile(&cfg, keys, nil, l)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	shared := Config{CacheSaltSecret: strings.Repeat("s3cret-", 6)}

	l := NewLimiter()
	s := snap(Config{}, l)
	sa, sa2, sb := caller(s, aSecret).CacheSalt(), caller(s, a2Secret).CacheSalt(), caller(s, bSecret).CacheSalt()
	for _, salt := range [][]byte{sa, sb} {
		if !saltRE.Match(salt) || bytes.Contains(salt, []byte("acme")) || bytes.Contains(salt, []byte("globex")) {
			t.Fatalf("salt %q: want 32 hexadecimal digits", salt)
		}
	}
	if !bytes.Equal(sa, sa2) || bytes.Equal(sa, sb) {
		t.Fatalf("salts %s (acme), %s (acme's second key), %s (globex): want acme's keys alike, globex apart", sa, sa2, sb)
	}
	if got := caller(snap(Config{}, l), aSecret).CacheSalt(); !bytes.Equal(got, sa) {
		t.Fatalf("after a reload acme's salt is %s, was %s", got, sa)
	}
	if got := caller(snap(Config{}, NewLimiter()), aSecret).CacheSalt(); bytes.Equal(got, sa) {
		t.Fatal("two replicas with no secret configured derived the same salt: the fallback is not random")
	}

	// A configured secret, or one derived from the HS256 secret: the same
	// salts on every replica, and not those of another secret.
	r1, r2 := caller(snap(shared, NewLimiter()), aSecret).CacheSalt(), caller(snap(shared, NewLimiter()), aSecret).CacheSalt()
	if !bytes.Equal(r1, r2) || bytes.Equal(r1, sa) {
		t.Fatalf("with cache_salt_secret two replicas derive %s and %s (the random fallback gave %s)", r1, r2, sa)
	}
	hs := Config{JWT: JWTConfig{Secret: jwtTestSecret}}
	j1, j2 := caller(snap(hs, NewLimiter()), aSecret).CacheSalt(), caller(snap(hs, NewLimiter()), aSecret).CacheSalt()
	if !bytes.Equal(j1, j2) || bytes.Equal(j1, r1) {
		t.Fatalf("from jwt.secret two replicas derive %s and %s", j1, j2)
	}
	withBoth := hs
	withBoth.CacheSaltSecret = shared.CacheSaltSecret
	if got := caller(snap(withBoth, NewLimiter()), aSecret).CacheSalt(); !bytes.Equal(got, r1) {
		t.Fatalf("cache_salt_secret and jwt.secret: salt %s, want cache_salt_secret's %s", got, r1)
	}

	// A client's own salt.
	ca, cb := caller(s, aSecret), caller(s, bSecret)
	own := ca.CacheSaltWith([]byte(`"user-17"`))
	if !saltRE.Match(own) || bytes.Equal(own, sa) || !bytes.Equal(own, ca.CacheSaltWith([]byte(`"user-17"`))) ||
		bytes.Equal(own, ca.CacheSaltWith([]byte(`"user-18"`))) || bytes.Equal(own, cb.CacheSaltWith([]byte(`"user-17"`))) {
		t.Fatalf("acme's salt with the client's \"user-17\" is %s: want stable, its own, apart from acme's %s and globex's", own, sa)
	}
	// Sending another's salt joins nothing: not globex's, not acme's own.
	if stolen := ca.CacheSaltWith(append(append([]byte(`"`), sb...), '"')); bytes.Equal(stolen, sb) || bytes.Equal(stolen, sa) {
		t.Fatalf("acme sending globex's salt got salt %s", stolen)
	}

	pa, pb := ca.Partition(), cb.Partition()
	if pa == 0 || pb == 0 || pa == pb || pa != caller(snap(shared, NewLimiter()), aSecret).Partition() {
		t.Fatalf("partitions %x (acme) %x (globex): want non-zero, apart, and the same whatever the secret", pa, pb)
	}
}

func TestCacheSaltSecretTooShort(t *testing.T) {
	cfg := Config{KeysFile: "keys.jsonl", CacheSaltSecret: "short"}
	errs := cfg.Validate(Known{})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "access.cache_salt_secret") {
		t.Fatalf("Validate = %v, want one error naming access.cache_salt_secret", errs)
	}
}

// TestCacheSaltAllocs: a request reads its salt and partition without
// allocating.
func TestCacheSaltAllocs(t *testing.T) {
	secret, k := mustKey(t, "acme")
	s := compile(t, Config{KeysFile: "keys.jsonl"}, k)
	c, d := s.Authenticate(bearer(secret), time.Now())
	if d != nil {
		t.Fatal(d)
	}
	var sink uint64
	if n := testing.AllocsPerRun(100, func() { sink += uint64(len(c.CacheSalt())) + c.Partition() }); n != 0 {
		t.Fatalf("CacheSalt and Partition: %v allocations, want 0", n)
	}
	client := []byte(`"end-user-1234"`)
	if n := testing.AllocsPerRun(100, func() { sink += uint64(len(c.CacheSaltWith(client))) }); n > 1 {
		t.Fatalf("CacheSaltWith: %v allocations, want 1 (its result)", n)
	}
}

// TestCacheSaltWithIsHMAC: CacheSaltWith's HMAC, written out to save
// allocations, is crypto/hmac's.
func TestCacheSaltWithIsHMAC(t *testing.T) {
	secret, k := mustKey(t, "acme")
	s := compile(t, Config{KeysFile: "keys.jsonl"}, k)
	c, d := s.Authenticate(bearer(secret), time.Now())
	if d != nil {
		t.Fatal(d)
	}
	for _, client := range []string{`"x"`, `"end-user-1234"`, `"` + strings.Repeat("long ", 100) + `"`} {
		m := hmac.New(sha256.New, c.e.iso.key[:])
		m.Write([]byte("cache_salt\x00"))
		m.Write([]byte(client))
		if got, want := string(c.CacheSaltWith([]byte(client))), hex.EncodeToString(m.Sum(nil)[:SaltLen/2]); got != want {
			t.Fatalf("CacheSaltWith(%.20s…) = %s, crypto/hmac says %s", client, got, want)
		}
	}
}

// BenchmarkCacheSaltWith is the cost of a request that sends its own
// cache_salt: an HMAC-SHA256 under the principal's salt key.
// `go test ./tenancy -run '^$' -bench CacheSaltWith -benchmem`.
func BenchmarkCacheSaltWith(b *testing.B) {
	secret, k := mustKey(b, "acme")
	s, err := Compile(&Config{KeysFile: "keys.jsonl"}, []Key{k}, nil, NewLimiter())
	if err != nil {
		b.Fatal(err)
	}
	c, d := s.Authenticate(bearer(secret), time.Now())
	if d != nil {
		b.Fatal(d)
	}
	client := []byte(`"end-user-1234"`)
	b.ReportAllocs()
	for b.Loop() {
		c.CacheSaltWith(client)
	}
}
