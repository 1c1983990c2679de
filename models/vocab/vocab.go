package vocab

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Parse returns the vocabulary of a Hugging Face tokenizer.json as
// token strings in id order: model.vocab as an object {token: id}
// (WordPiece, BPE) or as a list of [token, score] pairs (Unigram, id =
// position). Ids with no token are "".
func Parse(data []byte) ([]string, error) {
	var tj struct {
		Model struct {
			Type  string          `json:"type"`
			Vocab json.RawMessage `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	raw := bytes.TrimSpace(tj.Model.Vocab)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("tokenizer.json: no model.vocab")
	}
	if raw[0] == '[' {
		var pairs [][]json.RawMessage
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("tokenizer.json: model.vocab: %w", err)
		}
		vocab := make([]string, len(pairs))
		for i, p := range pairs {
			if len(p) == 0 {
				return nil, fmt.Errorf("tokenizer.json: model.vocab[%d] is empty", i)
			}
			if err := json.Unmarshal(p[0], &vocab[i]); err != nil {
				return nil, fmt.Errorf("tokenizer.json: model.vocab[%d]: %w", i, err)
			}
		}
		return vocab, nil
	}
	var m map[string]int
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("tokenizer.json: model.vocab: %w", err)
	}
	if len(m) == 0 {
		return nil, errors.New("tokenizer.json: model.vocab is empty")
	}
	n := 0
	for tok, id := range m {
		if id < 0 || id >= 4*len(m)+1024 {
			return nil, fmt.Errorf("tokenizer.json: token %q has id %d, out of range", tok, id)
		}
		n = max(n, id+1)
	}
	vocab := make([]string, n)
	for tok, id := range m {
		if vocab[id] != "" {
			return nil, fmt.Errorf("tokenizer.json: tokens %q and %q share id %d", vocab[id], tok, id)
		}
		vocab[id] = tok
	}
	return vocab, nil
}

// ReadFile reads a tokenizer.json file's vocabulary (Parse) and returns it
// with the file's sha256.
func ReadFile(path string) (vocab []string, sha256hex string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	vocab, err = Parse(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(data)
	return vocab, hex.EncodeToString(sum[:]), nil
}
