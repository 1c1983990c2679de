// Package router is the gateway's HTTP edge: the gin engine, the
// OpenAI-compatible handlers, routing a request to a pool, and errors in
// OpenAI's JSON shape. gin stays inside this package; its subpackages are
// plain net/http.
//
// A Gateway serves from an immutable snapshot of its configuration (pools,
// model table, limits), swapped atomically by Apply; a request keeps the
// snapshot it started with. Handlers are safe for concurrent use. Run owns
// the pools' health-check goroutines and returns after they have all
// stopped, when its context is done.
package router
