package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/rowjson"
)

var tsUS = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}

// testRows is a unit as a sender's cache scan gives it: every column type the cache holds,
// nulls, strings that need escaping and invalid UTF-8, a NaN, a nested object kept as JSON
// text, and a row's own _hyp_overflow.
func testRows(t testing.TB, seqs []int64) arrow.RecordBatch {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64},
		{Name: columns.IngestedAtColumn, Type: tsUS},
		{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "service.name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "ratio", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "nested", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: columns.OverflowColumn, Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	base := time.Date(2026, 11, 30, 9, 0, 0, 123456000, time.UTC).UnixMicro()
	msgs := []string{"plain", "quote \" backslash \\ newline \n tab \t", "\x00\x1f ctl", "bad \xff utf8", "é中😀 \u2028"}
	for i, seq := range seqs {
		b.Field(0).(*array.Int64Builder).Append(seq)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(base + int64(i)*1000))
		b.Field(2).(*array.StringBuilder).Append(msgs[i%len(msgs)])
		if i%3 == 0 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.StringBuilder).Append("checkout")
		}
		b.Field(4).(*array.Int64Builder).Append(int64(i) * -1234567)
		switch i % 4 {
		case 0:
			b.Field(5).(*array.Float64Builder).Append(math.NaN())
		case 1:
			b.Field(5).AppendNull()
		default:
			b.Field(5).(*array.Float64Builder).Append(float64(i) / 7)
		}
		b.Field(6).(*array.BooleanBuilder).Append(i%2 == 0)
		b.Field(7).(*array.StringBuilder).Append(`{"a":[1,{"b":null}]}`)
		if i%2 == 1 {
			b.Field(8).(*array.StringBuilder).Append(`{"extra":1}`)
		} else {
			b.Field(8).AppendNull()
		}
	}
	return b.NewRecordBatch()
}

// fataler is what the helpers here need of a test: *testing.T, *testing.F and *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// arrowOf is recs as a sender writes them: one IPC stream, ZSTD buffers.
func arrowOf(t fataler, recs ...arrow.RecordBatch) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(recs[0].Schema()), ipc.WithZstd())
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ndjsonOf is recs as a sender's NDJSON body.
func ndjsonOf(t testing.TB, recs ...arrow.RecordBatch) []byte {
	t.Helper()
	enc, err := rowjson.NewEncoder(recs[0].Schema())
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	for _, r := range recs {
		for i := range int(r.NumRows()) {
			body = append(enc.AppendRow(body, r, i), '\n')
		}
	}
	return body
}

func parseArrowBody(body []byte, first, last int64, form rowForm, incarnation string) (*chunk, *httpbody.Error) {
	sc, rerr := scanArrow(body, 64<<20)
	if rerr != nil {
		return nil, rerr
	}
	return parseArrow(body, sc, first, last, form, incarnation, httpbody.Meter{})
}

// TestArrowBodyIsTheNDJSONChunk holds the two wire formats to one result: the same unit
// (two batches, the second a slice as a scan gives) parsed as NDJSON and as Arrow is the
// same chunk, byte for byte, in both row forms, with and without an incarnation.
func TestArrowBodyIsTheNDJSONChunk(t *testing.T) {
	seqs := []int64{3, 4, 9, 10, 11, 40, 41, 42, 43, 100, 101, 102}
	all := testRows(t, seqs)
	defer all.Release()
	a, b := all.NewSlice(0, 5), all.NewSlice(5, all.NumRows())
	defer a.Release()
	defer b.Release()
	nd, ar := ndjsonOf(t, a, b), arrowOf(t, a, b)
	for _, tc := range []struct {
		name        string
		form        rowForm
		incarnation string
	}{
		{"cache rows", cacheRows, ""},
		{"cache rows, incarnation", cacheRows, "inc-1"},
		{"user json", userJSON, "inc-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, rerr := parseRows(nd, 3, 102, tc.form, tc.incarnation)
			if rerr != nil {
				t.Fatalf("ndjson: %+v", rerr)
			}
			defer want.release()
			got, rerr := parseArrowBody(ar, 3, 102, tc.form, tc.incarnation)
			if rerr != nil {
				t.Fatalf("arrow: %+v", rerr)
			}
			defer got.release()
			if !slices.Equal(got.seqs, want.seqs) || !slices.Equal(got.ats, want.ats) || got.framed != want.framed {
				t.Fatalf("seqs %v ats %v framed %v, want %v %v %v", got.seqs, got.ats, got.framed, want.seqs, want.ats, want.framed)
			}
			if len(got.ends) != len(want.ends) {
				t.Fatalf("%d rows, want %d", len(got.ends), len(want.ends))
			}
			for i := range want.ends {
				if g, w := got.row(i), want.row(i); !bytes.Equal(g, w) {
					t.Errorf("row %d:\n got %q\nwant %q", i, g, w)
				}
			}
		})
	}
}

