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
// Set.Decide runs the cascade on a request's Signals, which each wire
// format extracts (the model asked for, the conversation text through the
// set's Window, headers): tier 1; if its top class has a route, clears that
// class's tier-1 floor and does not require tier 2, route there; otherwise,
// when tier 2 can settle it, tier 2 with its own floors; otherwise the
// default pool. Every Decision carries a reason. What the caller adds is
// part of the decision too: the conversation's session keeps a turn that
// is not confident on the route its conversation took (Signals.Sessions),
// and a tenant's pins send a class to the tenant's own pool
// (Signals.Pins, Decision.Pinned). The gateway, `triage route`, `triage
// eval --rules`, `triage ab` and shadow mode all decide through Decide:
// there is no other implementation of it; calibration replays its policy
// (Gather, Replay), without the caller's sessions and pins.
//
// A Set is safe for concurrent use; its only mutable state is its lazily
// loaded tier 2 (a classifier.Lazy, whose load runs on a goroutine of its
// own). A Sessions store is safe for concurrent use and outlives the Sets
// that decide with it: its owner (the gateway) keeps one for its life,
// and each session is resolved against the Set deciding the turn, by its
// route's name. Neither starts a goroutine.
package rules
