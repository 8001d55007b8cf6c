package cache

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// BenchmarkFlush measures the flush alone: log records of 1,000 rows shaped like the load
// generator's NDJSON (bench/peers: ~290 bytes, a 150-byte body, an id) into one partition's
// table. Bodies and ids repeat from one request to the next, so every column of a file keeps
// its dictionary. b.N is rows.
func BenchmarkFlush(b *testing.B) {
	req := flushBenchRequest(0, "bench")
	benchmarkFlush(b, "source=loadgen", func(c *Cache, _ int) error {
		_, err := c.Ingest("logs", "loadgen", req)
		return err
	})
}

// BenchmarkUniqueFlush is BenchmarkFlush with a body and an id unique to every row, as
// trace ids and timestamps as text are in fleet logs: those columns are written plain.
func BenchmarkUniqueFlush(b *testing.B) {
	benchmarkFlush(b, "source=loadgen", func(c *Cache, n int) error {
		_, err := c.Ingest("logs", "loadgen", flushBenchRequest(n*flushBenchRows, "u"))
		return err
	})
}

// BenchmarkFlushArrow is BenchmarkFlush's rows as a server logs a forwarded Arrow body
// (IngestPartitionRecords): the flush takes them column by column.
func BenchmarkFlushArrow(b *testing.B) {
	var lines []byte
	forLines(flushBenchRequest(0, "bench"), func(l []byte) { lines = append(append(lines, l...), '\n') })
	rec := recordOfLines(b, lines)
	defer rec.Release()
	benchmarkFlush(b, "gateway=g/source=loadgen", func(c *Cache, _ int) error {
		_, err := c.IngestPartitionRecords("logs", "gateway=g/source=loadgen", []arrow.RecordBatch{rec})
		return err
	})
}

// recordOfLines is NDJSON lines as one record batch, as a sender's scan of them would read.
func recordOfLines(b *testing.B, lines []byte) arrow.RecordBatch {
	e := NewEncoder()
	defer e.Release()
	seq := int64(1)
	forLines(lines, func(l []byte) {
		if err := e.Add(l, seq, 1); err != nil {
			b.Fatal(err)
		}
		seq++
	})
	rec, err := e.Record()
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Release()
	// The user columns only: the cache stamps seq and ingest time itself.
	sc := arrow.NewSchema(rec.Schema().Fields()[2:], nil)
	return array.NewRecordBatch(sc, rec.Columns()[2:], rec.NumRows())
}

const flushBenchRows = 1000

func flushBenchRequest(from int, idPrefix string) []byte {
	var sb strings.Builder
	body := strings.Repeat("x", 150)
	for i := from; i < from+flushBenchRows; i++ {
		fmt.Fprintf(&sb, `{"time_unix_nano":1764547200000000000,"severity_number":9,"severity_text":"INFO","service_name":"loadgen","body":"%s %08d","id":"%s-%012d"}`+"\n", body, i, idPrefix, i)
	}
	return []byte(sb.String())
}

// benchmarkFlush makes ingest(n) of flushBenchRows rows into partition part for n = 0, 1,
// ... and flushes every 200 requests, timing the flushes only. It reports the data files'
// bytes per row.
func benchmarkFlush(b *testing.B, part string, ingest func(c *Cache, n int) error) {
	ctx := context.Background()
	c, err := Open(ctx, b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	b.ResetTimer()
	for done, n := 0, 0; done < b.N; {
		b.StopTimer()
		for k := 0; k < 200 && done < b.N; k++ {
			if err := ingest(c, n); err != nil {
				b.Fatal(err)
			}
			n++
			done += flushBenchRows
		}
		b.StartTimer()
		if err := c.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/row")
	var bytes, rows int64
	for _, f := range c.tables.lookup("logs", part).gen.files {
		bytes, rows = bytes+f.Bytes, rows+f.Rows
	}
	b.ReportMetric(float64(bytes)/float64(rows), "file-B/row")
}

// BenchmarkFlushNewPartitions measures a flush whose every partition is new, as after a
// burst from thousands of gateways on hyp server: one small request per partition, so the
// cost is that of creating each partition's table and its first commit. b.N is partitions.
func BenchmarkFlushNewPartitions(b *testing.B) {
	ctx := context.Background()
	c, err := Open(ctx, b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	req := []byte(`{"time_unix_nano":1764547200000000000,"severity_number":9,"body":"hello","id":"a-1"}` + "\n")
	for i := 0; i < b.N; i++ {
		if _, err := c.Ingest("logs", fmt.Sprintf("gw-%06d", i), req); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	if err := c.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/partition")
}
