package static

import (
	"fmt"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/models"
)

// Load builds tier 1 from a heads artifact: it finds the tokenizer and table
// the artifact names (in the artifact's directory, then in modelsDir),
// checks their sha256 against the artifact's record, and loads them. The
// table is mapped from its file (models.ReadTable), not copied to the heap:
// replace a table file by renaming a new one over it, never in place, while
// a gateway may be using it. With centroids in the artifact, the model
// reports each text's distance from its top class's (Result.Distance).
func Load(h *classifier.Heads, modelsDir string) (*Model, error) {
	return load(h, modelsDir, false)
}

// LoadVectors loads tier 1 as Load does, keeping the table's vectors
// where Load would fold the head into them: for what needs Features
// (centroids of an artifact trained without them).
func LoadVectors(h *classifier.Heads, modelsDir string) (*Model, error) {
	return load(h, modelsDir, true)
}

func load(h *classifier.Heads, modelsDir string, keep bool) (*Model, error) {
	t := h.Tier1
	if t == nil {
		return nil, fmt.Errorf("static: heads %s have no tier-1 head", h.Dir)
	}
	if t.Encoder.Kind != "static" {
		return nil, fmt.Errorf("static: heads %s: tier-1 encoder is %q, want static", h.Dir, t.Encoder.Kind)
	}
	tokPath, err := verified(h, t.Encoder.Tokenizer, t.Encoder.TokenizerSHA256, modelsDir)
	if err != nil {
		return nil, err
	}
	tablePath, err := verified(h, t.Encoder.Table, t.Encoder.TableSHA256, modelsDir)
	if err != nil {
		return nil, err
	}
	tok, err := tokenize.LoadWordPiece(tokPath)
	if err != nil {
		return nil, err
	}
	table, err := models.ReadTable(tablePath)
	if err != nil {
		return nil, err
	}
	head := t.Head
	return build(tok, table, &head, t.Encoder, t.Centroids, keep || t.Centroids != nil)
}

func verified(h *classifier.Heads, name, sum, modelsDir string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("static: heads %s name no file for tier 1", h.Dir)
	}
	p, err := h.Resolve(name, modelsDir)
	if err != nil {
		return "", fmt.Errorf("static: %w", err)
	}
	if sum != "" {
		got, err := models.FileSHA256(p)
		if err != nil {
			return "", err
		}
		if got != sum {
			return "", fmt.Errorf("static: %s has sha256 %s, the heads in %s were trained with %s", p, got, h.Dir, sum)
		}
	}
	return p, nil
}
