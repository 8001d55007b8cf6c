package cache

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkFlush measures the flush alone: log records of 1,000 rows shaped like the load
// generator's NDJSON (bench/peers: ~290 bytes, a 150-byte body, a unique id) into one
// partition's table. b.N is rows.
func BenchmarkFlush(b *testing.B) {
	const perRequest = 1000
	var sb strings.Builder
	body := strings.Repeat("x", 150)
	for i := range perRequest {
		fmt.Fprintf(&sb, `{"time_unix_nano":1764547200000000000,"severity_number":9,"severity_text":"INFO","service_name":"loadgen","body":"%s %08d","id":"bench-%012d"}`+"\n", body, i, i)
	}
	req := []byte(sb.String())
	ctx := context.Background()
	c, err := Open(ctx, b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	b.SetBytes(int64(len(req)) / perRequest)
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		for n := 0; n < 200 && done < b.N; n++ {
			if _, err := c.Ingest("logs", "loadgen", req); err != nil {
				b.Fatal(err)
			}
			done += perRequest
		}
		b.StartTimer()
		if err := c.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/row")
}
