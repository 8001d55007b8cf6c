package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/rowform"
)

// FuzzParseForward feeds arbitrary header values to the header parsers. Whatever they
// accept must satisfy every rule the handler relies on later.
func FuzzParseForward(f *testing.F) {
	f.Add("gw-1", "source=web", "1-10", "abc123", "Bearer tok")
	f.Add("gw/1", "source=", "10-1", "", "bearer  tok ")
	f.Add("", "gateway=a/source=b", "-1-2", "a b", "Basic x")
	f.Add("g", "source=\x00", "01-2", "\xff", "Bearer")
	f.Add("g", "source=é", "9223372036854775807-9223372036854775807", "~", "Bearer \t")
	f.Fuzz(func(t *testing.T, gateway, part, seqRange, batch, auth string) {
		h := http.Header{}
		for name, v := range map[string]string{headerGateway: gateway, headerPartition: part, headerSeqRange: seqRange, headerBatchID: batch, "Authorization": auth} {
			if v != "" {
				h.Set(name, v)
			}
		}
		if tok, ok := bearer(h); ok && (tok == "" || tok != string(bytes.TrimSpace([]byte(tok)))) {
			t.Fatalf("bearer(%q) accepted token %q", auth, tok)
		}
		fw, rerr := parseForward(h)
		if rerr != nil {
			if rerr.Status != http.StatusBadRequest || rerr.Kind != "bad_header" {
				t.Fatalf("error %d %q", rerr.Status, rerr.Kind)
			}
			return
		}
		if err := partition.ValidateGateway(fw.gateway); err != nil {
			t.Fatalf("accepted gateway %q: %v", fw.gateway, err)
		}
		if src, ok := partition.SourceFromName(part); !ok || src != fw.source {
			t.Fatalf("partition %q parsed as source %q", part, fw.source)
		}
		if fw.first < 0 || fw.first > fw.last || fmt.Sprintf("%d-%d", fw.first, fw.last) != seqRange {
			t.Fatalf("range %q parsed as %d-%d", seqRange, fw.first, fw.last)
		}
		if !validBatchID(fw.batchID) || fw.batchID != batch {
			t.Fatalf("batch id %q accepted as %q", batch, fw.batchID)
		}
	})
}

type field struct {
	key string
	raw string
}

// fields lists a validated line's top-level fields.
func fields(t *testing.T, line []byte) []field {
	t.Helper()
	var sc jsonrow.Scanner
	var out []field
	if err := sc.Object(line, func(f jsonrow.Field) error {
		out = append(out, field{string(f.Key), string(f.Raw)})
		return nil
	}); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	return out
}

