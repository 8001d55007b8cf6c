package config

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{in: "90d", want: 90 * day},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "36h", want: 36 * time.Hour},
		{in: "0", want: 0},
		{in: "-0", want: 0},
		{in: "0d", want: 0},
		{in: "1.5d", want: 36 * time.Hour},
		{in: "-2d", want: -2 * day},
		{in: "2s500ms", want: 2500 * time.Millisecond},
		{in: "1d1d", want: 2 * day},
		{in: "3µs", want: 3 * time.Microsecond},
		{in: "", wantErr: "empty"},
		{in: "-", wantErr: "empty"},
		{in: "2", wantErr: "missing unit"},
		{in: "1d2", wantErr: "missing unit"},
		{in: "d", wantErr: "expected a number"},
		{in: "1w", wantErr: `unknown unit "w"`},
		{in: "1 d", wantErr: `unknown unit " d"`},
		{in: ".d", wantErr: `bad number "."`},
		{in: "1.2.3h", wantErr: `bad number "1.2.3"`},
		{in: "106752d", wantErr: "out of range"},
		{in: "106751d106751d", wantErr: "out of range"},
		{in: "99999999999999999999h", wantErr: "out of range"},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseDuration(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParseDuration checks that, apart from the added "d" unit,
// ParseDuration agrees with time.ParseDuration.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"90d", "1d12h", "36h", "0", "-1.5h", "1.h", ".5m", "9223372036854775807ns", "1µs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseDuration(s)
		if strings.Contains(s, "d") {
			return
		}
		want, goErr := time.ParseDuration(s)
		switch {
		case err == nil && goErr != nil:
			t.Fatalf("ParseDuration(%q) = %v, time.ParseDuration rejects it: %v", s, got, goErr)
		case err != nil && goErr == nil && want != math.MinInt64:
			// math.MinInt64 is the one value Go reaches only through its
			// negative range, which config durations never need.
			t.Fatalf("ParseDuration(%q): %v, time.ParseDuration gives %v", s, err, want)
		case err == nil && got != want:
			t.Fatalf("ParseDuration(%q) = %v, time.ParseDuration gives %v", s, got, want)
		}
	})
}
