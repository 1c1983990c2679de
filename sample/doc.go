// Package sample keeps an opt-in, redacted sample of live prompts for
// labelling (`triage label`) and calibration on a user's own traffic.
//
// It owns the whole of sampling but the config and the file: the choice of
// a request (a rate and a cap per hour, decided on the request path with
// one random draw and two atomic operations), the bounded queue a chosen
// request's text is copied into, the worker that asks the tiers for their
// verdicts, redacts the text and writes the record, and the redaction
// itself (Redact). Nothing unredacted is ever written: the worker redacts
// before it formats the line.
//
// A Sampler is safe for concurrent use: Take and Offer never block (a full
// queue drops the record and counts it), and Run's worker is the only
// goroutine; it exits when Run's context ends.
package sample
