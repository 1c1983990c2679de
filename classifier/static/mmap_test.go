package static

import (
	"context"
	"math"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/models"
)

// sameClassifications fails unless a and b give the same logits, bit for
// bit, and the same verdict for every text.
func sameClassifications(t *testing.T, a, b *Model, texts []string) {
	t.Helper()
	k := len(a.Classes())
	la, lb := make([]float32, k), make([]float32, k)
	var ra, rb classifier.Result
	for _, text := range texts {
		na, nb := a.Logits(text, la), b.Logits(text, lb)
		for i := range la {
			if math.Float32bits(la[i]) != math.Float32bits(lb[i]) {
				t.Fatalf("Logits(%.40q)[%d] = %v mapped, %v on the heap", text, i, la[i], lb[i])
			}
		}
		a.Classify(context.Background(), text, &ra)
		b.Classify(context.Background(), text, &rb)
		if na != nb || ra.Class != rb.Class || ra.Score != rb.Score || ra.Tokens != rb.Tokens {
			t.Fatalf("Classify(%.40q) = %s %v (%d tokens) mapped, %s %v (%d tokens) on the heap", text, ra.Class, ra.Score, ra.Tokens, rb.Class, rb.Score, rb.Tokens)
		}
	}
}

// A tier 1 whose table is mapped from its file (models.ReadTable)
// classifies exactly as one whose table is on the heap.
func TestMappedTableClassifiesAsHeap(t *testing.T) {
	texts := []string{classifyText, "what about the chord and melody", "my referee and the stadium", "", "日本語 only"}
	t.Run("tiny", func(t *testing.T) {
		tk := tokenizer(t)
		heapTable := tinyTable(t, tk, 8, []string{"landlord"}, 50).Quantize(models.QuantI8)
		path := filepath.Join(t.TempDir(), "tiny.tbl")
		if _, err := heapTable.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		mappedTable, err := models.ReadTable(path)
		if err != nil {
			t.Fatal(err)
		}
		if runtime.GOOS == "linux" && mappedTable.MappedBytes() == 0 {
			t.Fatal("ReadTable did not map the table")
		}
		head := &classifier.Linear{Kind: "softmax", Classes: []string{"a", "b", "c"}, Dims: 8, W: make([]float32, 24), B: []float32{0.1, 0, -0.1}, Temperature: 1}
		for i := range head.W {
			head.W[i] = float32(i%5) - 2
		}
		enc := classifier.Encoder{Kind: "static", MaxTokens: 64, Normalize: "l2", Bigrams: 50}
		a, err := New(tk, mappedTable, head, enc)
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(tk, heapTable, head, enc)
		if err != nil {
			t.Fatal(err)
		}
		sameClassifications(t, a, b, texts)
	})
	// With the default heads' own encoder the model may fold the head
	// into the rows (then the table is read once, by New, and the mapped
	// and the heap table must fold to the same bits) or keep the table;
	// built with L2 features it always keeps the table and reads its
	// vectors for every text. Either way the mapped table is exercised.
	t.Run("default", func(t *testing.T) {
		h, _ := defaultModel(t)
		tok, mapped, heap := defaultTables(t, h)
		shared := testenv.Shared(t, "datasets/subjects/dev.jsonl")
		dev, err := datasets.ReadJSONL(filepath.Join(shared, "datasets", "subjects", "dev.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		texts := append([]string(nil), texts...)
		for _, row := range dev.Rows[:min(500, len(dev.Rows))] {
			texts = append(texts, row.Text)
		}
		head := h.Tier1.Head
		for _, normalize := range []string{h.Tier1.Encoder.Normalize, "l2"} {
			enc := h.Tier1.Encoder
			enc.Normalize = normalize
			a, err := New(tok, mapped, &head, enc)
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(tok, heap, &head, enc)
			if err != nil {
				t.Fatal(err)
			}
			if a.Folded() != b.Folded() || (a.Folded() && normalize != "mean") {
				t.Fatalf("normalize %s: Folded() = %v mapped, %v on the heap", normalize, a.Folded(), b.Folded())
			}
			if a.Folded() {
				fa, _ := a.Fold()
				fb, _ := b.Fold()
				for i := range fa {
					if math.Float32bits(fa[i]) != math.Float32bits(fb[i]) {
						t.Fatalf("Fold()[%d] = %v mapped, %v on the heap", i, fa[i], fb[i])
					}
				}
			} else if a.table != mapped || b.table != heap {
				t.Fatalf("normalize %s: the unfolded models do not hold the tables they were given", normalize)
			}
			sameClassifications(t, a, b, texts)
		}
	})
}

// defaultTables loads the default heads' tokenizer and table, mapped from
// its file as Load does, and a copy of the table on the heap.
func defaultTables(t *testing.T, h *classifier.Heads) (*tokenize.WordPiece, *models.Table, *models.Table) {
	t.Helper()
	tokPath, err := h.Resolve(h.Tier1.Encoder.Tokenizer, modelsDir())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.LoadWordPiece(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	tablePath, err := h.Resolve(h.Tier1.Encoder.Table, modelsDir())
	if err != nil {
		t.Fatal(err)
	}
	mapped, err := models.ReadTable(tablePath)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" && mapped.MappedBytes() == 0 {
		t.Fatal("ReadTable did not map the default table")
	}
	heap := mapped.Clone()
	if heap.MappedBytes() != 0 {
		t.Fatal("a cloned table is mapped")
	}
	return tok, mapped, heap
}
