package tokenize

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/triagegw/triage/internal/testenv"
)

// TestDifferential compares WordPiece with Reference over every text of the
// shared subjects datasets (train and dev), and checks Encode's max: the
// ids of Encode(text, max) are the first max of Encode(text, 0).
func TestDifferential(t *testing.T) {
	dir := filepath.Join(testenv.Shared(t, "datasets/subjects/train.jsonl", "datasets/subjects/dev.jsonl"), "datasets", "subjects")
	wp := loadWordPiece(t)
	ref := loadReference(t)
	var texts []string
	for _, name := range []string{"train.jsonl", "dev.jsonl"} {
		texts = append(texts, readTexts(t, filepath.Join(dir, name))...)
	}
	// sugarme allocates heavily; fewer collections make this ~2x faster.
	defer debug.SetGCPercent(debug.SetGCPercent(800))
	step := 1
	if raceEnabled {
		// The race detector makes sugarme ~10x slower; a fixed sample of
		// the texts keeps the run short. Without -race every text is used.
		step = 7
	}

	type mismatch struct {
		i         int
		text      string
		got, want []int32
		err       error
	}
	var (
		mu      sync.Mutex
		bad     []mismatch
		nbad    atomic.Int64
		checked atomic.Int64
		ids     atomic.Int64
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	next.Store(-1)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]int32, 0, 1024)
			for {
				i := int(next.Add(1)) * step
				if i >= len(texts) {
					return
				}
				text := texts[i]
				got := wp.Encode(dst[:0], text, 0)
				want, err := ref.Encode(text)
				checked.Add(1)
				ids.Add(int64(len(want)))
				if err != nil || !slices.Equal(got, want) {
					nbad.Add(1)
					mu.Lock()
					bad = append(bad, mismatch{i, text, slices.Clone(got), want, err})
					mu.Unlock()
					continue
				}
				// Prefix property of max.
				for _, m := range []int{1, 2, len(want) / 3, len(want) - 1, len(want), len(want) + 1} {
					if m <= 0 {
						continue
					}
					cut := wp.Encode(dst[:0], text, m)
					if w := want[:min(m, len(want))]; !slices.Equal(cut, w) {
						nbad.Add(1)
						mu.Lock()
						bad = append(bad, mismatch{i, fmt.Sprintf("max=%d: %s", m, text), slices.Clone(cut), w, nil})
						mu.Unlock()
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(bad, func(a, b mismatch) int { return a.i - b.i })
	for i, m := range bad {
		if i == 5 {
			break
		}
		if m.err != nil {
			t.Errorf("text %d %q: Reference: %v", m.i, m.text, m.err)
			continue
		}
		t.Errorf("text %d %q:\n  WordPiece %v %s\n  Reference %v %s", m.i, m.text, m.got, tokens(wp, m.got), m.want, tokens(wp, m.want))
	}
	if n := nbad.Load(); n > 0 {
		t.Errorf("%d of %d texts differ", n, checked.Load())
	}
	if checked.Load() == 0 {
		t.Fatal("no texts checked")
	}
	t.Logf("%d texts (of %d), %d ids: WordPiece == Reference", checked.Load(), len(texts), ids.Load())
}

// readTexts reads the "text" field of every row of a JSONL file.
func readTexts(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var texts []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var row struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if row.Text == nil {
			t.Fatalf("%s: row without text: %.80s", path, sc.Text())
		}
		texts = append(texts, *row.Text)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(texts) == 0 {
		t.Fatalf("%s: no texts", path)
	}
	return texts
}
