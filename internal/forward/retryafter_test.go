package forward

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

var raNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		v      string
		want   time.Duration
		wantOK bool
	}{
		{"1", time.Second, true},
		{"120", 2 * time.Minute, true},
		{" 7\t", 7 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"2147483648", maxRetryAfter, true},
		{"2147483649", maxRetryAfter, true},
		{"99999999999999999999999", maxRetryAfter, true},
		{raNow.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Sunday, 01-Jun-25 12:00:30 GMT", 30 * time.Second, true}, // RFC 850
		{"Sun Jun  1 12:00:45 2025", 45 * time.Second, true},       // asctime
		{"Fri, 31 Dec 9999 23:59:59 GMT", maxRetryAfter, true},
		{"", 0, false},
		{"0", 0, false},
		{"000", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"1 2", 0, false},
		{raNow.Format(http.TimeFormat), 0, false},
		{raNow.Add(-time.Hour).Format(http.TimeFormat), 0, false},
		{"Sun, 01 Jun 2025 12:00:30 +0200", 0, false},
		{raNow.Add(time.Minute).Format(time.RFC3339), 0, false},
	} {
		got, ok := ParseRetryAfter(tc.v, raNow)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tc.v, got, ok, tc.want, tc.wantOK)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "1", "120", "-1", "2147483648", "99999999999999999999", "1e3", " 5 ",
		"Sun, 01 Jun 2025 12:01:00 GMT", "Sunday, 01-Jun-25 12:00:30 GMT", "Sun Jun  1 12:00:45 2025",
		"Thu, 01 Jan 1970 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "", "garbage"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, raNow)
		if !ok {
			if d != 0 {
				t.Fatalf("ParseRetryAfter(%q) = %s with ok false", v, d)
			}
			return
		}
		if d <= 0 || d > maxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %s, outside (0, %s]", v, d, maxRetryAfter)
		}
		// Small delta-seconds must come back exactly.
		if n, err := strconv.ParseUint(v, 10, 31); err == nil && v[0] != '+' && d != time.Duration(n)*time.Second {
			t.Fatalf("ParseRetryAfter(%q) = %s, want %ds", v, d, n)
		}
	})
}
