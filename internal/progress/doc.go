// Package progress shows how far a long step has got, so that a person
// watching knows the work goes on and when it will end: on a terminal, a
// bar with the count, the rate and the time left
// (github.com/schollz/progressbar/v3); otherwise (a log, CI, a pipe), a
// plain line every few seconds with the same figures, and one when the
// step ends. A step that ends within its first moments shows nothing.
//
// A Bar is safe for concurrent use (evaluation reports from every worker)
// and starts no goroutine: it draws when it is told of progress.
package progress
