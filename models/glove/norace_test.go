//go:build !race

package glove

const raceEnabled = false
