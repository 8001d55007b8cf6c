package transform

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func apply(t *testing.T, r *Runner, sql string, schema *arrow.Schema, recs []arrow.RecordBatch) *Result {
	t.Helper()
	res, err := r.Apply(context.Background(), sql, schema, recs)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	t.Cleanup(res.Release)
	return res
}

func TestApplyRows(t *testing.T) {
	r := newTestRunner(t)
	in := fiveRows()
	defer releaseAll(in)
	at := func(seq int) string { return fmt.Sprintf(`"2024-05-06T07:08:%02d.123456Z"`, 9+seq) }
	cases := []struct {
		sql  string
		cols []string
		rows []string
	}{
		{
			specExample,
			[]string{"_hyp_ingest_seq", "_hyp_ingested_at", "level", "msg", "n", "x"},
			[]string{
				`{"_hyp_ingest_seq":10,"_hyp_ingested_at":` + at(10) + `,"level":"info","msg":"login tok-*** ok","n":1,"x":0.5}`,
				`{"_hyp_ingest_seq":13,"_hyp_ingested_at":` + at(13) + `,"level":"warn","msg":"slow tok-*** call","n":3,"x":2.5}`,
				`{"_hyp_ingest_seq":21,"_hyp_ingested_at":` + at(21) + `,"level":"error","n":5,"x":4.5}`,
			},
		},
		{
			"SELECT _hyp_ingest_seq, _hyp_ingested_at, upper(msg) AS msg FROM rows WHERE n >= 4",
			[]string{"_hyp_ingest_seq", "_hyp_ingested_at", "msg"},
			[]string{
				`{"_hyp_ingest_seq":20,"_hyp_ingested_at":` + at(20) + `,"msg":"TOCK"}`,
				`{"_hyp_ingest_seq":21,"_hyp_ingested_at":` + at(21) + `}`,
			},
		},
		{
			"SELECT * EXCLUDE (secret, x) RENAME (msg AS message) FROM rows WHERE level = 'debug'",
			[]string{"_hyp_ingest_seq", "_hyp_ingested_at", "level", "message", "n"},
			[]string{
				`{"_hyp_ingest_seq":11,"_hyp_ingested_at":` + at(11) + `,"level":"debug","message":"tick","n":2}`,
				`{"_hyp_ingest_seq":20,"_hyp_ingested_at":` + at(20) + `,"level":"debug","message":"tock","n":4}`,
			},
		},
		{
			"SELECT _hyp_ingest_seq, _hyp_ingested_at, CASE WHEN n > 2 THEN 'big' ELSE 'small' END AS size, n * 2 AS n2, " +
				"x::INTEGER AS xi, CAST(n AS VARCHAR) AS ns FROM rows WHERE _hyp_ingest_seq < 20",
			[]string{"_hyp_ingest_seq", "_hyp_ingested_at", "size", "n2", "xi", "ns"},
			[]string{
				`{"_hyp_ingest_seq":10,"_hyp_ingested_at":` + at(10) + `,"size":"small","n2":2,"xi":0,"ns":"1"}`,
				`{"_hyp_ingest_seq":11,"_hyp_ingested_at":` + at(11) + `,"size":"small","n2":4,"xi":2,"ns":"2"}`,
				`{"_hyp_ingest_seq":13,"_hyp_ingested_at":` + at(13) + `,"size":"big","n2":6,"xi":2,"ns":"3"}`,
			},
		},
		{
			"SELECT * FROM rows WHERE false",
			[]string{"_hyp_ingest_seq", "_hyp_ingested_at", "level", "msg", "secret", "n", "x"},
			nil,
		},
	}
	for _, tc := range cases {
		res := apply(t, r, tc.sql, testSchema(), in)
		if got := fieldNames(res.Schema); !slices.Equal(got, tc.cols) {
			t.Errorf("%s: columns %q, want %q", tc.sql, got, tc.cols)
		}
		if got := jsonRows(t, res); !slices.Equal(got, tc.rows) {
			t.Errorf("%s:\n got  %q\n want %q", tc.sql, got, tc.rows)
		}
	}
}