// batchOf builds a one-batch stream from columns given as builders' values.
func streamOf(t testing.TB, fields []arrow.Field, fill func(b *array.RecordBuilder)) []byte {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	fill(b)
	rec := b.NewRecordBatch()
	defer rec.Release()
	return arrowOf(t, rec)
}

func TestArrowBodyRefusals(t *testing.T) {
	seqF := arrow.Field{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64, Nullable: true}
	atF := arrow.Field{Name: columns.IngestedAtColumn, Type: tsUS, Nullable: true}
	rows := func(seqs []int64, extra func(b *array.RecordBuilder)) func(b *array.RecordBuilder) {
		return func(b *array.RecordBuilder) {
			for _, s := range seqs {
				if s == 0 {
					b.Field(0).AppendNull()
				} else {
					b.Field(0).(*array.Int64Builder).Append(s)
				}
				b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_000_000))
			}
			if extra != nil {
				extra(b)
			}
		}
	}
	str := func(vals ...string) func(b *array.RecordBuilder) {
		return func(b *array.RecordBuilder) {
			for _, v := range vals {
				b.Field(2).(*array.StringBuilder).Append(v)
			}
		}
	}
	strField := func(name string) []arrow.Field {
		return []arrow.Field{seqF, atF, {Name: name, Type: arrow.BinaryTypes.String}}
	}
	valid := streamOf(t, []arrow.Field{seqF, atF}, rows([]int64{1, 2}, nil))
	cases := []struct {
		name        string
		body        []byte
		first, last int64
		kind        string
		line        int
	}{
		{"not arrow", []byte(`{"_hyp_ingest_seq":1}`), 1, 1, "bad_arrow", 0},
		{"truncated", valid[:len(valid)-20], 1, 2, "bad_arrow", 0},
		{"no seq column", streamOf(t, []arrow.Field{atF}, func(b *array.RecordBuilder) {
			b.Field(0).(*array.TimestampBuilder).Append(1)
		}), 1, 1, "bad_seq", 0},
		{"seq not int64", streamOf(t, []arrow.Field{{Name: columns.SeqColumn, Type: arrow.BinaryTypes.String}, atF}, func(b *array.RecordBuilder) {
			b.Field(0).(*array.StringBuilder).Append("1")
			b.Field(1).(*array.TimestampBuilder).Append(1)
		}), 1, 1, "bad_seq", 0},
		{"no ingest time column", streamOf(t, []arrow.Field{seqF}, func(b *array.RecordBuilder) {
			b.Field(0).(*array.Int64Builder).Append(1)
		}), 1, 1, "bad_ingested_at", 0},
		{"null seq", streamOf(t, []arrow.Field{seqF, atF}, rows([]int64{1, 0}, nil)), 1, 2, "bad_seq", 2},
		{"negative seq", streamOf(t, []arrow.Field{seqF, atF}, rows([]int64{-1}, nil)), 1, 1, "bad_seq", 1},
		{"seqs not increasing", streamOf(t, []arrow.Field{seqF, atF}, rows([]int64{1, 3, 3}, nil)), 1, 3, "bad_seq", 3},
		{"first seq not declared", valid, 0, 2, "bad_seq_range", 1},
		{"above range", valid, 1, 1, "bad_seq_range", 2},
		{"last seq not declared", valid, 1, 3, "bad_seq_range", 2},
		{"no rows", streamOf(t, []arrow.Field{seqF, atF}, rows(nil, nil)), 1, 1, "bad_seq_range", 0},
		{"reserved name", streamOf(t, strField("_HYP_source"), rows([]int64{1}, str("x"))), 1, 1, "bad_field", 0},
		{"internal name", streamOf(t, strField("_hyp_origin_seq"), rows([]int64{1}, str("x"))), 1, 1, "bad_field", 0},
		{"control character", streamOf(t, strField("a\x01"), rows([]int64{1}, str("x"))), 1, 1, "bad_field", 0},
		{"empty name", streamOf(t, strField(""), rows([]int64{1}, str("x"))), 1, 1, "bad_field", 0},
		{"overflow not an object", streamOf(t, strField(columns.OverflowColumn), rows([]int64{1, 2}, str(`{"a":1}`, `[1]`))), 1, 2, "bad_field", 2},
		{"overflow not a string", streamOf(t, []arrow.Field{seqF, atF, {Name: columns.OverflowColumn, Type: arrow.PrimitiveTypes.Int64}}, rows([]int64{1}, func(b *array.RecordBuilder) {
			b.Field(2).(*array.Int64Builder).Append(1)
		})), 1, 1, "bad_field", 0},
		{"unsupported type", streamOf(t, []arrow.Field{seqF, atF, {Name: "x", Type: arrow.PrimitiveTypes.Int32}}, rows([]int64{1}, func(b *array.RecordBuilder) {
			b.Field(2).(*array.Int32Builder).Append(1)
		})), 1, 1, "bad_field", 0},
		{"ingest time out of range", streamOf(t, []arrow.Field{seqF, {Name: columns.IngestedAtColumn, Type: arrow.FixedWidthTypes.Timestamp_s}}, func(b *array.RecordBuilder) {
			b.Field(0).(*array.Int64Builder).Append(1)
			b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(math.MaxInt64 / 2))
		}), 1, 1, "bad_ingested_at", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, rerr := parseArrowBody(tc.body, tc.first, tc.last, cacheRows, "")
			if rerr == nil {
				c.release()
				t.Fatal("accepted")
			}
			if rerr.Status != http.StatusBadRequest || rerr.Kind != tc.kind || rerr.Line != tc.line {
				t.Fatalf("got %d %s line %d (%s), want 400 %s line %d", rerr.Status, rerr.Kind, rerr.Line, rerr.Msg, tc.kind, tc.line)
			}
		})
	}
}

