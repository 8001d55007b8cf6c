package forward

import "testing"

func TestRefusesArrow(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   bool
	}{
		{415, `{"error":"unsupported_media_type"}`, true},
		{415, "", true},
		{400, `{"error":"bad_json","line":1,"message":"invalid character"}`, true}, // a server from before Arrow bodies
		{400, `{"error":"bad_arrow","message":"truncated"}`, false},                // a server that reads Arrow refuses the chunk
		{400, `{"error":"bad_seq","line":3}`, false},
		{400, "Client sent an HTTP request to an HTTPS server.", false},
		{422, `{"error":"bad_json"}`, false},
		{503, `{"error":"unavailable"}`, false},
	}
	for _, tc := range cases {
		if got := refusesArrow(tc.status, tc.body); got != tc.want {
			t.Errorf("refusesArrow(%d, %s) = %v, want %v", tc.status, tc.body, got, tc.want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for s, want := range map[string]Format{"arrow": Arrow, "ndjson": NDJSON} {
		if got, err := ParseFormat(s); err != nil || got != want || got.String() != s {
			t.Errorf("ParseFormat(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseFormat("json"); err == nil {
		t.Error("ParseFormat(json) accepted")
	}
}