// FuzzParseRows feeds arbitrary bodies and ranges to the body parser, in both its forms,
// which must accept and refuse alike, and cut into pieces, which must change nothing. An accepted body must come out as valid JSON objects
// holding exactly the sender's fields, minus the two it stamps (cluster mode's form), and as
// rows that read back (rowform.RowJSON) as those fields plus the origin seq (the cache's form),
// with positive increasing seqs that run exactly from first to last (the span the ledger
// records), exactly one RFC 3339 ingest time on every row, at most one `_hyp_overflow`,
// which holds one JSON object, and no other field with hyp's prefix in any case.
func FuzzParseRows(f *testing.F) {
	f.Add(rows(1, 2, 3), int64(1), int64(3))
	f.Add([]byte(`{ "a" : "x,y" , "_hyp_ingest_seq" : 7 , "b":{"c":[1,{"d":2}]}}`+"\r\n\n"), int64(0), int64(9))
	f.Add([]byte(`{"\u005fhyp_ingest_seq":1,"_hyp_ingested_at":"t","\u0061":1}`), int64(1), int64(1))
	f.Add([]byte(`{"_hyp_ingest_seq":1,"_hyp_origin_seq":1}`), int64(1), int64(1))
	f.Add([]byte(`{"_hyp_ingest_seq":2}`+"\n"+`{"_hyp_ingest_seq":1}`), int64(1), int64(2))
	f.Add([]byte(`{"_hyp_ingest_seq":1e0}`), int64(1), int64(1))
	f.Add([]byte("{\"_hyp_ingest_seq\":1,\"s\":\"\xff\"}"), int64(1), int64(1))
	f.Add([]byte(`[{"_hyp_ingest_seq":1}]`), int64(1), int64(1))
	f.Add(rows(5), int64(0), int64(1<<63-1))
	f.Add([]byte(`{"_hyp_ingest_seq":1,"_hyp_ingested_at":"not-a-time"}`), int64(1), int64(1))
	f.Add([]byte(`{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2026-01-02T03:04:05\u005a"}`), int64(1), int64(1))
	f.Add([]byte("\n\n"), int64(1), int64(1))
	f.Add(append(rows(1, 2, 3, 4), rows(3, 5, 6)...), int64(1), int64(6))
	f.Add(append([]byte("\n\n\n\n\n\n\n\n\n\n"), rows(2, 3)...), int64(1), int64(3))
	f.Add([]byte(overflowRow(1, `{"a":[1]}`)+overflowRow(2, `"{\"b\":2}"`)), int64(1), int64(2))
	f.Add([]byte(overflowRow(1, `" { } "`)+overflowRow(2, `"{} {}"`)), int64(1), int64(2))
	f.Add([]byte(overflowRow(1, `5`)), int64(1), int64(1))
	f.Add([]byte(`{"_hyp_ingest_seq":1,"_HYP_Ingested_At":"2026-01-02T03:04:05Z"}`), int64(1), int64(1))
	f.Add([]byte(`{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2026-01-02T03:04:05Z","_hyp_ingested_at":"2026-01-02T03:04:05Z"}`), int64(1), int64(1))
	f.Fuzz(func(t *testing.T, body []byte, first, last int64) {
		if first < 0 || last < first {
			return // parseForward never lets such a range through
		}
		samePieces(t, body, first, last) // a forward unit is parsed in pieces
		c, rerr := parseRows(body, first, last, cacheRows, "")
		cj, rerrJSON := parseRows(body, first, last, userJSON, "")
		if (rerr == nil) != (rerrJSON == nil) || (rerr != nil && *rerr != *rerrJSON) {
			t.Fatalf("the two forms disagree: %v and %v", rerr, rerrJSON)
		}
		if rerr != nil {
			// Only a chunk with no row at all has no line to name.
			if rerr.Status != http.StatusBadRequest || rerr.Kind == "" || (rerr.Line < 1 && rerr.Kind != "bad_seq_range") {
				t.Fatalf("error %d %q line %d", rerr.Status, rerr.Kind, rerr.Line)
			}
			return
		}
		if n := len(c.seqs); n == 0 || c.seqs[0] != first || c.seqs[n-1] != last {
			t.Fatalf("range %d-%d accepted for seqs %v", first, last, c.seqs)
		}
		if !slices.Equal(c.seqs, cj.seqs) || !slices.Equal(c.ats, cj.ats) {
			t.Fatalf("the two forms disagree on seqs %v / %v or ingest times %v / %v", c.seqs, cj.seqs, c.ats, cj.ats)
		}
		var in [][]byte
		_ = jsonrow.Lines(body, func(_ int, line []byte) error { in = append(in, line); return nil })
		if len(c.seqs) != len(in) || len(c.ends) != len(in) || len(cj.ends) != len(in) {
			t.Fatalf("%d lines in, %d seqs and %d, %d rows out", len(in), len(c.seqs), len(c.ends), len(cj.ends))
		}
		for i := range in {
			s := c.seqs[i]
			if s < 1 || (i > 0 && s <= c.seqs[i-1]) {
				t.Fatalf("row %d has seq %d (range %d-%d, previous %v)", i, s, first, last, c.seqs[:i])
			}
			var want []field
			var ats, ovfs int
			for _, f := range fields(t, in[i]) {
				switch f.key {
				case columns.OverflowColumn:
					// An object, or a string holding exactly one.
					var obj map[string]json.RawMessage
					text := []byte(f.raw)
					var s string
					if json.Unmarshal(text, &s) == nil {
						text = []byte(s)
					}
					if err := json.Unmarshal(text, &obj); err != nil || obj == nil {
						t.Fatalf("row %d: accepted %s %s: %v", i, columns.OverflowColumn, f.raw, err)
					}
					ovfs++
					want = append(want, f)
				case columns.IngestedAtColumn:
					ats++
					var at string
					if err := json.Unmarshal([]byte(f.raw), &at); err != nil {
						t.Fatalf("row %d: ingest time %s is not a string: %v", i, f.raw, err)
					}
					if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
						t.Fatalf("row %d: accepted ingest time %s: %v", i, f.raw, err)
					}
				case columns.SeqColumn:
				default:
					if len(f.key) >= 5 && strings.EqualFold(f.key[:5], columns.InternalPrefix) {
						t.Fatalf("row %d: accepted the reserved field %q", i, f.key)
					}
					want = append(want, f)
				}
			}
			if ats != 1 || ovfs > 1 {
				t.Fatalf("row %d: accepted with %d ingest times and %d overflows: %q", i, ats, ovfs, in[i])
			}
			// Cluster mode: the user fields, as a JSON object on one line.
			user := cj.row(i)
			if bytes.Contains(user, []byte("\n")) || !json.Valid(user) {
				t.Fatalf("row %d is not one line of valid JSON: %q", i, user)
			}
			if got := fields(t, user); !slices.Equal(got, want) {
				t.Fatalf("row %d: user fields of %q became %q", i, in[i], user)
			}
			// The cache's form: the same fields and the origin seq.
			out := rowform.RowJSON(c.row(i))
			if bytes.Contains(out, []byte("\n")) || !json.Valid(out) {
				t.Fatalf("row %d does not read back as one line of valid JSON: %q", i, out)
			}
			want = append(want, field{originSeqColumn, strconv.FormatInt(s, 10)})
			if got := fields(t, out); !slices.Equal(got, want) {
				t.Fatalf("row %d: %q became %q", i, in[i], out)
			}
		}
		if c.ends[len(in)-1] != len(c.rows) || cj.ends[len(in)-1] != len(cj.rows) {
			t.Fatalf("bytes after the last row")
		}
	})
}