// TestApplyTypes: every type DuckDB can compute comes out as one of the cache's five.
func TestApplyTypes(t *testing.T) {
	r := newTestRunner(t)
	in := fiveRows()
	defer releaseAll(in)
	cols := []struct {
		expr, typ, json string // json "" when null
	}{
		{"1::TINYINT", "int64", "1"},
		{"200::UTINYINT", "int64", "200"},
		{"-3::SMALLINT", "int64", "-3"},
		{"70000::UINTEGER", "int64", "70000"},
		{"-70000::INTEGER", "int64", "-70000"},
		{"9223372036854775807::UBIGINT", "int64", "9223372036854775807"},
		{"5::HUGEINT", "float64", "5.0"},
		{"1.25::DECIMAL(4,2)", "float64", "1.25"},
		{"-1.25::DECIMAL(18,3)", "float64", "-1.25"},
		{"1.25::DECIMAL(30,3)", "float64", "1.25"},
		{"1.5::FLOAT", "float64", "1.5"},
		{"true", "bool", "true"},
		{"'x'", "utf8", `"x"`},
		{"'x'::BLOB", "utf8", `"eA=="`},
		{"DATE '2024-01-02'", "timestamp[us, tz=UTC]", `"2024-01-02T00:00:00Z"`},
		{"TIMESTAMP '2024-01-02 03:04:05.678'", "timestamp[us, tz=UTC]", `"2024-01-02T03:04:05.678Z"`},
		{"TIMESTAMP_NS '2024-01-02 03:04:05.123456789'", "timestamp[us, tz=UTC]", `"2024-01-02T03:04:05.123456Z"`},
		{"TIMESTAMP_S '2024-01-02 03:04:05'", "timestamp[us, tz=UTC]", `"2024-01-02T03:04:05Z"`},
		{"TIMESTAMP_MS '2024-01-02 03:04:05.5'", "timestamp[us, tz=UTC]", `"2024-01-02T03:04:05.5Z"`},
		{"TIMESTAMPTZ '2024-01-02 03:04:05+02'", "timestamp[us, tz=UTC]", `"2024-01-02T01:04:05Z"`},
		{"TIME '01:02:03.5'", "utf8", `"01:02:03.5"`},
		{"TIME '01:02:03'", "utf8", `"01:02:03"`},
		{"INTERVAL '1 month 2 days 3 seconds'", "utf8", `"{\"months\":1,\"days\":2,\"nanoseconds\":3000000000}"`},
		{"'2d1c9d1a-0b7e-4f4a-9c1e-8e3b6f7a9d10'::UUID", "utf8", `"2d1c9d1a-0b7e-4f4a-9c1e-8e3b6f7a9d10"`},
		{"[1, 2]", "utf8", `"[1,2]"`},
		{"['x', NULL]", "utf8", `"[\"x\",null]"`},
		{"{'a': 1, 'b': 'x'}", "utf8", `"{\"a\":1,\"b\":\"x\"}"`},
		{"MAP {'k': 1}", "utf8", `"{\"k\":1}"`},
		{"MAP {1: 'one'}", "utf8", `"{\"1\":\"one\"}"`},
		{"[{'a': [1.5, NULL]}]", "utf8", `"[{\"a\":[1.5,null]}]"`},
		{"[TIMESTAMP '2024-01-02 03:04:05']", "utf8", `"[\"2024-01-02T03:04:05Z\"]"`},
		{"[DATE '2024-01-02']", "utf8", `"[\"2024-01-02\"]"`},
		{"[1.50::DECIMAL(5,2)]", "utf8", `"[1.50]"`},
		{"['x'::BLOB]", "utf8", `"[\"eA==\"]"`},
		{"[1, 2]::INTEGER[2]", "utf8", `"[1,2]"`},
		{"'a'::ENUM('a', 'b')", "utf8", `"a"`},
		{"12345678901234567890123::BIGNUM", "utf8", `"12345678901234567890123"`},
		{"(-12345678901234567890123)::BIGNUM", "utf8", `"-12345678901234567890123"`},
		{"(-1)::BIGNUM", "utf8", `"-1"`},
		{"0::BIGNUM", "utf8", `"0"`},
		{"union_value(k := 7)", "utf8", `"7"`},
		{"NULL::VARCHAR", "utf8", ""},
		{"NULL::BIGINT", "int64", ""},
	}
	var sel []string
	var want []string
	for i, c := range cols {
		sel = append(sel, fmt.Sprintf("%s AS c%d", c.expr, i))
		if c.json != "" {
			want = append(want, fmt.Sprintf(`"c%d":%s`, i, c.json))
		}
	}
	sql := "SELECT _hyp_ingest_seq, _hyp_ingested_at, " + strings.Join(sel, ", ") + " FROM rows WHERE _hyp_ingest_seq = 10"
	res := apply(t, r, sql, testSchema(), in)
	for i, c := range cols {
		f := res.Schema.Field(i + 2)
		if f.Type.String() != c.typ {
			t.Errorf("%s: type %s, want %s", c.expr, f.Type, c.typ)
		}
		if f.HasMetadata() {
			t.Errorf("%s: field metadata %v", c.expr, f.Metadata)
		}
	}
	if f := res.Schema.Field(1); f.Type.String() != "timestamp[us, tz=UTC]" || f.Nullable {
		t.Errorf("_hyp_ingested_at comes out as %v", f)
	}
	got := jsonRows(t, res)
	wantRow := `{"_hyp_ingest_seq":10,"_hyp_ingested_at":"2024-05-06T07:08:19.123456Z",` + strings.Join(want, ",") + "}"
	if len(got) != 1 || got[0] != wantRow {
		t.Errorf("got  %q\nwant %q", got, wantRow)
	}
}

