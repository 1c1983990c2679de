// Package router is the gateway's HTTP edge: the gin engine, the
// OpenAI-compatible handlers, routing a request to a pool, and errors in
// OpenAI's JSON shape. gin stays inside this package; its subpackages are
// plain net/http.
//
// A request's body is read once; the wire format (package openai) checks
// it and extracts the routing signals, which a request naming a rules
// alias hands to rules.Set.Decide; any other model name is routed by the
// model table. The decision (rules.Decision, one type everywhere) picks
// the pool, and router/proxy forwards under the pool's Policy.
//
// A Gateway serves from an immutable snapshot of its configuration (pools,
// model table, rules, limits), swapped atomically by Apply; a request keeps
// the snapshot it started with. State that must outlive a snapshot has one
// owner each: pools whose settings did not change (with their health and
// breaker state) are handed on by Apply; the sessions store, the limit
// counters and the Responses index are the Gateway's for its life, and
// each snapshot borrows them (Apply puts the rules' session settings in
// effect on the store). A Reloader drives Apply from file
// changes and signals. Handlers are safe for concurrent use. Run owns the
// pools' health-check goroutines and the shadow worker, and returns after
// they have all stopped, when its context is done.
//
// With tracing on (tracing.endpoint), each request is a span tree built
// here (trace.go) from what the request path already knows, the tiers'
// timings included (rules.Timing); router/tracing exports it. Shutdown
// exports the spans still queued and stops the exporter's goroutine.
package router
