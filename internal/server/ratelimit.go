package server

import (
	"sync"
	"time"
)

// bucket is a token bucket counted in rows. A request is charged its row count after the
// body is read, so the limit is on rows stored, not on requests. It is admitted when the
// bucket holds min(rows, burst) tokens and is then charged all its rows, possibly into debt:
// a chunk larger than the burst still gets through once the bucket is full instead of being
// refused forever, and its excess delays the requests after it.
type bucket struct {
	mu     sync.Mutex
	rate   float64 // tokens per second
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newBucket(rate float64, burst int, now func() time.Time) *bucket {
	b := float64(burst)
	if burst == 0 {
		b = max(1, rate)
	}
	return &bucket{rate: rate, burst: b, tokens: b, last: now(), now: now}
}

// take charges n rows and returns 0, or refuses and returns how long until it would admit
// them.
func (b *bucket) take(n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = min(b.burst, b.tokens+elapsed*b.rate)
		b.last = now
	}
	need := min(float64(n), b.burst)
	if b.tokens >= need {
		b.tokens -= float64(n)
		return 0
	}
	return time.Duration((need - b.tokens) / b.rate * float64(time.Second))
}
