// Package rules compiles a user's routing rules (YAML) into an immutable
// Set that decides, per request, which pool serves it and why.
//
// Parse reads the file from yaml.v3 nodes, so every problem names its line
// and column; unknown fields are errors, and all problems are reported at
// once. Compile checks every reference (pools, classes of the heads
// artifact, tier-2 availability, routes an earlier route shadows) and
// resolves floors: a class's floor in the rules file, else the floor
// calibration stored in the heads artifact, else the file's default floor.
//
// Set.Decide runs the cascade for requests naming the alias: tier 1; if its
// top class has a route, clears that class's tier-1 floor and does not
// require tier 2, route there; otherwise, when tier 2 can settle it, tier 2
// with its own floors; otherwise the default pool. Every Decision carries a
// reason. A Set is safe for concurrent use; its only mutable state is the
// optional session table (a bounded LRU behind a mutex) and the lazily
// loaded tier 2 (sync.Once). It starts no goroutines.
package rules