// TestApplyCaseTwins: columns whose names differ only in case are queried, and exported by
// a *, under their query names.
func TestApplyCaseTwins(t *testing.T) {
	r := newTestRunner(t)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_ingested_at", Type: timestampUTC},
		{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ID", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "Id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(baseTime.UnixMicro()))
	b.Field(2).(*array.StringBuilder).Append("lower")
	b.Field(3).(*array.StringBuilder).Append("upper")
	b.Field(4).(*array.Int64Builder).Append(7)
	rec := b.NewRecordBatch()
	defer rec.Release()

	res := apply(t, r, "SELECT * FROM rows", schema, []arrow.RecordBatch{rec})
	if got, want := fieldNames(res.Schema), []string{"_hyp_ingest_seq", "_hyp_ingested_at", "id__3", "ID", "Id__2"}; !slices.Equal(got, want) {
		t.Errorf("columns %q, want %q", got, want)
	}
	res = apply(t, r, "SELECT _hyp_ingest_seq, _hyp_ingested_at, id__3 || ID AS both, Id__2 + 1 AS n FROM rows", schema, []arrow.RecordBatch{rec})
	if got, want := jsonRows(t, res), []string{`{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2024-05-06T07:08:09.123456Z","both":"lowerupper","n":8}`}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestApplyEmpty: no records, records without rows, or no row through the filter all give
// Rows == 0 with the schema the SQL gives.
func TestApplyEmpty(t *testing.T) {
	r := newTestRunner(t)
	empty := testRecord()
	defer empty.Release()
	in := fiveRows()
	defer releaseAll(in)
	for name, recs := range map[string][]arrow.RecordBatch{"no records": nil, "no rows": {empty, empty}, "all filtered": in} {
		res := apply(t, r, "SELECT _hyp_ingest_seq, _hyp_ingested_at, upper(msg) AS m, n::TINYINT AS t FROM rows WHERE level = 'none'", testSchema(), recs)
		if res.Rows != 0 || len(res.Recs) != 0 {
			t.Errorf("%s: %d rows in %d records", name, res.Rows, len(res.Recs))
		}
		if got, want := res.Schema.String(), arrow.NewSchema([]arrow.Field{
			{Name: "_hyp_ingest_seq", Type: int64Type},
			{Name: "_hyp_ingested_at", Type: timestampUTC},
			{Name: "m", Type: stringType, Nullable: true},
			{Name: "t", Type: int64Type, Nullable: true},
		}, nil).String(); got != want {
			t.Errorf("%s: schema\n%s\nwant\n%s", name, got, want)
		}
	}
}

// TestApplyOverflowColumn: _hyp_overflow (a wide dataset's extra fields) passes through.
func TestApplyOverflowColumn(t *testing.T) {
	r := newTestRunner(t)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_ingested_at", Type: timestampUTC},
		{Name: "_hyp_overflow", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(baseTime.UnixMicro()))
	b.Field(2).(*array.StringBuilder).Append(`{"a":1}`)
	rec := b.NewRecordBatch()
	defer rec.Release()
	for _, sql := range []string{"SELECT * FROM rows", "SELECT _hyp_ingest_seq, _hyp_ingested_at, _hyp_overflow FROM rows"} {
		res := apply(t, r, sql, schema, []arrow.RecordBatch{rec})
		if got, want := jsonRows(t, res), []string{`{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2024-05-06T07:08:09.123456Z","_hyp_overflow":"{\"a\":1}"}`}; !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", sql, got, want)
		}
	}
}

