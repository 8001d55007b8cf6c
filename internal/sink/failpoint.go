package sink

import (
	"github.com/hyp-project/hyp/internal/failpoint"
	"github.com/hyp-project/hyp/internal/watermark"
)

// The steps of units and retention the crash-test switch (internal/failpoint) can name:
// after-intent, after-ship, after-watermark for any unit of any sink of the driver;
// after-loss-intent (gaps written, rows not yet deleted) and before-settle (rows deleted,
// gaps still pending) for a forced prune.

// failpoints are the unit hooks the switch asks for (none unless it names a unit step).
func failpoints() hooks {
	unit := func(step string) func(watermark.Key, watermark.Unit) {
		kill := failpoint.At(step)
		if kill == nil {
			return nil
		}
		return func(watermark.Key, watermark.Unit) { kill() }
	}
	return hooks{afterIntent: unit("after-intent"), afterShip: unit("after-ship"), afterWatermark: unit("after-watermark")}
}
