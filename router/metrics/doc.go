// Package metrics defines the gateway's Prometheus collectors. They register
// on a registry the caller passes in, never the global one. Per-pool
// observers are resolved once, when a config snapshot is built, so the
// request path never formats label values. Backend gauges are read from live
// state at scrape time.
//
// Everything here is safe for concurrent use and starts no goroutines.
package metrics