// TestApplyRefuses: what Check refuses, Apply refuses the same way; SQL that fails over the
// rows, and results that break the rules, are *Errors too.
func TestApplyRefuses(t *testing.T) {
	r := newTestRunner(t)
	in := fiveRows()
	defer releaseAll(in)
	cases := []struct{ sql, msg string }{
		{"SELECT * FROM rows ORDER BY n", "transform: ORDER BY is not allowed"},
		{"SELECT msg FROM rows", "transform: the select list must keep _hyp_ingest_seq (select * or the column itself)"},
		{"SELECT *, level AS msg FROM rows", `transform: output column "msg" appears twice: give the columns distinct names`},
		{"SELECT *, 1 AS \"a\nb\" FROM rows", `transform: output column "a\nb": its name has a control character`},
		{"SELECT *, #1 FROM rows", `transform: output column "_hyp_ingest_seq" appears twice: give the columns distinct names`},
		{"SELECT *, 18446744073709551615::UBIGINT AS big FROM rows", `transform: column "big": a value above 9223372036854775807 does not fit a long (int64)`},
		{"SELECT *, CAST(msg AS INTEGER) AS bad FROM rows", "transform: Conversion Error: "},
		{"SELECT *, error('boom') AS e FROM rows", "transform: Invalid Input Error: boom"},
		// A column the rows lack reads as NULL, so naming it beside * names it twice.
		{"SELECT *, nosuchcolumn FROM rows", "transform: output column \"nosuchcolumn\" appears twice"},
		{"SELECT _hyp_ingest_seq, _hyp_ingested_at, _hyp_overflow FROM rows", "transform: Binder Error: "},
	}
	for _, tc := range cases {
		res, err := r.Apply(context.Background(), tc.sql, testSchema(), in)
		var te *Error
		if !errors.As(err, &te) {
			if res != nil {
				res.Release()
			}
			t.Errorf("%q: got %v (%T), want a *Error", tc.sql, err, err)
			continue
		}
		if res != nil {
			t.Errorf("%q: a result with the error", tc.sql)
		}
		if !strings.HasPrefix(te.Msg, tc.msg) {
			t.Errorf("%q:\n got  %s\n want %s…", tc.sql, te.Msg, tc.msg)
		}
	}
}

