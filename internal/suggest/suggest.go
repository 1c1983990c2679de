// Package suggest finds the known name a mistyped one probably meant, for
// "did you mean" in config and rules errors. Pure functions.
package suggest

import (
	"sort"
	"strings"
)

// Closest returns the name in names within edit distance 2 of word (the
// nearest; the first alphabetically on ties), or "" when none is that close.
func Closest(word string, names []string) string {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	best, bestD := "", 3
	for _, n := range sorted {
		if d := Distance(word, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b (in bytes).
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ClosestFold is Closest ignoring case: "Computer Science" finds
// "computer science", "generl" finds "general". A name equal but for case
// is always the answer.
func ClosestFold(word string, names []string) string {
	lower := make([]string, len(names))
	for i, n := range names {
		if strings.EqualFold(n, word) {
			return n
		}
		lower[i] = strings.ToLower(n)
	}
	c := Closest(strings.ToLower(word), lower)
	for i, l := range lower {
		if l == c && c != "" {
			return names[i]
		}
	}
	return ""
}
