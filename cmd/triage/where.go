package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"

	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// Every command finds files the same way: a path in a config file is
// relative to that file (rules:, models_dir:), a path in a rules file
// relative to the rules file (heads:), and a path on the command line
// relative to the working directory. The models directory is --models when
// given, else the config's (its models_dir, else $TRIAGE_MODELS, else
// var/models under the working directory).

// modelsPlace is the models directory a command reads, and why that one.
type modelsPlace = lifecycle.Place

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
		return modelsPlace{Dir: p.models, Why: "--models " + p.models}
	case cfg != nil:
		return lifecycle.ConfigPlace(cfg)
	}
	return lifecycle.DefaultPlace()
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
	return lifecycle.RulesHeads(f), nil
}
