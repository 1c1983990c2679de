package tokenize

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The tokenizer.json of sentence-transformers/all-MiniLM-L6-v2 (the
// bert-base-uncased vocabulary), as the Go module
// github.com/clems4ever/all-minilm-l6-v2-go ships it.
const (
	modulePath    = "github.com/clems4ever/all-minilm-l6-v2-go"
	moduleVersion = "v0.0.9"
	moduleFile    = "all_minilm_l6_v2/tokenizer.json"
	moduleSHA256  = "da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0"
)

// ModuleFile returns the path of the all-MiniLM-L6-v2 tokenizer.json in the
// Go module cache, downloading the module through the go command (go mod
// download, which uses GOPROXY and verifies go.sum/GONOSUMDB as usual) if
// needed, after checking its sha256.
func ModuleFile() (string, error) {
	path, err := moduleFilePath()
	if err != nil {
		return "", err
	}
	if err := checkSHA256(path, moduleSHA256); err != nil {
		return "", err
	}
	return path, nil
}

// moduleFilePath asks the go command where the module is, without checking
// the file.
func moduleFilePath() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", modulePath+"@"+moduleVersion)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct {
		Dir   string
		Error string
	}
	if len(out) > 0 {
		if jerr := json.Unmarshal(out, &info); jerr != nil && err == nil {
			err = jerr
		}
	}
	if info.Error != "" {
		return "", fmt.Errorf("tokenize: go mod download %s@%s: %s", modulePath, moduleVersion, info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("tokenize: go mod download %s@%s: %v: %s", modulePath, moduleVersion, err, bytes.TrimSpace(stderr.Bytes()))
	}
	if info.Dir == "" {
		return "", fmt.Errorf("tokenize: go mod download %s@%s: no Dir in its output", modulePath, moduleVersion)
	}
	return filepath.Join(info.Dir, filepath.FromSlash(moduleFile)), nil
}

// checkSHA256 checks that the file at path has the given sha256.
func checkSHA256(path, want string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != want {
		return fmt.Errorf("tokenize: %s: sha256 %s, want %s", path, got, want)
	}
	return nil
}
