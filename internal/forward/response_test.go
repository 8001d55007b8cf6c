package forward

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

func TestParseAck(t *testing.T) {
	for _, tc := range []struct {
		body    string
		want    Ack
		wantErr bool
	}{
		{`{"accepted":3,"duplicates":0}`, Ack{3, 0}, false},
		{` {"duplicates":2,"accepted":1} `, Ack{1, 2}, false},
		{`{"accepted":0,"duplicates":0,"extra":{"nested":[1,2]},"first_seq":"1"}`, Ack{0, 0}, false},
		{`{"accepted":3}`, Ack{}, true},
		{`{"duplicates":3}`, Ack{}, true},
		{`{"accepted":null,"duplicates":0}`, Ack{}, true},
		{`{"accepted":-1,"duplicates":0}`, Ack{}, true},
		{`{"accepted":1.5,"duplicates":0}`, Ack{}, true},
		{`{"accepted":"3","duplicates":0}`, Ack{}, true},
		{`{"accepted":3,"duplicates":0}{}`, Ack{}, true},
		{`[]`, Ack{}, true},
		{`null`, Ack{}, true},
		{``, Ack{}, true},
		{`<html>`, Ack{}, true},
	} {
		got, err := parseAck([]byte(tc.body))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("parseAck(%q) = %+v, %v; want %+v, error %v", tc.body, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParseAck(f *testing.F) {
	for _, s := range []string{`{"accepted":3,"duplicates":0}`, `{"accepted":1,"duplicates":2,"x":[]}`,
		`{"accepted":-1,"duplicates":0}`, `{"accepted":1e2,"duplicates":0}`, `{"ACCEPTED":1,"Duplicates":1}`,
		`{"accepted":9223372036854775808,"duplicates":0}`, `{"accepted":1,"accepted":2,"duplicates":0}`, `null`, ``, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ack, err := parseAck(b)
		if err != nil {
			if ack != (Ack{}) {
				t.Fatalf("parseAck(%q) = %+v with error %v", b, ack, err)
			}
			return
		}
		if ack.Accepted < 0 || ack.Duplicates < 0 {
			t.Fatalf("parseAck(%q) = %+v, negative count", b, ack)
		}
		// Whatever was accepted must survive a round trip through the server's shape.
		again, err := json.Marshal(map[string]int{"accepted": ack.Accepted, "duplicates": ack.Duplicates})
		if err != nil {
			t.Fatal(err)
		}
		if back, err := parseAck(again); err != nil || back != ack {
			t.Fatalf("round trip of %+v gave %+v, %v", ack, back, err)
		}
	})
}

func TestReadSnippet(t *testing.T) {
	long := strings.Repeat("x", 5000)
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"short", `{"error":"bad_json"}`, `{"error":"bad_json"}`},
		{"trimmed", "\n  {\"error\":\"x\"}\r\n", `{"error":"x"}`},
		{"empty", "", ""},
		{"truncated", long, long[:maxSnippet] + "…"},
		{"exactly the limit", long[:maxSnippet], long[:maxSnippet]},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"cut inside a rune", strings.Repeat("x", maxSnippet-1) + "é", strings.Repeat("x", maxSnippet-1) + "\uFFFD…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readSnippet(strings.NewReader(tc.in))
			if got != tc.want {
				t.Errorf("readSnippet = %q, want %q", got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("readSnippet = %q, not valid UTF-8", got)
			}
		})
	}
	if got := readSnippet(iotest.ErrReader(errors.New("boom"))); !strings.Contains(got, "boom") {
		t.Errorf("unreadable body gave %q, want the read error", got)
	}
}
