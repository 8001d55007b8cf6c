package forward

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter is where an over-long Retry-After saturates. RFC 9111 section 1.2.2 tells a
// recipient to read a delta-seconds value it cannot represent as 2^31 seconds; applying the
// same bound to dates keeps every result far from time.Duration overflow. Send caps the wait
// at MaxWait anyway.
const maxRetryAfter = (1 << 31) * time.Second

// ParseRetryAfter reads a Retry-After header value (RFC 9110 section 10.2.3): delta-seconds
// or an HTTP-date, the latter measured from now. It reports false for anything that does not
// ask for a positive wait (empty, 0, negative, garbage, a date not after now), so the caller
// falls back to its own backoff instead of hammering or stalling on a confused server.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > int64(maxRetryAfter/time.Second) {
			// Only overflow can fail here: the string is all digits.
			return maxRetryAfter, true
		}
		if n == 0 {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0, false
	}
	return min(d, maxRetryAfter), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
