package sink

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hyp-project/hyp/internal/config"
)

// BenchmarkBlobParquetExport times a blob Parquet export to a local directory end to end:
// cache scan, encode, fsync and rename, for 500,000 log rows in one compacted partition.
func BenchmarkBlobParquetExport(b *testing.B) {
	const rows = 500_000
	ctx := context.Background()
	dir := b.TempDir()
	c := openCache(b, filepath.Join(dir, "cache"), nil)
	defer c.Close(ctx)
	for i := 0; i < rows; i += 100_000 {
		if _, err := c.Ingest(testDataset, "bench", benchRows(i, 100_000)); err != nil {
			b.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.Compact(ctx, true, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		home := filepath.Join(dir, fmt.Sprint("run", i))
		if err := os.Mkdir(home, 0o700); err != nil {
			b.Fatal(err)
		}
		sinks := map[string]config.Sink{"p": {Type: "blob", Format: "parquet", Schedule: "@every 1h",
			Destination: config.Destination{Type: "local-fs", Path: filepath.Join(home, "exports")}}}
		d, err := New(ctx, Options{Home: home, Sinks: sinks, Cache: c})
		if err != nil {
			b.Fatal(err)
		}
		res, err := d.RunNow(ctx, "p")
		if err != nil || res[0].Rows != rows {
			b.Fatalf("export: %v %+v", err, res)
		}
	}
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// benchRows are NDJSON log lines shaped like bench/'s: a few constant strings, a path of
// 5,000 values, small integers and a unique id.
func benchRows(from, n int) []byte {
	var buf bytes.Buffer
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&buf, `{"ts":"2026-11-30T09:00:00.%06dZ","level":"info","service":"checkout","msg":"request handled","path":"/api/v1/items/%d","status":200,"duration_ms":%d,"id":%d}`+"\n", i%1000000, i%5000, i%977, i)
	}
	return buf.Bytes()
}