// FuzzIngestedAt holds the fast path for forwarded ingest times to time.Parse: whatever it
// accepts, time.Parse must accept as the same instant, and the spelling senders write must
// take the fast path.
func FuzzIngestedAt(f *testing.F) {
	for _, s := range []string{
		"2026-11-30T09:00:01.123456Z", "2026-11-30T09:00:01Z", "2024-02-29T23:59:59.999999999Z",
		"2025-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-11-30T24:00:00Z", "2026-11-30T09:00:60Z",
		"0000-01-01T00:00:00.1Z", "9999-12-31T23:59:59.0000000001Z", "2026-11-30t09:00:01Z",
		"2026-11-30T09:00:01+02:00", "2026-11-30T09:00:01.Z", "2026-13-01T00:00:00Z", `2026-11-30T09:00:01\u005a`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw := []byte(`"` + s + `"`)
		us, fast := utcMicros(raw)
		if fast {
			ts, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				t.Fatalf("utcMicros accepted %q, time.Parse refuses it: %v", s, err)
			}
			if ts.UnixMicro() != us {
				t.Fatalf("%q: utcMicros %d, time.Parse %d", s, us, ts.UnixMicro())
			}
		}
		if ts, err := time.Parse(time.RFC3339Nano, s); err == nil && ts.Location() == time.UTC && !ts.IsZero() {
			if canon := ts.Format(time.RFC3339Nano); !fast && canon == s && ts.Year() >= 0 && ts.Year() <= 9999 {
				t.Fatalf("%q is what senders write but missed the fast path", s)
			}
		}
		// The whole parse, escapes and all, agrees with time.Parse on the unescaped text.
		got, _, ok := parseIngestedAt(raw, nil)
		text, err := jsonrow.AppendString(nil, raw)
		if err != nil {
			if ok {
				t.Fatalf("parseIngestedAt accepted %s, which is no JSON string", raw)
			}
			return
		}
		ts, err := time.Parse(time.RFC3339Nano, string(text))
		if ok != (err == nil) || ok && got != ts.UnixMicro() {
			t.Fatalf("%s: parseIngestedAt %d %v, time.Parse %v %v", raw, got, ok, ts, err)
		}
	})
}
