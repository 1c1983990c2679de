//go:build !unix

package main

import "time"

// cpuTime is 0 where getrusage is not: BenchmarkServePath's cpu-µs/op
// reads 0.
func cpuTime() time.Duration { return 0 }
