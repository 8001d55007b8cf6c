//go:build failpoints

package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Armed says whether this binary has the switch.
const Armed = true

// switched is the step the switch names, its n, and the hits so far, read once.
var switched = func() struct {
	step string
	n    int64
	hits *atomic.Int64
} {
	step, count, _ := strings.Cut(os.Getenv(Env), ":")
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil || n < 1 {
		n = 1
	}
	return struct {
		step string
		n    int64
		hits *atomic.Int64
	}{step, n, new(atomic.Int64)}
}()

// At returns what a step calls when the process reaches it: nil unless the switch names
// step; else a func that counts a hit and, on the n-th, kills the process and never returns.
func At(step string) func() {
	if step == "" || switched.step != step {
		return nil
	}
	return func() {
		if switched.hits.Add(1) == switched.n {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way; never run the next step
		}
	}
}
