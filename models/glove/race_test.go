//go:build race

package glove

const raceEnabled = true
