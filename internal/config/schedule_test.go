package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseSchedule(t *testing.T) {
	// after is deliberately not in UTC: cron must still be evaluated in UTC.
	zone := time.FixedZone("UTC+5", 5*3600)
	after := time.Date(2026, 3, 10, 12, 30, 15, 0, zone) // 07:30:15 UTC
	tests := []struct {
		in      string
		next    time.Time
		wantErr string
	}{
		{in: "@every 1m", next: after.Add(time.Minute)},
		{in: "  @every   1d12h ", next: after.Add(36 * time.Hour)},
		{in: "@every 250ms", next: after.Add(250 * time.Millisecond)},
		{in: "0 3 * * *", next: time.Date(2026, 3, 11, 3, 0, 0, 0, time.UTC)},
		{in: "*/15 * * * *", next: time.Date(2026, 3, 10, 7, 45, 0, 0, time.UTC)},
		{in: "@daily", next: time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)},
		{in: "0 0 29 2 *", next: time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)},
		{in: "", wantErr: "empty schedule"},
		{in: "@every", wantErr: "want \"@every <duration>\""},
		{in: "@every 1m 2m", wantErr: "want \"@every <duration>\""},
		{in: "@every 0", wantErr: "greater than 0"},
		{in: "@every -1m", wantErr: "greater than 0"},
		{in: "@every 1x", wantErr: `unknown unit "x"`},
		{in: "* * * *", wantErr: "expected exactly 5 fields"},
		{in: "0 0 * * * *", wantErr: "expected exactly 5 fields"},
		{in: "61 * * * *", wantErr: "above maximum"},
		{in: "@fortnightly", wantErr: "unrecognized descriptor"},
		{in: "CRON_TZ=Europe/Paris 0 3 * * *", wantErr: "cron runs in UTC"},
		{in: "TZ=UTC 0 3 * * *", wantErr: "cron runs in UTC"},
		{in: "0 0 30 2 *", wantErr: "never fires"},
	}
	for _, tt := range tests {
		s, err := ParseSchedule(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseSchedule(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseSchedule(%q): %v", tt.in, err)
			continue
		}
		if got := s.Next(after); !got.Equal(tt.next) {
			t.Errorf("ParseSchedule(%q).Next(%v) = %v, want %v", tt.in, after, got, tt.next.UTC())
		}
	}
}

// FuzzParseSchedule checks that no spec panics and that an accepted one
// only ever moves forward.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"@every 1m", "@every 1d", "0 3 * * *", "*/5 1-4 ? JAN-MAR MON", "@weekly", "0 0 29 2 *"} {
		f.Add(s)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := ParseSchedule(spec)
		if err != nil {
			return
		}
		if next := s.Next(start); !next.After(start) {
			t.Fatalf("ParseSchedule(%q).Next(%v) = %v, not after it", spec, start, next)
		}
	})
}
