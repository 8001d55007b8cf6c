package cache

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// loadgenNDJSON is a request of n rows as the side-by-side load generator sends them to
// /v1/ingest (../shared/peers/load/otlpgen: ~290 bytes, a 150-byte body and an id).
func loadgenNDJSON(n int) []byte {
	var sb strings.Builder
	filler := strings.Repeat("user=alice action=login status=ok latency_ms=12 ", 3)
	for i := range n {
		id := fmt.Sprintf("x-%010d", i)
		body := ("event id=" + id + " " + filler)[:150]
		fmt.Fprintf(&sb, `{"time_unix_nano":1764547200000000000,"severity_number":9,"severity_text":"INFO","service_name":"loadgen","body":"%s","id":"%s"}`+"\n", body, id)
	}
	return []byte(sb.String())
}

// BenchmarkIngest measures Cache.Ingest of 1,000-row NDJSON requests from four clients, the
// load generator's concurrency: validation into the row form, the log append and the group
// commit's write and fsync. b.N is requests.
func BenchmarkIngest(b *testing.B) {
	for _, src := range []struct{ name, source string }{{"query", "loadgen"}, {"field", ""}} {
		b.Run(src.name, func(b *testing.B) {
			ctx := context.Background()
			c, err := Open(ctx, b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				b.StopTimer() // Close flushes what was ingested: not what is measured
				if err := c.Close(ctx); err != nil {
					b.Error(err)
				}
			}()
			req := loadgenNDJSON(1000)
			b.SetBytes(int64(len(req)))
			b.ReportAllocs()
			b.SetParallelism(2) // 2 × GOMAXPROCS: four clients on this 2-core machine
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Ingest("logs", src.source, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
