package sink

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hyp-project/hyp/internal/watermark"
)

// failpointEnv names the crash-test switch: `<step>:<n>` kills the process with SIGKILL the
// n-th time any unit of any sink of the driver reaches step (after-intent, after-ship,
// after-watermark), or retention reaches it (after-loss-intent: gaps written, rows not yet
// deleted; before-settle: rows deleted, gaps still pending). It exists so tests can prove
// exactly-once and exact gaps at every step against the real binary; unset, it costs
// nothing.
const failpointEnv = "HYP_FAILPOINT"

// failpoint reads the switch: the step it names and on which hit to kill.
func failpoint() (step string, n int64) {
	step, count, _ := strings.Cut(os.Getenv(failpointEnv), ":")
	v, err := strconv.ParseInt(count, 10, 64)
	if err != nil || v < 1 {
		v = 1
	}
	return step, v
}

func killAt(seen *atomic.Int64, n int64) {
	if seen.Add(1) == n {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; never run the next step
	}
}

// retentionFailpoint returns what retention calls at a step of a forced prune, or nil.
func retentionFailpoint(at string, seen *atomic.Int64) func() {
	step, n := failpoint()
	if step != at {
		return nil
	}
	return func() { killAt(seen, n) }
}

func failpoints(seen *atomic.Int64) hooks {
	step, n := failpoint()
	if step == "" {
		return hooks{}
	}
	kill := func(watermark.Key, watermark.Unit) { killAt(seen, n) }
	switch step {
	case "after-intent":
		return hooks{afterIntent: kill}
	case "after-ship":
		return hooks{afterShip: kill}
	case "after-watermark":
		return hooks{afterWatermark: kill}
	}
	return hooks{}
}
