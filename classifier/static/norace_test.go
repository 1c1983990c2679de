//go:build !race

package static

const raceEnabled = false
