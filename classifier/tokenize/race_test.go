//go:build race

package tokenize

// raceEnabled reports whether the race detector is on: sync.Pool then drops
// items at random (so allocation counts are meaningless) and sugarme is much
// slower.
const raceEnabled = true
