// Package evaluation runs a classifier tier or a whole rule set over a
// labelled dataset and says how well it routes: per-class precision, recall
// and F1, accuracy, macro and micro averages, coverage (the share routed to
// a class route rather than the default), the confusion matrix, calibration
// (expected calibration error and reliability bins), escalation rate and
// reasons, precision–coverage curves per class, latency per tier, all
// repeated per slice of any column. It renders text, JSON and a
// self-contained HTML page, and fits floors (calibration).
//
// Runs use every core and are deterministic: items are scored in parallel
// and reduced in input order. Nothing here keeps state between calls.
package evaluation
