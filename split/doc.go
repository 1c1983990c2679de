// Package split logs a live A/B split's requests: one line per request
// routed while the rules have a split (rules.Split), saying which arm it
// was on, how that arm decided and how the request went. The gateway's
// request path only copies a fixed-size Record into a bounded queue (full:
// the line is dropped and counted); a worker encodes and writes the lines.
// `triage ab --log` (package evaluation) reads them back and compares the
// arms.
//
// A Log is safe for concurrent use: Offer never blocks, and Run's worker
// is its only goroutine; it exits when Run's context ends.
package split
