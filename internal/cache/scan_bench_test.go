package cache

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// BenchmarkScan reads a whole partition of rows shaped like the load generator's, each with
// a unique body and id (so both are written plain), in one scan as a sink's read ahead does:
// the cache's share of a forward unit's CPU on the sender. b.N is rows.
func BenchmarkScan(b *testing.B) {
	const total = 200_000
	ctx := context.Background()
	c, err := Open(ctx, b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	for n := 0; n < total/flushBenchRows; n++ {
		if _, err := c.Ingest("logs", "loadgen", flushBenchRequest(n*flushBenchRows, "u")); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += total {
		var rows int64
		if _, err := c.Scan(ctx, "logs", "source=loadgen", 0, 1<<62, func(r arrow.RecordBatch) error {
			rows += r.NumRows()
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if rows != total {
			b.Fatalf("scan returned %d rows, want %d", rows, total)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/row")
}
