package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// Place is the models directory a command reads, and why that one, for
// the message when a file is not there.
type Place struct {
	Dir string
	Why string
}

// DefaultPlace is the models directory without a config: $TRIAGE_MODELS,
// else var/models.
func DefaultPlace() Place {
	if d := os.Getenv(config.ModelsEnv); d != "" {
		return Place{d, "$" + config.ModelsEnv}
	}
	return Place{config.DefaultModelsDir, fmt.Sprintf("the default, under the working directory (no config, and %s is not set)", config.ModelsEnv)}
}

// ConfigPlace is cfg's models directory.
func ConfigPlace(cfg *config.Config) Place {
	return Place{cfg.ModelsPath(), cfg.ModelsOrigin()}
}

// RulesHeads is the heads directory f names, resolved against the rules
// file's directory.
func RulesHeads(f *rules.File) string {
	if filepath.IsAbs(f.Heads) {
		return f.Heads
	}
	return filepath.Join(filepath.Dir(f.Path), f.Heads)
}

// NeedFiles checks that the model files tier n of h names can be found,
// in the heads' directory or the models directory, and says where it
// looked, and why there, when one cannot.
func NeedFiles(h *classifier.Heads, n int, m Place) error {
	t := h.Tier(n)
	if t == nil {
		return nil // the loader says the tier is missing
	}
	type file struct{ name, what string }
	var files []file
	switch n {
	case 1:
		files = []file{{t.Encoder.Table, "its static table"}, {t.Encoder.Tokenizer, "its tokenizer"}}
	case 2:
		files = []file{{t.Encoder.Model, "its encoder's model directory"}}
	}
	for _, f := range files {
		if f.name == "" {
			continue
		}
		if _, err := h.Resolve(f.name, m.Dir); err != nil {
			return missingModelFile(h, n, f.name, f.what, m)
		}
	}
	return nil
}

// missingModelFile explains a model file that is neither in the heads'
// directory nor in the models directory.
func missingModelFile(h *classifier.Heads, n int, name, what string, m Place) error {
	var b strings.Builder
	fmt.Fprintf(&b, "tier %d of the heads in %s needs %s (%s): it is neither in %s nor in the models directory %s (or its tables/ and tokenizer/)", n, h.Dir, name, what, h.Dir, m.Dir)
	abs, err := filepath.Abs(m.Dir)
	if err != nil {
		abs = m.Dir
	}
	state := "which has no " + name
	if st, err := os.Stat(m.Dir); err != nil {
		state = "which does not exist"
	} else if !st.IsDir() {
		state = "which is not a directory"
	}
	fmt.Fprintf(&b, "\n  the models directory is %s, from %s; that is %s, %s", m.Dir, m.Why, abs, state)
	fmt.Fprintf(&b, "\n  setup writes model files to var/models in the checkout it runs in (or to $%s): point models_dir in the config, --models or %s at that directory", config.ModelsEnv, config.ModelsEnv)
	return errors.New(b.String())
}
