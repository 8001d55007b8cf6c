package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/rowform"
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
		// A sender's own overflow is kept as sent, for the cache to merge into (SPEC 5).
		{"overflow object kept", `{"a":1,"_hyp_overflow":{"x":[2]},"_hyp_ingest_seq":5}`, `{"a":1,"_hyp_overflow":{"x":[2]},"_hyp_origin_seq":5}`},
		{"overflow string kept", `{"_hyp_overflow":" {\"x\":\"{}\"} ","_hyp_ingest_seq":5}`, `{"_hyp_overflow":" {\"x\":\"{}\"} ","_hyp_origin_seq":5}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.in, columns.IngestedAtColumn) {
				// Every forwarded row has one; where it stands is not what a case is about.
				tc.in = strings.Replace(tc.in, "{", `{"_hyp_ingested_at":"2026-01-02T03:04:05Z",`, 1)
			}
			// The cache's form keeps each field's value as sent; RowJSON writes it back as
			// JSON.
			c, rerr := parseRows([]byte(tc.in+"\n"), 5, 5, cacheRows, "")
			if rerr != nil {
				t.Fatalf("%s: %s", rerr.Kind, rerr.Msg)
			}
			want := fields(t, []byte(tc.want))
			if len(c.ends) != 1 {
				t.Fatalf("%d rows", len(c.ends))
			}
			if got := fields(t, rowform.RowJSON(c.row(0))); !slices.Equal(got, want) {
				t.Fatalf("got  %q\nwant %s", got, tc.want)
			}
			// Cluster mode gets the user fields' text as sent, without the origin seq.
			c, rerr = parseRows([]byte(tc.in+"\n"), 5, 5, userJSON, "")
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
	c, rerr := parseRows(rows(1, 2, 3, 4), 1, 4, cacheRows, "")
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
			line := string(rowform.RowJSON(body[4:end]))
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

// samePieces checks that parsing body in 2 to 6 pieces gives what parsing it whole gives,
// in both forms: the same rows, seqs and ingest times, or the same error. It returns the
// whole parse's error.
func samePieces(t *testing.T, body []byte, first, last int64) *httpbody.Error {
	t.Helper()
	var wholeErr *httpbody.Error
	for _, form := range []rowForm{cacheRows, userJSON} {
		whole, werr := parseRowsIn(body, first, last, form, "", 1)
		wholeErr = werr
		for parts := 2; parts <= 6; parts++ {
			c, rerr := parseRowsIn(body, first, last, form, "", parts)
			switch {
			case (werr == nil) != (rerr == nil):
				t.Fatalf("form %d, %d pieces: error %v, whole %v", form, parts, rerr, werr)
			case werr != nil && *werr != *rerr:
				t.Fatalf("form %d, %d pieces: error %+v, whole %+v", form, parts, *rerr, *werr)
			case werr == nil && (!slices.Equal(c.rows, whole.rows) || !slices.Equal(c.ends, whole.ends) || !slices.Equal(c.seqs, whole.seqs) || !slices.Equal(c.ats, whole.ats)):
				t.Fatalf("form %d, %d pieces: seqs %v ends %v, whole %v %v", form, parts, c.seqs, c.ends, whole.seqs, whole.ends)
			}
			if c != nil {
				c.release()
			}
		}
		if whole != nil {
			whole.release()
		}
	}
	return wholeErr
}

// A body parsed in pieces (as a forward unit is) gives the rows or the error parsing it
// whole gives, whichever piece a broken rule falls in and whatever lies on a cut.
func TestParseRowsInPieces(t *testing.T) {
	line := func(seq int64) string { return string(rows(seq)) }
	lines := func(from, to int64) string { return string(rows(seqRange(from, to)...)) }
	tests := []struct {
		name        string
		body        string
		first, last int64
		kind        string // the whole parse's error, "" for none
	}{
		{"valid", lines(1, 12), 1, 12, ""},
		{"valid, CRLF and blank lines", strings.ReplaceAll(lines(1, 6), "\n", "\r\n\n") + "\n\n", 1, 6, ""},
		{"bad JSON late", lines(1, 9) + "{\n" + lines(10, 12), 1, 12, "bad_json"},
		{"bad JSON first", "{\n" + lines(1, 12), 1, 12, "bad_json"},
		{"seqs go back in the middle", lines(1, 6) + line(3) + lines(7, 12), 1, 12, "bad_seq"},
		{"seqs go back at the end", lines(1, 11) + line(5), 1, 12, "bad_seq"},
		{"a seq above the range, then going back", lines(1, 6) + line(40) + line(7) + lines(8, 12), 1, 12, "bad_seq_range"},
		{"first row not the declared first", lines(2, 12), 1, 12, "bad_seq_range"},
		{"blank lines before a wrong first row", strings.Repeat("\n", 2000) + lines(2, 12), 1, 12, "bad_seq_range"},
		{"blank lines before the rows", strings.Repeat("\n", 2000) + lines(1, 12), 1, 12, ""},
		{"last row short of the range", lines(1, 11), 1, 12, "bad_seq_range"},
		{"only blank lines", strings.Repeat(" \n", 30), 1, 12, "bad_seq_range"},
		{"two broken rules, the earlier wins", lines(1, 4) + line(2) + lines(5, 8) + "[]\n" + lines(9, 12), 1, 12, "bad_seq"},
		{"reserved field late", lines(1, 10) + `{"_hyp_ingest_seq":11,"_hyp_x":1}` + "\n" + line(12), 1, 12, "bad_field"},
		{"ingest time missing late", lines(1, 10) + `{"_hyp_ingest_seq":11}` + "\n" + line(12), 1, 12, "bad_ingested_at"},
		{"ingest time missing first, a later row out of order", `{"_hyp_ingest_seq":1}` + "\n" + lines(3, 12) + line(2), 1, 12, "bad_ingested_at"},
		{"no trailing newline", strings.TrimSuffix(lines(1, 12), "\n"), 1, 12, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rerr := samePieces(t, []byte(tc.body), tc.first, tc.last)
			switch {
			case tc.kind == "" && rerr != nil:
				t.Fatalf("error %+v", *rerr)
			case tc.kind != "" && (rerr == nil || rerr.Kind != tc.kind):
				t.Fatalf("error %v, want %s", rerr, tc.kind)
			}
		})
	}
}

// TestParseCostBoundsWhatParsingAllocates: what parseRows allocates for a body, shortest
// rows with a long incarnation included, is within what parseCost charged the listener's
// budget before it.
func TestParseCostBoundsWhatParsingAllocates(t *testing.T) {
	const at = `"_hyp_ingested_at":"2026-12-04T10:00:00.000001Z"`
	incarnation := strings.Repeat("a", 128)
	cases := []struct {
		name string
		row  func(seq int) string
	}{
		{"shortest rows", func(seq int) string { return fmt.Sprintf(`{"_hyp_ingest_seq":%d,%s}`, seq, at) }},
		{"ordinary rows", func(seq int) string {
			return fmt.Sprintf(`{"_hyp_ingest_seq":%d,%s,"level":"info","msg":"request handled in %d ms","attrs":{"path":"/api"}}`, seq, at, seq%97)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			const n = 50_000
			for seq := 1; seq <= n; seq++ {
				b.WriteString(tc.row(seq) + "\n")
			}
			body := b.Bytes()
			for _, parts := range []int{1, 2} {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				c, rerr := parseRowsIn(body, 1, n, cacheRows, incarnation, parts)
				runtime.ReadMemStats(&after)
				if rerr != nil {
					t.Fatal(rerr)
				}
				c.release()
				if got, charged := after.TotalAlloc-before.TotalAlloc, parseCostIn(body, incarnation, parts); got > uint64(charged) {
					t.Errorf("parsing %d bytes in %d pieces allocated %d, parseCost charged %d", len(body), parts, got, charged)
				}
			}
		})
	}
}
