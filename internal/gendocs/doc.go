// Package gendocs writes the generated reference pages of docs/: the
// configuration reference, from the config structs' koanf keys and doc
// comments (read from the Go source), and the CLI reference, from the
// commands' flag sets. cmd/triage's TestReferenceDocs holds the committed
// pages to what it writes, and writes them with -update.
//
// Its functions are pure: they read the source files they are pointed at
// and return bytes. Nothing the gateway serves with imports it.
package gendocs
