package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/partition"
)

const (
	testToken   = "s3cret-token"
	testGateway = "gw-1"
	testSource  = "web"
)

// env is a server over a real cache and ledger in a temp dir.
type env struct {
	t     *testing.T
	cache *cache.Cache
	led   *ledger.Ledger
	h     http.Handler
	reg   *prometheus.Registry
}

func newEnv(t *testing.T, tweak func(*Options)) *env {
	t.Helper()
	return newEnvStore(t, tweak, nil)
}

// newEnvStore builds an env whose handler sees the cache through wrap, when not nil.
func newEnvStore(t *testing.T, tweak func(*Options), wrap func(Store) Store) *env {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	c, err := cache.Open(ctx, filepath.Join(dir, "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	led, err := ledger.Open(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = led.Close() })
	reg := prometheus.NewRegistry()
	o := Options{
		Tokens:       []Token{{Secret: "other-token"}, {Secret: testToken}},
		MaxBodyBytes: 1 << 20,
		Registerer:   reg,
		Logger:       slog.New(slog.DiscardHandler),
	}
	if tweak != nil {
		tweak(&o)
	}
	var store Store = c
	if wrap != nil {
		store = wrap(c)
	}
	h, err := NewHandler(store, led, o)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, cache: c, led: led, h: h, reg: reg}
}

// rows renders one NDJSON row per seq, as a gateway's forward sink sends them.
func rows(seqs ...int64) []byte {
	var b bytes.Buffer
	for _, s := range seqs {
		fmt.Fprintf(&b, `{"msg":"row %d","_hyp_ingest_seq":%d,"_hyp_ingested_at":"2026-01-02T03:04:05.000006Z","n":%d}`+"\n", s, s, s)
	}
	return b.Bytes()
}

// overflowRow is a forwarded row of seq whose own `_hyp_overflow` is the JSON value ovf.
func overflowRow(seq int64, ovf string) string {
	return fmt.Sprintf(`{"msg":"row %d","_hyp_ingest_seq":%d,"_hyp_ingested_at":"2026-01-02T03:04:05Z","_hyp_overflow":%s}`+"\n", seq, seq, ovf)
}

func seqRange(a, b int64) []int64 {
	var out []int64
	for s := a; s <= b; s++ {
		out = append(out, s)
	}
	return out
}

// request is a valid forward request for range [a, b]; mods adjust it.
func request(a, b int64, body []byte, mods ...func(*http.Request)) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/ingest/logs", bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+testToken)
	r.Header.Set("Content-Type", "application/x-ndjson")
	r.Header.Set(headerGateway, testGateway)
	r.Header.Set(headerPartition, "source="+testSource)
	r.Header.Set(headerBatchID, fmt.Sprintf("%x", a*1_000_003+b))
	r.Header.Set(headerSeqRange, fmt.Sprintf("%d-%d", a, b))
	for _, m := range mods {
		m(r)
	}
	return r
}

type reply struct {
	code       int
	header     http.Header
	Accepted   int    `json:"accepted"`
	Duplicates int    `json:"duplicates"`
	Error      string `json:"error"`
	Line       int    `json:"line"`
	Message    string `json:"message"`
}

func (e *env) do(r *http.Request) reply {
	e.t.Helper()
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	rp := reply{code: w.Code, header: w.Header()}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("reply %d has Content-Type %q: %s", w.Code, ct, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &rp); err != nil {
		e.t.Fatalf("reply %d is not JSON: %v: %s", w.Code, err, w.Body)
	}
	if w.Code != http.StatusOK && rp.Error == "" {
		e.t.Fatalf("reply %d has no error kind: %s", w.Code, w.Body)
	}
	return rp
}

// send posts a chunk and requires a 200 with the given counts.
func (e *env) send(a, b int64, seqs []int64, accepted, duplicates int) {
	e.t.Helper()
	rp := e.do(request(a, b, rows(seqs...)))
	if rp.code != http.StatusOK || rp.Accepted != accepted || rp.Duplicates != duplicates {
		e.t.Fatalf("chunk %d-%d: got %d accepted=%d duplicates=%d %s %s; want 200 accepted=%d duplicates=%d",
			a, b, rp.code, rp.Accepted, rp.Duplicates, rp.Error, rp.Message, accepted, duplicates)
	}
}

// storedRow is one row of the server's cache, every column rendered as JSON.
type storedRow map[string]string

