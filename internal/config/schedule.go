package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// defaultSchedule is used for a sink that gives no schedule.
const defaultSchedule = "@every 1m"

// Schedule yields a sink's export times.
type Schedule interface {
	// Next returns the first activation strictly after after.
	Next(after time.Time) time.Time
}

// every is "@every <duration>". It is parsed here rather than by cron
// because cron's own @every neither knows the "d" unit nor keeps
// sub-second intervals.
type every time.Duration

func (e every) Next(after time.Time) time.Time { return after.Add(time.Duration(e)) }

// neverFiresProbe is a fixed start for checking that a cron schedule fires at
// all; cron gives up after five years, which still covers a 29 February.
var neverFiresProbe = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// ParseSchedule parses "@every <duration>" (duration as in ParseDuration,
// > 0), a 5-field cron expression or a cron descriptor such as "@daily".
// Cron is always evaluated in UTC.
func ParseSchedule(s string) (Schedule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty schedule")
	}
	fields := strings.Fields(s)
	if fields[0] == "@every" {
		if len(fields) != 2 {
			return nil, fmt.Errorf("schedule %q: want \"@every <duration>\"", s)
		}
		d, err := ParseDuration(fields[1])
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", s, err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("schedule %q: interval must be greater than 0", s)
		}
		return every(d), nil
	}
	// The contract fixes cron to UTC, so a zone given in the spec would
	// silently disagree with it.
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		return nil, fmt.Errorf("schedule %q: time zones are not supported, cron runs in UTC", s)
	}
	sched, err := cron.ParseStandard("CRON_TZ=UTC " + s)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", s, err)
	}
	if sched.Next(neverFiresProbe).IsZero() {
		return nil, fmt.Errorf("schedule %q never fires", s)
	}
	return sched, nil
}
