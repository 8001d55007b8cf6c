package transform

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/hyp-project/hyp/internal/rowjson"
)

func newTestRunner(tb testing.TB) *Runner {
	tb.Helper()
	r, err := NewRunner()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := r.Close(); err != nil {
			tb.Error(err)
		}
	})
	return r
}

// testRow is a row of the schema the tests' units have.
type testRow struct {
	seq                int64
	level, msg, secret string
	n                  int64
	x                  float64
	nullMsg            bool
}

// baseTime is the tests' _hyp_ingested_at: 2024-05-06T07:08:09.123456Z plus seq seconds.
var baseTime = time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)

func testSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_ingested_at", Type: timestampUTC},
		{Name: "level", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "secret", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "x", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, nil)
}

func testRecord(rows ...testRow) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema())
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.seq)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(baseTime.Add(time.Duration(r.seq) * time.Second).UnixMicro()))
		b.Field(2).(*array.StringBuilder).Append(r.level)
		if r.nullMsg {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.StringBuilder).Append(r.msg)
		}
		b.Field(4).(*array.StringBuilder).Append(r.secret)
		b.Field(5).(*array.Int64Builder).Append(r.n)
		b.Field(6).(*array.Float64Builder).Append(r.x)
	}
	return b.NewRecordBatch()
}

// fiveRows is a small unit split over two records, seqs with gaps.
func fiveRows() []arrow.RecordBatch {
	return []arrow.RecordBatch{
		testRecord(
			testRow{seq: 10, level: "info", msg: "login tok-123 ok", secret: "s1", n: 1, x: 0.5},
			testRow{seq: 11, level: "debug", msg: "tick", secret: "s2", n: 2, x: 1.5},
			testRow{seq: 13, level: "warn", msg: "slow tok-9 call", secret: "s3", n: 3, x: 2.5},
		),
		testRecord(
			testRow{seq: 20, level: "debug", msg: "tock", secret: "s4", n: 4, x: 3.5},
			testRow{seq: 21, level: "error", nullMsg: true, secret: "s5", n: 5, x: 4.5},
		),
	}
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// jsonRows renders a result's rows as sinks' JSON encoder does: it also proves the result
// has only the cache's types.
func jsonRows(tb testing.TB, res *Result) []string {
	tb.Helper()
	enc, err := rowjson.NewEncoder(res.Schema)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	var n int64
	for _, rec := range res.Recs {
		for i := 0; i < int(rec.NumRows()); i++ {
			out = append(out, string(enc.AppendRow(nil, rec, i)))
		}
		n += rec.NumRows()
	}
	if n != res.Rows {
		tb.Fatalf("Rows = %d, the records hold %d", res.Rows, n)
	}
	return out
}

func fieldNames(sc *arrow.Schema) []string {
	var names []string
	for _, f := range sc.Fields() {
		names = append(names, f.Name)
	}
	return names
}
