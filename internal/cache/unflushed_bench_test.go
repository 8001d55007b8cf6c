package cache

import (
	"context"
	"testing"
)

// BenchmarkListingUnflushed measures a listing over a log of 200,000 unflushed rows shaped
// like BenchmarkFlush's (200 requests of 1,000, about 58 MB of log): what a query asks of a
// daemon whose flush is behind, encoding included, handing the files to nowhere. It
// reports the Parquet bytes per row.
func BenchmarkListingUnflushed(b *testing.B) {
	ctx := context.Background()
	c, err := Open(ctx, b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	const requests = 200
	for n := range requests {
		if _, err := c.Ingest("logs", "loadgen", flushBenchRequest(n*flushBenchRows, "u")); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(flushBenchRequest(0, "u"))) * requests)
	b.ReportAllocs()
	var encoded int
	for b.Loop() {
		encoded = 0
		if _, err := c.Listing(ctx, func(_ string, data []byte) (string, error) {
			encoded += len(data)
			return "", nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(encoded)/(requests*flushBenchRows), "parquet-bytes/row")
}
