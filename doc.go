// Package triage is a semantic-routing gateway for OpenAI-compatible LLM
// servers. The binary is cmd/triage; each package's doc comment says what
// it owns, and docs/development.md says where to start. This root package
// holds only the tests that hold the packages to their map: which may
// import which, and where allocations are counted.
package triage
