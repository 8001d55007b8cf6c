package server

import (
	"math"
	"time"

	"github.com/hyp-project/hyp/internal/jsonrow"
)

// countRows counts the non-blank lines of an NDJSON body, which is what the rate limiter
// charges before the rows are validated.
func countRows(body []byte) int {
	n := 0
	_ = jsonrow.Lines(body, func(int, []byte) error { n++; return nil })
	return n
}

// retryAfterSeconds rounds a wait up to whole seconds, at least 1: Retry-After has no
// smaller unit, and 0 would tell the sender to fall back to its own backoff.
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}