// zstdFrame is a frame header declaring window log wlog, then one empty raw last block.
func zstdFrame(wlog byte) []byte {
	return []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, (wlog - 10) << 3, 0x01, 0x00, 0x00}
}

func TestZstdWindow(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		want int64
		ok   bool
	}{
		{"1 MiB window", zstdFrame(20), 1 << 20, true},
		{"8 MiB window", zstdFrame(23), 8 << 20, true},
		{"two frames, the second too large", append(zstdFrame(20), zstdFrame(27)...), 0, false},
		{"512 MiB window", zstdFrame(29), 0, false},
		{"single segment of 300 bytes", []byte{0x28, 0xb5, 0x2f, 0xfd, 0x60, 44, 0, 0x01, 0x00, 0x00}, 300, true},
		{"skippable then frame", append([]byte{0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 9, 9}, zstdFrame(20)...), 1 << 20, true},
		{"truncated", zstdFrame(20)[:7], 0, false},
		{"not zstd", []byte("hello world"), 0, false},
	}
	for _, tc := range cases {
		got, err := zstdWindow(tc.b)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: %d, %v; want %d, ok %v", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

// TestArrowBodyBoundsWhatItDecodes holds scanArrow to the sizes a stream declares: a
// buffer claiming more than the body's limit is 413 before anything is decoded, and the
// cost charged covers what decoding allocates.
func TestArrowBodyBoundsWhatItDecodes(t *testing.T) {
	rec := testRows(t, []int64{1, 2, 3, 4, 5, 6, 7, 8})
	defer rec.Release()
	body := arrowOf(t, rec)
	sc, rerr := scanArrow(body, 64<<20)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if sc.rows != 8 {
		t.Errorf("rows %d, want 8", sc.rows)
	}
	if _, rerr := scanArrow(body, sc.decoded-1); rerr == nil || rerr.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a limit below the decoded size: %+v, want 413", rerr)
	}
	// A compressed buffer whose length prefix claims 1 GiB: found in the body by the
	// prefix the writer put before the first buffer that compresses, and rewritten.
	i := bytes.Index(body, []byte{0x28, 0xb5, 0x2f, 0xfd})
	if i < 8 {
		t.Fatal("no zstd frame in the body")
	}
	forged := slices.Clone(body)
	binary.LittleEndian.PutUint64(forged[i-8:], 1<<30)
	if _, rerr := scanArrow(forged, 64<<20); rerr == nil || rerr.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a buffer declaring 1 GiB: %+v, want 413", rerr)
	}
	// The same claim within the limit: the decoder's allocator refuses what the charge
	// does not cover, and the stream is refused, not decoded into a gigabyte.
	c, rerr := parseArrow(forged, sc, 1, 8, cacheRows, "", httpbody.Meter{})
	if rerr == nil {
		c.release()
		t.Fatal("a stream decoding beyond its scan was accepted")
	}
	if rerr.Kind != "bad_arrow" {
		t.Errorf("got %+v, want bad_arrow", rerr)
	}
}

