// Package failpoint owns hyp's crash-test switch, the HYP_FAILPOINT environment variable
// `<step>:<n>`: the n-th time the process reaches step it kills itself with SIGKILL, so tests
// can prove exactly-once at every step against the real binary. Unset, a step costs a nil
// check. The steps are named by the packages that place them (sink, server, cluster; the
// README lists them); this package never decides where a process may die.
//
// At is the one way in. The switch and its count are the process's, as the environment
// variable is: every place that reaches a step counts towards the same n.
package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Env names the switch.
const Env = "HYP_FAILPOINT"

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
