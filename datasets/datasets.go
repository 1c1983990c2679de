package datasets

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// Row is one labelled example.
type Row struct {
	Text    string `json:"text"`
	Label   string `json:"label"`
	Source  string `json:"source,omitempty"`
	Realism string `json:"realism,omitempty"`
	ID      string `json:"id,omitempty"`
	// Cols holds every column but the text (label, source, realism and any
	// other), for slicing reports by any of them. Filled by Read.
	Cols map[string]string `json:"-"`
	// Line is the row's line in its file (its first, for a CSV record
	// spanning lines). Filled by Read.
	Line int `json:"-"`
}

// Set is a dataset read from a file.
type Set struct {
	Path   string
	SHA256 string
	Rows   []Row
	// Columns are the columns the file has: a CSV file's header, every key
	// of a JSONL file's rows (sorted). Read fills it.
	Columns []string
}

// ErrEmpty is the error of a reader given a file with no rows: every use of
// a dataset (training, evaluation, calibration, a dry run) needs some.
var ErrEmpty = errors.New("no rows: the dataset is empty")

// ReadJSONL reads a JSONL file of rows. Every row needs a non-empty text;
// labels may be empty for unlabelled data. Errors name the line.
func ReadJSONL(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	sc := bufio.NewScanner(io.TeeReader(f, h))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	s := &Set{Path: path}
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var r Row
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if r.Text == "" {
			return nil, fmt.Errorf("%s:%d: empty text", path, line)
		}
		s.Rows = append(s.Rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(s.Rows) == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrEmpty)
	}
	s.SHA256 = hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// Labels returns the rows' labels in order.
func (s *Set) Labels() []string {
	out := make([]string, len(s.Rows))
	for i, r := range s.Rows {
		out[i] = r.Label
	}
	return out
}

// Texts returns the rows' texts in order.
func (s *Set) Texts() []string {
	out := make([]string, len(s.Rows))
	for i, r := range s.Rows {
		out[i] = r.Text
	}
	return out
}

// Shared returns the shared material directory: $TRIAGE_SHARED, or
// ../shared next to the repository root (found from this source file's
// location when run from tests, or the working directory).
func Shared() string {
	if d := os.Getenv("TRIAGE_SHARED"); d != "" {
		return d
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Dir(filepath.Dir(file))
		if d := filepath.Join(root, "..", "shared"); isDir(d) {
			return d
		}
	}
	return filepath.Join("..", "shared")
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
