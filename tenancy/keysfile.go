package tenancy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/triagegw/triage/internal/atomicfile"
)

// AppendKey adds k to the keys file at path (created, mode 0600, if it
// does not exist), keeping the lines already there. The file is replaced
// atomically, so a gateway reloading it never reads half a write.
func AppendKey(path string, k Key) error {
	keys, err := LoadKeys(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, o := range keys {
		if o.ID == k.ID {
			return fmt.Errorf("%s: id %s is taken; run the command again", path, k.ID)
		}
	}
	return writeKeys(path, append(keys, k))
}

// KeysEmptyMarker, alone on a line of a keys file, says the file holds no
// key on purpose (every key withdrawn). Without it, a keys file that
// holds no key where the one in effect held some is taken for a file
// caught mid-rewrite (truncated in place, not written yet), and the keys
// in effect stay (ReloadKeys).
const KeysEmptyMarker = "# no keys"

// ReloadKeys reads the keys file at path to replace prev, the keys in
// effect. A file that holds no key while prev holds some (a file
// truncated and not yet rewritten looks so) is not loaded: ReloadKeys
// returns prev and kept true, and the caller warns; the rewrite, when it
// comes, reloads again. A file with a KeysEmptyMarker line is loaded
// empty. Errors are LoadKeys'.
func ReloadKeys(path string, prev []Key) (keys []Key, kept bool, err error) {
	keys, err = LoadKeys(path)
	if err != nil || len(keys) > 0 || len(prev) == 0 {
		return keys, false, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		if strings.TrimSpace(sc.Text()) == KeysEmptyMarker {
			return keys, false, nil
		}
	}
	return prev, true, nil
}

// RevokeKey marks the key with id revoked at now. Its line stays, so the
// file records who had access until when.
func RevokeKey(path, id string, now time.Time) (Key, error) {
	keys, err := LoadKeys(path)
	if err != nil {
		return Key{}, err
	}
	for i := range keys {
		if keys[i].ID != id {
			continue
		}
		if !keys[i].Revoked.IsZero() {
			return keys[i], fmt.Errorf("%s: key %s was already revoked at %s", path, id, keys[i].Revoked.Format(time.RFC3339))
		}
		keys[i].Revoked = now.UTC().Truncate(time.Second)
		return keys[i], writeKeys(path, keys)
	}
	return Key{}, fmt.Errorf("%s: no key with id %q (triage keys list shows them)", path, id)
}

// writeKeys replaces the file at path with keys, atomically, mode 0600.
func writeKeys(path string, keys []Key) error {
	return atomicfile.WriteMode(path, 0o600, func(w io.Writer) error {
		if _, err := io.WriteString(w, "# triage API keys: sha256 hashes, one key a line; managed by `triage keys`\n"); err != nil {
			return err
		}
		return FormatKeys(w, keys)
	})
}

// Status is a key's state at now: active, expired or revoked.
func (k *Key) Status(now time.Time) string {
	switch {
	case !k.Revoked.IsZero():
		return "revoked"
	case !k.Expires.IsZero() && !now.Before(k.Expires):
		return "expired"
	}
	return "active"
}
