package sim

import (
	"encoding/json"
	"errors"
	"strings"
)

// maxCacheSalt is the longest cache_salt vLLM accepts, in characters.
const maxCacheSalt = 128

// cacheSalt reads and validates a request's cache_salt as vLLM does
// (chat completions, completions, embeddings and Responses alike): absent
// or null, or a non-empty string of at most 128 characters without '@',
// '/', '\' or NUL, the separators of the KV connectors' keys. With the
// performance model on, prompts share cached blocks only under the same
// salt (Perf).
func cacheSalt(body []byte) (string, error) {
	var req struct {
		CacheSalt json.RawMessage `json:"cache_salt"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.CacheSalt) == 0 || string(req.CacheSalt) == "null" {
		return "", nil // the endpoint's own parse reports a malformed body
	}
	var salt string
	if err := json.Unmarshal(req.CacheSalt, &salt); err != nil {
		return "", errors.New("cache_salt: Input should be a valid string")
	}
	switch {
	case salt == "":
		return "", errors.New("Parameter 'cache_salt' must be a non-empty string if provided.")
	case len([]rune(salt)) > maxCacheSalt:
		return "", errors.New("Parameter 'cache_salt' must be at most 128 characters.")
	case strings.ContainsAny(salt, "@/\\\x00"):
		return "", errors.New("Parameter 'cache_salt' must not contain '@', '/', '\\' or NUL.")
	}
	return salt, nil
}