// TestApplyBadInput: a unit that breaks Apply's contract is the caller's error, not a *Error.
func TestApplyBadInput(t *testing.T) {
	r := newTestRunner(t)
	ctx := context.Background()
	unordered := []arrow.RecordBatch{testRecord(testRow{seq: 5}), testRecord(testRow{seq: 5})}
	defer releaseAll(unordered)
	noSeq := arrow.NewSchema([]arrow.Field{{Name: "msg", Type: stringType}}, nil)
	for name, call := range map[string]func() (*Result, error){
		"unordered":  func() (*Result, error) { return r.Apply(ctx, "SELECT * FROM rows", testSchema(), unordered) },
		"nil schema": func() (*Result, error) { return r.Apply(ctx, "SELECT * FROM rows", nil, nil) },
		"no seq":     func() (*Result, error) { return r.Apply(ctx, "SELECT * FROM rows", noSeq, nil) },
	} {
		res, err := call()
		var te *Error
		if err == nil || errors.As(err, &te) || res != nil {
			t.Errorf("%s: got (%v, %v), want a plain error", name, res, err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(ctx, "SELECT * FROM rows", testSchema(), nil); !errors.Is(err, errClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// TestApplyConcurrent: Applies from several goroutines each see their own rows.
func TestApplyConcurrent(t *testing.T) {
	r := newTestRunner(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 15 {
				var rows []testRow
				for i := range g*10 + k + 1 {
					rows = append(rows, testRow{seq: int64(1000*g + i), level: "info", msg: fmt.Sprintf("g%d", g), n: int64(i)})
				}
				rec := testRecord(rows...)
				res, err := r.Apply(context.Background(), "SELECT * FROM rows WHERE n % 2 = 0", testSchema(), []arrow.RecordBatch{rec})
				rec.Release()
				if err != nil {
					errs <- err
					return
				}
				want := int64((len(rows) + 1) / 2)
				for _, out := range res.Recs {
					msgs := out.Column(3).(*array.String)
					for i := 0; i < msgs.Len(); i++ {
						if msgs.Value(i) != fmt.Sprintf("g%d", g) {
							errs <- fmt.Errorf("goroutine %d saw %q", g, msgs.Value(i))
						}
					}
				}
				if res.Rows != want {
					errs <- fmt.Errorf("goroutine %d: %d rows, want %d", g, res.Rows, want)
				}
				res.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestApplySchemaChange: a connection's input view follows the unit's schema from one Apply
// to the next.
func TestApplySchemaChange(t *testing.T) {
	r := newTestRunner(t)
	in := fiveRows()
	defer releaseAll(in)
	narrow := arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_ingested_at", Type: timestampUTC},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, narrow)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(3)
	b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(baseTime.UnixMicro()))
	b.Field(2).(*array.Int64Builder).Append(42)
	rec := b.NewRecordBatch()
	defer rec.Release()
	for i := range 3 {
		res := apply(t, r, "SELECT * FROM rows WHERE n > 3", testSchema(), in)
		if res.Rows != 2 || res.Schema.NumFields() != 7 {
			t.Fatalf("round %d, wide: %d rows, %d columns", i, res.Rows, res.Schema.NumFields())
		}
		res = apply(t, r, "SELECT * FROM rows WHERE n > 3", narrow, []arrow.RecordBatch{rec})
		if got := jsonRows(t, res); !slices.Equal(got, []string{`{"_hyp_ingest_seq":3,"_hyp_ingested_at":"2024-05-06T07:08:09.123456Z","n":42}`}) {
			t.Fatalf("round %d, narrow: %q", i, got)
		}
	}
}

// TestDatabaseLockedDown: whatever SQL reaches the Runner's DuckDB cannot read files, change
// its configuration or see the machine's time zone.
func TestDatabaseLockedDown(t *testing.T) {
	r := newTestRunner(t)
	ctx := context.Background()
	s, err := r.take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.give(s, false)
	exec := s.conn.(driver.ExecerContext)
	for _, q := range []string{
		"SELECT * FROM read_csv('/etc/passwd')",
		"SELECT * FROM read_text('/etc/hostname')",
		"SET threads = 4",
		"SET enable_external_access = true",
		"SET disabled_optimizers = ''",
		"SET lock_configuration = false",
		"INSTALL httpfs",
		"LOAD httpfs",
		"ATTACH '/tmp/hyp-transform-test.db'",
		"COPY (SELECT 1) TO '/tmp/hyp-transform-test.csv'",
	} {
		if _, err := exec.ExecContext(ctx, q, nil); err == nil {
			t.Errorf("%s: allowed", q)
		}
	}
	want := map[string]string{"threads": "1", "TimeZone": "UTC", "enable_external_access": "false", "lock_configuration": "true", "temp_directory": ""}
	for name, v := range want {
		var got string
		err := queryRows(ctx, s.conn, "SELECT current_setting('"+name+"')::VARCHAR", nil, func(vals []driver.Value) error {
			got, _ = vals[0].(string)
			return nil
		})
		if err != nil || got != v {
			t.Errorf("%s = %q (%v), want %q", name, got, err, v)
		}
	}
}

// A unit whose rows lack a column the transform names reads it as NULL, as a query reads a
// column a partition never had: one transform serves every dataset a sink covers.
func TestApplyMissingColumnsReadNull(t *testing.T) {
	r := newTestRunner(t)
	in := fiveRows()
	defer releaseAll(in)
	cases := []struct {
		sql  string
		cols []string
		rows int
	}{
		// SPEC's example over rows without secret and level: every row kept (NULL <> 'debug'
		// is NULL, so WHERE drops them: coalesce keeps them), secret excluded.
		{"SELECT * EXCLUDE (nosuch) FROM rows WHERE coalesce(lvl, 'x') <> 'debug'", []string{"_hyp_ingest_seq", "_hyp_ingested_at", "level", "msg", "secret", "n", "x", "lvl"}, 5},
		{"SELECT _hyp_ingest_seq, _hyp_ingested_at, upper(Missing) AS m FROM rows", []string{"_hyp_ingest_seq", "_hyp_ingested_at", "m"}, 5},
		{"SELECT * REPLACE (upper(absent) AS absent) FROM rows WHERE absent IS NULL", []string{"_hyp_ingest_seq", "_hyp_ingested_at", "level", "msg", "secret", "n", "x", "absent"}, 5},
		// A lambda's parameter is not a column.
		{"SELECT _hyp_ingest_seq, _hyp_ingested_at, list_transform([n], v -> v + 1) AS l FROM rows", []string{"_hyp_ingest_seq", "_hyp_ingested_at", "l"}, 5},
	}
	for _, tc := range cases {
		res := apply(t, r, tc.sql, testSchema(), in)
		if got := fieldNames(res.Schema); !slices.Equal(got, tc.cols) || res.Rows != int64(tc.rows) {
			t.Errorf("%s: columns %v rows %d, want %v and %d", tc.sql, got, res.Rows, tc.cols, tc.rows)
		}
	}
}

func TestReferencedColumns(t *testing.T) {
	r := newTestRunner(t)
	s, err := r.take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer r.give(s, false)
	refs, _, err := r.checker.judge(context.Background(), s.conn, "SELECT * EXCLUDE (Secret) REPLACE (regexp_replace(rows.msg, 'a', 'b') AS msg) RENAME (lvl AS level) FROM rows WHERE n > 1 AND list_any_value(list_transform(tags, t -> t)) IS NULL")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"lvl", "msg", "n", "secret", "tags"}; !slices.Equal(refs, want) {
		t.Errorf("referenced %v, want %v", refs, want)
	}
}
