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
// n-th time any unit of any sink of the driver reaches step (after-intent, after-ship, after-watermark). It exists so
// tests can prove exactly-once at every step of a unit against the real binary; unset, it
// costs nothing.
const failpointEnv = "HYP_FAILPOINT"

func failpoints(seen *atomic.Int64) hooks {
	v := os.Getenv(failpointEnv)
	if v == "" {
		return hooks{}
	}
	step, count, _ := strings.Cut(v, ":")
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		n = 1
	}
	kill := func(watermark.Key, watermark.Unit) {
		if seen.Add(1) == int64(n) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way; never run the next step
		}
	}
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
