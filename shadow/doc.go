// Package shadow decides a sample of live requests a second way, with a
// candidate rule set, off the request path, and logs both decisions side
// by side: the candidate never routes anything. It owns the whole of
// shadow mode: the bounded queue a request copies its signals into, the
// worker that decides and counts agreement, the log record, and the log
// files, kept open across reloads. `triage ab --log` (package evaluation)
// reads the records back.
//
// A Runner is safe for concurrent use: Offer never blocks (a full queue
// drops the request and counts it), and Run's worker is the only
// goroutine; it exits when Run's context ends. Logs is safe for
// concurrent use; its writers' background flushers exit when the context
// given to NewLogs ends, and Close closes the files after that.
package shadow
