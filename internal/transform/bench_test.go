package transform

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// benchSQL is a typical redaction: mask tokens in the body and every digit of the id (a
// dozen regexp matches a row), and drop debug and trace rows.
const benchSQL = `SELECT * REPLACE (regexp_replace(body, 'tok-[0-9]+', 'tok-***') AS body, ` +
	`regexp_replace(id, '[0-9]', '#', 'g') AS id) FROM rows WHERE severity_number >= 9`

// loadgenSQL is a redaction of the load generator's rows (loadgenUnits): mask the user in
// the body and the number in the id, and drop debug and trace rows (it has none).
const loadgenSQL = `SELECT * REPLACE (regexp_replace(body, 'user=[a-z]+', 'user=***') AS body, ` +
	`regexp_replace(id, '[0-9]+', '#') AS id) FROM rows WHERE severity_number >= 9`

// loadgenUnits makes units of the rows the load generator's NDJSON becomes in the cache
// (bench/peers/load/otlpgen, NDJSON: its text copied here, as that is a module of its own),
// in record batches of 8192 rows.
func loadgenUnits(tb testing.TB, units, unitRows int) (*arrow.Schema, [][]arrow.RecordBatch) {
	tb.Helper()
	const filler = "user=alice action=login status=ok latency_ms=12 path=/api/v1/items/12345 agent=loadgen/1.0 lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_ingested_at", Type: timestampUTC},
		{Name: "body", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "service_name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "severity_number", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "severity_text", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "time_unix_nano", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, nil)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return schema, cutUnits(tb, schema, units, unitRows, 8192, func(b *array.RecordBuilder, i int) {
		id := fmt.Sprintf("T-%010d", i)
		b.Field(0).(*array.Int64Builder).Append(int64(1_000_000 + i))
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(base.Add(time.Duration(i) * time.Microsecond).UnixMicro()))
		b.Field(2).(*array.StringBuilder).Append(("event id=" + id + " " + filler)[:150])
		b.Field(3).(*array.StringBuilder).Append(id)
		b.Field(4).(*array.StringBuilder).Append("loadgen")
		b.Field(5).(*array.Int64Builder).Append(9)
		b.Field(6).(*array.StringBuilder).Append("INFO")
		b.Field(7).(*array.Int64Builder).Append(base.UnixNano())
	})
}

// logUnits makes units of log rows of varied severities, bodies and ids.
func logUnits(tb testing.TB, units, unitRows, batchRows int) (*arrow.Schema, [][]arrow.RecordBatch) {
	tb.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_ingested_at", Type: timestampUTC},
		{Name: "time_unix_nano", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "severity_number", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "severity_text", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "service_name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "body", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	texts := []string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rnd := uint64(42)
	return schema, cutUnits(tb, schema, units, unitRows, batchRows, func(b *array.RecordBuilder, i int) {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		sev := int64(rnd>>59)%24 + 1
		b.Field(0).(*array.Int64Builder).Append(int64(1_000_000 + i))
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(base.Add(time.Duration(i) * time.Microsecond).UnixMicro()))
		b.Field(2).(*array.Int64Builder).Append(base.UnixNano() + int64(i)*1000)
		b.Field(3).(*array.Int64Builder).Append(sev)
		b.Field(4).(*array.StringBuilder).Append(texts[(sev-1)/4])
		b.Field(5).(*array.StringBuilder).Append(fmt.Sprintf("svc-%02d", i%20))
		b.Field(6).(*array.StringBuilder).Append(fmt.Sprintf("GET /api/v1/items/%d user=u%d session tok-%05d took %dms status=200 region=eu-west-1 agent=loadgen/1.0 trace=%016x",
			i%100000, i%977, i%100000, i%250, rnd))
		b.Field(7).(*array.StringBuilder).Append(fmt.Sprintf("req-%08d-%04d", i, i%9973))
	})
}

