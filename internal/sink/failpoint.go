package sink

import (
	"sync/atomic"

	"github.com/hyp-project/hyp/internal/failpoint"
	"github.com/hyp-project/hyp/internal/watermark"
)

// The steps of units and retention the crash-test switch (internal/failpoint) can name:
// after-intent, after-ship, after-watermark for any unit of any sink of the driver;
// after-loss-intent (gaps written, rows not yet deleted) and before-settle (rows deleted,
// gaps still pending) for a forced prune.

// retentionFailpoint returns what retention calls at a step of a forced prune, or nil.
func retentionFailpoint(at string, seen *atomic.Int64) func() {
	step, n := failpoint.Get()
	if step != at {
		return nil
	}
	return func() { failpoint.Kill(seen, n) }
}

func failpoints(seen *atomic.Int64) hooks {
	step, n := failpoint.Get()
	if step == "" {
		return hooks{}
	}
	kill := func(watermark.Key, watermark.Unit) { failpoint.Kill(seen, n) }
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
