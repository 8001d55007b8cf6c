//go:build unix

package transform

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used, all threads (DuckDB's among them).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
