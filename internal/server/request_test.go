package server

import (
	"encoding/binary"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hyp-project/hyp/internal/cache"
)

func TestParseRowsRewrites(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"seq last", `{"a":1,"_hyp_ingest_seq":5}`, `{"a":1,"_hyp_origin_seq":5}`},
		{"seq first", `{"_hyp_ingest_seq":5,"a":1}`, `{"a":1,"_hyp_origin_seq":5}`},
		{"only the seq", `{"_hyp_ingest_seq":5}`, `{"_hyp_origin_seq":5}`},
		{"both internal fields go", `{"_hyp_ingested_at":"2026-01-02T03:04:05+01:00","b":null,"_hyp_ingest_seq":5}`, `{"b":null,"_hyp_origin_seq":5}`},
		{"whitespace inside fields kept", `{ "a" : 1 , "_hyp_ingest_seq" : 5 , "b":[1, 2] }`, `{ "a" : 1, "b":[1, 2],"_hyp_origin_seq":5}`},
		{"whitespace around the object dropped", "  \t{\"_hyp_ingest_seq\":5}  ", `{"_hyp_origin_seq":5}`},
		{"escapes kept raw", `{"\u0061":"x\ny\u00e9","_hyp_ingest_seq":5}`, `{"\u0061":"x\ny\u00e9","_hyp_origin_seq":5}`},
		{"escaped seq key recognised", `{"\u005fhyp_ingest_seq":5,"a":{"_hyp_ingest_seq":1}}`, `{"a":{"_hyp_ingest_seq":1},"_hyp_origin_seq":5}`},
		{"escaped ingest time accepted", `{"_hyp_ingested_at":"2026-01-02T03:04:05.5\u005a","_hyp_ingest_seq":5}`, `{"_hyp_origin_seq":5}`},
		{"commas inside values", `{"a":"x,y","_hyp_ingest_seq":5,"b":{"c":1,"d":[1,2]}}`, `{"a":"x,y","b":{"c":1,"d":[1,2]},"_hyp_origin_seq":5}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The cache's form keeps each field's value as sent; RowJSON writes it back as
			// JSON.
			c, rerr := parseRows([]byte(tc.in+"\n"), 5, 5, cacheRows)
			if rerr != nil {
				t.Fatalf("%s: %s", rerr.Kind, rerr.Msg)
			}
			want := fields(t, []byte(tc.want))
			if len(c.ends) != 1 {
				t.Fatalf("%d rows", len(c.ends))
			}
			if got := fields(t, cache.RowJSON(c.row(0))); !slices.Equal(got, want) {
				t.Fatalf("got  %q\nwant %s", got, tc.want)
			}
			// Cluster mode gets the user fields' text as sent, without the origin seq.
			c, rerr = parseRows([]byte(tc.in+"\n"), 5, 5, userJSON)
			if rerr != nil {
				t.Fatalf("%s: %s", rerr.Kind, rerr.Msg)
			}
			wantJSON := strings.Replace(strings.Replace(tc.want, `,"_hyp_origin_seq":5`, "", 1), `"_hyp_origin_seq":5`, "", 1)
			if got := string(c.rows); got != wantJSON {
				t.Fatalf("user JSON\ngot  %s\nwant %s", got, wantJSON)
			}
		})
	}
}

func TestChunkFreshBody(t *testing.T) {
	c, rerr := parseRows(rows(1, 2, 3, 4), 1, 4, cacheRows)
	if rerr != nil {
		t.Fatal(rerr.Msg)
	}
	tests := []struct {
		held  []bool
		seqs  string // the origin seqs expected in the result, in order
		count int
	}{
		{[]bool{false, false, false, false}, "1234", 4},
		{[]bool{true, false, true, false}, "24", 2},
		{[]bool{false, true, true, true}, "1", 1},
		{[]bool{true, true, true, true}, "", 0},
	}
	for _, tc := range tests {
		body, n := c.freshBody(tc.held)
		var seqs strings.Builder
		framed := 0
		for len(body) > 0 {
			if len(body) < 4 || int(binary.LittleEndian.Uint32(body)) > len(body)-4 {
				t.Fatalf("freshBody(%v): %d bytes left do not frame a row", tc.held, len(body))
			}
			end := 4 + int(binary.LittleEndian.Uint32(body))
			line := string(cache.RowJSON(body[4:end]))
			if i := strings.Index(line, `"_hyp_origin_seq":`); i >= 0 {
				seqs.WriteString(strings.TrimSuffix(line[i+len(`"_hyp_origin_seq":`):], "}"))
			}
			body, framed = body[end:], framed+1
		}
		if n != tc.count || framed != n || seqs.String() != tc.seqs {
			t.Errorf("freshBody(%v) = %d rows (%d framed) %q, want %d %q", tc.held, n, framed, seqs.String(), tc.count, tc.seqs)
		}
	}
}

func TestParseSeqRange(t *testing.T) {
	tests := []struct {
		in          string
		first, last int64
		ok          bool
	}{
		{"1-2", 1, 2, true},
		{"0-0", 0, 0, true},
		{"5-5", 5, 5, true},
		{"9223372036854775807-9223372036854775807", 1<<63 - 1, 1<<63 - 1, true},
		{"", 0, 0, false},
		{"1", 0, 0, false},
		{"1-", 0, 0, false},
		{"-1", 0, 0, false},
		{"2-1", 0, 0, false},
		{"01-2", 0, 0, false},
		{"1 - 2", 0, 0, false},
		{"1-2-3", 0, 0, false},
		{"1.0-2", 0, 0, false},
		{"0x1-2", 0, 0, false},
	}
	for _, tc := range tests {
		a, b, err := parseSeqRange(tc.in)
		if (err == nil) != tc.ok || a != tc.first || b != tc.last {
			t.Errorf("parseSeqRange(%q) = %d, %d, %v", tc.in, a, b, err)
		}
	}
}

func TestBearer(t *testing.T) {
	tests := []struct {
		values []string
		token  string
		ok     bool
	}{
		{[]string{"Bearer abc"}, "abc", true},
		{[]string{"bearer abc"}, "abc", true},
		{[]string{"Bearer   abc  "}, "abc", true},
		{[]string{"Bearer"}, "", false},
		{[]string{"Bearer "}, "", false},
		{[]string{"Basic abc"}, "", false},
		{[]string{"Bearer abc", "Bearer abc"}, "", false},
		{nil, "", false},
	}
	for _, tc := range tests {
		h := http.Header{"Authorization": tc.values}
		if tok, ok := bearer(h); tok != tc.token || ok != tc.ok {
			t.Errorf("bearer(%q) = %q, %v", tc.values, tok, ok)
		}
	}
}
