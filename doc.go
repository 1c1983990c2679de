// Package triage is a semantic-routing gateway for OpenAI-compatible LLM
// servers. The binary is cmd/triage; the packages are mapped in README.md.
// This root package holds only the tests that keep that map true.
package triage
