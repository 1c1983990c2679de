// Package config loads the gateway's configuration: defaults, then the YAML
// file, then TRIAGE_* environment overrides, then validation that reports
// every problem at once with its path. It is the only package that imports
// koanf. Watch reports changes to the files a config depends on.
//
// Load and Validate are pure functions of their inputs, the environment and
// the TLS files the config names (which they read to check).
// Watch runs until its context is done and returns then.
package config
