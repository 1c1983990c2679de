package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// Every command finds files the same way: a path in a config file is
// relative to that file (rules:, models_dir:), a path in a rules file
// relative to the rules file (heads:), and a path on the command line
// relative to the working directory. The models directory is --models when
// given, else the config's (its models_dir, else $TRIAGE_MODELS, else
// var/models under the working directory).

// modelsPlace is the models directory a command reads, and why that one,
// for the message when a file is not there.
type modelsPlace struct {
	dir string
	why string
}

// defaultModels is the models directory without a config: $TRIAGE_MODELS,
// else var/models.
func defaultModels() modelsPlace {
	if d := os.Getenv(config.ModelsEnv); d != "" {
		return modelsPlace{d, "$" + config.ModelsEnv}
	}
	return modelsPlace{config.DefaultModelsDir, fmt.Sprintf("the default, under the working directory (no config, and %s is not set)", config.ModelsEnv)}
}

// configModels is cfg's models directory.
func configModels(cfg *config.Config) modelsPlace {
	return modelsPlace{cfg.ModelsPath(), cfg.ModelsOrigin()}
}

// modelsFlagHelp documents every command's --models.
const modelsFlagHelp = "directory of model files built by setup (default: the config's models_dir, else $TRIAGE_MODELS, else var/models)"

// placeFlags are the flags that say where a command finds the heads and
// model files it classifies with: --config (whose rules name the heads and
// whose models_dir names the models directory), --heads and --models,
// which override them.
type placeFlags struct {
	config, heads, models string
	configSet             bool
}

func (p *placeFlags) register(fs *flag.FlagSet, headsHelp string) {
	fs.StringVar(&p.config, "config", "triage.yaml", "gateway config: its rules' heads and its models_dir are the defaults of --heads and --models")
	fs.StringVar(&p.heads, "heads", "", headsHelp+" (default: the heads the config's rules name)")
	fs.StringVar(&p.models, "models", "", modelsFlagHelp)
}

// parsed records which flags the command line set; call it after Parse.
func (p *placeFlags) parsed(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			p.configSet = true
		}
	})
}

// loadConfig loads --config; nil without error when it was not given and
// the default file is not there, or when --heads and --models make it
// unnecessary.
func (p *placeFlags) loadConfig() (*config.Config, error) {
	if !p.configSet {
		if p.heads != "" && p.models != "" {
			return nil, nil
		}
		if _, err := os.Stat(p.config); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	return config.Load(p.config)
}

// place is the models directory: --models, else the config's, else the
// default.
func (p *placeFlags) place(cfg *config.Config) modelsPlace {
	switch {
	case p.models != "":
		return modelsPlace{p.models, "--models " + p.models}
	case cfg != nil:
		return configModels(cfg)
	}
	return defaultModels()
}

// headsDir is --heads, else the directory the config's rules name.
func (p *placeFlags) headsDir(cfg *config.Config) (string, error) {
	if p.heads != "" {
		return p.heads, nil
	}
	if cfg == nil {
		return "", fmt.Errorf("no --heads, and no %s here to take the heads its rules name from: give --heads DIR or --config FILE", p.config)
	}
	return configHeads(cfg)
}

// configHeads is the heads directory cfg's rules name.
func configHeads(cfg *config.Config) (string, error) {
	path := cfg.RulesPath()
	if path == "" {
		return "", fmt.Errorf("%s names no rules file, so no heads: give --heads DIR", cfg.Path)
	}
	f, err := rules.ParseFile(path)
	if err != nil {
		return "", err
	}
	if f.Heads == "" {
		return "", fmt.Errorf("%s: heads: required (the heads artifact directory the rules classify with)", path)
	}
	return rulesHeads(f), nil
}

// rulesHeads is the heads directory f names, resolved against the rules
// file's directory.
func rulesHeads(f *rules.File) string {
	if filepath.IsAbs(f.Heads) {
		return f.Heads
	}
	return filepath.Join(filepath.Dir(f.Path), f.Heads)
}

// needFiles checks that the model files tier n of h names can be found,
// in the heads' directory or the models directory, and says where it
// looked, and why there, when one cannot.
func needFiles(h *classifier.Heads, n int, m modelsPlace) error {
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
		if _, err := h.Resolve(f.name, m.dir); err != nil {
			return missingModelFile(h, n, f.name, f.what, m)
		}
	}
	return nil
}

// missingModelFile explains a model file that is neither in the heads'
// directory nor in the models directory.
func missingModelFile(h *classifier.Heads, n int, name, what string, m modelsPlace) error {
	var b strings.Builder
	fmt.Fprintf(&b, "tier %d of the heads in %s needs %s (%s): it is neither in %s nor in the models directory %s (or its tables/ and tokenizer/)", n, h.Dir, name, what, h.Dir, m.dir)
	abs, err := filepath.Abs(m.dir)
	if err != nil {
		abs = m.dir
	}
	state := "which has no " + name
	if st, err := os.Stat(m.dir); err != nil {
		state = "which does not exist"
	} else if !st.IsDir() {
		state = "which is not a directory"
	}
	fmt.Fprintf(&b, "\n  the models directory is %s, from %s; that is %s, %s", m.dir, m.why, abs, state)
	fmt.Fprintf(&b, "\n  setup writes model files to var/models in the checkout it runs in (or to $%s): point models_dir in the config, --models or %s at that directory", config.ModelsEnv, config.ModelsEnv)
	return errors.New(b.String())
}
