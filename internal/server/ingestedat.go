package server

import (
	"time"

	"github.com/hyp-project/hyp/internal/jsonrow"
)

// parseIngestedAt reads a forwarded `_hyp_ingested_at`, the raw JSON string of an RFC 3339
// time, as Unix microseconds. Senders write it as rowjson does, `2006-01-02T15:04:05.999999Z`
// in UTC, which is read here without time.Parse's allocation; any other spelling (an
// offset, an escape, a lower-case letter) goes to time.Parse, which decides.
func parseIngestedAt(raw []byte, scratch []byte) (micros int64, _ []byte, ok bool) {
	if us, ok := utcMicros(raw); ok {
		return us, scratch, true
	}
	var err error
	if scratch, err = jsonrow.AppendString(scratch[:0], raw); err != nil {
		return 0, scratch, false
	}
	ts, err := time.Parse(time.RFC3339Nano, string(scratch))
	if err != nil {
		return 0, scratch, false
	}
	return ts.UnixMicro(), scratch, true
}

// utcMicros parses `"YYYY-MM-DDTHH:MM:SS[.F{1,9}]Z"`, quotes included. It accepts only
// what time.Parse(time.RFC3339Nano) accepts, to the same instant (FuzzIngestedAt), and
// may refuse more: a refusal only means the slow path decides.
func utcMicros(raw []byte) (int64, bool) {
	const base = len(`"2006-01-02T15:04:05`)
	n := len(raw)
	if n < base+2 || raw[0] != '"' || raw[n-1] != '"' || raw[n-2] != 'Z' ||
		raw[5] != '-' || raw[8] != '-' || raw[11] != 'T' || raw[14] != ':' || raw[17] != ':' {
		return 0, false
	}
	num := func(i, w int) (int, bool) {
		v := 0
		for _, c := range raw[i : i+w] {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(1, 4)
	month, ok2 := num(6, 2)
	day, ok3 := num(9, 2)
	hour, ok4 := num(12, 2)
	minute, ok5 := num(15, 2)
	sec, ok6 := num(18, 2)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 ||
		month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return 0, false
	}
	nanos := 0
	if frac := raw[base : n-2]; len(frac) > 0 {
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return 0, false
		}
		v, ok := num(base+1, len(frac)-1)
		if !ok {
			return 0, false
		}
		for range 10 - len(frac) {
			v *= 10
		}
		nanos = v
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nanos, time.UTC)
	if t.Day() != day { // 31 April, 29 February of a common year: time.Date normalised it
		return 0, false
	}
	return t.UnixMicro(), true
}
