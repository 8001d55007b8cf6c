//go:build !unix

package transform

import "time"

// cpuTime is not measured here: the benchmarks leave out their CPU figures.
func cpuTime() time.Duration { return 0 }
