package cache

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkFlush measures the flush alone: log records of 1,000 rows shaped like the load
// generator's NDJSON (bench/peers: ~290 bytes, a 150-byte body, an id) into one partition's
// table. Bodies and ids repeat from one request to the next, so every column of a file keeps
// its dictionary. b.N is rows.
func BenchmarkFlush(b *testing.B) {
	req := flushBenchRequest(0, "bench")
	benchmarkFlush(b, func(int) []byte { return req })
}

// BenchmarkUniqueFlush is BenchmarkFlush with a body and an id unique to every row, as
// trace ids and timestamps as text are in fleet logs: those columns are written plain.
func BenchmarkUniqueFlush(b *testing.B) {
	benchmarkFlush(b, func(n int) []byte { return flushBenchRequest(n*flushBenchRows, "u") })
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

// benchmarkFlush ingests request(n) for n = 0, 1, ... and flushes every 200 requests,
// timing the flushes only. It reports the data files' bytes per row.
func benchmarkFlush(b *testing.B, request func(n int) []byte) {
	ctx := context.Background()
	c, err := Open(ctx, b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	b.SetBytes(int64(len(request(0))) / flushBenchRows)
	b.ResetTimer()
	for done, n := 0, 0; done < b.N; {
		b.StopTimer()
		for k := 0; k < 200 && done < b.N; k++ {
			if _, err := c.Ingest("logs", "loadgen", request(n)); err != nil {
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
	for _, f := range c.tables.lookup("logs", "source=loadgen").gen.files {
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
