package tenancy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// An API key reads "sk-triage-ID-SECRET": ID (8 hex digits) names the
// key's line in the keys file, so a request costs one map lookup and one
// sha256; SECRET is 40 base62 characters (238 bits). The file keeps the
// sha256 of the whole key, never the key.
const (
	keyPrefix    = "sk-triage-"
	keyIDLen     = 8
	keySecretLen = 40
	maxKeyLine   = 64 << 10
	keyLen       = len(keyPrefix) + keyIDLen + 1 + keySecretLen
)

// Key is one line of the keys file.
type Key struct {
	ID        string    `json:"id"`
	Principal string    `json:"principal"`
	Groups    []string  `json:"groups,omitempty"`
	Hash      string    `json:"hash"` // "sha256:" and 64 hex digits
	Created   time.Time `json:"created"`
	Expires   time.Time `json:"expires,omitzero"` // zero: never
	Revoked   time.Time `json:"revoked,omitzero"` // zero: not revoked
	// Note is free text for the file's reader (whom it was issued to).
	Note string `json:"note,omitempty"`

	sum [sha256.Size]byte
}

// NewKey makes a key for principal and its line. The secret is returned
// once; the line keeps its hash.
func NewKey(principal string, groups []string, expires time.Time, now time.Time) (secret string, k Key, err error) {
	if err := checkName("principal", principal); err != nil {
		return "", Key{}, err
	}
	for _, g := range groups {
		if err := checkName("group", g); err != nil {
			return "", Key{}, err
		}
	}
	id := make([]byte, keyIDLen/2)
	if _, err := rand.Read(id); err != nil {
		return "", Key{}, err
	}
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	sec := make([]byte, keySecretLen)
	for i := range sec {
		// rand.Text's way: a byte below 248 is unbiased modulo 62.
		var b [1]byte
		for {
			if _, err := rand.Read(b[:]); err != nil {
				return "", Key{}, err
			}
			if b[0] < 248 {
				break
			}
		}
		sec[i] = alphabet[int(b[0])%len(alphabet)]
	}
	secret = keyPrefix + hex.EncodeToString(id) + "-" + string(sec)
	sum := sha256.Sum256([]byte(secret))
	k = Key{ID: hex.EncodeToString(id), Principal: principal, Groups: groups, Hash: "sha256:" + hex.EncodeToString(sum[:]),
		Created: now.UTC().Truncate(time.Second), sum: sum}
	if !expires.IsZero() {
		k.Expires = expires.UTC().Truncate(time.Second)
	}
	return secret, k, nil
}

// KeyID is the id part of a presented key ("" if it is not shaped as one).
func KeyID(secret string) string {
	if len(secret) != keyLen || !strings.HasPrefix(secret, keyPrefix) || secret[len(keyPrefix)+keyIDLen] != '-' {
		return ""
	}
	id := secret[len(keyPrefix) : len(keyPrefix)+keyIDLen]
	for i := 0; i < len(id); i++ {
		if !(id[i] >= '0' && id[i] <= '9' || id[i] >= 'a' && id[i] <= 'f') {
			return ""
		}
	}
	return id
}

func checkName(what, s string) error {
	if s == "" || s == "*" || len(s) > 128 || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%s %q: want a name of 1 to 128 printable characters, not *", what, s)
	}
	return nil
}

// ParseKeys reads a keys file: one JSON object per line (a Key); blank
// lines and lines starting with # are skipped. Every bad line is
// reported, with its number; none of the file is used then.
func ParseKeys(r io.Reader) ([]Key, error) {
	var keys []Key
	var errs []error
	ids := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxKeyLine)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		k, err := parseKey(line)
		if err == nil {
			if prev, dup := ids[k.ID]; dup {
				err = fmt.Errorf("id %q is also on line %d", k.ID, prev)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n, err))
			continue
		}
		ids[k.ID] = n
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line %d: longer than %d bytes", n+1, maxKeyLine)
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return keys, nil
}

func parseKey(line []byte) (Key, error) {
	var k Key
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&k); err != nil {
		return Key{}, fmt.Errorf("not a key: %v", err)
	}
	if dec.More() {
		return Key{}, errors.New("more than one JSON value on the line")
	}
	if len(k.ID) != keyIDLen || KeyID(keyPrefix+k.ID+"-"+strings.Repeat("0", keySecretLen)) == "" {
		return Key{}, fmt.Errorf("id %q: want %d hex digits", k.ID, keyIDLen)
	}
	if err := checkName("principal", k.Principal); err != nil {
		return Key{}, err
	}
	for _, g := range k.Groups {
		if err := checkName("group", g); err != nil {
			return Key{}, err
		}
	}
	h, ok := strings.CutPrefix(k.Hash, "sha256:")
	b, err := hex.DecodeString(h)
	if !ok || err != nil || len(b) != sha256.Size {
		return Key{}, errors.New(`hash: want "sha256:" and 64 hex digits`)
	}
	copy(k.sum[:], b)
	return k, nil
}

// FormatKeys writes keys as a keys file, one line each.
func FormatKeys(w io.Writer, keys []Key) error {
	for _, k := range keys {
		b, err := json.Marshal(k)
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// LoadKeys reads and parses a keys file. A file larger than 64 MiB is
// refused (about 250,000 keys).
func LoadKeys(path string) ([]Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	keys, err := ParseKeys(io.LimitReader(f, maxKeysFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st, err := f.Stat(); err == nil && st.Size() > maxKeysFile {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, maxKeysFile>>20)
	}
	return keys, nil
}

const maxKeysFile = 64 << 20
