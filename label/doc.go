// Package label is `triage label`: a local web page to label a sample of
// live prompts (package sample's records) one at a time, with the
// keyboard, into the standard labelled JSONL ({"text","label","source",
// "id"}) that eval and calibrate read.
//
// It owns reading a sample (a file cut mid-line is read up to its last
// whole record), the labels file (append-only, synced per label, locked
// against a second process, resumed where it stopped), the session's
// state (the queue, undo, counts, the precision estimate and the stopping
// hint), and the page and its JSON API over net/http. Everything it serves
// is embedded in the binary.
//
// Propose is `triage label --by POOL`: a model the gateway fronts labels
// the pending prompts instead of a person (ChatClient asks it through the
// gateway, with the fixed Instruction, at temperature 0), within a bound
// on calls in flight and on tokens; an answer is a label only when it is
// exactly a class (ParseAnswer), else "not sure". Its labels carry their
// labeller, and Agree measures them against a person's (Cohen's kappa).
//
// A Session is safe for concurrent use (one mutex: a label is one
// appended, synced line). Serve's goroutines exit when its context ends;
// Propose's calls have all returned when it returns.
package label
