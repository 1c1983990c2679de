package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// encoderFlags choose where the offline commands (train --tier 2, eval,
// calibrate, classify) get tier 2's vectors: in process, or from the
// engine the gateway's rules name (tier2.encoder), or from the one
// --encoder-url names. Heads fitted on an engine's vectors are then the
// heads a gateway pointed at that engine runs.
type encoderFlags struct {
	url, model, apiKeyEnv, caFile string
	certFile, keyFile             string
	timeout                       time.Duration
}

func (e *encoderFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.url, "encoder-url", "", "tier 2's encoder served at this URL over the OpenAI embeddings API (triage encode serve, vLLM, TEI) instead of in process (default: the config's rules' tier2.encoder, else in process)")
	fs.StringVar(&e.model, "encoder-model", "", "with --encoder-url: the model name the engine serves (default: the name in the encoder manifest)")
	fs.StringVar(&e.apiKeyEnv, "encoder-api-key-env", "", "with --encoder-url: environment variable holding the engine's API key")
	fs.StringVar(&e.caFile, "encoder-ca", "", "with --encoder-url: PEM bundle, the only trust for an https engine")
	fs.StringVar(&e.certFile, "encoder-cert", "", "with --encoder-url: PEM client certificate for an engine that requires one (mTLS; with --encoder-key)")
	fs.StringVar(&e.keyFile, "encoder-key", "", "with --encoder-url: the PEM private key of --encoder-cert")
	fs.DurationVar(&e.timeout, "encoder-timeout", 30*time.Second, "with --encoder-url: how long one text may take")
}

// override is the remote encoder --encoder-url names, to replace a rules
// file's tier2.encoder (nil: the rules' own).
func (e *encoderFlags) override() *rules.RemoteEncoder {
	if e.url == "" {
		return nil
	}
	return &rules.RemoteEncoder{URL: e.url, Model: e.model, APIKeyEnv: e.apiKeyEnv, CAFile: e.caFile,
		CertFile: e.certFile, KeyFile: e.keyFile, Timeout: e.timeout}
}

// check refuses the engine's settings without --encoder-url, which they
// qualify.
func (e *encoderFlags) check() error {
	if e.url == "" && (e.model != "" || e.apiKeyEnv != "" || e.caFile != "" || e.certFile != "" || e.keyFile != "") {
		return badInput(fmt.Errorf("--encoder-model, --encoder-api-key-env, --encoder-ca, --encoder-cert and --encoder-key need --encoder-url"))
	}
	if (e.certFile == "") != (e.keyFile == "") {
		return badInput(fmt.Errorf("--encoder-cert and --encoder-key go together (the client certificate and its key)"))
	}
	return nil
}

// remote is the remote encoder's client configuration, or nil for tier 2
// in process: --encoder-url, else the tier2.encoder of cfg's rules
// (when useRules and cfg has rules).
func (e *encoderFlags) remote(cfg *config.Config, useRules bool) (*onnx.RemoteConfig, error) {
	var re *rules.RemoteEncoder
	path := ""
	switch {
	case e.url != "":
		re = e.override()
	case e.check() != nil:
		return nil, e.check()
	case useRules && cfg != nil && cfg.RulesPath() != "":
		f, err := rules.ParseFile(cfg.RulesPath())
		if err != nil {
			return nil, err
		}
		if re = f.Tier2.Encoder; re == nil {
			return nil, nil
		}
		path = f.Path
	default:
		return nil, nil
	}
	rc, err := lifecycle.RemoteConfig(re, path)
	if err != nil {
		return nil, err
	}
	return &rc, nil
}