// stored returns the rows of the test partition in server seq order.
func stored(t *testing.T, c *cache.Cache) []storedRow {
	t.Helper()
	ctx := context.Background()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	name := partition.GatewayName(testGateway, testSource)
	var out []storedRow
	for _, st := range c.Status() {
		if st.Dataset != "logs" || st.Partition != name {
			continue
		}
		_, err := c.Scan(ctx, "logs", name, 0, st.HeadSeq, func(rec arrow.RecordBatch) error {
			for i := range int(rec.NumRows()) {
				row := storedRow{}
				for j, f := range rec.Schema().Fields() {
					if rec.Column(j).IsNull(i) {
						continue
					}
					b, err := json.Marshal(rec.Column(j).GetOneForMarshal(i))
					if err != nil {
						return err
					}
					row[f.Name] = string(b)
				}
				out = append(out, row)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// originSeqs lists the stored rows' origin seqs in storage order.
func originSeqs(t *testing.T, c *cache.Cache) []int64 {
	t.Helper()
	var out []int64
	for _, r := range stored(t, c) {
		s, err := strconv.ParseInt(r[originSeqColumn], 10, 64)
		if err != nil {
			t.Fatalf("row %v: %s: %v", r, originSeqColumn, err)
		}
		out = append(out, s)
	}
	return out
}

func TestForwardDedupes(t *testing.T) {
	type step struct {
		a, b       int64
		seqs       []int64
		accepted   int
		duplicates int
	}
	tests := []struct {
		name   string
		steps  []step
		stored []int64
	}{
		{
			name:   "one chunk",
			steps:  []step{{1, 3, []int64{1, 2, 3}, 3, 0}},
			stored: []int64{1, 2, 3},
		},
		{
			name:   "same chunk twice",
			steps:  []step{{1, 5, seqRange(1, 5), 5, 0}, {1, 5, seqRange(1, 5), 0, 5}},
			stored: seqRange(1, 5),
		},
		{
			name:   "overlapping re-chunked re-send",
			steps:  []step{{1, 100, seqRange(1, 100), 100, 0}, {50, 150, seqRange(50, 150), 50, 51}},
			stored: seqRange(1, 150),
		},
		{
			name:   "re-send split into smaller chunks",
			steps:  []step{{1, 10, seqRange(1, 10), 10, 0}, {1, 4, seqRange(1, 4), 0, 4}, {5, 12, seqRange(5, 12), 2, 6}},
			stored: seqRange(1, 12),
		},
		{
			name: "sparse seqs: the span of the rows counts, not only the rows seen",
			steps: []step{
				{11, 19, []int64{11, 15, 19}, 3, 0},
				{3, 25, []int64{3, 11, 15, 19, 25}, 2, 3},
				// Inside a stored span: the sender promised the span had no other rows.
				{12, 14, []int64{12, 14}, 0, 2},
			},
			stored: []int64{11, 15, 19, 3, 25},
		},
		{
			name:   "later chunk first",
			steps:  []step{{11, 20, seqRange(11, 20), 10, 0}, {1, 10, seqRange(1, 10), 10, 0}, {1, 20, seqRange(1, 20), 0, 20}},
			stored: append(seqRange(11, 20), seqRange(1, 10)...),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			for _, s := range tc.steps {
				e.send(s.a, s.b, s.seqs, s.accepted, s.duplicates)
			}
			if got := originSeqs(t, e.cache); !slices.Equal(got, tc.stored) {
				t.Fatalf("stored origin seqs %v, want %v", got, tc.stored)
			}
		})
	}
}

func TestStoredRowsKeepSenderFields(t *testing.T) {
	e := newEnv(t, nil)
	body := `{"msg":"caf\u00e9 \"q\"","_hyp_ingest_seq":7,"nested":{"a":[1,2]},"_hyp_ingested_at":"2026-01-02T03:04:05Z","ok":true}` + "\n" +
		"\r\n" + // blank lines are skipped, as on the daemon
		`{ "_hyp_ingest_seq" : 9 , "n" : 1.5, "_hyp_ingested_at" : "2026-01-02T03:04:05Z" }` + "\r\n"
	rp := e.do(request(7, 9, []byte(body)))
	if rp.code != http.StatusOK || rp.Accepted != 2 {
		t.Fatalf("got %+v", rp)
	}
	got := stored(t, e.cache)
	if len(got) != 2 {
		t.Fatalf("stored %d rows: %v", len(got), got)
	}
	want := []map[string]string{
		{"msg": `"café \"q\""`, "nested": `"{\"a\":[1,2]}"`, "ok": "true", originSeqColumn: "7"},
		{"n": "1.5", originSeqColumn: "9"},
	}
	for i, w := range want {
		for k, v := range w {
			if got[i][k] != v {
				t.Errorf("row %d: %s = %s, want %s (row %v)", i, k, got[i][k], v, got[i])
			}
		}
		// The server's cache stamps its own seq and time, never the sender's.
		if s := got[i][columns.SeqColumn]; s != strconv.Itoa(i+1) {
			t.Errorf("row %d: server seq %s, want the server's own %d", i, s, i+1)
		}
		if at := got[i][columns.IngestedAtColumn]; strings.HasPrefix(at, `"2026-01-02`) {
			t.Errorf("row %d: the sender's ingest time was stored: %s", i, at)
		}
	}
}

func TestRejectsAndStoresNothing(t *testing.T) {
	gz := func(r *http.Request) { r.Header.Set("Content-Encoding", "gzip") }
	set := func(h, v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set(h, v) } }
	del := func(h string) func(*http.Request) { return func(r *http.Request) { r.Header.Del(h) } }
	add := func(h, v string) func(*http.Request) { return func(r *http.Request) { r.Header.Add(h, v) } }
	good := rows(1, 2)
	tests := []struct {
		name string
		body string // "" means good
		mods []func(*http.Request)
		code int
		kind string
		line int
	}{
		{"no token", "", []func(*http.Request){del("Authorization")}, 401, "unauthorized", 0},
		{"unknown token", "", []func(*http.Request){set("Authorization", "Bearer nope")}, 401, "unauthorized", 0},
		{"token prefix", "", []func(*http.Request){set("Authorization", "Bearer "+testToken[:5])}, 401, "unauthorized", 0},
		{"basic scheme", "", []func(*http.Request){set("Authorization", "Basic "+testToken)}, 401, "unauthorized", 0},
		{"two tokens", "", []func(*http.Request){add("Authorization", "Bearer "+testToken)}, 401, "unauthorized", 0},
		{"bad dataset", "", []func(*http.Request){func(r *http.Request) { r.URL.Path = "/v1/ingest/Logs" }}, 400, "bad_dataset", 0},
		{"no gateway", "", []func(*http.Request){del(headerGateway)}, 400, "bad_header", 0},
		{"bad gateway", "", []func(*http.Request){set(headerGateway, "gw/1")}, 400, "bad_header", 0},
		{"two gateways", "", []func(*http.Request){add(headerGateway, "gw-2")}, 400, "bad_header", 0},
		{"no partition", "", []func(*http.Request){del(headerPartition)}, 400, "bad_header", 0},
		{"partition without source=", "", []func(*http.Request){set(headerPartition, testSource)}, 400, "bad_header", 0},
		{"gateway partition", "", []func(*http.Request){set(headerPartition, "gateway=x/source=web")}, 400, "bad_header", 0},
		{"empty source", "", []func(*http.Request){set(headerPartition, "source=")}, 400, "bad_header", 0},
		{"no batch id", "", []func(*http.Request){del(headerBatchID)}, 400, "bad_header", 0},
		{"no range", "", []func(*http.Request){del(headerSeqRange)}, 400, "bad_header", 0},
		{"range reversed", "", []func(*http.Request){set(headerSeqRange, "2-1")}, 400, "bad_header", 0},
		{"range negative", "", []func(*http.Request){set(headerSeqRange, "-1-2")}, 400, "bad_header", 0},
		{"range one number", "", []func(*http.Request){set(headerSeqRange, "2")}, 400, "bad_header", 0},
		{"range with plus", "", []func(*http.Request){set(headerSeqRange, "+1-2")}, 400, "bad_header", 0},
		{"range overflow", "", []func(*http.Request){set(headerSeqRange, "1-9223372036854775808")}, 400, "bad_header", 0},
		{"bad json", string(rows(1)) + "{\"a\":}\n", nil, 400, "bad_json", 2},
		{"not an object", "[1]\n", nil, 400, "bad_json", 1},
		{"line after blank lines", "\n\n" + string(rows(1)) + "nope\n", nil, 400, "bad_json", 4},
		{"no seq", `{"a":1}`, nil, 400, "bad_seq", 1},
		{"string seq", `{"_hyp_ingest_seq":"1"}`, nil, 400, "bad_seq", 1},
		{"float seq", `{"_hyp_ingest_seq":1.0}`, nil, 400, "bad_seq", 1},
		{"seq twice", `{"_hyp_ingest_seq":1,"_hyp_ingest_seq":2}`, nil, 400, "bad_seq", 1},
		{"seq zero", string(rows(0)), []func(*http.Request){set(headerSeqRange, "0-0")}, 400, "bad_seq", 1},
		{"seq negative", `{"_hyp_ingest_seq":-1}`, nil, 400, "bad_seq", 1},
		{"seq above range", string(rows(1, 3)), nil, 400, "bad_seq_range", 2},
		{"seq repeated", string(rows(1, 1)), nil, 400, "bad_seq", 2},
		{"seq going back", string(rows(1, 3, 2)), []func(*http.Request){set(headerSeqRange, "1-3")}, 400, "bad_seq", 3},
		{"first row not the range's first", string(rows(2, 1)), nil, 400, "bad_seq_range", 1},
		{"range below the first row", "", []func(*http.Request){set(headerSeqRange, "0-2")}, 400, "bad_seq_range", 1},
		{"range above the last row", "", []func(*http.Request){set(headerSeqRange, "1-3")}, 400, "bad_seq_range", 2},
		{"absurd range on one row", string(rows(1)), []func(*http.Request){set(headerSeqRange, "0-9223372036854775807")}, 400, "bad_seq_range", 1},
		{"absurd range after the first row", "", []func(*http.Request){set(headerSeqRange, "1-9223372036854775807")}, 400, "bad_seq_range", 2},
		{"no rows", "\n\n", nil, 400, "bad_seq_range", 0},
		{"ingested_at not a string", `{"_hyp_ingest_seq":1,"_hyp_ingested_at":5}`, nil, 400, "bad_ingested_at", 1},
		{"ingested_at not a time", string(rows(1)) + `{"_hyp_ingest_seq":2,"_hyp_ingested_at":"not-a-time"}`, nil, 400, "bad_ingested_at", 2},
		{"ingested_at a date only", `{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2026-01-02"}` + "\n" + string(rows(2)), nil, 400, "bad_ingested_at", 1},
		{"ingested_at without a zone", `{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2026-01-02T03:04:05"}` + "\n" + string(rows(2)), nil, 400, "bad_ingested_at", 1},
		{"ingested_at missing", string(rows(1)) + `{"_hyp_ingest_seq":2,"msg":"x"}`, nil, 400, "bad_ingested_at", 2},
		{"ingested_at twice", `{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2026-01-02T03:04:05Z","_hyp_ingested_at":"2026-01-02T03:04:06Z"}` + "\n" + string(rows(2)), nil, 400, "bad_ingested_at", 1},
		{"ingested_at in upper case", `{"_hyp_ingest_seq":1,"_HYP_INGESTED_AT":"2026-01-02T03:04:05Z"}` + "\n" + string(rows(2)), nil, 400, "bad_field", 1},
		{"forged origin seq", `{"_hyp_ingest_seq":1,"_hyp_origin_seq":1}`, nil, 400, "bad_field", 1},
		{"escaped reserved key", `{"_hyp_ingest_seq":1,"\u005fhyp_x":1}`, nil, 400, "bad_field", 1},
		{"reserved key in mixed case", `{"_hyp_ingest_seq":1,"_Hyp_Source":"x"}`, nil, 400, "bad_field", 1},
		{"seq key in upper case", `{"_HYP_INGEST_SEQ":1}`, nil, 400, "bad_field", 1},
		{"overflow a number", overflowRow(1, `5`) + string(rows(2)), nil, 400, "bad_field", 1},
		{"overflow an array", overflowRow(1, `[{"a":1}]`) + string(rows(2)), nil, 400, "bad_field", 1},
		{"overflow null", overflowRow(1, `null`) + string(rows(2)), nil, 400, "bad_field", 1},
		{"overflow a plain string", string(rows(1)) + overflowRow(2, `"abc"`), nil, 400, "bad_field", 2},
		{"overflow a string of broken JSON", overflowRow(1, `"{not json}"`) + string(rows(2)), nil, 400, "bad_field", 1},
		{"overflow a string of two objects", overflowRow(1, `"{\"a\":1} {\"b\":2}"`) + string(rows(2)), nil, 400, "bad_field", 1},
		{"overflow a string of an array", overflowRow(1, `"[1]"`) + string(rows(2)), nil, 400, "bad_field", 1},
		{"overflow an empty string", overflowRow(1, `""`) + string(rows(2)), nil, 400, "bad_field", 1},
		{"overflow twice", `{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2026-01-02T03:04:05Z","_hyp_overflow":{"a":1},"_hyp_overflow":{"b":2}}` + "\n" + string(rows(2)), nil, 400, "bad_field", 1},
		{"overflow in upper case", `{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2026-01-02T03:04:05Z","_HYP_OVERFLOW":{"a":1}}` + "\n" + string(rows(2)), nil, 400, "bad_field", 1},
		{"empty key", `{"_hyp_ingest_seq":1,"":1}`, nil, 400, "bad_field", 1},
		{"bad gzip", "not gzip", []func(*http.Request){gz}, 400, "bad_gzip", 0},
		{"bad zstd", "not zstd", []func(*http.Request){set("Content-Encoding", "zstd")}, 400, "bad_zstd", 0},
		{"unsupported encoding", "", []func(*http.Request){set("Content-Encoding", "br")}, 415, "unsupported_encoding", 0},
		{"wrong method", "", []func(*http.Request){func(r *http.Request) { r.Method = http.MethodGet }}, 405, "method_not_allowed", 0},
		{"unknown path", "", []func(*http.Request){func(r *http.Request) { r.URL.Path = "/v1/ingest/logs/x" }}, 404, "not_found", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			body := good
			if tc.body != "" {
				body = []byte(tc.body)
			}
			rp := e.do(request(1, 2, body, tc.mods...))
			if rp.code != tc.code || rp.Error != tc.kind || rp.Line != tc.line {
				t.Fatalf("got %d %q line %d (%s); want %d %q line %d", rp.code, rp.Error, rp.Line, rp.Message, tc.code, tc.kind, tc.line)
			}
			if strings.Contains(rp.Message, testToken) {
				t.Fatalf("the reply leaks the token: %s", rp.Message)
			}
			if got := stored(t, e.cache); len(got) != 0 {
				t.Fatalf("a rejected request stored %v", got)
			}
			// Nothing was recorded either: the good chunk still goes in whole.
			e.send(1, 2, []int64{1, 2}, 2, 0)
		})
	}
}

// TestForwardedOverflowIsMerged holds the server to SPEC 5: a forwarded row's own
// `_hyp_overflow`, an object or a string holding one, keeps every field, and the fields the
// server's cache overflows itself join it; without an overflow of the server's the value
// is kept as sent.
func TestForwardedOverflowIsMerged(t *testing.T) {
	var wide strings.Builder
	fmt.Fprintf(&wide, `{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2026-01-02T03:04:05Z"`)
	for i := range cache.MaxColumns + 1 {
		fmt.Fprintf(&wide, `,"f%04d":%d`, i, i)
	}
	wide.WriteString("}\n")
	for _, tc := range []struct {
		name string
		own  string            // the row's `_hyp_overflow` as sent, "" for none
		want map[string]string // the stored overflow's fields, as JSON, when the server overflows
		kept string            // the stored overflow when the server does not
	}{
		{"object", `{"x":2,"y":{"z":[1]}}`, map[string]string{"x": "2", "y": `{"z":[1]}`}, `{"x":2,"y":{"z":[1]}}`},
		{"string holding an object", `"{\"x\":\"{}\",\"n\":null}"`, map[string]string{"x": `"{}"`, "n": "null"}, `{"x":"{}","n":null}`},
		{"padded string", `" \t{ \"x\" : 1 }\n"`, map[string]string{"x": "1"}, " \t{ \"x\" : 1 }\n"},
		{"empty object", `{ }`, map[string]string{}, `{ }`},
		{"string holding an empty object", `" {  } "`, map[string]string{}, " {  } "},
		{"none", "", map[string]string{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := `{"_hyp_ingest_seq":2,"_hyp_ingested_at":"2026-01-02T03:04:05Z","late":"beyond the cap"`
			if tc.own != "" {
				row += `,"_hyp_overflow":` + tc.own
			}
			row += "}\n"
			// The server overflows "late" in a dataset whose first row filled the cap.
			e := newEnv(t, nil)
			if rp := e.do(request(1, 2, []byte(wide.String()+row))); rp.code != http.StatusOK {
				t.Fatalf("got %+v", rp)
			}
			got := stored(t, e.cache)
			if len(got) != 2 {
				t.Fatalf("%d rows stored", len(got))
			}
			var text string
			if err := json.Unmarshal([]byte(got[1][columns.OverflowColumn]), &text); err != nil {
				t.Fatalf("%s %s: %v", columns.OverflowColumn, got[1][columns.OverflowColumn], err)
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal([]byte(text), &fields); err != nil {
				t.Fatalf("%s %s is not one JSON object: %v", columns.OverflowColumn, text, err)
			}
			want := maps.Clone(tc.want)
			want["late"] = `"beyond the cap"`
			if keys := topKeys(t, text); len(fields) != len(want) || len(keys) != len(want) {
				t.Errorf("%s = %s, want the fields %v", columns.OverflowColumn, text, want)
			}
			for k, v := range want {
				if string(fields[k]) != v {
					t.Errorf("%s = %s: %s is %s, want %s", columns.OverflowColumn, text, k, fields[k], v)
				}
			}

			// In a dataset with room, the row's own overflow is kept as it was sent.
			e = newEnv(t, nil)
			if rp := e.do(request(2, 2, []byte(row))); rp.code != http.StatusOK {
				t.Fatalf("got %+v", rp)
			}
			got = stored(t, e.cache)
			text = ""
			if v, ok := got[0][columns.OverflowColumn]; ok {
				if err := json.Unmarshal([]byte(v), &text); err != nil {
					t.Fatal(err)
				}
			}
			if text != tc.kept || got[0]["late"] != `"beyond the cap"` {
				t.Errorf("stored %v, want %s %q and late kept", got[0], columns.OverflowColumn, tc.kept)
			}
		})
	}
}

// topKeys lists a JSON object's keys in order, duplicates included, which decoding into a
// map would fold.
func topKeys(t *testing.T, text string) []string {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(text))
	var keys []string
	if _, err := d.Token(); err != nil { // {
		t.Fatal(err)
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestUnauthorizedNamesScheme(t *testing.T) {
	e := newEnv(t, nil)
	rp := e.do(request(1, 1, rows(1), func(r *http.Request) { r.Header.Del("Authorization") }))
	if got := rp.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Fatalf("WWW-Authenticate = %q", got)
	}
}

func compress(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestGzip(t *testing.T) {
	e := newEnv(t, nil)
	rp := e.do(request(1, 50, compress(t, rows(seqRange(1, 50)...)), func(r *http.Request) { r.Header.Set("Content-Encoding", "gzip") }))
	if rp.code != http.StatusOK || rp.Accepted != 50 {
		t.Fatalf("got %+v", rp)
	}
	if got := originSeqs(t, e.cache); !slices.Equal(got, seqRange(1, 50)) {
		t.Fatalf("stored %v", got)
	}
}

// TestZstd: a zstd body is stored like a plain one, and one that inflates past the body
// limit is refused as too large, the same limit as sent and after decompression.
func TestZstd(t *testing.T) {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	body := rows(seqRange(1, 50)...)
	zr := func(r *http.Request) { r.Header.Set("Content-Encoding", "zstd") }
	e := newEnv(t, func(o *Options) { o.MaxBodyBytes = int64(len(body)) })
	rp := e.do(request(1, 50, enc.EncodeAll(body, nil), zr))
	if rp.code != http.StatusOK || rp.Accepted != 50 {
		t.Fatalf("got %+v", rp)
	}
	if got := originSeqs(t, e.cache); !slices.Equal(got, seqRange(1, 50)) {
		t.Fatalf("stored %v", got)
	}
	bomb := append(bytes.Repeat([]byte("\n"), 1000*len(body)), rows(51)...)
	if rp := e.do(request(51, 51, enc.EncodeAll(bomb, nil), zr)); rp.code != http.StatusRequestEntityTooLarge || rp.Error != "too_large" {
		t.Fatalf("a body inflating past the limit got %d %s, want 413 too_large", rp.code, rp.Error)
	}
}

func TestBodyLimit(t *testing.T) {
	at := rows(seqRange(1, 20)...)   // exactly the limit, and compresses well below it
	over := rows(seqRange(1, 21)...) // over it as sent
	limit := int64(len(at))
	blanks := bytes.Repeat([]byte("\n"), int(limit)*1000) // compresses far below the limit
	tests := []struct {
		name string
		body []byte
		gzip bool
		code int
	}{
		{"at the limit", at, false, http.StatusOK},
		{"over the limit", over, false, http.StatusRequestEntityTooLarge},
		{"gzip at the limit", compress(t, at), true, http.StatusOK},
		{"gzip inflating past the limit", compress(t, append(blanks, at...)), true, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.MaxBodyBytes = limit })
			r := request(1, 20, tc.body)
			if tc.gzip {
				r.Header.Set("Content-Encoding", "gzip")
			}
			rp := e.do(r)
			if rp.code != tc.code {
				t.Fatalf("got %d %s %s, want %d", rp.code, rp.Error, rp.Message, tc.code)
			}
			if tc.code != http.StatusOK && rp.Error != "too_large" {
				t.Fatalf("error kind %q", rp.Error)
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	e := newEnv(t, func(o *Options) {
		o.RateLimit, o.Burst = 10, 10
		o.Now = func() time.Time { return now }
	})
	e.send(1, 8, seqRange(1, 8), 8, 0) // 2 tokens left
	rp := e.do(request(9, 13, rows(seqRange(9, 13)...)))
	if rp.code != http.StatusTooManyRequests || rp.Error != "rate_limited" || rp.header.Get("Retry-After") != "1" {
		t.Fatalf("got %d %q Retry-After %q", rp.code, rp.Error, rp.header.Get("Retry-After"))
	}
	if got := originSeqs(t, e.cache); len(got) != 8 {
		t.Fatalf("a refused request stored rows: %v", got)
	}
	now = now.Add(time.Second)
	e.send(9, 13, seqRange(9, 13), 5, 0)
}

func TestBucket(t *testing.T) {
	type take struct {
		after time.Duration // clock advance before the take
		rows  int
		wait  time.Duration // 0: admitted
	}
	tests := []struct {
		name  string
		rate  float64
		burst int
		takes []take
	}{
		{"within burst", 10, 10, []take{{0, 10, 0}, {0, 1, 100 * time.Millisecond}}},
		{"refill", 10, 10, []take{{0, 10, 0}, {500 * time.Millisecond, 5, 0}, {0, 1, 100 * time.Millisecond}}},
		{"refill capped at burst", 10, 10, []take{{time.Hour, 10, 0}, {0, 1, 100 * time.Millisecond}}},
		{"a refusal charges nothing", 10, 10, []take{{0, 8, 0}, {0, 5, 300 * time.Millisecond}, {0, 2, 0}}},
		{"chunk over the burst passes when full and leaves debt", 10, 10, []take{{0, 30, 0}, {0, 1, 2100 * time.Millisecond}, {2100 * time.Millisecond, 1, 0}}},
		{"chunk over the burst waits for a full bucket", 10, 10, []take{{0, 1, 0}, {0, 30, 100 * time.Millisecond}}},
		{"default burst is one second", 5, 0, []take{{0, 5, 0}, {0, 1, 200 * time.Millisecond}}},
		{"default burst is at least one row", 0.5, 0, []take{{0, 1, 0}, {0, 1, 2 * time.Second}}},
		{"empty request passes", 10, 10, []take{{0, 10, 0}, {0, 0, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(0, 0)
			b := newBucket(tc.rate, tc.burst, func() time.Time { return now })
			for i, tk := range tc.takes {
				now = now.Add(tk.after)
				if got := b.take(tk.rows); (got - tk.wait).Abs() > time.Millisecond {
					t.Fatalf("take %d (%d rows) waits %v, want %v", i, tk.rows, got, tk.wait)
				}
			}
		})
	}
}

func TestConcurrentSameKeyStoresEachSeqOnce(t *testing.T) {
	e := newEnv(t, nil)
	// Every worker sends overlapping chunks of the same 200 seqs, in a different order.
	const workers, top, size = 8, 200, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range top / size * 2 {
				a := int64((i*size/2+w*size)%top + 1)
				b := min(a+size-1, top)
				rec := httptest.NewRecorder()
				e.h.ServeHTTP(rec, request(a, b, rows(seqRange(a, b)...)))
				var rp reply
				if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &rp) != nil {
					t.Errorf("chunk %d-%d: %d %s", a, b, rec.Code, rec.Body)
					return
				}
				mu.Lock()
				accepted += rp.Accepted
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	got := originSeqs(t, e.cache)
	slices.Sort(got)
	if want := slices.Compact(slices.Clone(got)); !slices.Equal(got, want) {
		t.Fatalf("some seqs were stored twice: %d rows, %d distinct", len(got), len(want))
	}
	if accepted != len(got) {
		t.Fatalf("replies accepted %d rows, the cache holds %d", accepted, len(got))
	}
}

func TestHealthz(t *testing.T) {
	e := newEnv(t, nil)
	rp := e.do(httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rp.code != http.StatusOK {
		t.Fatalf("GET /healthz: %d", rp.code)
	}
	if rp := e.do(httptest.NewRequest(http.MethodPost, "/healthz", nil)); rp.code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /healthz: %d", rp.code)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, nil)
	e.send(1, 10, seqRange(1, 10), 10, 0)
	e.send(5, 12, seqRange(5, 12), 2, 6)
	e.do(request(1, 1, []byte("nope")))
	e.do(request(1, 1, rows(1), func(r *http.Request) { r.Header.Del("Authorization") }))
	want := map[string]float64{
		`hyp_server_rows_total{dataset="logs",result="accepted"}`:  12,
		`hyp_server_rows_total{dataset="logs",result="duplicate"}`: 6,
		`hyp_server_requests_total{code="200"}`:                    2,
		`hyp_server_requests_total{code="400"}`:                    1,
		`hyp_server_requests_total{code="401"}`:                    1,
		`hyp_server_rejected_total{reason="bad_json"}`:             1,
		`hyp_server_rejected_total{reason="unauthorized"}`:         1,
		// The unauthorized request reads no body; the bad one is not kept.
		`hyp_server_chunk_step_seconds_count{step="read"}`:  3,
		`hyp_server_chunk_step_seconds_count{step="parse"}`: 3,
		`hyp_server_chunk_step_seconds_count{step="keep"}`:  2,
	}
	got := gather(t, e.reg)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// gather flattens a registry's counters to `name{label="value",...}` -> value, and its
// histograms to `name_count{...}` -> how many samples.
func gather(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if h := m.GetHistogram(); h != nil {
				out[mf.GetName()+"_count{"+strings.Join(labels, ",")+"}"] = float64(h.GetSampleCount())
				continue
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestNewHandlerOptions(t *testing.T) {
	dir := t.TempDir()
	led, err := ledger.Open(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	c, err := cache.Open(context.Background(), filepath.Join(dir, "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ok := Options{Tokens: []Token{{Secret: "t"}}, MaxBodyBytes: 1}
	tests := []struct {
		name  string
		tweak func(*Options)
	}{
		{"no tokens", func(o *Options) { o.Tokens = nil }},
		{"empty token", func(o *Options) { o.Tokens = []Token{{Secret: "t"}, {Secret: ""}} }},
		{"token with a space", func(o *Options) { o.Tokens = []Token{{Secret: "a b"}} }},
		{"malformed glob", func(o *Options) { o.Tokens = []Token{{Secret: "t", Gateways: []string{"web-["}}} }},
		{"no body limit", func(o *Options) { o.MaxBodyBytes = 0 }},
		{"negative rate", func(o *Options) { o.RateLimit = -1 }},
		{"negative burst", func(o *Options) { o.Burst = -1 }},
		{"negative gateway cap", func(o *Options) { o.MaxGatewaysPerToken = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.tweak(&o)
			if _, err := NewHandler(c, led, o); err == nil {
				t.Fatal("NewHandler accepted bad options")
			}
		})
	}
	reg := prometheus.NewRegistry()
	ok.Registerer = reg
	if _, err := NewHandler(c, led, ok); err != nil {
		t.Fatal(err)
	}
	if _, err := NewHandler(c, led, ok); err == nil {
		t.Fatal("a second handler registered the same metrics")
	}
}

func TestLoadTokens(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []Token
		err     string
	}{
		{"one", "abc\n", []Token{{Secret: "abc"}}, ""},
		{"comments and blanks", "# gateways\n\n  abc  \r\n#def\nxyz", []Token{{Secret: "abc"}, {Secret: "xyz"}}, ""},
		{"bound", "abc web-*\nxyz\tdb-1,db-2 \n", []Token{{Secret: "abc", Gateways: []string{"web-*"}}, {Secret: "xyz", Gateways: []string{"db-1", "db-2"}}}, ""},
		{"none", "# only a comment\n\n", nil, "holds no token"},
		{"empty file", "", nil, "holds no token"},
		{"three fields", "abc\nsecret web-1 web-2\n", nil, "line 2"},
		{"malformed glob", "abc\nsecret web-[\n", nil, "line 2: gateway glob \"web-[\""},
		{"empty glob", "secret web-1,\n", nil, "line 1: empty gateway glob"},
		{"token twice", "secret\n# x\nsecret web-1\n", nil, "line 3: the token of line 1 again"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadTokens(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("the error leaks a token: %v", err)
				}
				return
			}
			if err != nil || !slices.EqualFunc(got, tc.want, func(a, b Token) bool {
				return a.Secret == b.Secret && slices.Equal(a.Gateways, b.Gateways)
			}) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := LoadTokens(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

func TestTokenBoundToGateways(t *testing.T) {
	const bound = "bound-token"
	e := newEnv(t, func(o *Options) {
		o.Tokens = append(o.Tokens, Token{Secret: bound, Gateways: []string{"web-*", "db-1"}})
	})
	as := func(tok, gw string) func(*http.Request) {
		return func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set(headerGateway, gw)
		}
	}
	tests := []struct {
		name, token, gateway string
		code                 int
		kind                 string
	}{
		{"glob matches", bound, "web-7", 200, ""},
		{"exact name", bound, "db-1", 200, ""},
		{"another gateway", bound, "db-2", 403, "gateway_not_allowed"},
		{"glob is not a prefix", bound, "xweb-7", 403, "gateway_not_allowed"},
		{"unbound token sends as anyone", testToken, "db-2", 200, ""},
		{"unknown token still 401", "nope", "web-7", 401, "unauthorized"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq := int64(i + 1)
			rp := e.do(request(seq, seq, rows(seq), as(tc.token, tc.gateway)))
			if rp.code != tc.code || rp.Error != tc.kind {
				t.Fatalf("got %d %q (%s), want %d %q", rp.code, rp.Error, rp.Message, tc.code, tc.kind)
			}
			if tc.code == 403 && !strings.Contains(rp.Message, tc.gateway) {
				t.Fatalf("the refusal does not name the gateway: %s", rp.Message)
			}
		})
	}
	// Nothing the refused chunks declared reached the victims' ledgers.
	for gw, seq := range map[string]int64{"db-2": 3, "xweb-7": 4} {
		held, err := e.led.Held(ledger.Key{Gateway: gw, Dataset: "logs", Partition: "source=" + testSource}, []int64{seq})
		if err != nil || held[0] {
			t.Fatalf("%s seq %d: held %v, %v", gw, seq, held, err)
		}
	}
}

// failingStore stores the rows and then reports a failure, as a cache whose log write landed
// but whose fsync failed would.
type failingStore struct {
	Store
	mu    sync.Mutex
	fails int
}

func (s *failingStore) IngestPartitionRows(dataset, name string, body []byte, rows int) (cache.Result, error) {
	res, err := s.Store.IngestPartitionRows(dataset, name, body, rows)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.fails > 0 {
		s.fails--
		return cache.Result{}, io.ErrShortWrite
	}
	return res, err
}

func TestRetryAfterStoreFailureIsNotStoredTwice(t *testing.T) {
	fs := &failingStore{fails: 1}
	e := newEnvStore(t, nil, func(s Store) Store { fs.Store = s; return fs })
	rp := e.do(request(1, 10, rows(seqRange(1, 10)...)))
	if rp.code != http.StatusServiceUnavailable || rp.Error != "unavailable" || rp.header.Get("Retry-After") != "1" {
		t.Fatalf("got %d %q Retry-After %q", rp.code, rp.Error, rp.header.Get("Retry-After"))
	}
	// The retry repairs the ledger from the cache first, so the rows the failed append left
	// behind count as duplicates.
	e.send(1, 12, seqRange(1, 12), 2, 10)
	if got := originSeqs(t, e.cache); !slices.Equal(got, seqRange(1, 12)) {
		t.Fatalf("stored %v", got)
	}
}

// TestForgedRangeCannotSilenceAGateway is the attack the range rule closes: one row declaring
// every seq would have made the ledger hold all of the victim's future rows.
func TestForgedRangeCannotSilenceAGateway(t *testing.T) {
	e := newEnv(t, nil)
	e.send(1, 5, seqRange(1, 5), 5, 0)
	rp := e.do(request(6, 1<<63-1, rows(6)))
	if rp.code != http.StatusBadRequest || rp.Error != "bad_seq_range" {
		t.Fatalf("forged chunk: got %d %q (%s)", rp.code, rp.Error, rp.Message)
	}
	e.send(6, 10, seqRange(6, 10), 5, 0)
	if got := originSeqs(t, e.cache); !slices.Equal(got, seqRange(1, 10)) {
		t.Fatalf("stored %v", got)
	}
}