// cutUnits makes units*unitRows rows of schema with row(b, i), in record batches of
// batchRows, and cuts them into units of unitRows (a unit spans batches, as a unit the
// exporter gathers does).
func cutUnits(tb testing.TB, schema *arrow.Schema, units, unitRows, batchRows int, row func(b *array.RecordBuilder, i int)) [][]arrow.RecordBatch {
	total := units * unitRows
	var batches []arrow.RecordBatch
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := 0; i < total; i++ {
		row(b, i)
		if (i+1)%batchRows == 0 || i+1 == total {
			batches = append(batches, b.NewRecordBatch())
		}
	}
	tb.Cleanup(func() { releaseAll(batches) })
	var out [][]arrow.RecordBatch
	for u := 0; u < units; u++ {
		var unit []arrow.RecordBatch
		lo, hi := u*unitRows, (u+1)*unitRows
		for k, rec := range batches {
			start, end := k*batchRows, k*batchRows+int(rec.NumRows())
			if end <= lo || start >= hi {
				continue
			}
			unit = append(unit, rec.NewSlice(int64(max(lo, start)-start), int64(min(hi, end)-start)))
		}
		tb.Cleanup(func() { releaseAll(unit) })
		out = append(out, unit)
	}
	return out
}

// BenchmarkApply measures transforms, one Apply at a time unless parallel, over units of
// 10,000 rows in 8k-row batches: rows/s is the throughput, cpu-rows/s the rows per second of
// the process's CPU time (DuckDB runs each query on one thread), which a busy machine skews
// less:
//
//	loadgen      loadgenSQL over the load generator's rows: two regexp_replace and a WHERE;
//	digits       benchSQL over varied log rows: a regexp match for every digit of the id;
//	unit=10      benchSQL over 10-row units: cpu-ns/op is the fixed cost of an Apply;
//	parallel     loadgen from GOMAXPROCS goroutines at once.
//
//	go test -run '^$' -bench BenchmarkApply -benchtime 200x ./internal/transform/
func BenchmarkApply(b *testing.B) {
	r := newTestRunner(b)
	ctx := context.Background()
	run := func(b *testing.B, sql string, schema *arrow.Schema, units [][]arrow.RecordBatch, parallel bool) {
		if _, err := r.Apply(ctx, sql, schema, units[0]); err != nil { // warm the verdict cache
			b.Fatal(err)
		}
		unitRows := 0
		for _, rec := range units[0] {
			unitRows += int(rec.NumRows())
		}
		b.ReportAllocs()
		cpu0 := cpuTime()
		b.ResetTimer()
		if parallel {
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					res, err := r.Apply(ctx, sql, schema, units[i%len(units)])
					if err != nil {
						b.Error(err)
						return
					}
					res.Release()
				}
			})
		} else {
			for i := 0; i < b.N; i++ {
				res, err := r.Apply(ctx, sql, schema, units[i%len(units)])
				if err != nil {
					b.Fatal(err)
				}
				res.Release()
			}
		}
		b.StopTimer()
		rows := float64(b.N) * float64(unitRows)
		b.ReportMetric(rows/b.Elapsed().Seconds(), "rows/s")
		if cpu := cpuTime() - cpu0; cpu > 0 {
			b.ReportMetric(rows/cpu.Seconds(), "cpu-rows/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
	b.Run("loadgen", func(b *testing.B) {
		schema, units := loadgenUnits(b, 10, 10000)
		run(b, loadgenSQL, schema, units, false)
	})
	b.Run("digits", func(b *testing.B) {
		schema, units := logUnits(b, 10, 10000, 8192)
		run(b, benchSQL, schema, units, false)
	})
	b.Run("unit=10", func(b *testing.B) {
		schema, units := logUnits(b, 10, 10, 8192)
		run(b, benchSQL, schema, units, false)
	})
	b.Run("parallel", func(b *testing.B) {
		schema, units := loadgenUnits(b, 10, 10000)
		run(b, loadgenSQL, schema, units, true)
	})
}
