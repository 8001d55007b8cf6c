// Package failpoint owns hyp's crash-test switch, the HYP_FAILPOINT environment variable
// `<step>:<n>`: the n-th time the process reaches step it kills itself with SIGKILL, so tests
// can prove exactly-once at every step against the real binary. Unset, it costs one
// comparison per step. The steps are named by the packages that place them; this package
// never decides where a process may die.
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

// Get reads the switch: the step it names ("" when unset) and on which hit to kill.
func Get() (step string, n int64) {
	step, count, _ := strings.Cut(os.Getenv(Env), ":")
	v, err := strconv.ParseInt(count, 10, 64)
	if err != nil || v < 1 {
		v = 1
	}
	return step, v
}

// Kill counts a hit on seen and kills the process on the n-th; it never returns then.
func Kill(seen *atomic.Int64, n int64) {
	if seen.Add(1) == n {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; never run the next step
	}
}

// At returns what a step calls: nil unless the switch names step.
func At(step string) func() {
	s, n := Get()
	if s != step {
		return nil
	}
	var seen atomic.Int64
	return func() { Kill(&seen, n) }
}