// FuzzArrowBody feeds arbitrary bodies to the Arrow reader, which takes outside input: it
// must never panic nor allocate beyond what it charged, must accept or refuse alike in
// both row forms, and what it accepts must hold the rules parseRows holds an NDJSON body
// to: seqs strictly ascending from the declared first to the declared last, an ingest time
// per row, every row of the cluster's form one JSON object, or batches kept in the columnar
// form that stage what that form's rows would.
func FuzzArrowBody(f *testing.F) {
	rec := testRows(f, []int64{1, 2, 5, 9})
	defer rec.Release()
	valid := arrowOf(f, rec)
	f.Add(valid, int64(1), int64(9))
	f.Add(valid[:len(valid)/2], int64(1), int64(9))
	f.Add(append(slices.Clone(valid), valid...), int64(1), int64(9))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0}, int64(1), int64(1))
	f.Add([]byte(`{"_hyp_ingest_seq":1}`), int64(1), int64(1))
	f.Fuzz(func(t *testing.T, body []byte, first, last int64) {
		if first < 0 || first > last {
			return // parseForward refuses such ranges before the body is read
		}
		sc, rerr := scanArrow(body, 1<<20)
		if rerr != nil {
			return
		}
		if sc.rows < 0 || sc.decoded < 0 || sc.working < 0 {
			t.Fatalf("scan %+v", sc)
		}
		cr, rerr1 := parseArrow(body, sc, first, last, cacheRows, "inc", httpbody.Meter{})
		uj, rerr2 := parseArrow(body, sc, first, last, userJSON, "inc", httpbody.Meter{})
		if (rerr1 == nil) != (rerr2 == nil) || (rerr1 != nil && (rerr1.Kind != rerr2.Kind || rerr1.Line != rerr2.Line)) {
			t.Fatalf("forms disagree: %+v and %+v", rerr1, rerr2)
		}
		if rerr1 != nil {
			return
		}
		defer cr.release()
		defer uj.release()
		n := len(uj.seqs)
		rows := len(uj.ends)
		for _, r := range uj.recs {
			rows += int(r.NumRows())
		}
		if n == 0 || n > sc.rows || rows != n || len(uj.ats) != n || uj.seqs[0] != first || uj.seqs[n-1] != last || !slices.Equal(cr.seqs, uj.seqs) {
			t.Fatalf("accepted %d rows (scan %d), seqs %v, declared %d-%d", n, sc.rows, uj.seqs, first, last)
		}
		for i := 1; i < n; i++ {
			if uj.seqs[i] <= uj.seqs[i-1] {
				t.Fatalf("seqs %v not strictly ascending", uj.seqs)
			}
		}
		if len(uj.recs) > 0 {
			// The columnar form stages what the body's rows as text would.
			text, rerr := decodeArrow(body, sc, first, last, userJSON, "inc", httpbody.Meter{})
			if rerr != nil {
				t.Fatalf("the columnar form accepted what the text path refuses: %+v", rerr)
			}
			defer text.release()
			sameStaged(t, uj, text)
			return
		}
		for i := range n {
			if row := uj.row(i); !json.Valid(row) || row[0] != '{' {
				t.Fatalf("row %d is not a JSON object: %q", i, row)
			}
		}
	})
}

// TestArrowLogIsCharged: a single-node server, which encodes an Arrow body's batches into
// its cache's log record, charges the request's budget for that record before it is made:
// the smallest budget that lets it parse a body is at least the batches' decoded size above
// the one a cluster replica needs, which stages the batches themselves.
func TestArrowLogIsCharged(t *testing.T) {
	rec := testRows(t, []int64{1, 2, 3, 4, 5, 6, 7, 8})
	defer rec.Release()
	// testRows has a NaN and bad UTF-8, which only the text path takes: keep the columns
	// the columnar form keeps (seq, ingest time, service.name, n, ok).
	var fields []arrow.Field
	var cols []arrow.Array
	for _, j := range []int{0, 1, 3, 4, 6} {
		fields, cols = append(fields, rec.Schema().Field(j)), append(cols, rec.Column(j))
	}
	clean := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
	defer clean.Release()
	body := arrowOf(t, clean)
	sc, rerr := scanArrow(body, 64<<20)
	if rerr != nil {
		t.Fatal(rerr)
	}
	// fits reports whether body parses in form within a budget of limit bytes.
	fits := func(form rowForm, limit int64) bool {
		budget, err := httpbody.NewBudget(limit)
		if err != nil {
			t.Fatal(err)
		}
		var c *chunk
		var rerr *httpbody.Error
		h, err := httpbody.Guard(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			c, rerr = parseArrow(body, sc, 1, 8, form, "inc-1", httpbody.MeterOf(r))
		}), budget, httpbody.Pace{Grace: time.Second, MinRate: 1})
		if err != nil {
			t.Fatal(err)
		}
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
		if rerr == nil {
			if len(c.recs) == 0 {
				t.Fatalf("form %d: kept as rows, not as batches", form)
			}
			c.release()
		}
		return rerr == nil
	}
	least := func(form rowForm) int64 {
		lo, hi := int64(1), int64(64<<20)
		for lo < hi {
			if mid := (lo + hi) / 2; fits(form, mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return lo
	}
	node, replica := least(cacheRows), least(userJSON)
	if node-replica < sc.decoded {
		t.Errorf("a single node needs a budget of %d, a replica %d: less than the %d decoded bytes its log record takes", node, replica, sc.decoded)
	}
}
