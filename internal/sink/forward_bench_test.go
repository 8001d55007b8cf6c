package sink

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/config"
	seqledger "github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/server"
)

// BenchmarkForwardTick times one tick forwarding every row of a few partitions to an
// in-process `hyp server`, for each wire format and NDJSON compression; both ends run in
// this process, so a CPU profile shows the whole path (the server's share is what lies
// under server's ServeHTTP), and cpu-s/1M is both ends' CPU per million rows.
func BenchmarkForwardTick(b *testing.B) {
	runs := 0 // every run gets a central and a home of its own, -count and reruns included
	const parts, perPart = 4, 50_000
	ctx := context.Background()
	dir := b.TempDir()
	c := openCache(b, filepath.Join(dir, "gw"), nil)
	defer c.Close(ctx)
	for p := range parts {
		src := fmt.Sprintf("src%d", p)
		for i := 0; i < perPart; i += 10_000 {
			var sb strings.Builder
			for j := i; j < i+10_000; j++ {
				fmt.Fprintf(&sb, `{"ts":"2026-11-30T09:00:00.%06dZ","level":"info","service":"checkout","msg":"request handled","path":"/api/v1/items/%d","status":200,"duration_ms":%d,"id":%d}`+"\n", j%1000000, j%5000, j%977, j)
			}
			if _, err := c.Ingest(testDataset, src, []byte(sb.String())); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := c.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ format, comp string }{{"ndjson", "none"}, {"ndjson", "gzip"}, {"ndjson", "zstd"}, {"arrow", "gzip"}, {"arrow", "zstd"}, {"arrow", "none"}} {
		comp := tc.comp
		b.Run(tc.format+"-"+comp, func(b *testing.B) {
			var rows, wire int64
			cpu0 := cpuTime(b)
			for b.Loop() {
				b.StopTimer()
				runs++
				run := filepath.Join(dir, fmt.Sprintf("%s-%d", comp, runs))
				if err := os.MkdirAll(filepath.Join(run, "home"), 0o700); err != nil {
					b.Fatal(err)
				}
				sc := openCache(b, filepath.Join(run, "central"), nil)
				led, err := seqledger.Open(filepath.Join(run, "ledger.db"))
				if err != nil {
					b.Fatal(err)
				}
				h, err := server.NewHandler(sc, led, server.Options{Tokens: []server.Token{{Secret: "tok"}}, MaxBodyBytes: 16 << 20})
				if err != nil {
					b.Fatal(err)
				}
				srv := httptest.NewServer(h)
				d, err := New(ctx, Options{Home: filepath.Join(run, "home"), Cache: c, Sinks: map[string]config.Sink{
					"central": {Type: "forward", URL: config.URLs{srv.URL}, TokenFile: token, Schedule: "@every 1h", Compression: comp, Format: tc.format},
				}})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := d.RunNow(ctx, "central")
				b.StopTimer()
				if err != nil || res[0].Status != "ok" || res[0].Rows != parts*perPart {
					b.Fatalf("run: %v %+v", err, res)
				}
				rows += res[0].Rows
				wire += res[0].Bytes
				srv.Close()
				led.Close()
				sc.Close(ctx)
				b.StartTimer()
			}
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
			// Setup and teardown included: a central's cache and ledger opened and closed.
			b.ReportMetric((cpuTime(b)-cpu0)/float64(rows)*1e6, "cpu-s/1M")
			b.ReportMetric(float64(wire)/float64(rows), "wire-B/row")
		})
	}
}

// cpuTime is the process's user and system CPU seconds so far.
func cpuTime(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
